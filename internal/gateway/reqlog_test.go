package gateway

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"scistream/internal/auth"
	"scistream/internal/localgw"
	"scistream/internal/reqlog"
)

// records returns the JSON log records in l whose msg is msg.
func records(t *testing.T, l *logLines, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.String()), "\n") {
		if line == "" {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line is not JSON: %v: %s", err, line)
		}
		if rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

// safeID is a request id the gateway made: at least 16 safe bytes.
var safeID = regexp.MustCompile(`^[A-Za-z0-9._:-]{16,64}$`)

// jsonLogger returns a logger of every level that writes JSON to l.
func jsonLogger(l *logLines) *slog.Logger {
	return slog.New(slog.NewJSONHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// checkNoSecrets fails t if the log holds a token or any header.
func checkNoSecrets(t *testing.T, log string, tokens ...string) {
	t.Helper()
	for _, s := range append(tokens, "Bearer", "Authorization", "authorization") {
		if strings.Contains(log, s) {
			t.Fatalf("the log holds %q:\n%s", s, log)
		}
	}
}

// TestRequestLog: each request's line has its id (the caller's if safe,
// else a new one, also in the answer's header), the caller's identity,
// the route, the status and the duration; the "request failed" line
// has the same id; no token and no header is logged, also not a wrong
// token.
func TestRequestLog(t *testing.T) {
	var logs logLines
	s := newTestServer(t, func(c *Config) { c.Logger = jsonLogger(&logs) })
	wrong := "wrong-token-" + strings.Repeat("x", 20)
	for _, c := range []struct {
		name, method, path, token, id string
		keepID                        bool
		status                        int
		identity, route               string
	}{
		{"create", "POST", "/v1/streams/inbound", aliceToken, "trace-7f3a:01_b.c", true, 201, "alice", "POST /v1/streams/inbound"},
		{"uuid id", "GET", "/v1/streams", bobToken, "0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b6c", true, 200, "bob", "GET /v1/streams"},
		{"wrong token", "GET", "/v1/streams/0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b6c", wrong, "", false, 401, "", "GET /v1/streams/{uid}"},
		{"no token", "DELETE", "/v1/streams/x", "", "", false, 401, "", "DELETE /v1/streams/{uid}"},
		{"unknown route", "GET", "/v2/nothing", aliceToken, "", false, 404, "", "none"},
		{"unclean path", "GET", "/v1//streams", aliceToken, "", false, 404, "", "none"},
		{"health", "GET", "/healthz", "", "", false, 200, "", "GET /healthz"},
		{"id with space", "GET", "/v1/info", aliceToken, "a b", false, 200, "alice", "GET /v1/info"},
		{"id with newline", "GET", "/v1/info", aliceToken, "a\nlevel=ERROR msg=forged", false, 200, "alice", "GET /v1/info"},
		{"id too long", "GET", "/v1/info", aliceToken, strings.Repeat("a", 65), false, 200, "alice", "GET /v1/info"},
		{"id of 64", "GET", "/v1/info", aliceToken, strings.Repeat("b", 64), true, 200, "alice", "GET /v1/info"},
		{"id with quotes", "GET", "/v1/info", aliceToken, `"x"`, false, 200, "alice", "GET /v1/info"},
		{"id not ASCII", "GET", "/v1/info", aliceToken, "ïd", false, 200, "alice", "GET /v1/info"},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := len(records(t, &logs, "request"))
			body := ""
			if c.method == "POST" {
				body = inboundBody(9)
			}
			req := httptest.NewRequest(c.method, "/", strings.NewReader(body))
			req.URL.Path = c.path
			if c.token != "" {
				req.Header.Set("Authorization", "Bearer "+c.token)
			}
			if c.id != "" {
				req.Header.Set(reqlog.Header, c.id)
			}
			rr := httptest.NewRecorder()
			s.routes().ServeHTTP(rr, req)
			if rr.Code != c.status {
				t.Fatalf("status %d, want %d: %s", rr.Code, c.status, rr.Body)
			}
			id := rr.Header().Get(reqlog.Header)
			switch {
			case c.keepID && id != c.id:
				t.Fatalf("answer's %s %q, want the caller's %q", reqlog.Header, id, c.id)
			case !c.keepID && (id == c.id || !safeID.MatchString(id)):
				t.Fatalf("answer's %s %q: want a new id of at least 16 safe bytes", reqlog.Header, id)
			}
			recs := records(t, &logs, "request")
			if len(recs) != before+1 {
				t.Fatalf("%d request lines, want 1", len(recs)-before)
			}
			rec := recs[len(recs)-1]
			if rec["request_id"] != id || rec["identity"] != c.identity || rec["route"] != c.route ||
				rec["status"] != float64(c.status) || rec["method"] != c.method {
				t.Errorf("request line %v; want request_id %q identity %q route %q status %d", rec, id, c.identity, c.route, c.status)
			}
			if d, ok := rec["duration"].(float64); !ok || d <= 0 {
				t.Errorf("request line's duration %v", rec["duration"])
			}
			wantLevel := "INFO"
			if c.path == "/healthz" {
				wantLevel = "DEBUG"
			}
			if rec["level"] != wantLevel {
				t.Errorf("request line at %v, want %s", rec["level"], wantLevel)
			}
		})
	}
	// A refusal with a cause logs "request failed" with the same id.
	failed := records(t, &logs, "request failed")
	if len(failed) == 0 {
		t.Fatalf("no request failed line for the wrong token:\n%s", logs.String())
	}
	var found bool
	for _, f := range failed {
		for _, r := range records(t, &logs, "request") {
			found = found || (f["request_id"] == r["request_id"] && r["status"] == float64(401))
		}
	}
	if !found {
		t.Errorf("no request failed line shares its request_id with a 401 request line:\n%s", logs.String())
	}
	checkNoSecrets(t, logs.String(), aliceToken, bobToken, wrong)
}

// TestRequestIDsUnderLoad: a burst of concurrent requests over the real
// TLS listener, half with their own ids: every request gets exactly one
// log line, every answer its id, every generated id is distinct, and no
// token reaches the log.
func TestRequestIDsUnderLoad(t *testing.T) {
	var logs logLines
	tok := localgw.NewToken()
	tokens, err := auth.ParseTokens(strings.NewReader(auth.HashToken(tok) + " carol\n"))
	if err != nil {
		t.Fatal(err)
	}
	g := startGW(t, tokens, func(c *Config) { c.Logger = jsonLogger(&logs) })
	waitReady(t, g)
	pem, err := os.ReadFile(g.cert)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	host, _, _ := net.SplitHostPort(g.addr)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: host}}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	const n = 64
	ids := make([]string, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			req, _ := http.NewRequest("GET", "https://"+g.addr+"/v1/streams", nil)
			req.Header.Set("Authorization", "Bearer "+tok)
			if i%2 == 0 {
				req.Header.Set(reqlog.Header, fmt.Sprintf("caller-%d", i))
			}
			resp, err := hc.Do(req)
			if err != nil {
				errs <- err
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				errs <- fmt.Errorf("request %d: status %d", i, resp.StatusCode)
			}
			ids[i] = resp.Header.Get(reqlog.Header)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for i, id := range ids {
		if i%2 == 0 && id != fmt.Sprintf("caller-%d", i) {
			t.Errorf("request %d: id %q, want the caller's", i, id)
		}
		if seen[id] {
			t.Errorf("id %q given twice", id)
		}
		seen[id] = true
	}
	logged := map[string]bool{}
	for _, rec := range records(t, &logs, "request") {
		if rec["route"] == "GET /v1/streams" {
			if id, _ := rec["request_id"].(string); seen[id] && rec["identity"] == "carol" {
				logged[id] = true
			}
		}
	}
	if len(logged) != n {
		t.Errorf("%d of %d requests logged with their id and identity", len(logged), n)
	}
	checkNoSecrets(t, logs.String(), tok)
}
