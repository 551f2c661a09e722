package gateway

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"scistream/internal/api"
	"scistream/internal/client"
	"scistream/internal/store"
	"scistream/internal/strangers"
	"scistream/internal/stream"
	"scistream/internal/waitfor"
)

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

			stream := func(g *testGW) *stream.Stream {
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
			if r, n := in.Refused.HandshakeCap.Load(), out.Stats().WANRedials; n < 1 || n != r {
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

// TestHandshakesQueued: with two WAN handshakes in flight to the peer at
// most, a burst of twelve application connections is carried whole: the
// others wait for a slot instead of failing (peerdial.Handshakes).
func TestHandshakesQueued(t *testing.T) {
	p := startPair(t, nil, func(c *Config) { c.HandshakesPerPeer = 2 })
	ctx := context.Background()
	_, outS, err := client.Wire(ctx, p.in, p.out,
		&api.InboundRequest{RemoteIP: "127.0.0.1", ReceiverPorts: []int{echoApp(t)}, NumConn: 1},
		api.OutboundRequest{NumConn: 1, Allow: []string{"127.0.0.0/8"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 12 {
		wg.Add(1)
		go func() { defer wg.Done(); roundTrip(t, outS.Listeners[0], 64<<10) }()
	}
	wg.Wait()
}
