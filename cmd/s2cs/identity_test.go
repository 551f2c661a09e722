package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"scistream/internal/api"
	"scistream/internal/auth"
	"scistream/internal/client"
	"scistream/internal/localgw"
	"scistream/internal/oidctest"
)

// served is s2cs run in-process by serve.
type served struct {
	addr   string
	stdout []string // lines up to the control API's
	stderr *syncBuffer
	done   chan error
	cancel context.CancelFunc
}

// serve runs s2cs in-process with args and waits until it says where
// its control API is; the test's end stops it and waits for run.
func serve(t *testing.T, args []string) *served {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	s := &served{stderr: &syncBuffer{}, done: make(chan error, 1), cancel: cancel}
	go func() {
		err := run(ctx, args, pw, s.stderr)
		pw.Close()
		s.done <- err
	}()
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		line := sc.Text()
		s.stdout = append(s.stdout, line)
		if a, ok := strings.CutPrefix(announced(line), "control API on https://"); ok {
			s.addr, _, _ = strings.Cut(a, " ")
			break
		}
	}
	go io.Copy(io.Discard, pr)
	if s.addr == "" {
		cancel()
		t.Fatalf("s2cs never said where it serves; run = %v; stderr:\n%s", <-s.done, s.stderr)
	}
	t.Cleanup(func() {
		cancel()
		select {
		case <-s.done:
		case <-time.After(15 * time.Second):
			t.Error("run did not return after its context ended")
		}
	})
	return s
}

// stop ends run and returns its error.
func (s *served) stop(t *testing.T) error {
	t.Helper()
	s.cancel()
	select {
	case err := <-s.done:
		s.done <- err // for the cleanup
		return err
	case <-time.After(15 * time.Second):
		t.Fatal("run did not return after its context ended")
	}
	return nil
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestIdentityFlagsRefused: each impossible setting of the identity
// providers and roles is refused at start, naming the flag, before
// anything is created.
func TestIdentityFlagsRefused(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
		return p
	}
	tokens := write("tokens", auth.HashToken("t1")+" alice\n"+auth.HashToken("t2")+" idp.example:bob\n", 0o600)
	open := write("open-secret", "s3cr3t-value\n", 0o644)
	empty := write("empty-secret", "\n", 0o600)
	twoLines := write("two-lines", "a\nb\n", 0o600)
	secret := write("secret", "s3cr3t-value\n", 0o600)
	roles := write("roles", "user any\nadmin identity alice\n", 0o600)
	base := []string{"--state_dir", state, "--listener_ip", "127.0.0.1"}
	oidc := []string{"--oidc_issuer", "https://idp.example", "--oidc_audience", "gw", "--oidc_jwks_file", filepath.Join(dir, "none.json")}
	intro := []string{"--introspection_url", "https://idp.example/introspect", "--introspection_client_id", "gw"}
	for _, c := range []struct {
		args    []string
		mention string
	}{
		{nil, "no authentication configured: pass --tokens FILE"},
		{[]string{"--oidc_audience", "gw"}, "--oidc_audience needs --oidc_issuer"},
		{[]string{"--oidc_alias", "x", "--tokens", tokens}, "--oidc_alias needs --oidc_issuer"},
		{[]string{"--introspection_secret_file", secret, "--tokens", tokens}, "--introspection_secret_file needs --introspection_url"},
		{[]string{"--oidc_issuer", "https://idp.example"}, "--oidc_issuer needs --oidc_audience"},
		{[]string{"--oidc_issuer", "http://idp.example", "--oidc_audience", "gw"}, `--oidc_issuer "http://idp.example": give an https:// URL`},
		{append(oidc[:4:4], "--oidc_algs", "RS256,HS256"), `algorithm "HS256" is not accepted`},
		{append(oidc[:4:4], "--oidc_algs", "none"), `algorithm "none" is not accepted`},
		{append(oidc[:4:4], "--oidc_clock_skew", "1h"), "--oidc_clock_skew 1h0m0s: give 0s to 10m0s"},
		{append(oidc[:4:4], "--oidc_alias", "Bad:Alias"), "alias"},
		{append(oidc[:4:4], "--oidc_ca", filepath.Join(dir, "missing.pem")), "--oidc_ca"},
		{oidc, "--oidc_jwks_file"},
		{[]string{"--introspection_url", "https://idp.example/introspect"}, "--introspection_url needs --introspection_client_id"},
		{intro, "--introspection_url needs --introspection_secret_file"},
		{append(intro, "--introspection_secret_file", open), "can be read or written by other users (mode 0644): chmod 600"},
		{append(intro, "--introspection_secret_file", empty), "is empty"},
		{append(intro, "--introspection_secret_file", twoLines), "more than one line"},
		{append(intro, "--introspection_secret_file", secret, "--introspection_max_in_flight", "0"), "--introspection_max_in_flight 0"},
		{append(intro, "--introspection_secret_file", secret, "--introspection_cache_ttl", "0s"), "--introspection_cache_ttl 0s"},
		{append(intro, "--introspection_secret_file", secret, "--introspection_alias", "idp.example", "--tokens", tokens), `identity "idp.example:bob" takes a name of the identity provider`},
		// Two providers on one host: by default both would name their
		// users "idp.example:NAME", one namespace for two realms. (The
		// missing JWKS file makes the test fail, not serve, without the
		// check.)
		{append(append(oidc[:6:6], intro...), "--introspection_secret_file", secret), `--oidc_alias and --introspection_alias are both "idp.example"`},
		{append(append(oidc[:6:6], intro...), "--introspection_secret_file", secret, "--oidc_alias", "realm", "--introspection_alias", "realm"), `are both "realm"`},
		{append(append(oidc[:6:6], intro...), "--introspection_secret_file", secret, "--introspection_alias", "idp.example"), "give one of them another alias, e.g. --introspection_alias"},
		{[]string{"--insecure_no_auth", "--oidc_issuer", "https://idp.example", "--oidc_audience", "gw"}, "--insecure_no_auth excludes --oidc_issuer"},
		{[]string{"--tokens", tokens, "--roles", roles}, "--roles: " + roles + `: line 2: unknown role "admin"`},
		{[]string{"--tokens", tokens, "--roles", filepath.Join(dir, "missing")}, "--roles: open"},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			refused(t, state, append(append([]string{}, base...), c.args...), c.mention)
		})
	}
}

// TestServeIdentity runs s2cs with a token file, an OIDC issuer and an
// introspection endpoint at once, and a roles file: each kind of token
// reaches the API as its identity, an operator sees another's stream,
// and neither the tokens nor the client secret reach the log.
func TestServeIdentity(t *testing.T) {
	is := oidctest.Start(t, oidctest.Options{Alg: "ES256"})
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "secret")
	tokensFile := filepath.Join(dir, "tokens")
	rolesFile := filepath.Join(dir, "roles")
	static := localgw.NewToken()
	for _, f := range []struct{ path, content string }{
		{secretFile, is.IntrospectionSecret + "\n"},
		{tokensFile, auth.HashToken(static) + " carol\n"},
		{rolesFile, "user any\noperator identity 127.0.0.1:ops\n"},
	} {
		if err := os.WriteFile(f.path, []byte(f.content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s := serve(t, []string{"--listener_ip", localgw.RandomLoopback(), "--port", "0", "--port_range", "5100-5101",
		"--state_dir", filepath.Join(dir, "state"), "--log_format", "json", "--tokens", tokensFile, "--roles", rolesFile,
		"--oidc_issuer", is.URL, "--oidc_audience", is.Audience, "--oidc_ca", is.CAFile,
		"--introspection_url", is.URL + "/introspect", "--introspection_client_id", is.IntrospectionClientID,
		"--introspection_secret_file", secretFile, "--introspection_alias", "globus", "--allow_targets", "127.0.0.0/8"})
	cert := filepath.Join(dir, "state", "s2cs.crt")
	jwt := is.Mint(oidctest.Claims{Subject: "alice"})
	opaque := is.MintOpaque(oidctest.Claims{Subject: "bob"})
	ops := is.Mint(oidctest.Claims{Subject: "ops"})
	ctx := context.Background()
	for tok, want := range map[string]string{static: "carol", jwt: "127.0.0.1:alice", opaque: "globus:bob", ops: "127.0.0.1:ops"} {
		c, err := client.New(client.Config{Addr: s.addr, ServerCert: cert, Token: tok})
		if err != nil {
			t.Fatal(err)
		}
		info, err := c.Info(ctx)
		c.Close()
		if err != nil || info.Identity != want {
			t.Errorf("identity %q, %v; want %q", info.Identity, err, want)
		}
	}
	// An operator finds alice's stream under her name.
	alice, _ := client.New(client.Config{Addr: s.addr, ServerCert: cert, Token: jwt})
	defer alice.Close()
	st, err := alice.Inbound(ctx, &api.InboundRequest{RemoteIP: "127.0.0.1", ReceiverPorts: []int{9}, NumConn: 1})
	if err != nil {
		t.Fatal(err)
	}
	op, _ := client.New(client.Config{Addr: s.addr, ServerCert: cert, Token: ops})
	defer op.Close()
	var got api.Stream
	if err := op.Do(ctx, "GET", "/v1/streams/"+st.UID+"?owner=127.0.0.1:alice", nil, &got); err != nil || got.Owner != "127.0.0.1:alice" {
		t.Fatalf("operator's get: %+v, %v", got, err)
	}
	// A bad token is refused, and says why.
	c, _ := client.New(client.Config{Addr: s.addr, ServerCert: cert, Token: is.Mint(oidctest.Claims{Subject: "alice", Expiry: time.Now().Add(-time.Hour)})})
	_, err = c.Info(ctx)
	c.Close()
	if ae, ok := err.(*api.Error); !ok || ae.Code != api.CodeUnauthenticated || !strings.Contains(ae.Message, "token expired") {
		t.Fatalf("expired token: %v", err)
	}
	if err := s.stop(t); err != nil {
		t.Fatalf("run: %v", err)
	}
	log := s.stderr.String()
	var trusting, introspecting bool
	for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line is not JSON: %q", line)
		}
		trusting = trusting || rec["msg"] == "trusting JWTs of an OIDC issuer"
		introspecting = introspecting || rec["msg"] == "checking opaque tokens by introspection"
	}
	if !trusting || !introspecting {
		t.Errorf("the log does not say what the gateway trusts:\n%s", log)
	}
	for _, secret := range []string{static, jwt, opaque, ops, is.IntrospectionSecret} {
		if strings.Contains(log, secret) || strings.Contains(strings.Join(s.stdout, "\n"), secret) {
			t.Fatalf("a token or the client secret is in s2cs's output:\n%s", log)
		}
	}
	if is.Stats().JWKSFetches != 1 {
		t.Errorf("%d JWKS fetches, want 1 (at start)", is.Stats().JWKSFetches)
	}
}

// TestServeIssuerDown: an issuer that does not answer at start is
// warned of, and s2cs serves: static tokens work, the issuer's tokens
// are unavailable (503) rather than refused.
func TestServeIssuerDown(t *testing.T) {
	is := oidctest.Start(t, oidctest.Options{Alg: "ES256"})
	is.SetDown(true)
	dir := t.TempDir()
	tokensFile := filepath.Join(dir, "tokens")
	static := localgw.NewToken()
	if err := os.WriteFile(tokensFile, []byte(auth.HashToken(static)+" carol\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := serve(t, []string{"--listener_ip", localgw.RandomLoopback(), "--port", "0", "--port_range", "5100-5101",
		"--state_dir", filepath.Join(dir, "state"), "--tokens", tokensFile,
		"--oidc_issuer", is.URL, "--oidc_audience", is.Audience, "--oidc_ca", is.CAFile})
	if !strings.Contains(s.stderr.String(), "the OIDC issuer's keys could not be fetched") {
		t.Errorf("no warning of the issuer being down:\n%s", s.stderr)
	}
	cert := filepath.Join(dir, "state", "s2cs.crt")
	for tok, want := range map[string]int{static: http.StatusOK, is.Mint(oidctest.Claims{Subject: "alice"}): http.StatusServiceUnavailable} {
		c, _ := client.New(client.Config{Addr: s.addr, ServerCert: cert, Token: tok})
		_, err := c.Info(context.Background())
		c.Close()
		status := http.StatusOK
		if ae, ok := err.(*api.Error); ok {
			status = ae.Code.HTTPStatus()
		} else if err != nil {
			t.Fatal(err)
		}
		if status != want {
			t.Errorf("status %d (%v), want %d", status, err, want)
		}
	}
}
