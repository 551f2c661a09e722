package e2e

import (
	"encoding/json"
	"net"
	"testing"
	"time"
)

// TestPooledStream: a stream wired with s2uc --wan_pool carries one
// application connection after another on warm, reused WAN legs, every
// byte verified; the consumer's gateway killed with SIGKILL and
// restarted leaves stale legs in the pool that the producer's gateway
// finds and replaces, so the next connections work, and one that was
// open through the death saw a reset, never a clean end.
func TestPooledStream(t *testing.T) {
	p := newPair(t, pairOpts{})
	app := newSink(t, "127.0.0.1", nil)
	so := p.wire("alice", app.host(), app.port(), 2, "--wan_pool", "2")
	legs := func() (created, reused, idle int64) {
		var st struct {
			Gateways []struct {
				Role  string `json:"role"`
				Stats struct {
					LegsCreated int64 `json:"legs_created"`
					LegsReused  int64 `json:"legs_reused"`
					LegsIdle    int64 `json:"legs_idle"`
				} `json:"stats"`
			} `json:"gateways"`
		}
		if err := json.Unmarshal([]byte(p.mustS2UC("alice", "status", so.UID, "--output", "json")), &st); err != nil {
			t.Fatal(err)
		}
		for _, g := range st.Gateways {
			if g.Role == "outbound" {
				return g.Stats.LegsCreated, g.Stats.LegsReused, g.Stats.LegsIdle
			}
		}
		t.Fatal("status shows no outbound side")
		return 0, 0, 0
	}
	// A connection's leg goes back to the pool just after its consumer
	// read the end: the next one waits for it, or it would dial anew.
	warm := func() {
		t.Helper()
		eventually(t, 15*time.Second, "four idle legs (two per channel)", func() bool { _, _, i := legs(); return i >= 4 })
	}
	send := func(i int) {
		t.Helper()
		c, err := net.Dial("tcp", so.Listeners[i%2])
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		n := int64(256<<10 + i)
		sum := sendRandom(t, c, n, uint64(i))
		c.(*net.TCPConn).CloseWrite()
		r := app.next(t, 30*time.Second)
		if r.err != nil || r.n != n || r.sum != sum {
			t.Fatalf("connection %d: consumer got %d bytes (err %v), want %d identical", i, r.n, r.err, n)
		}
	}
	// A warm leg the warmer dialed before the inbound side took the pin
	// was refused by the peer, which the dialer learns when it takes it
	// (and dials anew): one connection per channel clears those first, as
	// a loaded machine showed (19 of 20 reused).
	warm()
	send(100)
	send(101)
	created0, reused0, _ := legs()
	for i := range 20 {
		warm()
		send(i)
	}
	created, reused, _ := legs()
	if reused-reused0 != 20 || created-created0 > 20 {
		t.Fatalf("20 connections one after another: %d on reused legs, %d legs dialed; want 20 reused, at most one refill each", reused-reused0, created-created0)
	}

	// One connection open through the consumer gateway's death.
	c, err := net.Dial("tcp", so.Listeners[0])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sendRandom(t, c, 64<<10, 99)
	eventually(t, 10*time.Second, "the consumer to have accepted it", func() bool { return app.accepted.Load() == 23 })
	p.restart(&p.cons, false)
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("the connection open through the death read %v, want a reset", err)
	}
	if r := app.next(t, 30*time.Second); r.err == nil {
		t.Fatalf("the consumer read a clean end of a connection cut by its gateway's death (%d bytes)", r.n)
	}
	// The warm legs to the dead process are stale now: the next
	// connections find that and use fresh legs.
	for i := range 6 {
		send(100 + i)
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
