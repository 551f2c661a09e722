package gateway

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"scistream/internal/admission"
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
		Logger:       slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
		LookupHost:   fakeLookup,
		AllowTargets: testTargets, AllowPeers: testTargets,
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

// testTargets is what newTestServer's gateway dials: loopback, and
// TEST-NET-1, where fakeLookup's names resolve.
var testTargets = append(slices.Clone(loopback), netip.MustParsePrefix("192.0.2.0/24"))

// fakeLookup resolves host names without a DNS server: names under
// .example resolve to TEST-NET-1, two names under .test to addresses no
// stream may lead to, and nothing else resolves.
func fakeLookup(ctx context.Context, host string) ([]netip.Addr, error) {
	switch {
	case strings.HasSuffix(host, ".example"):
		return []netip.Addr{netip.MustParseAddr("192.0.2.1")}, nil
	case host == "multicast.test":
		return []netip.Addr{netip.MustParseAddr("192.0.2.7"), netip.MustParseAddr("239.1.2.3")}, nil
	case host == "zero.test":
		return []netip.Addr{netip.IPv4Unspecified()}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
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
	if rec, err := in.cfg.Store.Get(store.Key{Owner: "alice", UID: inS.UID}); err != nil || rec.State != api.StateListening {
		t.Fatalf("stored record: %+v, %v", rec, err)
	}
	ob, _ := json.Marshal(api.OutboundRequest{UID: inS.UID, PeerListeners: inS.Listeners, NumConn: 1,
		PeerCert: inS.WANCert, Secret: inS.Secret, Allow: []string{"127.0.0.0/8"}})
	var outS api.Stream
	callOK(t, out, "POST", "/v1/streams/outbound", aliceToken, string(ob), 201, &outS)
	if outS.State != api.StateWired || outS.PeerCertSHA256 != in.cfg.Identity.SHA256 || outS.Secret != "" {
		t.Fatalf("outbound answer: %+v", outS)
	}

	attach := func(cert string) string {
		b, _ := json.Marshal(api.AttachRequest{PeerCert: cert})
		return string(b)
	}
	path := "/v1/streams/" + inS.UID
	callErr(t, in, "POST", path+"/attach", bobToken, attach(outS.WANCert), 404, api.CodeNotFound, "no stream "+inS.UID+" of yours")
	callErr(t, in, "POST", path+"/attach", aliceToken, attach(""), 400, api.CodeInvalidArgument, "peer_cert is required")
	callErr(t, out, "POST", path+"/attach", aliceToken, attach(inS.WANCert), 400, api.CodeInvalidArgument, "outbound side")
	var att api.Stream
	callOK(t, in, "POST", path+"/attach", aliceToken, attach(outS.WANCert), 200, &att)
	if att.State != api.StateWired || att.PeerCertSHA256 != out.cfg.Identity.SHA256 {
		t.Fatalf("attach answer: %+v", att)
	}
	callOK(t, in, "POST", path+"/attach", aliceToken, attach(outS.WANCert), 200, nil) // again: same pin
	callErr(t, in, "POST", path+"/attach", aliceToken, attach(inS.WANCert), 409, api.CodeConflict, "another peer certificate")

	var got api.Stream
	callOK(t, in, "GET", path, aliceToken, "", 200, &got)
	if got.State != api.StateWired || got.Stats == nil || got.WANCert == "" || got.Secret != "" {
		t.Fatalf("get: %+v", got)
	}
	// Another identity's stream answers exactly as one that does not exist.
	_, bobs := call(t, in, "GET", path, bobToken, "")
	_, none := call(t, in, "GET", "/v1/streams/00000000-0000-4000-8000-000000000000", bobToken, "")
	if want := strings.ReplaceAll(string(none), "00000000-0000-4000-8000-000000000000", inS.UID); string(bobs) != want {
		t.Fatalf("another identity's stream: %s; a missing one: %s", bobs, none)
	}
	callErr(t, in, "GET", path, bobToken, "", 404, api.CodeNotFound, "of yours")
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

	callErr(t, in, "DELETE", path, bobToken, "", 404, api.CodeNotFound, "of yours")
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
		{"negative max_active_conns", "inbound", `{"remote_ip":"127.0.0.1","receiver_ports":[80],"num_conn":1,"max_active_conns":-1}`, 400, api.CodeInvalidArgument, "max_active_conns -1 out of range"},
		{"max_active_conns over the gateway's cap", "inbound", `{"remote_ip":"127.0.0.1","receiver_ports":[80],"num_conn":1,"max_active_conns":1073741824}`, 400, api.CodeInvalidArgument, "this gateway's cap on tls connections at once"},
		{"outbound max_active_conns over the gateway's cap", "outbound", `{"uid":"` + uid + `","num_conn":1,"peer_listeners":["h.example:80"],"max_active_conns":1073741824}`, 400, api.CodeInvalidArgument, "max_active_conns 1073741824 out of range"},
		{"tcp wan", "inbound", `{"remote_ip":"127.0.0.1","receiver_ports":[80],"num_conn":1,"wan":"tcp"}`, 403, api.CodePermissionDenied, "insecure_tcp_wan"},
		{"content type", "inbound", `{}`, 400, api.CodeInvalidArgument, "content type"},
		{"outbound bad uid", "outbound", `{"uid":"x","num_conn":1}`, 400, api.CodeInvalidArgument, "uid"},
		{"outbound no listeners", "outbound", `{"uid":"` + uid + `","num_conn":1}`, 400, api.CodeInvalidArgument, "peer_listeners"},
		{"outbound bad port", "outbound", `{"uid":"` + uid + `","num_conn":1,"peer_listeners":["h:08"]}`, 400, api.CodeInvalidArgument, "not a number"},
		{"outbound no cert", "outbound", `{"uid":"` + uid + `","num_conn":1,"peer_listeners":["h.example:80"],"secret":"` + strings.Repeat("A", 43) + `="}`, 400, api.CodeInvalidArgument, "peer_cert is required"},
		{"outbound short secret", "outbound", `{"uid":"` + uid + `","num_conn":1,"peer_listeners":["h.example:80"],"secret":"AAAA"}`, 400, api.CodeInvalidArgument, "secret"},
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

// TestUIDsPerIdentity: a UID is unique per identity, so taking one that
// another identity holds neither fails (no conflict that would tell it
// exists) nor touches the other's stream.
func TestUIDsPerIdentity(t *testing.T) {
	s := newTestServer(t, nil)
	const uid = "0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b6c"
	body := `{"uid":"` + uid + `","remote_ip":"127.0.0.1","receiver_ports":[9],"num_conn":1}`
	var a, b api.Stream
	callOK(t, s, "POST", "/v1/streams/inbound", aliceToken, body, 201, &a)
	callOK(t, s, "POST", "/v1/streams/inbound", bobToken, body, 201, &b)
	if a.UID != b.UID || a.Owner == b.Owner || a.Listeners[0] == b.Listeners[0] || a.Secret == b.Secret {
		t.Fatalf("alice's %+v and bob's %+v share more than the UID", a, b)
	}
	callErr(t, s, "POST", "/v1/streams/inbound", aliceToken, body, 409, api.CodeConflict, uid)
	callOK(t, s, "DELETE", "/v1/streams/"+uid, bobToken, "", 200, nil)
	var got api.Stream
	callOK(t, s, "GET", "/v1/streams/"+uid, aliceToken, "", 200, &got)
	if got.State != api.StateListening {
		t.Fatalf("alice's stream is %s after bob released his", got.State)
	}
	// Bob may take the UID again once his stream has ended.
	callOK(t, s, "POST", "/v1/streams/inbound", bobToken, body, 201, nil)
}

// TestQuota: each limit of Config.Quota refuses the request that would
// exceed it with no_resources naming the limit, counts only the
// identity's own live streams, and frees up as streams end.
func TestQuota(t *testing.T) {
	s := newTestServer(t, func(c *Config) {
		c.PortRange = ports.Range{Lo: 5100, Hi: 5119}
		c.Quota = admission.Quota{Streams: 3, Ports: 5, Pending: 2}
	})
	body := func(n int) string {
		return `{"remote_ip":"127.0.0.1","receiver_ports":[9],"num_conn":` + strconv.Itoa(n) + `}`
	}
	var first, second api.Stream
	callOK(t, s, "POST", "/v1/streams/inbound", aliceToken, body(1), 201, &first)
	callOK(t, s, "POST", "/v1/streams/inbound", aliceToken, body(1), 201, &second)
	callErr(t, s, "POST", "/v1/streams/inbound", aliceToken, body(1), 507, api.CodeNoResources, "--quota_pending")
	callOK(t, s, "POST", "/v1/streams/inbound", bobToken, body(1), 201, nil) // bob's own quota
	attach, _ := json.Marshal(api.AttachRequest{PeerCert: string(s.cfg.Identity.PEM)})
	callOK(t, s, "POST", "/v1/streams/"+first.UID+"/attach", aliceToken, string(attach), 200, nil)
	callErr(t, s, "POST", "/v1/streams/inbound", aliceToken, body(4), 507, api.CodeNoResources, "--quota_ports")
	callOK(t, s, "POST", "/v1/streams/inbound", aliceToken, body(3), 201, nil)
	callErr(t, s, "POST", "/v1/streams/inbound", aliceToken, body(1), 507, api.CodeNoResources, "--quota_streams")
	callOK(t, s, "DELETE", "/v1/streams/"+second.UID, aliceToken, "", 200, nil)
	callOK(t, s, "POST", "/v1/streams/inbound", aliceToken, body(1), 201, nil)
}

// TestQuotaConcurrent: requests that arrive together cannot pass a limit
// between them; the quota counts creations in flight.
func TestQuotaConcurrent(t *testing.T) {
	s := newTestServer(t, func(c *Config) {
		c.PortRange = ports.Range{Lo: 5100, Hi: 5139}
		c.Quota = admission.Quota{Streams: 5}
	})
	if n := concurrently(t, s, 20, inboundBody(9)); n[201] != 5 || n[507] != 15 {
		t.Fatalf("20 concurrent requests under a quota of 5 streams: %v", n)
	}
}

// concurrently sends k inbound requests with body at once as alice and
// counts their answers by status.
func concurrently(t *testing.T, s *Server, k int, body string) map[int]int {
	var wg sync.WaitGroup
	codes := make(chan int, k)
	for range k {
		wg.Go(func() {
			code, _ := call(t, s, "POST", "/v1/streams/inbound", aliceToken, body)
			codes <- code
		})
	}
	wg.Wait()
	close(codes)
	n := map[int]int{}
	for c := range codes {
		n[c]++
	}
	return n
}

// TestSecretsLeaveWithTheStream: a released or expired record keeps no
// secret and no pin, in the store or in the API; a record ended under an
// older version that kept them is cleaned at the next start.
func TestSecretsLeaveWithTheStream(t *testing.T) {
	clk := &clock{t: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)}
	s := newTestServer(t, func(c *Config) { c.Now = clk.Now })
	var rel, exp api.Stream
	callOK(t, s, "POST", "/v1/streams/inbound", aliceToken, inboundBody(9), 201, &rel)
	callOK(t, s, "POST", "/v1/streams/inbound", aliceToken, inboundBody(9), 201, &exp)
	attach, _ := json.Marshal(api.AttachRequest{PeerCert: string(s.cfg.Identity.PEM)})
	callOK(t, s, "POST", "/v1/streams/"+rel.UID+"/attach", aliceToken, string(attach), 200, nil)
	callOK(t, s, "DELETE", "/v1/streams/"+rel.UID, aliceToken, "", 200, nil)
	s.sweep(clk.Add(s.cfg.PendingTimeout+time.Second), clk.Now())
	for _, uid := range []string{rel.UID, exp.UID} {
		rec, err := s.cfg.Store.Get(store.Key{Owner: "alice", UID: uid})
		if err != nil || !rec.State.Terminal() || rec.Secret != nil || rec.PeerCertSHA256 != "" {
			t.Fatalf("ended record %+v, %v: want terminal without secret or pin", rec, err)
		}
		var v api.Stream
		callOK(t, s, "GET", "/v1/streams/"+uid, aliceToken, "", 200, &v)
		if v.PeerCertSHA256 != "" || v.Secret != "" {
			t.Fatalf("ended stream's view: %+v", v)
		}
	}
	// A record an older version left with its secret.
	old := &store.Record{UID: "0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b6c", Owner: "alice", State: api.StateReleased,
		Role: api.RoleInbound, NumConn: 1, Secret: []byte("0123456789abcdef0123456789abcdef"), PeerCertSHA256: "ab"}
	if err := s.cfg.Store.Put(old); err != nil {
		t.Fatal(err)
	}
	if err := s.restore(); err != nil {
		t.Fatal(err)
	}
	if rec, err := s.cfg.Store.Get(old.Key()); err != nil || rec.Secret != nil || rec.PeerCertSHA256 != "" {
		t.Fatalf("old ended record after a start: %+v, %v", rec, err)
	}
}
