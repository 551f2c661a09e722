package e2e

import (
	"context"
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"scistream/internal/api"
	"scistream/internal/localgw"
)

// TestWiredUntilData: a stream's state says whether data has passed. A
// stream given a peer listener nothing listens on (s2uc stream
// --peer_listeners, as a mistyped NAT mapping would give it; s2uc's
// outbound-request refuses a listener the inbound side never gave) stays
// wired on both gateways after a producer connected, and s2uc status
// says so with the refused dial beside it; a stream through which one
// connection passed is connected on both. A graceful restart of both
// gateways keeps each state.
func TestWiredUntilData(t *testing.T) {
	p := newPair(t, pairOpts{})
	app := newSink(t, "127.0.0.1", nil)
	ln, err := net.Listen("tcp", net.JoinHostPort(p.cons.Opts.ListenerIP, "0"))
	if err != nil {
		t.Fatal(err)
	}
	nothing := ln.Addr().String() // a port on the inbound gateway's address that nothing listens on
	ln.Close()
	wrong := p.wire("alice", app.host(), app.port(), 1, "--peer_listeners", nothing)
	good := p.wire("alice", app.host(), app.port(), 1)

	ctx := context.Background()
	view := func(g *localgw.Gateway, uid string) *api.Stream {
		t.Helper()
		c, err := g.Client(p.tokens["alice"])
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		s, err := c.Get(ctx, uid)
		if err != nil {
			t.Fatalf("status of %s on %s: %v", uid, g.Addr, err)
		}
		return s
	}
	states := func(uid string) (in, out api.State) {
		t.Helper()
		return view(p.cons, uid).State, view(p.prod, uid).State
	}
	for _, uid := range []string{wrong.UID, good.UID} {
		if in, out := states(uid); in != api.StateWired || out != api.StateWired {
			t.Errorf("stream %s before any data: inbound %s, outbound %s; want both wired", uid, in, out)
		}
	}

	// (a) The wrong peer listener: the producer's connection is reset,
	// and both sides stay wired.
	c, err := dialFrom("", wrong.Listeners[0])
	switch {
	case errors.Is(err, syscall.ECONNRESET):
		// Reset before the dial returned: the gateway's dial of the
		// peer was refused that fast.
	case err != nil:
		t.Fatal(err)
	default:
		c.Write([]byte("lost"))
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		if n, err := c.Read(make([]byte, 1)); err == nil || n > 0 {
			t.Fatalf("a connection through a wrong peer listener read %d bytes, %v; want it reset", n, err)
		}
		c.Close()
	}
	eventually(t, 10*time.Second, "the outbound side to count the failed dial", func() bool {
		return view(p.prod, wrong.UID).Stats.AbortedByKind[api.EndDialFailed] > 0
	})
	if in, out := states(wrong.UID); in != api.StateWired || out != api.StateWired {
		t.Errorf("after a connection to a wrong peer listener: inbound %s, outbound %s; want both wired", in, out)
	}
	out := p.mustS2UC("alice", "status", wrong.UID)
	for _, want := range []string{
		"outbound wired (no data has passed yet; last failed dial ",
		nothing + ": connect: connection refused)\n",
		"inbound wired (no data has passed yet)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("s2uc status of the wrongly wired stream lacks %q:\n%s", want, out)
		}
	}

	// (b) One connection through the good stream: connected on both.
	sendOne(t, good.Listeners[0], app, "through")
	eventually(t, 10*time.Second, "both sides of the stream data passed through to say connected", func() bool {
		in, out := states(good.UID)
		return in == api.StateConnected && out == api.StateConnected
	})
	if out := p.mustS2UC("alice", "status", good.UID); !strings.Contains(out, "inbound connected\n") || !strings.Contains(out, "outbound connected\n") {
		t.Errorf("s2uc status of the stream data passed through:\n%s", out)
	}

	// (c) A graceful restart of both gateways keeps each state: the
	// stored records say it, with no connection since.
	p.restart(&p.cons, true)
	p.restart(&p.prod, true)
	if in, out := states(good.UID); in != api.StateConnected || out != api.StateConnected {
		t.Errorf("after a graceful restart, the stream data passed through: inbound %s, outbound %s; want both connected", in, out)
	}
	if in, out := states(wrong.UID); in != api.StateWired || out != api.StateWired {
		t.Errorf("after a graceful restart, the wrongly wired stream: inbound %s, outbound %s; want both wired", in, out)
	}
}
