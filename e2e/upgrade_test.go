package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
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

// A live upgrade (issue 37): kill -USR2 makes s2cs start its binary
// again and hand it every framed connection; the applications see a
// pause, never a reset.

// handedTo waits until g's log says it handed the gateway over, and
// returns the new process's PID, which the test then stops itself (it
// is not localgw's child).
func handedTo(t *testing.T, g *localgw.Gateway, nth int) int {
	t.Helper()
	re := regexp.MustCompile(`live upgrade: the gateway is handed over to the new s2cs; this process exits.* pid=(\d+)`)
	var pid int
	eventually(t, time.Minute, "the gateway to say it handed over", func() bool {
		m := re.FindAllStringSubmatch(g.Log(), -1)
		if len(m) < nth {
			return false
		}
		pid, _ = strconv.Atoi(m[nth-1][1])
		return pid > 0
	})
	t.Cleanup(func() { stopPID(t, pid) })
	return pid
}

// stopPID stops the process pid (SIGTERM, then SIGKILL) and waits until
// it is gone.
func stopPID(t *testing.T, pid int) {
	if syscall.Kill(pid, syscall.SIGTERM) != nil {
		return // gone already
	}
	gone := func() bool { return syscall.Kill(pid, 0) != nil || isZombie(pid) }
	if !waitfor.Cond(10*time.Second, gone) {
		syscall.Kill(pid, syscall.SIGKILL)
		waitfor.Cond(10*time.Second, gone)
	}
}

// isZombie reports whether pid has exited and waits to be reaped.
func isZombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] == 'Z'
}

// TestUpgradeDuringTransfer: kill -USR2 on the outbound gateway, then on
// the inbound one, during a paced 1 GiB transfer: both processes are
// replaced (new PIDs, their control APIs answer), the transfer arrives
// byte-exact, neither application sees a reset, and neither gateway
// counts an aborted connection.
func TestUpgradeDuringTransfer(t *testing.T) {
	for _, c := range []struct {
		name, wan    string
		pool, stripe int
	}{{"tls", api.WANTLS, 0, 1}, {"quic", api.WANQUIC, 0, 1}, {"pooled", api.WANTLS, 1, 1}, {"striped", api.WANTLS, 0, 4}} {
		t.Run(c.name, func(t *testing.T) { upgradeDuringTransfer(t, c.wan, c.pool, c.stripe) })
	}
}

// upgradeDuringTransfer is TestUpgradeDuringTransfer over WAN legs of
// wan, pooled if pool > 0, stripe legs at once: a QUIC stream's UDP
// socket is handed over like a TCP listener, and its connection resumes
// on a new QUIC connection; a connection on a pooled leg's session
// resumes on a leg of its own; a striped one resumes on a new first leg
// and is striped again.
func upgradeDuringTransfer(t *testing.T, wan string, pool, stripe int) {
	p := newResumePair(t, "--port", "5000") // a fixed control port: the new process serves it again
	app := newTimedSink(t, p.l.hostIP)
	var in, out *api.Stream
	if stripe > 1 {
		in, out = p.wireStriped(t, app.port(), 2e9, stripe, pool)
	} else {
		in, out = p.wireOver(t, app.port(), 2e9, wan, pool) // 250 MB/s: 4 s for 1 GiB
	}
	conn, err := dialFrom(p.l.hostIP, out.Listeners[0])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const total = 1 << 30
	// Held at each upgrade, and at three quarters: never over before
	// the upgrade, or before the legs are counted after the last, however
	// slow the machine.
	pr := produce(conn, total, 41, total/4, total/2, 3*total/4)
	// Connects to both control ports all along: with the listening
	// sockets handed over, none is refused while neither process
	// accepts. (Not to the stream's listener: each connect there would
	// be a connection of the stream.)
	probing, probed := make(chan struct{}), make(chan struct{})
	var probes, refused atomic.Int64
	go func() {
		defer close(probed)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for range 20000 {
			for _, a := range []string{p.prod.Addr, p.cons.Addr} {
				c, err := dialFrom(p.l.hostIP, a)
				probes.Add(1)
				if err != nil {
					refused.Add(1)
					t.Logf("connect to %s during the upgrades: %v", a, err)
					continue
				}
				c.Close()
			}
			select {
			case <-probing:
				return
			case <-tick.C:
			}
		}
	}()
	pids := map[string][2]int{}
	for i, g := range []*localgw.Gateway{p.prod, p.cons} {
		at := int64(i+1) * total / 4 // a quarter, then half
		eventually(t, time.Minute, "the consumer to have more", func() bool { return app.n.Load() >= at })
		old := g.PID()
		if err := syscall.Kill(old, syscall.SIGUSR2); err != nil {
			t.Fatal(err)
		}
		pr.release() // the bytes flow while the process hands over
		pids[[]string{"outbound", "inbound"}[i]] = [2]int{old, handedTo(t, g, 1)}
		// The connection itself went over, not only the stream, and the
		// listening sockets with it: the control port's and the
		// stream's (an inbound QUIC stream's port is a UDP socket as
		// well as a TCP listener).
		eventually(t, time.Minute, "the new process to take the connection back", func() bool {
			return strings.Contains(g.Log(), `msg="live upgrade: connections handed over taken back" taken=1 of=1`)
		})
		if stripe > 1 {
			// Striped again, while the producer holds (at a half, then
			// three quarters).
			_, portS, _ := net.SplitHostPort(in.Listeners[0])
			port, _ := strconv.Atoi(portS)
			var legs []string
			if !waitfor.Cond(30*time.Second, func() bool {
				legs = p.legPorts(t, port)
				return len(legs) == stripe
			}) {
				t.Fatalf("%d WAN legs at the consumer's gateway after the %s gateway's upgrade, want %d", len(legs), []string{"outbound", "inbound"}[i], stripe)
			}
		}
		listeners := 2
		if wan == api.WANQUIC && g == p.cons {
			listeners = 3
		}
		if want := fmt.Sprintf(`msg="live upgrade: connections frozen for the new process" connections=1 listeners=%d`, listeners); !strings.Contains(g.Log(), want) {
			t.Errorf("the %s gateway did not hand over its connection and its %d listeners:\n%s", []string{"outbound", "inbound"}[i], listeners, lastLines(g.Log(), 30))
		}
	}
	eventually(t, time.Minute, "the consumer to have three quarters", func() bool { return app.n.Load() >= 3*total/4 })
	pr.release()
	r := pr.result(app)
	close(probing)
	<-probed
	if refused.Load() > 0 {
		t.Errorf("%d of %d connects to the gateways' listeners failed during the upgrades", refused.Load(), probes.Load())
	}
	pr.check(t, r)
	t.Logf("processes replaced (old, new): %v; the consumer's largest pause: %v", pids, r.maxGap.Round(time.Millisecond))
	for side, c := range map[string]struct {
		get func() (int64, error)
	}{
		"outbound": {func() (int64, error) {
			s, err := p.out.Get(context.Background(), out.UID)
			return s.Stats.AbortedConns, err
		}},
		"inbound": {func() (int64, error) {
			s, err := p.in.Get(context.Background(), in.UID)
			return s.Stats.AbortedConns, err
		}},
	} {
		n, err := c.get()
		if err != nil {
			t.Fatalf("the %s gateway's new process: %v", side, err)
		}
		if n != 0 {
			t.Errorf("the %s gateway's new process counts %d aborted connections", side, n)
		}
	}
	if stripe > 1 {
		for side, g := range map[string]struct {
			c   *client.Client
			uid string
		}{"outbound": {p.out, out.UID}, "inbound": {p.in, in.UID}} {
			s, err := g.c.Get(context.Background(), g.uid)
			if err != nil {
				t.Fatalf("the %s gateway's new process: %v", side, err)
			}
			if s.Stats.StripeLegs != stripe {
				t.Errorf("the %s gateway's new process says %d stripe legs, want %d", side, s.Stats.StripeLegs, stripe)
			}
		}
	}
}

// TestUpgradeRollback: a new binary that exits at once (a broken
// build) leaves the old process serving: it says why, its PID stays,
// its control API and its stream's listener still answer.
func TestUpgradeRollback(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "s2cs")
	b, err := os.ReadFile(bins.s2cs)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(exe, b, 0o755); err != nil {
		t.Fatal(err)
	}
	g, err := localgw.Start(context.Background(), localgw.Options{S2CS: exe, ListenerIP: "127.0.0.1", StateDir: filepath.Join(dir, "state")})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Stop()
	// The "upgrade": a binary that fails before it serves.
	os.Remove(exe)
	if err := os.WriteFile(exe, []byte("#!/bin/sh\necho broken build >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(g.PID(), syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "the gateway to say the upgrade was refused", func() bool {
		return strings.Contains(g.Log(), "live upgrade refused: the new s2cs did not start (rollback: this process keeps serving)")
	})
	select {
	case <-g.Done():
		t.Fatalf("the gateway exited after a failed upgrade:\n%s", lastLines(g.Log(), 20))
	default:
	}
	c, err := g.Client("")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Info(context.Background()); err != nil {
		t.Fatalf("the control API after the rollback: %v", err)
	}
}

// TestUpgradeThousandConns: 1,000 live application connections through
// the pair, each answered once; kill -USR2 on the outbound gateway, then
// on the inbound one; every connection is then answered again, none
// reset, and each new process says it took all 1,000 back.
func TestUpgradeThousandConns(t *testing.T) {
	const n = 1000
	p := newResumePair(t, "--port", "5000")
	echo, err := net.Listen("tcp", net.JoinHostPort(p.l.hostIP, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	in, out, err := client.Wire(context.Background(), p.in, p.out,
		&api.InboundRequest{RemoteIP: p.l.hostIP, ReceiverPorts: []int{echo.Addr().(*net.TCPAddr).Port}, NumConn: 1},
		api.OutboundRequest{NumConn: 1, Allow: []string{p.l.hostIP + "/32"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.in.Release(context.Background(), in.UID)
	conns := make([]*net.TCPConn, n)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	// ask sends msg on every connection, n at a time, and checks each
	// echo.
	ask := func(round string) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i, c := range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				msg := fmt.Sprintf("%s %d\n", round, i)
				c.SetDeadline(time.Now().Add(2 * time.Minute))
				if _, err := c.Write([]byte(msg)); err != nil {
					errs <- fmt.Errorf("connection %d, %s: write: %w", i, round, err)
					return
				}
				got := make([]byte, len(msg))
				if _, err := io.ReadFull(c, got); err != nil || string(got) != msg {
					errs <- fmt.Errorf("connection %d, %s: read %q: %v", i, round, got, err)
				}
			}()
		}
		wg.Wait()
		close(errs)
		k := 0
		for err := range errs {
			if k++; k <= 5 {
				t.Error(err)
			}
		}
		if k > 0 {
			for side, c := range map[string]*client.Client{"outbound": p.out, "inbound": p.in} {
				if st, err := c.Get(context.Background(), out.UID); err == nil {
					t.Logf("the %s side: aborted %v, last errors %+v", side, st.Stats.AbortedByKind, st.Stats.LastErrors)
				}
			}
			t.Fatalf("%d of %d connections failed %s", k, n, round)
		}
	}
	for i := range conns {
		if conns[i], err = dialFrom(p.l.hostIP, out.Listeners[0]); err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
	}
	ask("before")
	for i, g := range []*localgw.Gateway{p.prod, p.cons} {
		start := time.Now()
		if err := syscall.Kill(g.PID(), syscall.SIGUSR2); err != nil {
			t.Fatal(err)
		}
		handedTo(t, g, 1)
		eventually(t, time.Minute, "the new process to take every connection back", func() bool {
			return strings.Contains(g.Log(), fmt.Sprintf(`msg="live upgrade: connections handed over taken back" taken=%d of=%d reset=0`, n, n))
		})
		t.Logf("the %s gateway handed over %d connections in %v (signal to the new process's confirmation)", []string{"outbound", "inbound"}[i], n, time.Since(start).Round(time.Millisecond))
		ask([]string{"after the outbound upgrade", "after the inbound upgrade"}[i])
	}
}

// TestKillNineResets: what cannot be resumed is never silent: a SIGKILL
// of the inbound gateway mid-transfer resets the consumer at once (its
// kernel ends the sockets, armed to reset), and the producer once the
// outbound side's resume window ran out, counted there.
func TestKillNineResets(t *testing.T) {
	p := newResumePair(t, "--resume_window=2s")
	app := newTimedSink(t, p.l.hostIP)
	_, out := p.wire(t, app.port(), 80e6) // 10 MB/s: still sending when the gateway dies
	conn, err := dialFrom(p.l.hostIP, out.Listeners[0])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sent := make(chan error, 1)
	go func() {
		conn.SetWriteDeadline(time.Now().Add(2 * time.Minute))
		sent <- writeRandom(conn, 1<<30, 43)
	}()
	eventually(t, time.Minute, "the consumer to have 4 MB", func() bool { return app.n.Load() >= 4<<20 })
	p.cons.Kill()
	r := <-app.done
	if r.err == nil || !errors.Is(r.err, syscall.ECONNRESET) {
		t.Fatalf("the consumer's read ended with %v after %d bytes, not a reset", r.err, r.n)
	}
	if err := <-sent; err == nil || !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("the producer's writes ended with %v, not a reset", err)
	}
	eventually(t, 30*time.Second, "the outbound side to count the connection the window ran out on", func() bool {
		st, err := p.out.Get(context.Background(), out.UID)
		return err == nil && st.Stats.ResumeExpired == 1 && st.Stats.AbortedConns == 1
	})
}

// TestUpgradeFacilityNodes: the nodes of a facility (etcd) hand over as
// a lone gateway does. Two facilities of two nodes; kill -USR2 on the
// producer side's node that serves the stream's channel, then on the
// consumer side's, during a paced transfer: both processes replaced,
// the transfer byte-exact with no reset at either application, the
// channel still served by the same node on each side (the successor
// moved the claim onto its own lease; no other node took it over, also
// once the old process's lease ran out), no aborted connection.
func TestUpgradeFacilityNodes(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	tok, tokens := aliceTokens(t)
	// A short takeover: the old process's lease runs out during the
	// transfer, and a claim left on it would be taken by the other node.
	args := []string{"--port", "5000", "--takeover", "4s"}
	cons := startFacility(t, "ucons", srv.Endpoint, tokens, 2, args...)
	prod := startFacility(t, "uprod", srv.Endpoint, tokens, 2, args...)
	inC, outC := cons.client(0, tok), prod.client(0, tok)
	app := newTimedSink(t, "127.0.0.1")
	ctx := context.Background()
	in, out, err := client.Wire(ctx, inC, outC,
		&api.InboundRequest{RemoteIP: "127.0.0.1", ReceiverPorts: []int{app.port()}, NumConn: 1, Rate: 1e9},
		api.OutboundRequest{NumConn: 1, Allow: []string{"127.0.0.0/8"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	nodeOf := func(f *facilityNodes, ch []api.Channel) int {
		t.Helper()
		for i := range f.nodes {
			if len(ch) == 1 && ch[0].Node == f.nodeName(i) {
				return i
			}
		}
		t.Fatalf("no node of %s serves the channel: %+v", f.name, ch)
		return -1
	}
	sides := []struct {
		name string
		f    *facilityNodes
		node int
		uid  string
	}{{"outbound", prod, nodeOf(prod, out.Channels), out.UID}, {"inbound", cons, nodeOf(cons, in.Channels), in.UID}}
	conn, err := dialFrom("", out.Listeners[0])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const total = 512 << 20                          // 125 MB/s: about 4 s
	pr := produce(conn, total, 47, total/4, total/2) // held at each upgrade
	for i, s := range sides {
		g := s.f.nodes[s.node]
		at := int64(i+1) * total / 4
		eventually(t, time.Minute, "the consumer to have more", func() bool { return app.n.Load() >= at })
		old := g.PID()
		if err := syscall.Kill(old, syscall.SIGUSR2); err != nil {
			t.Fatal(err)
		}
		pr.release()
		pid := handedTo(t, g, 1)
		eventually(t, time.Minute, "the new process to take the connection back", func() bool {
			return strings.Contains(g.Log(), `msg="live upgrade: connections handed over taken back" taken=1 of=1 reset=0`)
		})
		t.Logf("%s node %s: process %d replaced by %d", s.name, s.f.nodeName(s.node), old, pid)
	}
	r := pr.result(app)
	pr.check(t, r)
	t.Logf("the consumer's largest pause: %v", r.maxGap.Round(time.Millisecond))
	for _, s := range sides {
		other := s.f.nodes[1-s.node]
		if strings.Contains(other.Log(), "took over a channel of the facility") {
			t.Errorf("the %s facility's other node took the channel over during the upgrade:\n%s", s.name, lastLines(other.Log(), 20))
		}
		// The new process answers on the same control address.
		c := s.f.client(s.node, tok)
		st, err := c.Get(ctx, s.uid)
		if err != nil {
			t.Fatalf("the %s node's new process: %v", s.name, err)
		}
		if n := st.Stats.AbortedConns; n != 0 {
			t.Errorf("the %s node's new process counts %d aborted connections", s.name, n)
		}
		if len(st.Channels) != 1 || st.Channels[0].Node != s.f.nodeName(s.node) {
			t.Errorf("the %s stream's channel after the upgrade: %+v; want it on %s still", s.name, st.Channels, s.f.nodeName(s.node))
		}
	}
}
