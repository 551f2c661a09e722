package gateway

import (
	"crypto/sha256"
	"encoding/base64"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"scistream/internal/api"
	"scistream/internal/strangers"
)

// TestStatusPageServed: the page needs no token and holds no data; its
// Content-Security-Policy admits exactly its own inline script and style
// (by hash), connects to this origin only and forbids framing; nothing
// in it loads from elsewhere.
func TestStatusPageServed(t *testing.T) {
	s := newTestServer(t, nil)
	callOK(t, s, "POST", "/v1/streams/inbound", aliceToken, inboundBody(9000), 201, nil)
	rr := httptest.NewRecorder()
	s.routes().ServeHTTP(rr, httptest.NewRequest("GET", "/status", nil))
	if rr.Code != 200 || !strings.HasPrefix(rr.Header().Get("Content-Type"), "text/html") {
		t.Fatalf("GET /status: %d %s", rr.Code, rr.Header().Get("Content-Type"))
	}
	page := rr.Body.String()
	if strings.Contains(page, "alice") || strings.Contains(page, "{{") {
		t.Errorf("the page holds data or an unfilled placeholder")
	}
	csp := rr.Header().Get("Content-Security-Policy")
	for _, tag := range []string{"script", "style"} {
		m := regexp.MustCompile(`(?s)<`+tag+`>(.*?)</`+tag+`>`).FindAllStringSubmatch(page, -1)
		if len(m) != 1 {
			t.Fatalf("%d inline %s elements, want 1", len(m), tag)
		}
		sum := sha256.Sum256([]byte(m[0][1]))
		if want := tag + "-src 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"; !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %q", csp, want)
		}
	}
	for _, want := range []string{"default-src 'none'", "connect-src 'self'", "frame-ancestors 'none'", "form-action 'none'", "base-uri 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %q", csp, want)
		}
	}
	for h, want := range map[string]string{"X-Frame-Options": "DENY", "Cache-Control": "no-store", "Referrer-Policy": "no-referrer", "X-Content-Type-Options": "nosniff"} {
		if got := rr.Header().Get(h); got != want {
			t.Errorf("%s: %q, want %q", h, got, want)
		}
	}
	if regexp.MustCompile(`(?i)(src|href)\s*=\s*["']?(https?:)?//`).MatchString(page) || strings.Contains(page, "innerHTML") || strings.Contains(page, "localStorage") {
		t.Errorf("the page loads from elsewhere, writes HTML from data, or keeps the token beyond the tab")
	}
}

// TestStatusAPI: GET /v1/status needs a token; it shows a reader every
// identity's live streams (the operators' view), and a plain user its
// own only, with their rate history and the gateway's health, and never
// a secret.
func TestStatusAPI(t *testing.T) {
	s := newTestServer(t, func(c *Config) { c.Roles = mustPolicy(t, "user any\nreader identity bob\n") })
	var a, b api.Stream
	callOK(t, s, "POST", "/v1/streams/inbound", aliceToken, inboundBody(9000), 201, &a)
	callOK(t, s, "POST", "/v1/streams/inbound", bobToken, inboundBody(9001), 201, &b)
	callErr(t, s, "GET", "/v1/status", "", "", 401, api.CodeUnauthenticated, "bearer token")
	callErr(t, s, "GET", "/v1/status", "nope", "", 401, api.CodeUnauthenticated, "not recognised")
	var own api.GatewayStatus
	callOK(t, s, "GET", "/v1/status", aliceToken, "", 200, &own)
	if own.Scope != api.ScopeOwn || own.Identity != "alice" || len(own.Streams) != 1 || own.Streams[0].UID != a.UID || own.Streams[0].Owner != "alice" {
		t.Fatalf("alice's status: scope %q as %q, streams %+v; want her own stream only", own.Scope, own.Identity, own.Streams)
	}
	st := s.live()[0]
	st.Rates.Sample(st.Rates.Last().Add(s.env.Rates.Interval()), 1000, 0)

	var v api.GatewayStatus
	code, body := call(t, s, "GET", "/v1/status", bobToken, "")
	if code != 200 || strings.Contains(string(body), a.Secret) || strings.Contains(string(body), b.Secret) {
		t.Fatalf("GET /v1/status: %d, or a secret in it:\n%s", code, body)
	}
	callOK(t, s, "GET", "/v1/status", bobToken, "", 200, &v)
	owners := map[string]string{}
	for _, x := range v.Streams {
		owners[x.UID] = x.Owner
		if x.Stats == nil || x.Stats.Rates == nil || x.Stats.Rates.History == nil {
			t.Errorf("stream %s without its rate history: %+v", x.UID, x.Stats)
		}
	}
	if len(v.Streams) != 2 || owners[a.UID] != "alice" || owners[b.UID] != "bob" || v.Scope != api.ScopeAll || v.Identity != "bob" {
		t.Errorf("streams %v, scope %q as %q; want alice's and bob's, all, as bob", owners, v.Scope, v.Identity)
	}
	h := v.Health
	if !h.Ready || h.Streams["listening"] != 2 || h.Streams["released"] != 0 || h.PortsInUse != 2 || h.PortsCapacity != 4 ||
		h.APIErrors["unauthenticated"] != 2 || len(h.Refused) != len(strangers.Keys()) || h.WANConns["relaying"] != 0 {
		t.Errorf("health: %+v", h)
	}
	if v.Version == "" || v.ListenerIP != s.cfg.ListenerIP || v.Started.IsZero() {
		t.Errorf("status header: %+v", v)
	}
	// The streams routes still show each identity its own only.
	var l api.StreamList
	callOK(t, s, "GET", "/v1/streams", aliceToken, "", 200, &l)
	if len(l.Streams) != 1 || l.Streams[0].UID != a.UID || l.Streams[0].Stats.Rates.History != nil {
		t.Errorf("alice's list: %+v; want her stream only, without history", l.Streams)
	}
}
