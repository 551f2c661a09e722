package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"scistream/internal/api"
	"scistream/internal/client"
	"scistream/internal/store"
	"scistream/internal/strangers"
	"scistream/internal/waitfor"
	"scistream/internal/wan"
)

// TestRedial: redial dials again only a reset before the peer answered
// (wan.ErrUnanswered), only within its window and its context, and tells
// of each dial again once its wait is over.
func TestRedial(t *testing.T) {
	reset := &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	unanswered := fmt.Errorf("tls handshake: %w", errors.Join(wan.ErrUnanswered, reset))
	// failing returns a dial that fails with err n times, then succeeds.
	failing := func(n int, err error) (func(context.Context) (int, error), *int) {
		calls := 0
		return func(context.Context) (int, error) {
			calls++
			if calls <= n {
				return 0, err
			}
			return 42, nil
		}, &calls
	}
	ctx := context.Background()

	dial, calls := failing(3, unanswered)
	var told []error
	if v, err := redial(ctx, time.Minute, dial, func(err error) { told = append(told, err) }); err != nil || v != 42 || *calls != 4 || len(told) != 3 {
		t.Errorf("3 unanswered resets, then an answer: got %d, %v after %d dials (%d told); want 42 after 4 (3 told)", v, err, *calls, len(told))
	}

	for _, e := range []error{reset, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}} {
		dial, calls = failing(1, e)
		if _, err := redial(ctx, time.Minute, dial, nil); !errors.Is(err, e) || *calls != 1 {
			t.Errorf("%v: %v after %d dials; want it after 1 (the peer answered, or nobody listens: never dialled again)", e, err, *calls)
		}
	}

	dial, calls = failing(1<<30, unanswered)
	start := time.Now()
	if _, err := redial(ctx, 200*time.Millisecond, dial, nil); !errors.Is(err, wan.ErrUnanswered) || *calls < 2 {
		t.Errorf("always unanswered: %v after %d dials; want the reset after several", err, *calls)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("always unanswered with a window of 200ms: gave up after %v", el)
	}

	// Each dial gets a context that ends with the window.
	start = time.Now()
	if _, err := redial(ctx, 100*time.Millisecond, func(ctx context.Context) (int, error) {
		<-ctx.Done()
		return 0, ctx.Err()
	}, nil); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
		t.Errorf("a dial that waits for its context, window 100ms: %v after %v; want the window's end", err, time.Since(start))
	}

	cctx, cancel := context.WithCancel(ctx)
	n := 0
	told = nil
	if _, err := redial(cctx, time.Hour, func(context.Context) (int, error) {
		if n++; n == 2 {
			cancel() // during the second dial: its wait ends at once
		}
		return 0, unanswered
	}, func(err error) { told = append(told, err) }); !errors.Is(err, wan.ErrUnanswered) || n != 2 || len(told) != 1 {
		t.Errorf("cancelled during the second dial: %v after %d dials, %d told; want the reset after 2, 1 told", err, n, len(told))
	}
}

// TestRedialHandshakeCap: while strangers hold every handshake slot the
// consumer gateway gives one source, the producer gateway's dial for an
// application connection is reset; it dials again until a slot is free,
// and the application connection, which waited, is carried to its last
// byte instead of being reset. (s2bench conns once lost one of 200
// connections at once this way: 128 were in their handshake before the
// first had authenticated.)
func TestRedialHandshakeCap(t *testing.T) {
	for _, wanT := range []string{api.WANTLS, api.WANTCP} {
		t.Run(wanT, func(t *testing.T) {
			p := startPair(t, func(c *Config) {
				c.AllowTCPWAN = true
				c.Strangers = strangers.Limits{PerListener: 100, PerSource: 2, Total: 100}
			}, func(c *Config) { c.AllowTCPWAN = true })
			ctx := context.Background()
			inS, outS, err := client.Wire(ctx, p.in, p.out,
				&api.InboundRequest{RemoteIP: "127.0.0.1", ReceiverPorts: []int{echoApp(t)}, NumConn: 1, WAN: wanT},
				api.OutboundRequest{NumConn: 1, Allow: []string{"127.0.0.0/8"}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			inHandshake := func() int {
				return p.cons.srv.strange.InHandshake()
			}
			// Two silent strangers from the source the producer gateway
			// dials from (neither binds one) hold the source's slots.
			var strangers []net.Conn
			for range 2 {
				c, err := net.Dial("tcp", inS.Listeners[0])
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				strangers = append(strangers, c)
			}
			waitfor.Must(t, 10*time.Second, "the strangers to hold both slots", func() bool { return inHandshake() == 2 })

			stream := func(g *testGW) *Stream {
				g.srv.mu.Lock()
				defer g.srv.mu.Unlock()
				return g.srv.streams[store.Key{Owner: "alice", UID: inS.UID}]
			}
			in, out := stream(p.cons), stream(p.prod)
			app, err := net.Dial("tcp", outS.Listeners[0])
			if err != nil {
				t.Fatal(err)
			}
			defer app.Close()
			want := []byte("the first bytes of a stream whose leg the peer reset")
			if _, err := app.Write(want); err != nil {
				t.Fatal(err)
			}
			waitfor.Must(t, 10*time.Second, "the consumer gateway to reset a dial", func() bool { return in.Refused.HandshakeCap.Load() >= 1 })
			for _, c := range strangers {
				c.Close()
			}
			app.SetReadDeadline(time.Now().Add(20 * time.Second))
			got := make([]byte, len(want))
			if _, err := io.ReadFull(app, got); err != nil || string(got) != string(want) {
				t.Fatalf("echo through the gateways after the slots were freed: %q, %v; want %q", got, err, want)
			}
			if r, n := in.Refused.HandshakeCap.Load(), out.redials.Load(); n < 1 || n != r {
				t.Errorf("the consumer gateway reset %d dials, the producer gateway dialled again %d times; want as many, at least 1", r, n)
			}
			s, err := p.out.Get(ctx, inS.UID)
			if err != nil {
				t.Fatal(err)
			}
			if n := s.Stats.AbortedByKind[api.EndDialFailed]; n != 0 {
				t.Errorf("%d connections aborted as dial_failed, want 0", n)
			}
		})
	}
}
