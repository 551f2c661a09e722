package gateway

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"scistream/internal/api"
	"scistream/internal/client"
	"scistream/internal/legpool"
	"scistream/internal/waitfor"
)

// TestPooledLegs: an outbound stream with wan_pool keeps its legs warm,
// carries one application connection after another on them without a
// new handshake, replaces a leg whose connection was reset rather than
// reuse it, and ends every leg when released.
func TestPooledLegs(t *testing.T) {
	p := startPair(t, nil, nil)
	prod, in, out := p.prod, p.in, p.out
	ctx := context.Background()
	inS, outS, stats := wirePooled(t, p, 2)
	// Warm: two idle legs once the inbound side took the pin.
	waitfor.Must(t, 15*time.Second, "two warm legs", func() bool { return stats().LegsCreated >= 2 })
	waitfor.Must(t, 15*time.Second, "two idle legs in the stats", func() bool { return stats().LegsIdle == 2 })

	// A warm leg the warmer dialed before the attach was refused by the
	// peer, which the dialer learns when it takes it
	// (TestPoolStaleLegNotReused): a first connection clears those, and
	// the warmer has two sound idle legs again before the count starts.
	roundTrip(t, outS.Listeners[0], 1<<10)
	legs := prod.srv.env.Legs
	waitfor.Must(t, 15*time.Second, "two sound idle legs", func() bool {
		ls := legs.Stats(inS.Listeners[0])
		return ls.Sound >= 2 && ls.Stale == 0
	})
	before := stats()
	for range 5 {
		roundTrip(t, outS.Listeners[0], 100<<10)
	}
	st := stats()
	// Every one takes an idle leg, none waits for a handshake. The
	// warmer refills the pool behind them: at most once per connection
	// (when the one before has not given its leg back yet, the pool is
	// one short).
	if reused, created := st.LegsReused-before.LegsReused, st.LegsCreated-before.LegsCreated; reused != 5 || created > 5 {
		t.Fatalf("5 connections one after another: %d reused, %d legs dialed; want 5 reused and at most 5 dialed behind them", reused, created)
	}

	// Four at once: some take warm legs, the rest dial.
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() { defer wg.Done(); roundTrip(t, outS.Listeners[0], 1<<20) }()
	}
	wg.Wait()

	// A connection reset mid-way: its leg is reset, not reused, and the
	// far side sees the reset.
	c, err := net.Dial("tcp", outS.Listeners[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatal(err)
	}
	c.(*net.TCPConn).SetLinger(0)
	c.Close()
	waitfor.Must(t, 10*time.Second, "the reset counted at both gateways", func() bool {
		s, err := in.Get(ctx, inS.UID)
		return err == nil && stats().AbortedByKind[api.EndAppReset] == 1 && s.Stats.AbortedByKind[api.EndPeerReset] == 1
	})
	// Every leg the manager holds is idle and sound: the reset one is
	// gone, not back in the pool.
	m := prod.srv.env.Legs
	waitfor.Must(t, 10*time.Second, "only sound idle legs", func() bool {
		ls := m.Stats(inS.Listeners[0])
		return ls.Open == ls.Idle && ls.Idle == ls.Sound
	})
	roundTrip(t, outS.Listeners[0], 64<<10) // still works

	// Release: every leg ends, at both gateways (the package's leak
	// check covers their goroutines).
	for _, cl := range []*client.Client{out, in} {
		if _, err := cl.Release(ctx, inS.UID); err != nil {
			t.Fatal(err)
		}
	}
	// The manager forgot the stream: no idle leg, no warmer, no count.
	if ls := m.Stats(inS.Listeners[0]); ls.Open != 0 || ls.Flows != 0 || ls.Warmers != 0 || ls.Teardowns != 0 {
		t.Fatalf("after the release the pool holds %d legs open, %d flows, %d warmers, %d teardown counts", ls.Open, ls.Flows, ls.Warmers, ls.Teardowns)
	}
}

// TestPoolCap: at the cap of legs to one peer, a stream that needs a leg
// tears down another stream's idle one (counted), and warming alone
// never does.
func TestPoolCap(t *testing.T) {
	p := startPair(t, nil, func(c *Config) { c.Pool = legpool.Config{MaxPerPeer: 2, Policy: legpool.PolicyLRU} })
	prod, in, out := p.prod, p.in, p.out
	ctx := context.Background()
	echo := echoApp(t)
	wire := func() (string, string) {
		inS, outS, err := client.Wire(ctx, in, out,
			&api.InboundRequest{RemoteIP: "127.0.0.1", ReceiverPorts: []int{echo}, NumConn: 1},
			api.OutboundRequest{NumConn: 1, Allow: []string{"127.0.0.0/8"}, WANPool: 2}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return inS.UID, outS.Listeners[0]
	}
	stats := func(uid string) *api.Stats {
		s, err := out.Get(ctx, uid)
		if err != nil {
			t.Fatal(err)
		}
		return s.Stats
	}
	a, _ := wire()
	waitfor.Must(t, 15*time.Second, "stream a's two warm legs", func() bool { return stats(a).LegsCreated == 2 })
	b, bAddr := wire()
	roundTrip(t, bAddr, 64<<10) // b needs a leg: one of a's goes
	if sa, sb := stats(a), stats(b); sa.LegsTornDown != 1 || sb.LegsCreated < 1 {
		t.Fatalf("at the cap: a had %d legs torn down, b dialed %d; want 1 and at least 1", sa.LegsTornDown, sb.LegsCreated)
	}
	m := prod.srv.env.Legs
	if open := m.Stats(bAddr).Open; open > 2 {
		t.Fatalf("%d legs open to the peer, over the cap of 2", open)
	}
}

// TestPoolStaleLegNotReused: a warm leg dialed before the inbound side
// took the pin looks up to the dialer (TLS 1.3: the client's handshake
// ends before the server checks its certificate) but the peer refused
// it. The first connection finds it stale and dials a new leg: the
// connection works, and it counts as a new leg, not as a reused one.
func TestPoolStaleLegNotReused(t *testing.T) {
	p := startPair(t, nil, nil)
	prod, in, out := p.prod, p.in, p.out
	ctx := context.Background()
	inS, err := in.Inbound(ctx, &api.InboundRequest{RemoteIP: "127.0.0.1", ReceiverPorts: []int{echoApp(t)}, NumConn: 1})
	if err != nil {
		t.Fatal(err)
	}
	outS, err := out.Outbound(ctx, &api.OutboundRequest{UID: inS.UID, Secret: inS.Secret, PeerCert: inS.WANCert, WAN: inS.WAN,
		PeerListeners: inS.Listeners, NumConn: 1, Allow: []string{"127.0.0.0/8"}, WANPool: 1})
	if err != nil {
		t.Fatal(err)
	}
	stats := func() *api.Stats {
		s, err := out.Get(ctx, inS.UID)
		if err != nil {
			t.Fatal(err)
		}
		return s.Stats
	}
	// Not attached yet: the warm leg the warmer dialed is refused by
	// the peer, unknown to the dialer.
	waitfor.Must(t, 15*time.Second, "the warm leg dialed before the attach", func() bool { return stats().LegsIdle == 1 })
	m := prod.srv.env.Legs
	waitfor.Must(t, 10*time.Second, "the peer's refusal of the warm leg", func() bool { return m.Stats(outS.Listeners[0]).Stale > 0 })
	if _, err := in.Attach(ctx, inS.UID, &api.AttachRequest{PeerCert: outS.WANCert}); err != nil {
		t.Fatal(err)
	}
	roundTrip(t, outS.Listeners[0], 1<<10)
	// At least the stale leg and the connection's own: taking the stale
	// leg wakes the warmer, which may have dialed a replacement by now.
	if st := stats(); st.LegsReused != 0 || st.LegsCreated < 2 {
		t.Fatalf("the connection after a stale warm leg: %d reused, %d created; want 0 reused (the stale leg carried nothing) and at least 2 created", st.LegsReused, st.LegsCreated)
	}
	for _, cl := range []*client.Client{out, in} {
		if _, err := cl.Release(ctx, inS.UID); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPoolTrimmed (issue 27, finding 3): a burst of connections dials
// more legs than a stream's pool keeps; once the burst is over, the legs
// beyond the pool go after the idle time, counted as torn down, and the
// pool's own stay.
func TestPoolTrimmed(t *testing.T) {
	p := startPair(t, nil, func(c *Config) { c.Pool.IdleTimeout = time.Second })
	_, outS, stats := wirePooled(t, p, 2)
	waitfor.Must(t, 15*time.Second, "two idle legs", func() bool { return stats().LegsIdle == 2 })
	// Eight connections open at once: each holds a leg.
	const burst = 8
	var conns []net.Conn
	for i := range burst {
		c, err := net.Dial("tcp", outS.Listeners[0])
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		msg := []byte(fmt.Sprintf("connection %d", i))
		c.SetDeadline(time.Now().Add(20 * time.Second))
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, msg); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.(*net.TCPConn).CloseWrite()
		io.Copy(io.Discard, c) // the echo's end: the session ended in order
		c.Close()
	}
	// Every leg of the burst went idle again (its session ended in
	// order), beside what the warmer dialed meanwhile.
	waitfor.Must(t, 15*time.Second, "the burst's legs idle", func() bool { return stats().LegsIdle >= burst })
	t.Logf("after the burst: %d legs idle", stats().LegsIdle)
	waitfor.Must(t, 30*time.Second, "the legs beyond the pool torn down after the idle time", func() bool {
		s := stats()
		return s.LegsIdle == 2 && s.LegsTornDown >= burst-2
	})
	roundTrip(t, outS.Listeners[0], 64<<10) // the pool still serves
}

// wirePooled wires a stream of one channel with wan_pool pool between
// p's gateways to an echo application, and returns both sides' views
// and a reader of the outbound side's stats.
func wirePooled(t *testing.T, p *gwPair, pool int) (inS, outS *api.Stream, stats func() *api.Stats) {
	t.Helper()
	ctx := context.Background()
	inS, outS, err := client.Wire(ctx, p.in, p.out,
		&api.InboundRequest{RemoteIP: "127.0.0.1", ReceiverPorts: []int{echoApp(t)}, NumConn: 1},
		api.OutboundRequest{NumConn: 1, Allow: []string{"127.0.0.0/8"}, WANPool: pool}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return inS, outS, func() *api.Stats {
		s, err := p.out.Get(ctx, inS.UID)
		if err != nil {
			t.Fatal(err)
		}
		return s.Stats
	}
}
