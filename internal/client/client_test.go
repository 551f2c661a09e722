package client_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"scistream/internal/api"
	"scistream/internal/certs"
	"scistream/internal/client"
)

// identity is a self-signed certificate for 127.0.0.1 and its PEM file.
type identity struct {
	cert tls.Certificate
	file string
}

func newIdentity(t *testing.T) identity {
	t.Helper()
	id, file, _, err := certs.LoadOrGenerate(t.TempDir(), []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	return identity{id.TLS, file}
}

// tlsServer serves h over TLS with id's certificate on 127.0.0.1.
func tlsServer(t *testing.T, id identity, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(testLog{t}, "server: ", 0) // the refused handshakes
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{id.cert}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// testLog writes a server's log to the test's.
type testLog struct{ t *testing.T }

func (w testLog) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

func newClient(t *testing.T, cfg client.Config) *client.Client {
	t.Helper()
	c, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// checkLibraryMessage: the error names the gateway's address, is one
// line, and names no command-line flag (the caller adds those).
func checkLibraryMessage(t *testing.T, err error, addr string) {
	t.Helper()
	t.Log(err)
	msg := err.Error()
	if !strings.HasPrefix(msg, "s2cs "+addr+": ") || strings.Contains(msg, "\n") || strings.Contains(msg, "--") {
		t.Errorf("message %q: want one line starting with \"s2cs %s: \" and naming no flag", msg, addr)
	}
}

// A port nobody listens on: the listener that had it is closed.
func TestUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c := newClient(t, client.Config{Addr: addr, ServerCert: newIdentity(t).file, Timeout: 5 * time.Second})
	_, err = c.Info(context.Background())
	if !errors.Is(err, client.ErrUnreachable) || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("got %v, want ErrUnreachable wrapping ECONNREFUSED", err)
	}
	if errors.Is(err, client.ErrCertificate) || errors.Is(err, client.ErrNotHTTPS) {
		t.Errorf("%v matches another class too", err)
	}
	checkLibraryMessage(t, err, addr)
}

// The gateway presents another certificate than the one pinned; and a
// client given no certificate does not trust a self-signed one.
func TestCertificate(t *testing.T) {
	srv := tlsServer(t, newIdentity(t), http.NotFoundHandler())
	addr := srv.Listener.Addr().String()

	c := newClient(t, client.Config{Addr: addr, ServerCert: newIdentity(t).file, Timeout: 5 * time.Second})
	_, err := c.Info(context.Background())
	var unknownCA x509.UnknownAuthorityError
	if !errors.Is(err, client.ErrCertificate) || !errors.As(err, &unknownCA) {
		t.Fatalf("pinned another certificate: got %v, want ErrCertificate wrapping x509.UnknownAuthorityError", err)
	}
	if !strings.Contains(err.Error(), "does not match the one given") {
		t.Errorf("pinned another certificate: %q does not say so", err)
	}
	checkLibraryMessage(t, err, addr)

	c = newClient(t, client.Config{Addr: addr, Timeout: 5 * time.Second})
	_, err = c.Info(context.Background())
	var verify *tls.CertificateVerificationError
	if !errors.Is(err, client.ErrCertificate) || !errors.As(err, &verify) {
		t.Fatalf("system roots: got %v, want ErrCertificate wrapping *tls.CertificateVerificationError", err)
	}
	if !strings.Contains(err.Error(), "none was given") {
		t.Errorf("system roots: %q does not say that no certificate was given", err)
	}
	checkLibraryMessage(t, err, addr)
}

// Something answers in plain HTTP where HTTPS was expected.
func TestNotHTTPS(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	addr := srv.Listener.Addr().String()
	c := newClient(t, client.Config{Addr: addr, ServerCert: newIdentity(t).file, Timeout: 5 * time.Second})
	_, err := c.Info(context.Background())
	if !errors.Is(err, client.ErrNotHTTPS) || errors.Is(err, client.ErrCertificate) || errors.Is(err, client.ErrUnreachable) {
		t.Fatalf("got %v, want ErrNotHTTPS only", err)
	}
	checkLibraryMessage(t, err, addr)
}

// The pinned gateway answers: a result is decoded, the token is sent, and
// an API error body comes back as *api.Error.
func TestPinnedAnswers(t *testing.T) {
	id := newIdentity(t)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/info", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer secret-token" {
			w.WriteHeader(http.StatusUnauthorized)
			json.NewEncoder(w).Encode(api.ErrorBody{Error: api.Error{Code: api.CodeUnauthenticated, Message: "no token"}})
			return
		}
		json.NewEncoder(w).Encode(api.Info{Version: "0.1.0", Identity: "alice"})
	})
	mux.HandleFunc("GET /v1/streams/{uid}", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNotFound)
		json.NewEncoder(w).Encode(api.ErrorBody{Error: api.Error{Code: api.CodeNotFound, Message: "no stream " + r.PathValue("uid")}})
	})
	srv := tlsServer(t, id, mux)
	c := newClient(t, client.Config{Addr: srv.Listener.Addr().String(), ServerCert: id.file, Token: "secret-token", Timeout: 5 * time.Second})

	info, err := c.Info(context.Background())
	if err != nil || info.Identity != "alice" || info.Version != "0.1.0" {
		t.Fatalf("Info: %+v, %v", info, err)
	}
	_, err = c.Get(context.Background(), "abc")
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != api.CodeNotFound || ae.Message != "no stream abc" {
		t.Fatalf("Get: got %v, want *api.Error not_found \"no stream abc\"", err)
	}
	for _, sentinel := range []error{client.ErrUnreachable, client.ErrCertificate, client.ErrNotHTTPS} {
		if errors.Is(err, sentinel) {
			t.Errorf("an API error matches %v", sentinel)
		}
	}
}

func TestConfigError(t *testing.T) {
	noPEM := filepath.Join(t.TempDir(), "junk.crt")
	if err := os.WriteFile(noPEM, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "missing.crt")
	for _, c := range []struct {
		cfg   client.Config
		field string
		want  string
	}{
		{client.Config{Addr: "no-port"}, "Addr", `address "no-port": want host:port of the gateway's control API, e.g. 10.0.0.5:5000`},
		{client.Config{Addr: ":5000"}, "Addr", `address ":5000": want host:port`},
		{client.Config{Addr: "127.0.0.1:5000", ServerCert: missing}, "ServerCert", "server certificate " + `"` + missing + `": open ` + missing},
		{client.Config{Addr: "127.0.0.1:5000", ServerCert: noPEM}, "ServerCert", "no PEM certificate in file"},
	} {
		_, err := client.New(c.cfg)
		var ce *client.ConfigError
		if !errors.As(err, &ce) || ce.Field != c.field || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "--") {
			t.Errorf("New(%+v): got %v, want a ConfigError for %s containing %q and naming no flag", c.cfg, err, c.field, c.want)
		}
	}
	_, err := client.New(client.Config{Addr: "127.0.0.1:5000", ServerCert: missing})
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing certificate file: %v does not match os.ErrNotExist", err)
	}
}

// TestWANPortNamed: an address that asks for a client certificate, as
// a gateway's WAN data port does, is said to be one (ErrWANPort), not
// left as the TLS alert it ends with: certificate_required when the
// handshake gets that far, or no_application_protocol when the port
// refuses the protocols the client offers before it asks (the WAN port
// takes only its own); then a handshake of its own, offering none,
// finds it asking. A server that asks nothing and ends the handshake
// with an alert is not named so.
func TestWANPortNamed(t *testing.T) {
	id := newIdentity(t)
	for _, c := range []struct {
		name   string
		cfg    *tls.Config
		wanted bool
	}{
		{"no_application_protocol", &tls.Config{MinVersion: tls.VersionTLS13, ClientAuth: tls.RequireAnyClientCert, NextProtos: []string{"scistream-wan/2"}}, true},
		{"certificate_required over h2", &tls.Config{MinVersion: tls.VersionTLS13, ClientAuth: tls.RequireAnyClientCert, NextProtos: []string{"h2"}}, true},
		{"certificate_required over http/1.1", &tls.Config{MinVersion: tls.VersionTLS13, ClientAuth: tls.RequireAnyClientCert, NextProtos: []string{"http/1.1"}}, true},
		{"certificate_required, no ALPN", &tls.Config{MinVersion: tls.VersionTLS13, ClientAuth: tls.RequireAnyClientCert}, true},
		{"an alert without asking", &tls.Config{MinVersion: tls.VersionTLS13, NextProtos: []string{"other/1"}}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			cfg := c.cfg.Clone()
			cfg.Certificates = []tls.Certificate{id.cert}
			done := make(chan struct{})
			go func() { // a WAN port: handshakes, and nothing else
				defer close(done)
				for {
					conn, err := ln.Accept()
					if err != nil {
						return
					}
					tc := tls.Server(conn, cfg)
					tc.SetDeadline(time.Now().Add(10 * time.Second))
					tc.Handshake()
					tc.Close()
				}
			}()
			defer func() { ln.Close(); <-done }()
			addr := ln.Addr().String()
			cl := newClient(t, client.Config{Addr: addr, ServerCert: id.file, Timeout: 10 * time.Second})
			_, err = cl.Info(context.Background())
			want := addr + " asks for a client certificate: it is a gateway's WAN data port, not its control port"
			switch {
			case err == nil:
				t.Fatal("an answer from a port that answers none")
			case c.wanted && (!errors.Is(err, client.ErrWANPort) || err.Error() != want):
				t.Errorf("%v, want %q (ErrWANPort)", err, want)
			case !c.wanted && errors.Is(err, client.ErrWANPort):
				t.Errorf("%v: ErrWANPort of a server that asks no certificate", err)
			}
		})
	}
}
