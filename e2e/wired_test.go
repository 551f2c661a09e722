package e2e

import (
	"context"
	"errors"
	"io"
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
	// A stream led to a live listener of another stream: the same two
	// gateways, so its TLS handshake succeeds both ways, and the
	// acceptor then refuses its preface. (In TLS 1.3 the dialer's
	// handshake completes before the acceptor judged it: before the
	// acceptor's answer, such a stream said connected.)
	ln, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := ln.Addr().String() // a consumer port that nothing listens on
	ln.Close()
	// A stream whose consumer cannot be reached: the inbound gateway
	// refuses the leg with the reason (it said connected on the
	// outbound side though nothing reached the consumer).
	noApp := p.wire("alice", "127.0.0.1", gone[strings.LastIndex(gone, ":")+1:], 1, "--app_wait", "0")

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
	otherListener := view(p.cons, good.UID).Listeners[0]
	other := p.wire("alice", app.host(), app.port(), 1, "--peer_listeners", otherListener)
	for _, uid := range []string{wrong.UID, good.UID, other.UID, noApp.UID} {
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

	// (a2) Another stream's listener, and a consumer that is not
	// there: each producer connection is reset, the outbound side
	// stays wired with the peer's reason as its last failed dial.
	for _, c := range []struct {
		so   streamOut
		want string
	}{
		{other, "no answer from the peer gateway: "},
		{noApp, "the peer gateway refused the connection: application not reachable: dial tcp " + gone + ": connect: connection refused"},
	} {
		conn, err := dialFrom("", c.so.Listeners[0])
		switch {
		case errors.Is(err, syscall.ECONNRESET):
			// Reset before the dial returned (a starved machine
			// runs the gateway's whole refusal first), as in (a).
		case err != nil:
			t.Fatal(err)
		default:
			conn.Write([]byte("lost"))
			conn.SetReadDeadline(time.Now().Add(30 * time.Second))
			if n, err := conn.Read(make([]byte, 1)); err == nil || n > 0 || errors.Is(err, io.EOF) {
				t.Fatalf("a connection through %s read %d bytes, %v; want it reset", c.so.UID, n, err)
			}
			conn.Close()
		}
		eventually(t, 10*time.Second, "the outbound side to count the refused connection", func() bool {
			return view(p.prod, c.so.UID).Stats.AbortedByKind[api.EndDialFailed] > 0
		})
		if _, out := states(c.so.UID); out != api.StateWired {
			t.Errorf("stream %s after its peer did not accept a connection: outbound %s; want wired", c.so.UID, out)
		}
		if out := p.mustS2UC("alice", "status", c.so.UID); !strings.Contains(out, "outbound wired (no data has passed yet; last failed dial ") || !strings.Contains(out, c.want) {
			t.Errorf("s2uc status of %s lacks the outbound side's wired state and %q:\n%s", c.so.UID, c.want, out)
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
