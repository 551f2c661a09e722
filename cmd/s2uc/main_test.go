package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"scistream/internal/api"
	"scistream/internal/certs"
	"scistream/internal/version"
)

// s2uc runs s2uc in process as main does and returns stdout, stderr (with
// main's error line) and the exit status.
func s2uc(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), args, &stdout, &stderr)
	report(&stderr, args, err)
	return stdout.String(), stderr.String(), exitCode(err)
}

// isolate keeps s2uc away from the user's stream records, token,
// configuration file and SCISTREAM_* defaults (an empty variable is
// unset to s2uc).
func isolate(t *testing.T) {
	t.Setenv("SCISTREAM_HOME", t.TempDir())
	for _, v := range []string{"SCISTREAM_TOKEN", "SCISTREAM_CONFIG", "SCISTREAM_PROFILE", "SCISTREAM_S2CS", "SCISTREAM_SERVER_CERT", "SCISTREAM_TOKEN_FILE", "SCISTREAM_OUTPUT"} {
		t.Setenv(v, "")
	}
}

// TestHelp: --help on the tool and on every command prints the usage on
// stdout (to be paged or grepped: s2uc list --help | grep owner) and
// exits 0.
func TestHelp(t *testing.T) {
	isolate(t)
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		stdout, stderr, code := s2uc(t, args...)
		if code != 0 || stderr != "" || !strings.HasPrefix(stdout, "usage: s2uc COMMAND") {
			t.Errorf("%v: exit %d, stderr %q, stdout:\n%s", args, code, stderr, stdout)
		}
		for _, c := range tool().Commands {
			if !strings.Contains(stdout, "\n  "+c.Name+" ") {
				t.Errorf("%v: the listing lacks %s:\n%s", args, c.Name, stdout)
			}
		}
	}
	for _, c := range tool().Commands {
		snake := strings.ReplaceAll(c.Name, "-", "_")
		for _, args := range [][]string{{c.Name, "--help"}, {c.Name, "-h"}, {"help", c.Name}, {snake, "--help"}} {
			stdout, stderr, code := s2uc(t, args...)
			if code != 0 || stderr != "" || !strings.HasPrefix(stdout, "usage: s2uc "+c.Name+" ") {
				t.Errorf("%v: exit %d, stderr %q, stdout:\n%s", args, code, stderr, stdout)
			}
			// Each flag's help says one default, once; --s2cs says
			// whose control API it names in one phrase.
			for _, l := range strings.Split(stdout, "\n") {
				if strings.Count(l, "(default") > 1 {
					t.Errorf("%v: a flag with two defaults: %q", args, l)
				}
				if strings.Contains(l, "HOST:PORT of the ") && !regexp.MustCompile(`HOST:PORT of the (\w+ )?gateway's control API( \(.*\))?$`).MatchString(l) {
					t.Errorf("%v: --s2cs help %q", args, l)
				}
			}
			local := c.Name == "hash-token" || c.Name == "login" || c.Name == "logout" || c.Name == "version" || c.Name == "completion" // talk to no gateway
			if !local && !strings.Contains(stdout, "--timeout") {
				t.Errorf("%v: the usage lacks the common flags:\n%s", args, stdout)
			}
		}
	}
}

func TestVersion(t *testing.T) {
	stdout, stderr, code := s2uc(t, "--version")
	if want := "s2uc " + version.Version + " (commit "; code != 0 || !strings.HasPrefix(stdout, want) || stderr != "" {
		t.Errorf("--version: exit %d, stdout %q (want %q...), stderr %q", code, stdout, want, stderr)
	}
}

// TestBadCommandLine: a wrong command line is one "s2uc: " line on
// stderr naming the problem, exit status 1, before any request is sent.
func TestBadCommandLine(t *testing.T) {
	isolate(t)
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty-token")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.crt")
	const gw = "127.0.0.1:1" // never dialled: every case fails first
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"frobnicate"}, `unknown command "frobnicate"; run s2uc --help for the list`},
		{[]string{"stauts", "0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b6c"}, `unknown command "stauts": did you mean status? (s2uc --help lists the commands)`},
		{[]string{"outbound_reqest"}, `unknown command "outbound_reqest": did you mean outbound-request? (s2uc --help lists the commands)`},
		{[]string{"list", "--output", ""}, `--output "": use text or json`},
		{[]string{"list", "--nope"}, "unknown flag --nope (s2uc list --help lists the flags)"},
		{[]string{"list", "--servr_cert", "x"}, "unknown flag --servr_cert: did you mean --server_cert? (s2uc list --help lists the flags)"},
		{[]string{"inbound-request", "--num_conn", "many"}, `invalid value "many" for flag -num_conn`},
		{[]string{"list", "--output", "xml"}, `--output "xml": use text or json`},
		{[]string{"list", "--timeout", "0s"}, "--timeout must be positive"},
		{[]string{"list"}, "missing --s2cs HOST:PORT"},
		{[]string{"list", "--s2cs", "no-port"}, `--s2cs "no-port": want HOST:PORT of the gateway's control API, e.g. 10.0.0.5:5000`},
		{[]string{"list", "--s2cs", gw, "--server_cert", missing}, "--server_cert " + missing + ": open " + missing},
		{[]string{"list", "--s2cs", gw, "--token_file", empty}, "--token_file " + empty + " is empty"},
		{[]string{"list", "--s2cs", gw, "extra"}, `unexpected argument "extra"`},
		{[]string{"info", "--s2cs", gw, "extra"}, `unexpected argument "extra"`},
		{[]string{"status"}, "give exactly one stream UID"},
		{[]string{"status", "a", "b"}, "give exactly one stream UID"},
		{[]string{"status", "a", "--watch", "1ms"}, "--watch must be at least 100ms"},
		{[]string{"release"}, "give exactly one stream UID to release"},
		{[]string{"outbound-request"}, "missing UID: give the stream UID printed by inbound-request"},
		{[]string{"outbound-request", "uid", "127.0.0.1:5100", "more"}, `unexpected argument "more"`},
		{[]string{"outbound-request", "uid", "--num_conn", "0"}, "--num_conn 0 out of range"},
		{[]string{"inbound-request", "--s2cs", gw, "--remote_ip", "127.0.0.1", "--receiver_ports", "0"}, `--receiver_ports: "0" is not a port 1-65535`},
		{[]string{"inbound-request", "--s2cs", gw, "--remote_ip", "127.0.0.1", "--receiver_ports", "80", "--num_conn", "10000"}, "--num_conn 10000 out of range"},
		{[]string{"inbound-request", "--s2cs", gw, "--remote_ip", "127.0.0.1", "--receiver_ports", "80", "--app_wait", "soon"}, `--app_wait "soon": give a duration such as 30s or 10m, or 0 not to wait`},
		{[]string{"inbound-request", "--s2cs", gw, "--remote_ip", "127.0.0.1", "--receiver_ports", "80", "--app_wait", "-5s"}, "--app_wait -5s: give a whole number of seconds, 0 or more"},
		{[]string{"inbound-request", "--s2cs", gw, "--remote_ip", "127.0.0.1", "--receiver_ports", "80", "--app_wait", "1500ms"}, "--app_wait 1.5s: give a whole number of seconds"},
		{[]string{"stream", "--inbound_s2cs", gw, "--outbound_s2cs", gw, "--remote_ip", "127.0.0.1", "--receiver_ports", "80", "--app_wait", "48h"}, "--app_wait 48h0m0s is longer than any gateway allows (24h)"},
		{[]string{"inbound-request", "--s2cs", gw, "--remote_ip", "127.0.0.1", "--receiver_ports", "80", "--resume_window", "soon"}, `--resume_window "soon": give a duration such as 30s or 5m, or 0 not to wait`},
		{[]string{"inbound-request", "--s2cs", gw, "--remote_ip", "127.0.0.1", "--receiver_ports", "80", "--resume_window", "-1s"}, "--resume_window -1s: give a whole number of seconds, 0 or more"},
		{[]string{"outbound-request", "--s2cs", gw, "0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b6c", "--resume_window", "2500ms"}, "--resume_window 2.5s: give a whole number of seconds"},
		{[]string{"stream", "--inbound_s2cs", gw, "--outbound_s2cs", gw, "--remote_ip", "127.0.0.1", "--receiver_ports", "80", "--resume_window", "25h"}, "--resume_window 25h0m0s is longer than any gateway allows (24h); see s2uc info for the gateway's maximum"},
		{[]string{"inbound-request", "--s2cs", gw, "--remote_ip", "127.0.0.1", "--receiver_ports", "80", "--max_active_conns", "-1"}, "--max_active_conns -1: give the most connections"},
		{[]string{"outbound-request", "uid", "--max_active_conns", "-2"}, "--max_active_conns -2: give the most connections"},
		{[]string{"stream", "--inbound_s2cs", gw, "--outbound_s2cs", gw, "--remote_ip", "127.0.0.1", "--receiver_ports", "80", "--max_active_conns", "-3"}, "--max_active_conns -3"},
		{[]string{"inbound-request", "--s2cs", gw, "--receiver_ports", "80"}, "missing --remote_ip"},
		{[]string{"inbound_request", "--s2cs", gw, "--remote_ip", "127.0.0.1"}, "missing --receiver_ports"},
		{[]string{"stream", "--inbound_s2cs", "no-port", "--outbound_s2cs", gw, "--remote_ip", "127.0.0.1", "--receiver_ports", "80"}, `inbound gateway: --inbound_s2cs "no-port": want HOST:PORT`},
		{[]string{"stream", "--inbound-s2cs", gw, "--remote_ip", "127.0.0.1", "--receiver_ports", "80"}, "give both --inbound_s2cs and --outbound_s2cs"},
		{[]string{"hash-token"}, "missing --identity NAME"},
		{[]string{"inbound-request", "--s2cs", gw, "--remote_ip", "127.0.0.1", "--receiver_ports", "80", "--rate", "fast"}, `--rate "fast": no number`},
		{[]string{"inbound-request", "--s2cs", gw, "--remote_ip", "127.0.0.1", "--receiver_ports", "80", "--rate", "10 Gigs"}, `--rate "10 Gigs": unknown unit`},
		{[]string{"stream", "--inbound_s2cs", gw, "--outbound_s2cs", gw, "--remote_ip", "127.0.0.1", "--receiver_ports", "80", "--rate", "1G", "--min_rate", "2G"}, "--min_rate 2 Gbit/s is more than --rate 1 Gbit/s"},
		{[]string{"outbound-request", "uid", "--lease", "-1h"}, "--lease -1h0m0s: give a positive whole number of seconds"},
		{[]string{"inbound-request", "--s2cs", gw, "--remote_ip", "127.0.0.1", "--receiver_ports", "80", "--lease", "soon"}, `--lease "soon": give a duration such as 2h`},
		{[]string{"update"}, "give exactly one stream UID to update"},
		{[]string{"update", "uid"}, "nothing to update: give --rate, --allow or --lease"},
		{[]string{"update", "uid", "--rate", "-5M"}, `--rate "-5M": no number`},
		{[]string{"update", "uid", "--lease", "1500ms"}, "--lease 1.5s: give a positive whole number of seconds"},
		{[]string{"update", "uid", "--lease", "1h"}, "no local record of stream uid: give the gateway with --s2cs"},
	} {
		stdout, stderr, code := s2uc(t, c.args...)
		checkOneLine(t, c.args, stdout, stderr, code, c.want)
	}
	// Without a command: the listing, then the message.
	_, stderr, code := s2uc(t)
	if code != exitUsage || !strings.HasPrefix(stderr, "usage: s2uc") || !strings.HasSuffix(stderr, "\ns2uc: no command given; see the list above\n") {
		t.Errorf("no command: exit %d, stderr:\n%s", code, stderr)
	}
}

// checkOneLine: a refused command line, exit status 2 (4 for a UID
// s2uc has no record of), nothing on stdout, and stderr exactly one line
// "s2uc: ..." containing want.
func checkOneLine(t *testing.T, args []string, stdout, stderr string, code int, want string) {
	t.Helper()
	status := exitUsage
	if strings.Contains(want, "no local record") {
		status = exitNotFound
	}
	checkExit(t, args, stdout, stderr, code, status, want)
}

// checkExit: exit status status, nothing on stdout, and stderr exactly
// one line "s2uc: ..." containing want.
func checkExit(t *testing.T, args []string, stdout, stderr string, code, status int, want string) {
	t.Helper()
	if code != status || stdout != "" || strings.Count(stderr, "\n") != 1 || !strings.HasPrefix(stderr, "s2uc: ") || !strings.Contains(stderr, want) {
		t.Errorf("s2uc %s: exit %d, stdout %q, stderr %q; want exit %d and one line containing %q",
			strings.Join(args, " "), code, stdout, stderr, status, want)
	}
}

// TestRequestErrors: a request that gets no answer from the gateway's
// API says what failed (the client library's part) and which flag to
// check (s2uc's part), in one line; a refusal by the gateway carries its
// code. Real sockets on loopback.
func TestRequestErrors(t *testing.T) {
	isolate(t)
	t.Setenv("SCISTREAM_TOKEN", "alice-token")
	cert, certFile := selfSigned(t)
	_, otherFile := selfSigned(t)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := ln.Addr().String()
	ln.Close()

	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/info", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer alice-token" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		json.NewEncoder(w).Encode(api.Info{Version: "0.1.0", Identity: "alice", ListenerIP: "127.0.0.1", PortRange: "5100-5199"})
	})
	// The gateway answers with the caller's request id (gateway/reqlog.go).
	ids := make(chan string, 10)
	mux.HandleFunc("GET /v1/streams", func(w http.ResponseWriter, r *http.Request) {
		ids <- r.Header.Get("X-Request-Id")
		w.Header().Set("X-Request-Id", r.Header.Get("X-Request-Id"))
		w.WriteHeader(http.StatusForbidden)
		json.NewEncoder(w).Encode(api.ErrorBody{Error: api.Error{Code: api.CodePermissionDenied, Message: "alice may not list"}})
	})
	mux.HandleFunc("GET /v1/streams/{uid}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Request-Id", r.Header.Get("X-Request-Id"))
		w.WriteHeader(http.StatusBadRequest)
		json.NewEncoder(w).Encode(api.ErrorBody{Error: api.Error{Code: api.CodeInvalidArgument, Message: "uid: not a uid"}})
	})
	gw := httptest.NewUnstartedServer(mux)
	gw.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are the point
	gw.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	gw.StartTLS()
	t.Cleanup(gw.Close)
	plain := httptest.NewServer(mux)
	t.Cleanup(plain.Close)
	gwAddr, plainAddr := gw.Listener.Addr().String(), plain.Listener.Addr().String()

	for _, c := range []struct {
		args   []string
		status int
		want   []string
	}{
		{[]string{"list", "--s2cs", refused, "--server_cert", certFile}, exitUnavailable,
			[]string{"s2uc: s2cs " + refused + ": unreachable: ", "connection refused; check --s2cs and that s2cs runs there"}},
		{[]string{"status", "uid1", "--s2cs", refused, "--server_cert", certFile}, exitUnavailable,
			[]string{"s2uc: status on " + refused + ": s2cs " + refused + ": unreachable: ", "; check --s2cs"}},
		{[]string{"info", "--s2cs", gwAddr, "--server_cert", otherFile}, exitFailed,
			[]string{"s2uc: s2cs " + gwAddr + ": TLS verification failed (x509: ", "the gateway's certificate does not match the one given; pass the gateway's certificate with --server_cert (s2cs prints its path at start)"}},
		{[]string{"info", "--s2cs", gwAddr}, exitFailed,
			[]string{"TLS verification failed", "none was given; pass the gateway's certificate with --server_cert"}},
		{[]string{"info", "--s2cs", plainAddr, "--server_cert", certFile}, exitUnavailable,
			[]string{"s2uc: s2cs " + plainAddr + ": answered plain HTTP; the control API is HTTPS only; check --s2cs"}},
		{[]string{"list", "--s2cs", gwAddr, "--server_cert", certFile}, exitDenied,
			[]string{"s2uc: permission_denied: alice may not list (request "}},
	} {
		stdout, stderr, code := s2uc(t, c.args...)
		t.Logf("s2uc %s: %s", c.args[0], stderr)
		for _, want := range c.want {
			checkExit(t, c.args, stdout, stderr, code, c.status, want)
		}
	}

	// The refusal names the request it was: the id s2uc sent, which the
	// gateway logged. A refusal the caller can fix names none.
	id := <-ids
	if len(id) < 16 {
		t.Fatalf("s2uc sent the request id %q, want a random one", id)
	}
	_, stderr, _ := s2uc(t, "list", "--s2cs", gwAddr, "--server_cert", certFile)
	if again := <-ids; again == id || !strings.HasSuffix(stderr, "alice may not list (request "+again+" in the gateway's log)\n") {
		t.Errorf("a refusal: %q; want it to end with the request id sent, %q (not the last request's, %q)", stderr, again, id)
	}
	_, stderr, _ = s2uc(t, "status", "uid1", "--s2cs", gwAddr, "--server_cert", certFile)
	if !strings.Contains(stderr, "invalid_argument: uid: not a uid") || strings.Contains(stderr, "(request ") {
		t.Errorf("a refusal the caller can fix: %q; want it without a request id", stderr)
	}

	stdout, stderr, code := s2uc(t, "info", "--s2cs", gwAddr, "--server_cert", certFile)
	if want := "s2cs 0.1.0 at " + gwAddr + " as alice\n  listener_ip 127.0.0.1, ports 5100-5199\n"; code != 0 || !strings.HasPrefix(stdout, want) || stderr != "" {
		t.Errorf("info: exit %d, stdout %q (want %q...), stderr %q", code, stdout, want, stderr)
	}
}

// selfSigned returns a certificate for 127.0.0.1 and its PEM file.
func selfSigned(t *testing.T) (tls.Certificate, string) {
	t.Helper()
	id, file, _, err := certs.LoadOrGenerate(t.TempDir(), []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	return id.TLS, file
}
