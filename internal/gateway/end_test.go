package gateway

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"scistream/internal/api"
)

// TestPendingExpiry drives the janitor's round with an injected clock: an
// inbound stream whose peer never attaches expires exactly after
// Config.PendingTimeout and frees its ports; an attached one never does.
func TestPendingExpiry(t *testing.T) {
	clk := &clock{t: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)}
	s := newTestServer(t, func(c *Config) {
		c.Now = clk.Now
		c.PendingTimeout = 10 * time.Minute
	})
	var waiting, attached api.Stream
	callOK(t, s, "POST", "/v1/streams/inbound", aliceToken, inboundBody(9), 201, &waiting)
	callOK(t, s, "POST", "/v1/streams/inbound", aliceToken, inboundBody(9), 201, &attached)
	b, _ := json.Marshal(api.AttachRequest{PeerCert: string(s.cfg.Identity.PEM)})
	callOK(t, s, "POST", "/v1/streams/"+attached.UID+"/attach", aliceToken, string(b), 200, nil)

	var last time.Time
	last = s.sweep(clk.Add(10*time.Minute), last) // exactly the timeout: not yet
	if n := len(s.live()); n != 2 {
		t.Fatalf("%d live streams at the timeout, want 2", n)
	}
	s.sweep(clk.Add(time.Second), last)
	var got api.Stream
	callOK(t, s, "GET", "/v1/streams/"+waiting.UID, aliceToken, "", 200, &got)
	if got.State != api.StateExpired || !strings.Contains(got.Reason, "10m0s") || !got.Updated.Equal(clk.Now()) {
		t.Fatalf("after the timeout: %s %q updated %s; want expired naming the timeout at %s", got.State, got.Reason, got.Updated, clk.Now())
	}
	callOK(t, s, "GET", "/v1/streams/"+attached.UID, aliceToken, "", 200, &got)
	if got.State != api.StateConnected {
		t.Fatalf("the attached stream is %s after the timeout", got.State)
	}
	if n := s.alloc.InUse(); n != 1 {
		t.Fatalf("%d ports in use, want only the attached stream's", n)
	}
	s.sweep(clk.Add(24*time.Hour), time.Time{})
	callOK(t, s, "GET", "/v1/streams/"+attached.UID, aliceToken, "", 200, &got)
	if got.State != api.StateConnected {
		t.Fatalf("the attached stream is %s a day later", got.State)
	}
}

// TestPrune: ended streams' records stay for Config.Retention, then the
// janitor deletes them, at most one round a minute.
func TestPrune(t *testing.T) {
	clk := &clock{t: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)}
	s := newTestServer(t, func(c *Config) {
		c.Now = clk.Now
		c.Retention = time.Hour
	})
	var st api.Stream
	callOK(t, s, "POST", "/v1/streams/inbound", aliceToken, inboundBody(9), 201, &st)
	callOK(t, s, "DELETE", "/v1/streams/"+st.UID, aliceToken, "", 200, nil)
	released := clk.Now()

	last := s.sweep(clk.Add(time.Hour), time.Time{}) // exactly the retention: kept
	if !last.Equal(clk.Now()) {
		t.Fatalf("sweep returned last prune %s, want now %s", last, clk.Now())
	}
	callOK(t, s, "GET", "/v1/streams/"+st.UID, aliceToken, "", 200, nil)
	if got := s.sweep(clk.Add(30*time.Second), last); !got.Equal(last) {
		t.Fatalf("pruned again %s after the last prune", got.Sub(last))
	}
	callOK(t, s, "GET", "/v1/streams/"+st.UID, aliceToken, "", 200, nil) // too soon for another round
	s.sweep(clk.Add(31*time.Second), last)
	callErr(t, s, "GET", "/v1/streams/"+st.UID, aliceToken, "", 404, api.CodeNotFound, st.UID)
	if clk.Now().Sub(released) <= time.Hour {
		t.Fatal("test clock arithmetic is off")
	}
}
