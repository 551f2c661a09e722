package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"scistream/internal/api"
	"scistream/internal/client"
	"scistream/internal/etcdtest"
	"scistream/internal/localgw"
	"scistream/internal/waitfor"
)

// TestFacilitySharedPort: a consumer facility of three nodes serves one
// shared WAN port behind a real HAProxy on port 443 that takes the nodes
// in turn (the 443-only edge of a facility that scales out). Every node
// serves every channel of a stream on the port: a stream created on one
// node is advertised as the router by all three, and its connections are
// relayed by all three, byte-exact. A node with another shared port
// cannot join. A node is SIGKILLed during transfers: the flows it carried
// end with a reset, never a clean short end, the others finish
// byte-exact, new connections go to the other nodes at once (no channel
// has to be taken over), and a stream whose lease that node kept runs
// out on another. The node comes back and takes connections again, and a
// release on one node ends the stream on all. A producer facility keeps
// pooled legs to it (checkPooledOnFacility).
func TestFacilitySharedPort(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	tok, tokens := aliceTokens(t)
	ips := []string{localgw.RandomLoopback(), localgw.RandomLoopback(), localgw.RandomLoopback()}
	var servers []string
	for _, ip := range ips {
		// Health checks every 200 ms on the control API's /healthz, ready
		// once the node serves the facility's streams: a dead node is
		// skipped after one failed check, a live one taken again after
		// one good one; a connection the dead node refuses meanwhile goes
		// to the next.
		servers = append(servers, net.JoinHostPort(ip, "8443")+" check port 5000 check-ssl verify none inter 200ms fall 1 rise 1")
	}
	router := startSNIRouter(t, map[string][]string{"f.wan.test": servers}, "option httpchk GET /healthz", "http-check expect status 200")
	cons := startFacilityOn(t, "cons", srv.Endpoint, tokens, ips, "--port", "5000",
		"--wan_port", "8443", "--wan_domain", "f.wan.test", "--wan_advertise", router.addr, "--takeover", "4s")
	// Pooled legs beyond a channel's wan_pool, which a burst on a
	// starved machine may dial, are torn down after 2 s idle, so the
	// count of idle legs settles (checkPooledOnFacility).
	prod := startFacility(t, "prod", srv.Endpoint, tokens, 2, "--takeover", "4s", "--pool_idle_timeout", "2s")
	ctx := context.Background()

	// A node whose shared WAN port differs from the others' cannot join.
	odd := slices.Clone(cons.args)
	odd[slices.Index(odd, "f.wan.test")] = "other.wan.test"
	if g, err := localgw.Start(ctx, localgw.Options{S2CS: bins.s2cs, ListenerIP: localgw.RandomLoopback(), PortRange: "6000-6999",
		StateDir: t.TempDir(), TokensFile: tokens, Args: append(odd, "--node", "cons-odd")}); err == nil {
		g.Stop()
		t.Fatal("a node with another --wan_domain joined the facility")
	} else if !strings.Contains(err.Error(), "same --wan_port, --wan_domain") {
		t.Fatalf("a node with another --wan_domain: %v; want a refusal naming the flags", err)
	}

	var inC []*client.Client
	for i := range 3 {
		inC = append(inC, cons.client(i, tok))
	}
	outC := prod.client(0, tok)
	app := newEchoApp(t)
	inS, outS, err := client.Wire(ctx, inC[0], outC,
		&api.InboundRequest{RemoteIP: "127.0.0.1", ReceiverPorts: []int{app.port()}, NumConn: 2},
		api.OutboundRequest{NumConn: 2, Allow: []string{"127.0.0.0/8"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(inS.WANServerName, ".f.wan.test") {
		t.Fatalf("inbound stream on a facility with a shared port: server name %q, want one under f.wan.test", inS.WANServerName)
	}
	view := func(i int) *api.Stream {
		t.Helper()
		v, err := inC[i].Get(ctx, inS.UID)
		if err != nil {
			t.Fatalf("the stream's view on node %d: %v", i, err)
		}
		return v
	}
	for i := range 3 {
		// Attached (the pin) on every node: a leg any of them gets is
		// checked against it.
		waitfor.Must(t, 10*time.Second, fmt.Sprintf("node %d to serve the attached stream", i), func() bool {
			v, err := inC[i].Get(ctx, inS.UID)
			return err == nil && v.State.Attached()
		})
		if v := view(i); !slices.Equal(v.Listeners, []string{router.addr}) || v.WANServerName != inS.WANServerName {
			t.Fatalf("node %d advertises %v as %q; want the router %s as %q", i, v.Listeners, v.WANServerName, router.addr, inS.WANServerName)
		}
	}
	relayed := func(i int) int64 { return view(i).Stats.TotalConns }

	// Connections taken by the nodes in turn, once the router has seen
	// each node healthy: every node relays some, every one byte-exact.
	sent := 0
	eventually(t, 20*time.Second, "every node to relay a connection", func() bool {
		for range 3 {
			if err := echoOnce(outS.Listeners[sent%2], 256<<10, uint64(sent)); err != nil {
				t.Fatalf("connection %d: %v", sent, err)
			}
			sent++
		}
		return relayed(0) > 0 && relayed(1) > 0 && relayed(2) > 0
	})
	t.Logf("every node relayed a connection after %d connections", sent)

	// A stream whose lease node 0 keeps (the node it was placed on), to
	// run out after node 0 is dead.
	placed := regexp.MustCompile(`msg="stream created" uid=(\S+) .*nodes=\[cons-0\]`)
	var leased string
	for range 30 {
		s, err := inC[0].Inbound(ctx, &api.InboundRequest{RemoteIP: "127.0.0.1", ReceiverPorts: []int{app.port()}, NumConn: 1})
		if err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(placed.FindAllStringSubmatch(cons.nodes[0].Log(), -1), func(m []string) bool { return m[1] == s.UID }) {
			leased = s.UID
			break
		}
		if _, err := inC[0].Release(ctx, s.UID); err != nil {
			t.Fatal(err)
		}
	}
	if leased == "" {
		t.Fatal("none of 30 streams was placed on node 0 of 3")
	}

	// Kill node 0 during transfers: nine flows are in flight, each
	// stopped halfway until the node is dead.
	type flow struct {
		err     error
		halfway atomic.Bool
	}
	flows := make([]*flow, 9)
	gate := make(chan struct{})
	var opened sync.Once
	open := func() { opened.Do(func() { close(gate) }) }
	defer open() // a failed check below lets the flows end
	var wg sync.WaitGroup
	for i := range flows {
		flows[i] = &flow{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			flows[i].err = echoGated(outS.Listeners[i%2], 256<<10, 2<<20, uint64(100+i), gate, &flows[i].halfway)
		}()
	}
	eventually(t, 30*time.Second, "every flow to be halfway", func() bool {
		for _, fl := range flows {
			if !fl.halfway.Load() {
				return false
			}
		}
		return true
	})
	// Halfway is written, not yet relayed: wait for every leg.
	var active [3]int64
	eventually(t, 30*time.Second, "the nodes to relay the nine flows", func() bool {
		for i := range active {
			active[i] = view(i).Stats.ActiveConns
		}
		return active[0]+active[1]+active[2] == int64(len(flows))
	})
	onVictim := active[0]
	if onVictim == 0 {
		t.Fatalf("node 0 relays none of the nine flows the router took in turn (nodes 1 and 2: %d, %d)", active[1], active[2])
	}
	before := relayed(1) + relayed(2)
	lease := 4
	if _, err := inC[0].Update(ctx, leased, &api.UpdateRequest{LeaseS: &lease}); err != nil {
		t.Fatal(err)
	}
	cons.nodes[0].Kill()
	if v, err := inC[1].Get(ctx, leased); err != nil || v.State.Terminal() {
		t.Fatalf("the stream whose lease node 0 kept, right after the kill: %v, %v; want it live", v.State, err)
	}
	open()
	wg.Wait()
	failed := 0
	for i, fl := range flows {
		if fl.err == nil {
			continue
		}
		failed++
		if !errors.Is(fl.err, syscall.ECONNRESET) && !errors.Is(fl.err, syscall.EPIPE) {
			t.Errorf("flow %d ended with %v; want a reset", i, fl.err)
		}
	}
	t.Logf("node 0 killed with %d of 9 flows on it: %d failed with a reset, the others finished byte-exact", onVictim, failed)
	if int64(failed) != onVictim {
		t.Errorf("%d flows failed, %d were on the killed node; want those and no other", failed, onVictim)
	}
	if len(app.silent) > 0 {
		t.Fatalf("silent ends: %v", app.silent)
	}
	// New connections need no takeover: the other nodes serve every
	// channel already. One the router sent to the dead node before its
	// health check failed was passed on to the next.
	for i := range 12 {
		if err := echoOnce(outS.Listeners[i%2], 256<<10, uint64(200+i)); err != nil {
			t.Fatalf("connection %d after the kill: %v", i, err)
		}
	}
	if n := relayed(1) + relayed(2) - before; n < 12 {
		t.Errorf("nodes 1 and 2 relayed %d more connections after the kill, want the 12 (and the survivors of the flows)", n)
	}
	// The lease node 0 kept runs out on another node.
	eventually(t, 30*time.Second, "the lease of a stream placed on the killed node to run out", func() bool {
		v, err := inC[1].Get(ctx, leased)
		return err == nil && v.State == api.StateExpired
	})

	// Node 0 comes back, and the router gives it connections again.
	cons.nodes[0] = cons.start(0, ips[0])
	inC[0] = cons.client(0, tok)
	waitfor.Must(t, 10*time.Second, "node 0 to serve the stream again", func() bool {
		_, err := inC[0].Get(ctx, inS.UID)
		return err == nil
	})
	eventually(t, 20*time.Second, "node 0 to relay a connection again", func() bool {
		if err := echoOnce(outS.Listeners[0], 64<<10, 300); err != nil {
			t.Fatalf("a connection after node 0 came back: %v", err)
		}
		return relayed(0) > 0
	})

	// A release on node 2 ends the stream on every node: a connection
	// the router sends to any of them is refused.
	if _, err := inC[2].Release(ctx, inS.UID); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		eventually(t, 10*time.Second, fmt.Sprintf("node %d to end the stream", i), func() bool {
			v, err := inC[i].Get(ctx, inS.UID)
			return err == nil && v.State == api.StateReleased
		})
	}
	for i := range 3 {
		if err := echoOnce(outS.Listeners[i%2], 1024, uint64(400+i)); err == nil {
			t.Fatalf("connection %d through a released stream was carried", i)
		}
	}
	if len(app.silent) > 0 {
		t.Fatalf("silent ends: %v", app.silent)
	}

	checkPooledOnFacility(t, ctx, prod, inC[1], tok, app)
}

// checkPooledOnFacility: a producer facility of two nodes keeps pooled
// WAN legs (wan_pool) for the channels each node serves, reuses them, and
// when a node dies the one that takes its channel over warms legs for it.
func checkPooledOnFacility(t *testing.T, ctx context.Context, prod *facilityNodes, in *client.Client, tok string, app *echoApp) {
	t.Helper()
	outC := []*client.Client{prod.client(0, tok), prod.client(1, tok)}
	inS, outS, err := client.Wire(ctx, in, outC[0],
		&api.InboundRequest{RemoteIP: "127.0.0.1", ReceiverPorts: []int{app.port()}, NumConn: 2},
		api.OutboundRequest{NumConn: 2, Allow: []string{"127.0.0.0/8"}, WANPool: 2}, nil)
	if err != nil {
		t.Fatalf("a pooled stream from a facility to a facility behind its router: %v", err)
	}
	node := map[string]int{prod.nodeName(0): 0, prod.nodeName(1): 1}
	serves := map[int]int{} // prod node -> the channel it serves
	for _, c := range outS.Channels {
		serves[node[c.Node]] = c.Channel
	}
	if len(serves) != 2 {
		t.Fatalf("the pooled stream's channels %+v: want one on each producer node", outS.Channels)
	}
	stats := func(i int) *api.Stats {
		t.Helper()
		v, err := outC[i].Get(ctx, inS.UID)
		if err != nil {
			t.Fatalf("producer node %d: %v", i, err)
		}
		return v.Stats
	}
	for i := range 2 {
		eventually(t, 15*time.Second, fmt.Sprintf("producer node %d to warm two legs for its channel", i), func() bool { return stats(i).LegsIdle == 2 })
	}
	for i := range 6 {
		if err := echoOnce(outS.Listeners[i%2], 64<<10, uint64(500+i)); err != nil {
			t.Fatalf("pooled connection %d: %v", i, err)
		}
	}
	for i := range 2 {
		if s := stats(i); s.LegsReused == 0 {
			t.Errorf("producer node %d reused none of its pooled legs over 3 connections (%d dialed)", i, s.LegsCreated)
		}
		// Idle legs for its own channel only: two warm, and at most one
		// more the warmer dialed while one was busy (it went back to
		// idle; on a starved machine a leg slow to come back can make
		// it two more, torn down after --pool_idle_timeout). A node that
		// warmed the other node's channel too would hold at least 4
		// from then on (and passed 2 only on its way there, before the
		// connections).
		eventually(t, 15*time.Second, fmt.Sprintf("producer node %d to hold 2 or 3 idle legs", i), func() bool {
			n := stats(i).LegsIdle
			return n >= 2 && n <= 3
		})
	}
	// Node 1 dies: node 0 takes its channel over and warms legs for it.
	moved := serves[1]
	prod.nodes[1].Kill()
	var addr string
	eventually(t, 20*time.Second, "producer node 0 to serve the dead node's channel", func() bool {
		v, err := outC[0].Get(ctx, inS.UID)
		if err != nil {
			return false
		}
		for _, c := range v.Channels {
			if c.Channel == moved && c.Node == prod.nodeName(0) {
				addr = c.Listener
				return true
			}
		}
		return false
	})
	eventually(t, 15*time.Second, "producer node 0 to warm legs for both channels", func() bool { return stats(0).LegsIdle >= 4 })
	if err := echoOnce(addr, 64<<10, 600); err != nil {
		t.Fatalf("a pooled connection on the channel node 0 took over: %v", err)
	}
	if _, err := outC[0].Release(ctx, inS.UID); err != nil {
		t.Fatal(err)
	}
	if _, err := in.Release(ctx, inS.UID); err != nil {
		t.Fatal(err)
	}
	if len(app.silent) > 0 {
		t.Fatalf("silent ends: %v", app.silent)
	}
}

// TestFacilitySharedPortNoRouter: without a router, the nodes of a
// facility each advertise their own shared port (their --wan_port
// settings, as given, are alike, so they join one facility); the view of
// a stream names every node, the state a node stored when data first
// passed through it (connected) reaches the others, and when the node
// the producer's gateway dials dies, its next connections reach another
// node by themselves.
func TestFacilitySharedPortNoRouter(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	tok, tokens := aliceTokens(t)
	cons := startFacility(t, "cons", srv.Endpoint, tokens, 2, "--wan_port", "8443", "--wan_domain", "f.wan.test")
	prod := startFacility(t, "prod", srv.Endpoint, tokens, 1)
	in0, in1, out := cons.client(0, tok), cons.client(1, tok), prod.client(0, tok)
	app := newEchoApp(t)
	ctx := context.Background()
	// The view names the nodes node 0 knows: wait until it knows both.
	waitfor.Must(t, 10*time.Second, "node 0 to know both nodes", func() bool {
		info, err := in0.Info(ctx)
		return err == nil && len(info.Nodes) == 2
	})
	inS, outS, err := client.Wire(ctx, in0, out,
		&api.InboundRequest{RemoteIP: "127.0.0.1", ReceiverPorts: []int{app.port()}, NumConn: 1},
		api.OutboundRequest{NumConn: 1, Allow: []string{"127.0.0.0/8"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	own := net.JoinHostPort(cons.nodes[0].Opts.ListenerIP, "8443")
	if !slices.Equal(inS.Listeners, []string{own}) || len(inS.Nodes) != 2 {
		t.Fatalf("a shared stream without a router: listeners %v, nodes %v; want the node's own %s and both nodes", inS.Listeners, inS.Nodes, own)
	}
	waitfor.Must(t, 10*time.Second, "node 1 to serve the attached stream", func() bool {
		v, err := in1.Get(ctx, inS.UID)
		return err == nil && v.State.Attached()
	})
	if v, err := in1.Get(ctx, inS.UID); err != nil || v.State != api.StateWired {
		t.Fatalf("node 1 before any data: %+v, %v; want wired", v, err)
	}
	if err := echoOnce(outS.Listeners[0], 64<<10, 1); err != nil {
		t.Fatal(err)
	}
	// The data went through node 0 (the listener the stream advertised):
	// node 1 learns from the facility's store that the stream is
	// connected.
	waitfor.Must(t, 10*time.Second, "node 1 to mirror the connected state node 0 stored", func() bool {
		v, err := in1.Get(ctx, inS.UID)
		return err == nil && v.State == api.StateConnected
	})
	cons.nodes[0].Kill()
	for i := range 3 {
		if err := echoOnce(outS.Listeners[0], 64<<10, uint64(10+i)); err != nil {
			t.Fatalf("connection %d after the kill of the node the stream advertised: %v", i, err)
		}
	}
	if v, err := in1.Get(ctx, inS.UID); err != nil || v.Stats.TotalConns != 3 {
		t.Fatalf("node 1 relayed %v connections (%v); want the 3 after the kill", v.Stats, err)
	}
	if len(app.silent) > 0 {
		t.Fatalf("silent ends: %v", app.silent)
	}
}
