package appwait

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"scistream/internal/egress"
	"scistream/internal/loopback"
	"scistream/internal/relay"
	"scistream/internal/waitfor"
)

type result struct {
	c   net.Conn
	err error
}

// dial runs d.Dial in a goroutine; its result comes on the channel.
func dial(ctx context.Context, d *Dialer, w net.Conn, target string, wait time.Duration) <-chan result {
	out := make(chan result, 1)
	go func() {
		c, err := d.Dial(ctx, w, target, wait)
		out <- result{c, err}
	}()
	return out
}

func await(t *testing.T, ch <-chan result) result {
	t.Helper()
	select {
	case r := <-ch:
		if r.c != nil {
			t.Cleanup(func() { r.c.Close() })
		}
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("Dial did not return")
		return result{}
	}
}

// TestDialLateApplication: an application that listens after the first
// dial failed is reached while the connection waits; the wait is counted
// while it lasts and told once.
func TestDialLateApplication(t *testing.T) {
	_, w := loopback.TCPPair(t)
	target := loopback.RefusedAddr(t)
	var waiting atomic.Int64
	away := make(chan error, 10)
	d := &Dialer{Waiting: &waiting, Away: func(to string, wait time.Duration, err error) {
		if to != target || wait != time.Minute {
			t.Errorf("Away(%s, %s): want %s, 1m0s", to, wait, target)
		}
		away <- err
	}}
	res := dial(context.Background(), d, w, target, time.Minute)
	select {
	case err := <-away:
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("Away told of %v, want the refusal", err)
		}
	case r := <-res:
		t.Fatalf("Dial returned %v before the application listened", r.err)
	case <-time.After(30 * time.Second):
		t.Fatal("Away never told")
	}
	if n := waiting.Load(); n != 1 {
		t.Fatalf("%d connections waiting, want 1", n)
	}
	ln, err := net.Listen("tcp", target)
	if err != nil {
		t.Skipf("the port of the refused dial was taken meanwhile: %v", err)
	}
	defer ln.Close()
	if r := await(t, res); r.err != nil {
		t.Fatalf("the late application was not reached: %v", r.err)
	}
	if n := waiting.Load(); n != 0 || len(away) != 0 {
		t.Fatalf("after the dial: %d waiting, Away told %d more times; want 0, 0", n, len(away))
	}
}

// TestDialWaitRunsOut: an application that never answers ends the wait
// with an *Error that says for how long and why, and wraps the last
// dial's error; with no wait, the dial's own error comes at once.
func TestDialWaitRunsOut(t *testing.T) {
	_, w := loopback.TCPPair(t)
	target := loopback.RefusedAddr(t)
	var waiting atomic.Int64
	d := &Dialer{Waiting: &waiting}
	r := await(t, dial(context.Background(), d, w, target, 300*time.Millisecond))
	var we *Error
	if !errors.As(r.err, &we) || !errors.Is(r.err, syscall.ECONNREFUSED) {
		t.Fatalf("Dial = %v; want an *Error wrapping the refusal", r.err)
	}
	if want := "application " + target + " not reachable for 300ms: "; !strings.HasPrefix(r.err.Error(), want) || strings.Count(r.err.Error(), target) != 1 {
		t.Fatalf("the error says %q; want it to start %q and name the target once", r.err, want)
	}
	if n := waiting.Load(); n != 0 {
		t.Fatalf("%d waiting after the wait ran out", n)
	}
	r = await(t, dial(context.Background(), d, w, target, 0))
	if errors.As(r.err, &we) || !errors.Is(r.err, syscall.ECONNREFUSED) {
		t.Fatalf("Dial with no wait = %v; want the refusal itself", r.err)
	}
}

// TestDialWaitEnds: the wait ends when the leg ends (a *relay.Error on
// the WAN side, relay.B), when ctx ends (the dial's error), and never
// starts for a target the policy refuses.
func TestDialWaitEnds(t *testing.T) {
	t.Run("leg reset", func(t *testing.T) {
		peer, w := loopback.TCPPair(t)
		away := make(chan struct{}, 1)
		d := &Dialer{Away: func(string, time.Duration, error) { away <- struct{}{} }}
		res := dial(context.Background(), d, w, loopback.RefusedAddr(t), time.Minute)
		select {
		case <-away:
		case <-time.After(30 * time.Second):
			t.Fatal("the connection never waited")
		}
		relay.Abort(peer) // the producer gave up: its gateway resets the leg
		r := await(t, res)
		var re *relay.Error
		if !errors.As(r.err, &re) || re.Conn != relay.B || !errors.Is(r.err, syscall.ECONNRESET) {
			t.Fatalf("Dial after the leg was reset = %v; want a *relay.Error on the WAN leg with the reset", r.err)
		}
	})
	t.Run("context ends", func(t *testing.T) {
		_, w := loopback.TCPPair(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var waiting atomic.Int64
		d := &Dialer{Waiting: &waiting}
		res := dial(ctx, d, w, loopback.RefusedAddr(t), time.Hour)
		waitfor.Must(t, 10*time.Second, "the connection to wait", func() bool { return waiting.Load() == 1 })
		cancel()
		r := await(t, res)
		var we *Error
		if !errors.Is(r.err, syscall.ECONNREFUSED) || errors.As(r.err, &we) {
			t.Fatalf("Dial after its context ended = %v; want the last dial's refusal", r.err)
		}
		if n := waiting.Load(); n != 0 {
			t.Fatalf("%d waiting after the context ended", n)
		}
	})
	t.Run("refused by the policy", func(t *testing.T) {
		_, w := loopback.TCPPair(t)
		refusal := &egress.Refusal{Addr: netip.MustParseAddrPort("127.0.0.1:9"), Rule: "a loopback address", Flag: "--allow_targets"}
		d := &Dialer{
			Control: func(string, string, syscall.RawConn) error { return refusal },
			Away:    func(string, time.Duration, error) { t.Error("a target the policy refuses was waited for") },
		}
		r := await(t, dial(context.Background(), d, w, loopback.RefusedAddr(t), time.Hour))
		var got *egress.Refusal
		if !errors.As(r.err, &got) {
			t.Fatalf("Dial of a refused target = %v; want the policy's refusal", r.err)
		}
	})
}
