package login

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"scistream/internal/leakcheck"
	"scistream/internal/oidctest"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// loggedIn runs the device flow against is for subject, approving the
// code as the user's browser would, and returns the login and a store
// in a fresh directory that holds it.
func loggedIn(t *testing.T, is *oidctest.Issuer, subject string) (*Saved, Store) {
	t.Helper()
	ctx := context.Background()
	p, err := Start(ctx, Config{Issuer: is.URL, ClientID: is.ClientID, CAFile: is.CAFile, Scopes: []string{"openid", "scistream"}})
	if err != nil {
		t.Fatal(err)
	}
	if p.UserCode == "" || !strings.HasPrefix(p.VerificationURI, is.URL) || p.Expiry.Before(time.Now()) {
		t.Fatalf("pending: %+v", p)
	}
	if err := is.Approve(ctx, p.UserCode, subject); err != nil {
		t.Fatal(err)
	}
	s, err := p.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st := Store{Path: filepath.Join(t.TempDir(), "home", "login.json")}
	if err := st.Save(s); err != nil {
		t.Fatal(err)
	}
	return s, st
}

// TestDeviceFlow: the device flow yields an access and a refresh token
// and the issuer's endpoints; the store keeps them in a file of mode
// 0600 in a directory of mode 0700, and refuses one others can read.
func TestDeviceFlow(t *testing.T) {
	is := oidctest.Start(t, oidctest.Options{Alg: "ES256"})
	s, st := loggedIn(t, is, "alice")
	if s.AccessToken == "" || s.RefreshToken == "" || s.Expiry.IsZero() || s.Issuer != is.URL ||
		s.TokenEndpoint != is.URL+"/token" || s.RevocationEndpoint != is.URL+"/revoke" || s.CAFile != is.CAFile {
		t.Fatalf("saved: %+v", s)
	}
	for path, want := range map[string]os.FileMode{st.Path: 0o600, filepath.Dir(st.Path): 0o700} {
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != want {
			t.Fatalf("%s: mode %v, %v; want %04o", path, fi.Mode().Perm(), err, want)
		}
	}
	got, err := st.Load()
	if err != nil || got.AccessToken != s.AccessToken {
		t.Fatalf("Load = %+v, %v", got, err)
	}
	tok, err := st.Token(context.Background())
	if err != nil || tok != s.AccessToken || is.Stats().Refreshes != 0 {
		t.Fatalf("Token of a fresh login = %v (refreshes %d)", err, is.Stats().Refreshes)
	}
	os.Chmod(st.Path, 0o644)
	if _, err := st.Load(); err == nil || !strings.Contains(err.Error(), "read or written by others") {
		t.Fatalf("Load of a file others can read: %v", err)
	}
	// In a directory others can write, another's login could be put
	// in its place (issue 35).
	os.Chmod(st.Path, 0o600)
	os.Chmod(filepath.Dir(st.Path), 0o777)
	if _, err := st.Load(); err == nil || !strings.Contains(err.Error(), "login file "+st.Path+": directory "+filepath.Dir(st.Path)+" can be written by other users") {
		t.Fatalf("Load of a login in a directory others can write: %v", err)
	}
	os.Chmod(filepath.Dir(st.Path), 0o700)
	os.WriteFile(st.Path, []byte("{}"), 0o600)
	os.Chmod(st.Path, 0o600)
	if _, err := st.Load(); err == nil || !strings.Contains(err.Error(), "not a login") {
		t.Fatalf("Load of an empty login: %v", err)
	}
	st.Remove()
	if _, err := st.Token(context.Background()); err != ErrNoLogin {
		t.Fatalf("Token without a login: %v", err)
	}
}

// TestDeviceFlowRefused: a denied login, a wrong client id and an
// issuer without device flow each end with an error that says so.
func TestDeviceFlowRefused(t *testing.T) {
	is := oidctest.Start(t, oidctest.Options{Alg: "ES256"})
	ctx := context.Background()
	p, err := Start(ctx, Config{Issuer: is.URL, ClientID: is.ClientID, CAFile: is.CAFile})
	if err != nil {
		t.Fatal(err)
	}
	if err := is.Deny(ctx, p.UserCode); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(ctx); err == nil || !strings.Contains(err.Error(), "denied") {
		t.Fatalf("denied: %v", err)
	}
	if _, err := Start(ctx, Config{Issuer: is.URL, ClientID: "stranger", CAFile: is.CAFile}); err == nil || !strings.Contains(err.Error(), "invalid_client") {
		t.Fatalf("unknown client: %v", err)
	}
	if _, err := Start(ctx, Config{Issuer: is.URL, ClientID: is.ClientID}); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("issuer's CA not trusted: %v", err)
	}
	if _, err := Start(ctx, Config{Issuer: "http://" + strings.TrimPrefix(is.URL, "https://"), ClientID: is.ClientID}); err == nil || !strings.Contains(err.Error(), "https://") {
		t.Fatalf("http issuer: %v", err)
	}
	// Cancelled while waiting: Wait returns at once.
	p, err = Start(ctx, Config{Issuer: is.URL, ClientID: is.ClientID, CAFile: is.CAFile})
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := p.Wait(cctx); err == nil {
		t.Fatal("Wait with a cancelled context succeeded")
	}
}

// TestRefresh: a token within Margin of its expiry is renewed with the
// refresh token (which the issuer rotates) and saved; two commands at
// once renew it once; a revoked refresh token asks for a new login,
// and no error carries a token.
func TestRefresh(t *testing.T) {
	// Tokens that live less than Margin are stale at once.
	is := oidctest.Start(t, oidctest.Options{Alg: "ES256", AccessTTL: Margin / 2})
	s, st := loggedIn(t, is, "alice")
	ctx := context.Background()
	is.SetAccessTTL(time.Hour)
	var wg sync.WaitGroup
	toks := make([]string, 4)
	for i := range toks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if toks[i], err = st.Token(ctx); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if is.Stats().Refreshes != 1 {
		t.Fatalf("%d refreshes by 4 commands at once, want 1", is.Stats().Refreshes)
	}
	for _, tok := range toks {
		if tok == s.AccessToken || tok != toks[0] {
			t.Fatalf("tokens after the renewal: %d bytes, first %d bytes, old %d bytes", len(tok), len(toks[0]), len(s.AccessToken))
		}
	}
	renewed, err := st.Load()
	if err != nil || renewed.AccessToken != toks[0] || renewed.RefreshToken == s.RefreshToken {
		t.Fatalf("the renewal was not saved with the rotated refresh token: %v", err)
	}
	if tok, err := st.Token(ctx); err != nil || tok != toks[0] || is.Stats().Refreshes != 1 {
		t.Fatalf("a renewed token is renewed again: %v, %d refreshes", err, is.Stats().Refreshes)
	}
	// The refresh token revoked: the next renewal asks for a login.
	is.Revoke(renewed.RefreshToken)
	st.Now = func() time.Time { return renewed.Expiry }
	_, err = st.Token(ctx)
	if err == nil || !strings.Contains(err.Error(), "run s2uc login") || !strings.Contains(err.Error(), "invalid_grant") {
		t.Fatalf("revoked refresh token: %v", err)
	}
	for _, secret := range []string{renewed.AccessToken, renewed.RefreshToken, s.AccessToken, s.RefreshToken} {
		if strings.Contains(err.Error(), secret) {
			t.Fatal("the error carries a token")
		}
	}
}

// TestRevoke: logout revokes both tokens where the issuer offers it,
// and says when it does not.
func TestRevoke(t *testing.T) {
	is := oidctest.Start(t, oidctest.Options{Alg: "ES256"})
	s, _ := loggedIn(t, is, "alice")
	if offered, err := Revoke(context.Background(), s); !offered || err != nil || is.Stats().Revocations != 2 {
		t.Fatalf("Revoke = %v, %v; %d revocations", offered, err, is.Stats().Revocations)
	}
	none := oidctest.Start(t, oidctest.Options{Alg: "ES256", NoRevocation: true})
	s, _ = loggedIn(t, none, "alice")
	if offered, err := Revoke(context.Background(), s); offered || err != nil {
		t.Fatalf("Revoke without an endpoint = %v, %v", offered, err)
	}
}

// TestRefreshIssuerDown: a renewal while the issuer is down fails,
// saying so, and leaves the login as it was, to be renewed once the
// issuer is back.
func TestRefreshIssuerDown(t *testing.T) {
	is := oidctest.Start(t, oidctest.Options{Alg: "ES256", AccessTTL: Margin / 2})
	s, st := loggedIn(t, is, "alice")
	is.SetDown(true)
	if _, err := st.Token(context.Background()); err == nil || !strings.Contains(err.Error(), "could not be renewed") {
		t.Fatalf("renewal with the issuer down: %v", err)
	}
	kept, err := st.Load()
	if err != nil || kept.RefreshToken != s.RefreshToken || kept.AccessToken != s.AccessToken {
		t.Fatalf("the login changed after a failed renewal: %v", err)
	}
	is.SetDown(false)
	if tok, err := st.Token(context.Background()); err != nil || tok == s.AccessToken {
		t.Fatalf("renewal with the issuer back: %v", err)
	}
}
