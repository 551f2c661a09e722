package gateway

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"scistream/internal/api"
	"scistream/internal/auth"
	"scistream/internal/certs"
	"scistream/internal/localgw"
	"scistream/internal/ports"
	"scistream/internal/store"
)

// Tokens of the identities the in-process tests use.
const (
	aliceToken = "alice-token-for-tests"
	bobToken   = "bob-token-for-tests"
)

// clock is a settable clock for Config.Now.
type clock struct {
	mu sync.Mutex // guards t
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
	return c.t
}

// newTestServer returns a server that restored its (empty) store and is
// ready for requests, without serving on a socket: tests call its
// handler directly. mod may change the config first.
func newTestServer(t testing.TB, mod func(*Config)) *Server {
	t.Helper()
	dir := t.TempDir()
	ip := localgw.RandomLoopback()
	id, _, _, err := certs.LoadOrGenerate(dir, []string{ip})
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.OpenBolt(filepath.Join(dir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := auth.ParseTokens(strings.NewReader(
		auth.HashToken(aliceToken) + " alice\n" + auth.HashToken(bobToken) + " bob\n"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		ListenerIP: ip, PortRange: ports.Range{Lo: 5100, Hi: 5103}, Identity: id, Auth: tokens, Store: st,
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if mod != nil {
		mod(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(context.Background()) })
	if err := s.restore(); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.ready = true
	s.mu.Unlock()
	return s
}

// call sends one request to s's handler and returns the status and body.
func call(t *testing.T, s *Server, method, path, token, body string) (int, []byte) {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	rr := httptest.NewRecorder()
	s.routes().ServeHTTP(rr, req)
	return rr.Code, rr.Body.Bytes()
}

// callOK is call that fails the test unless the status is want, and
// decodes the body into out.
func callOK(t *testing.T, s *Server, method, path, token, body string, want int, out any) {
	t.Helper()
	code, b := call(t, s, method, path, token, body)
	if code != want {
		t.Fatalf("%s %s: status %d, want %d: %s", method, path, code, want, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: body is not JSON: %v: %s", method, path, err, b)
		}
	}
}

// callErr is call that expects an error answer with the documented body.
func callErr(t *testing.T, s *Server, method, path, token, body string, status int, code api.Code, mention string) {
	t.Helper()
	got, b := call(t, s, method, path, token, body)
	var eb api.ErrorBody
	if err := json.Unmarshal(b, &eb); err != nil {
		t.Fatalf("%s %s: error body is not JSON: %v: %s", method, path, err, b)
	}
	if got != status || eb.Error.Code != code || !strings.Contains(eb.Error.Message, mention) {
		t.Fatalf("%s %s: %d %s %q; want %d %s mentioning %q", method, path, got, eb.Error.Code, eb.Error.Message, status, code, mention)
	}
}

func inboundBody(port int) string {
	b, _ := json.Marshal(api.InboundRequest{RemoteIP: "127.0.0.1", ReceiverPorts: []int{port}, NumConn: 1})
	return string(b)
}

func TestHandlerAuthentication(t *testing.T) {
	s := newTestServer(t, nil)
	code, b := call(t, s, "GET", "/v1/streams", "", "")
	if code != 401 || !strings.Contains(string(b), `"unauthenticated"`) || !strings.Contains(string(b), "SCISTREAM_TOKEN") {
		t.Fatalf("no token: %d %s", code, b)
	}
	callErr(t, s, "GET", "/v1/info", "wrong", "", 401, api.CodeUnauthenticated, "not recognised")
	rr := httptest.NewRecorder()
	s.routes().ServeHTTP(rr, httptest.NewRequest("POST", "/v1/streams/inbound", nil))
	if rr.Header().Get("WWW-Authenticate") == "" {
		t.Fatal("401 without WWW-Authenticate")
	}
	var info api.Info
	callOK(t, s, "GET", "/v1/info", aliceToken, "", 200, &info)
	if info.Identity != "alice" || info.DefaultEngine != "splice" || len(info.Engines) != 3 || info.WANCertSHA256 != s.cfg.Identity.SHA256 {
		t.Fatalf("info = %+v", info)
	}
}

func TestHandlerNotReady(t *testing.T) {
	s := newTestServer(t, nil)
	s.mu.Lock()
	s.ready = false
	s.mu.Unlock()
	callErr(t, s, "GET", "/v1/streams", aliceToken, "", 503, api.CodeUnavailable, "not ready")
	code, b := call(t, s, "GET", "/healthz", "", "")
	if code != 503 || !strings.Contains(string(b), "starting") {
		t.Fatalf("healthz while not ready: %d %s", code, b)
	}
}

func TestHandlerUnknownRoute(t *testing.T) {
	s := newTestServer(t, nil)
	callErr(t, s, "GET", "/v2/streams", aliceToken, "", 404, api.CodeNotFound, "openapi.yaml")
	callErr(t, s, "PUT", "/v1/streams/inbound", aliceToken, "", 404, api.CodeNotFound, "no such endpoint")
	code, b := call(t, s, "GET", "/v1/openapi.yaml", "", "")
	if code != 200 || !strings.Contains(string(b), "openapi:") {
		t.Fatalf("openapi.yaml: %d", code)
	}
}

// TestHandlerStreamLifecycle walks a stream through every route in
// process: inbound, outbound on a second server, attach, get, list,
// release, release again; ownership is enforced on each.
func TestHandlerStreamLifecycle(t *testing.T) {
	in, out := newTestServer(t, nil), newTestServer(t, nil)
	var inS api.Stream
	callOK(t, in, "POST", "/v1/streams/inbound", aliceToken, inboundBody(9), 201, &inS)
	if inS.State != api.StateListening || inS.Secret == "" || inS.WANCert == "" || len(inS.Listeners) != 1 || inS.Owner != "alice" {
		t.Fatalf("inbound answer: %+v", inS)
	}
	if rec, err := in.cfg.Store.Get(inS.UID); err != nil || rec.State != api.StateListening {
		t.Fatalf("stored record: %+v, %v", rec, err)
	}
	ob, _ := json.Marshal(api.OutboundRequest{UID: inS.UID, PeerListeners: inS.Listeners, NumConn: 1,
		PeerCert: inS.WANCert, Secret: inS.Secret, Allow: []string{"127.0.0.0/8"}})
	var outS api.Stream
	callOK(t, out, "POST", "/v1/streams/outbound", aliceToken, string(ob), 201, &outS)
	if outS.State != api.StateConnected || outS.PeerCertSHA256 != in.cfg.Identity.SHA256 || outS.Secret != "" {
		t.Fatalf("outbound answer: %+v", outS)
	}

	attach := func(cert string) string {
		b, _ := json.Marshal(api.AttachRequest{PeerCert: cert})
		return string(b)
	}
	path := "/v1/streams/" + inS.UID
	callErr(t, in, "POST", path+"/attach", bobToken, attach(outS.WANCert), 403, api.CodePermissionDenied, "another identity")
	callErr(t, in, "POST", path+"/attach", aliceToken, attach(""), 400, api.CodeInvalidArgument, "peer_cert is required")
	callErr(t, out, "POST", path+"/attach", aliceToken, attach(inS.WANCert), 400, api.CodeInvalidArgument, "outbound side")
	var att api.Stream
	callOK(t, in, "POST", path+"/attach", aliceToken, attach(outS.WANCert), 200, &att)
	if att.State != api.StateConnected || att.PeerCertSHA256 != out.cfg.Identity.SHA256 {
		t.Fatalf("attach answer: %+v", att)
	}
	callOK(t, in, "POST", path+"/attach", aliceToken, attach(outS.WANCert), 200, nil) // again: same pin
	callErr(t, in, "POST", path+"/attach", aliceToken, attach(inS.WANCert), 409, api.CodeConflict, "another peer certificate")

	var got api.Stream
	callOK(t, in, "GET", path, aliceToken, "", 200, &got)
	if got.State != api.StateConnected || got.Stats == nil || got.WANCert == "" || got.Secret != "" {
		t.Fatalf("get: %+v", got)
	}
	callErr(t, in, "GET", path, bobToken, "", 403, api.CodePermissionDenied, "another identity")
	callErr(t, in, "GET", "/v1/streams/00000000-0000-4000-8000-000000000000", aliceToken, "", 404, api.CodeNotFound, "no stream")
	callErr(t, in, "GET", "/v1/streams/NOT-A-UID", aliceToken, "", 400, api.CodeInvalidArgument, "not a stream UID")

	var list api.StreamList
	callOK(t, in, "GET", "/v1/streams", bobToken, "", 200, &list)
	if len(list.Streams) != 0 {
		t.Fatalf("bob lists alice's stream: %+v", list)
	}
	callOK(t, in, "GET", "/v1/streams", aliceToken, "", 200, &list)
	if len(list.Streams) != 1 || list.Streams[0].UID != inS.UID {
		t.Fatalf("alice's list: %+v", list)
	}
	callErr(t, in, "GET", "/v1/streams?all=maybe", aliceToken, "", 400, api.CodeInvalidArgument, "all=")

	callErr(t, in, "DELETE", path, bobToken, "", 403, api.CodePermissionDenied, "another identity")
	var rel api.Stream
	callOK(t, in, "DELETE", path, aliceToken, "", 200, &rel)
	if rel.State != api.StateReleased || rel.Stats == nil || !strings.Contains(rel.Reason, "alice") {
		t.Fatalf("release answer: %+v", rel)
	}
	if n := in.alloc.InUse(); n != 0 {
		t.Fatalf("%d ports in use after release", n)
	}
	callOK(t, in, "DELETE", path, aliceToken, "", 200, &rel) // again: reports the end
	if rel.State != api.StateReleased {
		t.Fatalf("second release: %+v", rel)
	}
	callErr(t, in, "POST", path+"/attach", aliceToken, attach(outS.WANCert), 409, api.CodeConflict, "has ended")
	callOK(t, in, "GET", "/v1/streams?all=true", aliceToken, "", 200, &list)
	if len(list.Streams) != 1 || list.Streams[0].State != api.StateReleased {
		t.Fatalf("list --all after release: %+v", list)
	}
	callOK(t, in, "GET", "/v1/streams", aliceToken, "", 200, &list)
	if len(list.Streams) != 0 {
		t.Fatalf("list after release shows %d live streams", len(list.Streams))
	}
	callOK(t, out, "DELETE", path, aliceToken, "", 200, nil)
}

// TestHandlerCreateRefusals: each refusal of a create request names the
// field or the limit, and leaves no port bound.
func TestHandlerCreateRefusals(t *testing.T) {
	s := newTestServer(t, nil)
	const uid = "0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b6c"
	for _, c := range []struct {
		name, path, body string
		status           int
		code             api.Code
		mention          string
	}{
		{"empty", "inbound", ``, 400, api.CodeInvalidArgument, "empty body"},
		{"not an object", "inbound", `[1,2]`, 400, api.CodeInvalidArgument, "malformed JSON"},
		{"unknown field", "inbound", `{"remote_ip":"127.0.0.1","receiver_ports":[80],"num_conn":1,"colour":"red"}`, 400, api.CodeInvalidArgument, "colour"},
		{"num_conn over the range", "inbound", `{"remote_ip":"127.0.0.1","receiver_ports":[80],"num_conn":5}`, 400, api.CodeInvalidArgument, "exceeds this gateway's port range"},
		{"too many ports", "inbound", `{"remote_ip":"127.0.0.1","receiver_ports":[` + strings.Repeat("80,", 64) + `80],"num_conn":1}`, 400, api.CodeInvalidArgument, "receiver_ports"},
		{"bad host", "inbound", `{"remote_ip":"exa mple","receiver_ports":[80],"num_conn":1}`, 400, api.CodeInvalidArgument, "remote_ip"},
		{"bad engine", "inbound", `{"remote_ip":"127.0.0.1","receiver_ports":[80],"num_conn":1,"engine":"dpdk"}`, 400, api.CodeInvalidArgument, "engine"},
		{"tcp wan", "inbound", `{"remote_ip":"127.0.0.1","receiver_ports":[80],"num_conn":1,"wan":"tcp"}`, 403, api.CodePermissionDenied, "insecure_tcp_wan"},
		{"content type", "inbound", `{}`, 400, api.CodeInvalidArgument, "content type"},
		{"outbound bad uid", "outbound", `{"uid":"x","num_conn":1}`, 400, api.CodeInvalidArgument, "uid"},
		{"outbound no listeners", "outbound", `{"uid":"` + uid + `","num_conn":1}`, 400, api.CodeInvalidArgument, "peer_listeners"},
		{"outbound bad port", "outbound", `{"uid":"` + uid + `","num_conn":1,"peer_listeners":["h:08"]}`, 400, api.CodeInvalidArgument, "not a number"},
		{"outbound no cert", "outbound", `{"uid":"` + uid + `","num_conn":1,"peer_listeners":["h:80"],"secret":"` + strings.Repeat("A", 43) + `="}`, 400, api.CodeInvalidArgument, "peer_cert is required"},
		{"outbound short secret", "outbound", `{"uid":"` + uid + `","num_conn":1,"peer_listeners":["h:80"],"secret":"AAAA"}`, 400, api.CodeInvalidArgument, "secret"},
	} {
		t.Run(c.name, func(t *testing.T) {
			req := httptest.NewRequest("POST", "/v1/streams/"+c.path, strings.NewReader(c.body))
			req.Header.Set("Authorization", "Bearer "+aliceToken)
			if c.name == "content type" {
				req.Header.Set("Content-Type", "text/plain")
			}
			rr := httptest.NewRecorder()
			s.routes().ServeHTTP(rr, req)
			var eb api.ErrorBody
			json.Unmarshal(rr.Body.Bytes(), &eb)
			if rr.Code != c.status || eb.Error.Code != c.code || !strings.Contains(eb.Error.Message, c.mention) {
				t.Fatalf("%d %s %q; want %d %s mentioning %q", rr.Code, eb.Error.Code, eb.Error.Message, c.status, c.code, c.mention)
			}
			if n := s.alloc.InUse(); n != 0 {
				t.Fatalf("%d ports left bound by a refused request", n)
			}
		})
	}
}

// TestHandlerPortsAndConflicts: a fixed UID cannot be taken twice, and a
// gateway whose range is in use answers no_resources naming the fix.
func TestHandlerPortsAndConflicts(t *testing.T) {
	s := newTestServer(t, nil)
	const uid = "0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b6c"
	fixed := `{"uid":"` + uid + `","remote_ip":"127.0.0.1","receiver_ports":[9],"num_conn":3}`
	callOK(t, s, "POST", "/v1/streams/inbound", aliceToken, fixed, 201, nil)
	callErr(t, s, "POST", "/v1/streams/inbound", aliceToken, fixed, 409, api.CodeConflict, uid)
	two := `{"remote_ip":"127.0.0.1","receiver_ports":[9],"num_conn":2}`
	callErr(t, s, "POST", "/v1/streams/inbound", aliceToken, two, 507, api.CodeNoResources, "--port_range")
	if n := s.alloc.InUse(); n != 3 {
		t.Fatalf("%d ports in use, want the first stream's 3", n)
	}
}
