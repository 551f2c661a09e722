package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"scistream/internal/api"
	"scistream/internal/auth"
	"scistream/internal/login"
	"scistream/internal/oidctest"
)

// whoGateway is a gateway's /v1/info that answers with a hash of the
// bearer token it was sent (never the token itself) as the identity.
func whoGateway(t *testing.T) (addr, certFile string) {
	t.Helper()
	cert, certFile := selfSigned(t)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/info", func(w http.ResponseWriter, r *http.Request) {
		tok, err := auth.BearerToken(r)
		if err != nil {
			w.WriteHeader(http.StatusUnauthorized)
			json.NewEncoder(w).Encode(api.ErrorBody{Error: api.Error{Code: api.CodeUnauthenticated, Message: "missing bearer token"}})
			return
		}
		json.NewEncoder(w).Encode(api.Info{Identity: auth.HashToken(tok)[:16]})
	})
	gw := httptest.NewUnstartedServer(mux)
	gw.Config.ErrorLog = log.New(io.Discard, "", 0)
	gw.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	gw.StartTLS()
	t.Cleanup(gw.Close)
	return gw.Listener.Addr().String(), certFile
}

// loginInProcess runs s2uc login against is, reads the user code from
// its output as a person would, approves it for subject at the issuer,
// and returns the command's output.
func loginInProcess(t *testing.T, is *oidctest.Issuer, subject string) string {
	t.Helper()
	pr, pw := io.Pipe()
	var stderr strings.Builder
	done := make(chan error, 1)
	go func() {
		err := run(context.Background(), []string{"login", "--issuer", is.URL, "--client_id", is.ClientID, "--ca", is.CAFile}, pw, &stderr)
		pw.Close()
		done <- err
	}()
	var out strings.Builder
	sc := bufio.NewScanner(pr)
	codeRE := regexp.MustCompile(`enter the code (\S+)`)
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
		if m := codeRE.FindStringSubmatch(sc.Text()); m != nil {
			if err := is.Approve(context.Background(), m[1], subject); err != nil {
				t.Error(err)
			}
		}
	}
	if err := <-done; err != nil {
		t.Fatalf("s2uc login: %v; output:\n%s%s", err, out.String(), stderr.String())
	}
	return out.String()
}

// TestLogin: s2uc login prints where to go and the code, never a token;
// every command then sends the stored token, unless --token_file or
// SCISTREAM_TOKEN says otherwise; logout revokes and removes it.
func TestLogin(t *testing.T) {
	isolate(t)
	is := oidctest.Start(t, oidctest.Options{Alg: "ES256"})
	out := loginInProcess(t, is, "alice")
	if !strings.Contains(out, "open "+is.URL+"/activate in a browser") || !strings.Contains(out, "Logged in to "+is.URL) {
		t.Fatalf("login output:\n%s", out)
	}
	st, err := login.DefaultStore()
	if err != nil {
		t.Fatal(err)
	}
	saved, err := st.Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{saved.AccessToken, saved.RefreshToken} {
		if strings.Contains(out, secret) {
			t.Fatal("s2uc login printed a token")
		}
	}
	addr, cert := whoGateway(t)
	who := func(extra ...string) string {
		t.Helper()
		stdout, stderr, code := s2uc(t, append([]string{"info", "--s2cs", addr, "--server_cert", cert, "--output", "json"}, extra...)...)
		if code != 0 {
			t.Fatalf("s2uc info: %s", stderr)
		}
		var info api.Info
		json.Unmarshal([]byte(stdout), &info)
		return info.Identity
	}
	if got := who(); got != auth.HashToken(saved.AccessToken)[:16] {
		t.Fatal("s2uc info did not send the stored token")
	}
	t.Setenv("SCISTREAM_TOKEN", "from-the-environment")
	if got := who(); got != auth.HashToken("from-the-environment")[:16] {
		t.Fatal("SCISTREAM_TOKEN did not win over the stored login")
	}
	file := filepath.Join(t.TempDir(), "token")
	os.WriteFile(file, []byte("from-a-file\n"), 0o600)
	if got := who("--token_file", file); got != auth.HashToken("from-a-file")[:16] {
		t.Fatal("--token_file did not win")
	}
	os.Chmod(file, 0o640)
	_, stderr, code := s2uc(t, "info", "--s2cs", addr, "--server_cert", cert, "--token_file", file)
	if code != exitUsage || !strings.Contains(stderr, "can be read or written by others (mode 0640): chmod 600 "+file) {
		t.Fatalf("token file others can read: exit %d, %s", code, stderr)
	}
	t.Setenv("SCISTREAM_TOKEN", "")

	stdout, _, code := s2uc(t, "logout")
	if code != 0 || !strings.Contains(stdout, "Logged out of "+is.URL+": the token is revoked and removed") || is.Stats().Revocations != 2 {
		t.Fatalf("logout: exit %d, %q, %d revocations", code, stdout, is.Stats().Revocations)
	}
	if _, err := os.Stat(st.Path); !os.IsNotExist(err) {
		t.Fatalf("the login file is still there: %v", err)
	}
	_, stderr, _ = s2uc(t, "info", "--s2cs", addr, "--server_cert", cert)
	if !strings.Contains(stderr, "missing bearer token") {
		t.Fatalf("after logout: %s", stderr)
	}
	if stdout, _, code := s2uc(t, "logout"); code != 0 || stdout != "Not logged in.\n" {
		t.Fatalf("logout again: exit %d, %q", code, stdout)
	}
}

// TestLoginRenews: a command renews a stored token about to expire,
// and says to log in again when the issuer refuses the renewal.
func TestLoginRenews(t *testing.T) {
	isolate(t)
	is := oidctest.Start(t, oidctest.Options{Alg: "ES256", AccessTTL: login.Margin / 2})
	loginInProcess(t, is, "alice")
	is.SetAccessTTL(login.Margin * 10)
	addr, cert := whoGateway(t)
	if _, stderr, code := s2uc(t, "info", "--s2cs", addr, "--server_cert", cert); code != 0 || is.Stats().Refreshes != 1 {
		t.Fatalf("info with a stale login: exit %d, %d refreshes, %s", code, is.Stats().Refreshes, stderr)
	}
	st, _ := login.DefaultStore()
	saved, err := st.Load()
	if err != nil {
		t.Fatal(err)
	}
	// Stale again, and its refresh token revoked.
	saved.Expiry = saved.Expiry.Add(-login.Margin * 10)
	st.Save(saved)
	is.Revoke(saved.RefreshToken)
	_, stderr, code := s2uc(t, "info", "--s2cs", addr, "--server_cert", cert)
	if code != 1 || !strings.Contains(stderr, "could not be renewed (invalid_grant") || !strings.Contains(stderr, "run s2uc login") {
		t.Fatalf("renewal refused: exit %d, %s", code, stderr)
	}
	if strings.Contains(stderr, saved.RefreshToken) || strings.Contains(stderr, saved.AccessToken) {
		t.Fatal("the error shows a token")
	}
}

func TestLoginBadCommandLine(t *testing.T) {
	isolate(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"login"}, "missing --issuer URL"},
		{[]string{"login", "--issuer", "https://idp.example"}, "missing --client_id"},
		{[]string{"login", "--issuer", "http://idp.example", "--client_id", "s2uc"}, `--issuer: issuer "http://idp.example": give an https:// URL`},
		{[]string{"login", "--issuer", "https://idp.example", "--client_id", "s2uc", "--ca", "/nonexistent.pem"}, "--ca: CA file: open /nonexistent.pem"},
		{[]string{"login", "extra"}, `unexpected argument "extra"`},
		{[]string{"logout", "now"}, `unexpected argument "now"`},
	} {
		stdout, stderr, code := s2uc(t, c.args...)
		checkOneLine(t, c.args, stdout, stderr, code, c.want)
	}
}

// TestLoginInterrupted: a login abandoned while it waits (Ctrl-C) ends
// with an error and stores nothing; an earlier login stays as it was.
func TestLoginInterrupted(t *testing.T) {
	isolate(t)
	is := oidctest.Start(t, oidctest.Options{Alg: "ES256"})
	loginInProcess(t, is, "alice")
	st, _ := login.DefaultStore()
	before, err := os.ReadFile(st.Path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := run(ctx, []string{"login", "--issuer", is.URL, "--client_id", is.ClientID, "--ca", is.CAFile}, pw, io.Discard)
		pw.Close()
		done <- err
	}()
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		if strings.Contains(sc.Text(), "enter the code") {
			cancel() // the user gives up before approving
		}
	}
	if err := <-done; err == nil {
		t.Fatal("an abandoned login succeeded")
	}
	after, err := os.ReadFile(st.Path)
	if err != nil || string(after) != string(before) {
		t.Fatalf("the earlier login changed: %v", err)
	}
	if is.Stats().DeviceGrants != 1 {
		t.Fatalf("%d device grants, want the first login's only", is.Stats().DeviceGrants)
	}
}
