package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"scistream/internal/api"
	"scistream/internal/certs"
	"scistream/internal/client"
	"scistream/internal/etcdtest"
	"scistream/internal/localgw"
	"scistream/internal/waitfor"
)

// facilityNodes is one facility of several s2cs nodes sharing an etcd.
type facilityNodes struct {
	t      *testing.T
	name   string
	dir    string
	args   []string // every node's flags but --listener_ip, --node, --state_dir and --tokens
	tokens string
	nodes  []*localgw.Gateway
	cert   string
}

// startFacility starts n nodes of facility name on loopback addresses of
// their own, with one certificate for all (a peer pins one per stream).
func startFacility(t *testing.T, name, etcdEndpoint, tokensFile string, n int, extra ...string) *facilityNodes {
	t.Helper()
	var ips []string
	for range n {
		ips = append(ips, localgw.RandomLoopback())
	}
	return startFacilityOn(t, name, etcdEndpoint, tokensFile, ips, extra...)
}

// startFacilityOn is startFacility with one node on each of ips.
func startFacilityOn(t *testing.T, name, etcdEndpoint, tokensFile string, ips []string, extra ...string) *facilityNodes {
	t.Helper()
	dir := t.TempDir()
	f := &facilityNodes{t: t, name: name, dir: dir, tokens: tokensFile}
	certPEM, keyPEM, err := certs.SelfSigned(ips, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(dir, "gw.key")
	f.cert = filepath.Join(dir, "gw.crt")
	if err := os.WriteFile(f.cert, certPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	f.args = append([]string{"--store", "etcd://" + etcdEndpoint, "--store_facility", name,
		"--server_crt", f.cert, "--server_key", key,
		"--quota_streams", "500", "--quota_ports", "2000", "--quota_pending", "500"}, extra...)
	for i, ip := range ips {
		f.nodes = append(f.nodes, f.start(i, ip))
	}
	return f
}

// aliceTokens returns a fresh token of alice's and the token file that
// knows it, which every node of the facilities of a test shares.
func aliceTokens(t *testing.T) (token, file string) {
	t.Helper()
	token = localgw.NewToken()
	file = filepath.Join(t.TempDir(), "tokens")
	if err := localgw.WriteTokens(file, map[string]string{"alice": token}); err != nil {
		t.Fatal(err)
	}
	return token, file
}

func (f *facilityNodes) nodeName(i int) string { return fmt.Sprintf("%s-%d", f.name, i) }

func (f *facilityNodes) start(i int, ip string) *localgw.Gateway {
	f.t.Helper()
	name := f.nodeName(i)
	g, err := localgw.Start(context.Background(), localgw.Options{
		S2CS:       bins.s2cs,
		ListenerIP: ip,
		PortRange:  "6000-6999",
		StateDir:   filepath.Join(f.dir, name),
		TokensFile: f.tokens,
		Args:       append(slices.Clone(f.args), "--node", name),
	})
	if err != nil {
		f.t.Fatalf("start node %s: %v", name, err)
	}
	f.t.Cleanup(func() {
		g.Stop()
		if f.t.Failed() {
			f.t.Logf("node %s log (last 60 lines):\n%s", name, lastLines(g.Log(), 60))
		}
	})
	return g
}

func (f *facilityNodes) client(i int, token string) *client.Client {
	f.t.Helper()
	c, err := f.nodes[i].Client(token)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(c.Close)
	return c
}

// echoApp is the consumer: it reads an 8-byte length, then echoes that
// many bytes back. A connection that ends before all of them with a
// clean EOF is a silent end, counted in silent.
type echoApp struct {
	ln     net.Listener
	mu     sync.Mutex
	silent []string
	resets int
}

func newEchoApp(t *testing.T) *echoApp {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := &echoApp{ln: ln}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				a.serve(c.(*net.TCPConn))
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return a
}

func (a *echoApp) serve(c *net.TCPConn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Minute))
	var hdr [8]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		a.ended(c, 0, 8, err)
		return
	}
	want := int64(binary.BigEndian.Uint64(hdr[:]))
	n, err := io.Copy(c, io.LimitReader(c, want))
	if err == nil && n < want {
		err = io.EOF
	}
	if err != nil {
		a.ended(c, n, want, err)
		return
	}
	c.CloseWrite()
	io.Copy(io.Discard, c)
}

func (a *echoApp) ended(c net.Conn, n, want int64, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		a.silent = append(a.silent, fmt.Sprintf("%s: clean end after %d of %d bytes", c.RemoteAddr(), n, want))
		return
	}
	a.resets++
}

func (a *echoApp) port() int { return a.ln.Addr().(*net.TCPAddr).Port }

// echoOnce sends n random bytes through addr and checks the echo, byte
// for byte.
func echoOnce(addr string, n int, seed uint64) error {
	c, err := dialFrom("", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	msg := make([]byte, 8+n)
	binary.BigEndian.PutUint64(msg, uint64(n))
	r := rand.New(rand.NewPCG(seed, 7))
	for i := 8; i < len(msg); i++ {
		msg[i] = byte(r.Uint32())
	}
	errc := make(chan error, 1)
	go func() { _, err := c.Write(msg); errc <- err }()
	got, err := io.ReadAll(c)
	if werr := <-errc; werr != nil {
		return fmt.Errorf("write: %w", werr)
	}
	if err != nil {
		return fmt.Errorf("read: %w", err)
	}
	if !bytes.Equal(got, msg[8:]) {
		return fmt.Errorf("echo of %d bytes came back as %d bytes, differing", n, len(got))
	}
	return nil
}

// facStream is one stream across the two facilities.
type facStream struct {
	uid      string
	in, out  int // the nodes the requests went to
	lan      []string
	inChans  []api.Channel
	outChans []api.Channel
}

// TestFacility: two facilities of three s2cs nodes each on one real
// etcd. 100 streams are created through every node at once (no two get
// one UID or one port of a facility); every channel of every stream
// carries an echo byte-exact; a rated stream on three nodes keeps to its
// grant over all three; a consumer-side node is killed with
// SIGKILL during transfers: its connections end with a reset at both
// applications, never a clean short end, the others finish byte-exact,
// and every stream is served again (the time is logged: the takeover bound is a target, measured by s2bench facility; the
// outbound nodes find the moved channels themselves); a producer-side
// node is killed and its channels are served on the other nodes'
// addresses, as s2uc status shows; a consumer-side node hangs (SIGSTOP)
// and the producer side finds its moved channels without waiting out a
// handshake with it, and it takes them back when it resumes; etcd is
// stopped (control requests answer unavailable, streams carry data) and
// restarted, and the nodes reconcile without losing or duplicating a
// stream.
func TestFacility(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	dir := t.TempDir()
	tok, tokens := aliceTokens(t)
	cons := startFacility(t, "cons", srv.Endpoint, tokens, 3, "--takeover", "10s")
	prod := startFacility(t, "prod", srv.Endpoint, tokens, 3)
	app := newEchoApp(t)
	var inC, outC []*client.Client
	for i := range 3 {
		inC = append(inC, cons.client(i, tok))
		outC = append(outC, prod.client(i, tok))
	}
	ctx := context.Background()
	info, err := inC[0].Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Facility != "cons" || len(info.Nodes) != 3 {
		t.Fatalf("info of a node: facility %q, nodes %v; want cons and three nodes", info.Facility, info.Nodes)
	}

	// Bad requests a facility refuses, naming the field.
	many := make([]string, api.MaxPeerNodes+1)
	for i := range many {
		many[i] = "127.0.0.1"
	}
	for _, c := range []struct {
		do      func() error
		mention string
	}{
		{func() error {
			_, err := inC[0].Inbound(ctx, &api.InboundRequest{RemoteIP: "127.0.0.1", ReceiverPorts: []int{app.port()}, NumConn: 1, WAN: api.WANQUIC})
			return err
		}, `wan "quic"`},
		{func() error {
			_, _, err := client.Wire(ctx, inC[0], outC[0], &api.InboundRequest{RemoteIP: "127.0.0.1", ReceiverPorts: []int{app.port()}, NumConn: 1},
				api.OutboundRequest{NumConn: 1, PeerNodes: []string{"not a host!"}}, nil)
			return err
		}, "peer_nodes"},
		{func() error {
			_, _, err := client.Wire(ctx, inC[0], outC[0], &api.InboundRequest{RemoteIP: "127.0.0.1", ReceiverPorts: []int{app.port()}, NumConn: 1},
				api.OutboundRequest{NumConn: 1, PeerNodes: many}, nil)
			return err
		}, "peer_nodes: at most"},
		{func() error {
			_, _, err := client.Wire(ctx, inC[0], outC[0], &api.InboundRequest{RemoteIP: "127.0.0.1", ReceiverPorts: []int{app.port()}, NumConn: 1},
				api.OutboundRequest{NumConn: 1, WANPool: 1}, nil)
			return err
		}, "wan_pool"},
	} {
		var ae *api.Error
		if err := c.do(); !errors.As(err, &ae) || ae.Code != api.CodeInvalidArgument || !strings.Contains(ae.Message, c.mention) {
			t.Errorf("a bad request: %v; want invalid_argument naming %s", err, c.mention)
		}
	}
	// A stream of node 0 cannot reach a data port of node 1, where
	// another user's listener would take node 0's connection as one from
	// an allowed source (issue 25).
	node1 := cons.nodes[1].Opts.ListenerIP
	if _, err := inC[0].Inbound(ctx, &api.InboundRequest{RemoteIP: node1, ReceiverPorts: []int{6500}, NumConn: 1}); err == nil ||
		!strings.Contains(err.Error(), "on another node of this gateway's facility") {
		t.Errorf("a stream to %s:6500, another node's data port: %v; want a refusal naming the facility's other node", node1, err)
	}
	// Wire released what it created: nothing is left.
	for _, c := range []*client.Client{inC[1], outC[2]} {
		if l, err := c.List(ctx, false); err != nil || len(l) != 0 {
			t.Fatalf("after refused requests, a node lists %d streams (%v); want none", len(l), err)
		}
	}

	// 100 streams, six requests at a time, through every pair of nodes.
	const nStreams, numConn = 100, 3
	streams := make([]*facStream, nStreams)
	var wg sync.WaitGroup
	errs := make(chan error, nStreams)
	next := make(chan int)
	start := time.Now()
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				fs := &facStream{in: i % 3, out: (i + 1) % 3}
				inS, outS, err := client.Wire(ctx, inC[fs.in], outC[fs.out], &api.InboundRequest{
					RemoteIP: "127.0.0.1", ReceiverPorts: []int{app.port()}, NumConn: numConn,
				}, api.OutboundRequest{NumConn: numConn, Allow: []string{"127.0.0.0/8"}}, nil)
				if err != nil {
					errs <- fmt.Errorf("stream %d: %w", i, err)
					continue
				}
				fs.uid, fs.lan, fs.inChans, fs.outChans = inS.UID, outS.Listeners, inS.Channels, outS.Channels
				streams[i] = fs
			}
		}()
	}
	for i := range nStreams {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("created %d streams of %d channels through 3+3 nodes in %s", nStreams, numConn, time.Since(start).Round(time.Millisecond))

	// No UID twice; no port twice in a facility; channels spread.
	uids := map[string]bool{}
	inPorts, outPorts := map[string]string{}, map[string]string{}
	perNode := map[string]int{}
	for _, fs := range streams {
		if uids[fs.uid] {
			t.Fatalf("UID %s given twice", fs.uid)
		}
		uids[fs.uid] = true
		for _, sides := range []struct {
			chans []api.Channel
			seen  map[string]string
		}{{fs.inChans, inPorts}, {fs.outChans, outPorts}} {
			if len(sides.chans) != numConn {
				t.Fatalf("stream %s: %d channels in the view, want %d", fs.uid, len(sides.chans), numConn)
			}
			for _, c := range sides.chans {
				_, port, _ := net.SplitHostPort(c.Listener)
				if other, ok := sides.seen[port]; ok {
					t.Fatalf("port %s held by %s and %s in one facility", port, other, fs.uid)
				}
				sides.seen[port] = fs.uid
				if c.Node == "" {
					t.Fatalf("stream %s channel %d has no node after its creation: %+v", fs.uid, c.Channel, sides.chans)
				}
				perNode[c.Node]++
			}
		}
	}
	for i := range 3 {
		for _, f := range []*facilityNodes{cons, prod} {
			if n := perNode[f.nodeName(i)]; n < nStreams*numConn/6 {
				t.Errorf("node %s serves %d channels of %d: not spread", f.nodeName(i), n, nStreams*numConn)
			}
		}
	}

	// Every channel of every stream carries an echo.
	checkAll := func(what string, within time.Duration) time.Duration {
		t.Helper()
		start := time.Now()
		deadline := start.Add(within)
		var mu sync.Mutex
		var last error
		var wg sync.WaitGroup
		sem := make(chan struct{}, 16)
		for si, fs := range streams {
			for ch := range numConn {
				wg.Add(1)
				sem <- struct{}{}
				go func() {
					defer wg.Done()
					defer func() { <-sem }()
					// A connection refused or reset during a takeover
					// is tried again until the deadline.
					var err error
					addr := fs.lan[ch]
					if !waitfor.Cond(time.Until(deadline), func() bool {
						err = echoOnce(addr, 32<<10, uint64(si*numConn+ch))
						return err == nil
					}) {
						mu.Lock()
						last = fmt.Errorf("%s: stream %s channel %d via %s: %w", what, fs.uid, ch, addr, err)
						mu.Unlock()
					}
				}()
			}
		}
		wg.Wait()
		if last != nil {
			t.Fatal(last)
		}
		return time.Since(start)
	}
	checkAll("every channel", 30*time.Second)
	if len(app.silent) > 0 {
		t.Fatalf("silent ends before any fault: %v", app.silent)
	}

	// A granted rate holds for the whole facility: the stream's three
	// channels, one on each node, together carry no more than the grant
	// (each node paces its channel at a third of it, not the whole).
	checkFacilityRate(t, ctx, inC[0], outC[1], app.port())

	// Kill a consumer-side node during transfers: 36 flows are in
	// flight, each stopped halfway until the node is dead.
	victim := 1
	vname := cons.nodeName(victim)
	type flow struct {
		fs      *facStream
		ch      int
		victim  bool
		err     error
		halfway atomic.Bool
	}
	var flows []*flow
	for _, fs := range streams[:12] {
		for ch := range numConn {
			flows = append(flows, &flow{fs: fs, ch: ch, victim: fs.inChans[ch].Node == vname})
		}
	}
	gate := make(chan struct{})
	var fwg sync.WaitGroup
	for i, fl := range flows {
		fwg.Add(1)
		go func() {
			defer fwg.Done()
			fl.err = echoGated(fl.fs.lan[fl.ch], 512<<10, 4<<20, uint64(1000+i), gate, &fl.halfway)
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
	cons.nodes[victim].Kill()
	killed := time.Now()
	close(gate)
	// What must hold at any load: every channel is served again, no
	// byte is lost and no application sees a silent end (below). How
	// soon is the takeover bound (--takeover 10s), a target under a
	// normal load and a figure s2bench facility measures (3.8-4.9 s
	// here): on a starved machine the live nodes' reconcilers run late
	// (issue 27 saw 12.5 s at a load of 10-60 on two cores), so the
	// test waits six times the bound and logs the time.
	checkAll("after the kill of "+vname, 60*time.Second)
	served := time.Since(killed)
	t.Logf("every channel served again %s after the SIGKILL of %s (the bound, a target, is 10s)", served.Round(time.Millisecond), vname)
	fwg.Wait()
	var victims int
	for _, fl := range flows {
		switch {
		case fl.victim && fl.err == nil:
			t.Errorf("a flow through the killed node (stream %s channel %d) ended without an error", fl.fs.uid, fl.ch)
		case fl.victim:
			victims++
			if !errors.Is(fl.err, syscall.ECONNRESET) && !errors.Is(fl.err, syscall.EPIPE) {
				t.Errorf("a flow through the killed node ended with %v, not a reset", fl.err)
			}
		case fl.err != nil:
			t.Errorf("a flow through a live node (stream %s channel %d) failed: %v", fl.fs.uid, fl.ch, fl.err)
		}
	}
	if victims == 0 || victims == len(flows) {
		t.Fatalf("%d of %d flows went through %s: want some, not all", victims, len(flows), vname)
	}
	app.mu.Lock()
	silent, resets := slices.Clone(app.silent), app.resets
	app.mu.Unlock()
	if len(silent) > 0 {
		t.Fatalf("the consumer saw silent ends: %v", silent)
	}
	if resets < victims {
		t.Errorf("the consumer saw %d resets; %d flows went through the killed node", resets, victims)
	}
	st, err := inC[0].Get(ctx, streams[0].uid)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range st.Channels {
		if c.Node == vname || c.Node == "" {
			t.Fatalf("after the takeover, channel %d of %s is on %q", c.Channel, st.UID, c.Node)
		}
	}

	// The killed node comes back: the channels placed on it return to it
	// once idle, so streams spread over the nodes again.
	cons.nodes[victim] = cons.start(victim, cons.nodes[victim].Opts.ListenerIP)
	inC[victim] = cons.client(victim, tok)
	eventually(t, 20*time.Second, vname+" to serve its channels again", func() bool {
		for _, fs := range streams {
			s, err := inC[0].Get(ctx, fs.uid)
			if err != nil {
				return false
			}
			for ch, c := range s.Channels {
				if c.Node != fs.inChans[ch].Node {
					return false
				}
			}
		}
		return true
	})
	checkAll("after "+vname+" came back", 10*time.Second)

	// Kill a producer-side node: its channels move, and s2uc status
	// shows where.
	pv := 2
	prod.nodes[pv].Kill()
	pname := prod.nodeName(pv)
	eventually(t, 20*time.Second, "the producer facility to take over "+pname+"'s channels", func() bool {
		for _, fs := range streams {
			s, err := outC[0].Get(ctx, fs.uid)
			if err != nil {
				return false
			}
			for _, c := range s.Channels {
				if c.Node == pname || c.Node == "" {
					return false
				}
			}
			fs.lan = s.Listeners
		}
		return true
	})
	checkAll("after the kill of "+pname, 10*time.Second)
	// s2uc status, on any live node, says where each channel listens.
	cmd := exec.Command(bins.s2uc, "status", streams[0].uid, "--s2cs", prod.nodes[0].Addr, "--server_cert", prod.cert)
	cmd.Env = append(os.Environ(), "SCISTREAM_TOKEN="+tok, "SCISTREAM_HOME="+filepath.Join(dir, "home"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("s2uc status: %v: %s", err, out)
	}
	for ch, l := range streams[0].lan {
		if want := fmt.Sprintf(" %d %s on %s-", ch, l, prod.name); !strings.Contains(string(out), want) {
			t.Errorf("s2uc status does not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), pname+";") {
		t.Errorf("s2uc status still names the dead node %s:\n%s", pname, out)
	}

	// A consumer-side node hangs (SIGSTOP: its kernel still completes
	// TCP handshakes, nothing answers them): its lease runs out, the
	// other nodes take its channels, and the producer side's nodes find
	// them there without waiting out a TLS handshake with the hung node
	// (they dial the peer's other nodes after half a second, and again
	// while it stays silent). Each of its ~100 channels would otherwise
	// cost its first connection the 10 s handshake timeout.
	hv := 2
	hname, hpid := cons.nodeName(hv), cons.nodes[hv].PID()
	if err := syscall.Kill(hpid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(hpid, syscall.SIGCONT) })
	hung := time.Now()
	onNode := func(node string, placed bool) func() bool {
		return func() bool {
			for _, fs := range streams {
				s, err := inC[0].Get(ctx, fs.uid)
				if err != nil {
					return false
				}
				for ch, c := range s.Channels {
					if placed && c.Node != fs.inChans[ch].Node || !placed && (c.Node == node || c.Node == "") {
						return false
					}
				}
			}
			return true
		}
	}
	eventually(t, 20*time.Second, "the consumer facility to take over "+hname+"'s channels", onNode(hname, false))
	moved := time.Since(hung)
	took := checkAll("with "+hname+" hung", 20*time.Second)
	t.Logf("%s hung: its channels taken over after %s; every channel then carried an echo within %s", hname, moved.Round(time.Millisecond), took.Round(time.Millisecond))
	// 16 echoes at a time: ~100 channels waiting 10 s each on the hung
	// node would take a minute (70 s measured); half a second each, ~5 s.
	if took > 20*time.Second {
		t.Errorf("with %s hung, every channel carried an echo only after %s: connections waited out the handshake with the hung node", hname, took)
	}
	if err := syscall.Kill(hpid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, hname+" to serve its channels again after it resumed", onNode(hname, true))
	checkAll("after "+hname+" resumed", 10*time.Second)

	// etcd away: control requests answer unavailable, data flows.
	srv.Stop()
	_, err = inC[0].Inbound(ctx, &api.InboundRequest{RemoteIP: "127.0.0.1", ReceiverPorts: []int{app.port()}, NumConn: 1})
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != api.CodeUnavailable {
		t.Fatalf("a create with etcd down: %v; want unavailable", err)
	}
	checkAll("with etcd down", 10*time.Second)
	srv.Restart()
	eventually(t, 30*time.Second, "a create after etcd's return", func() bool {
		_, _, err := client.Wire(ctx, inC[2], outC[0], &api.InboundRequest{RemoteIP: "127.0.0.1", ReceiverPorts: []int{app.port()}, NumConn: 2},
			api.OutboundRequest{NumConn: 2, Allow: []string{"127.0.0.0/8"}}, nil)
		return err == nil
	})
	// Every node's view catches up (its etcd client reconnects with a
	// backoff of up to 2 s): no stream lost, none twice.
	for i, c := range inC {
		var n int
		if !waitfor.Cond(15*time.Second, func() bool {
			l, err := c.List(ctx, false)
			n = len(l)
			return err == nil && n == nStreams+1
		}) {
			t.Fatalf("node %s lists %d live streams; want %d", cons.nodeName(i), n, nStreams+1)
		}
	}
	checkAll("after etcd's return", 10*time.Second)
}

// checkFacilityRate wires a stream of three channels with a granted rate
// through two facilities of three nodes, echoes the same amount on every
// channel at once, and fails if the three together ran faster than the
// grant (a quarter over it allowed for the buckets' burst): one node per
// channel, each pacing at the whole grant, would run them three times as
// fast.
func checkFacilityRate(t *testing.T, ctx context.Context, in, out *client.Client, appPort int) {
	t.Helper()
	const grant = 24_000_000 // bits per second: 3 MB/s
	const each = 1 << 20     // bytes echoed per channel
	inS, outS, err := client.Wire(ctx, in, out, &api.InboundRequest{
		RemoteIP: "127.0.0.1", ReceiverPorts: []int{appPort}, NumConn: 3, Rate: grant,
	}, api.OutboundRequest{NumConn: 3, Rate: grant, Allow: []string{"127.0.0.0/8"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Release(ctx, inS.UID)
	defer out.Release(ctx, outS.UID)
	nodes := map[string]bool{}
	for _, c := range outS.Channels {
		nodes[c.Node] = true
	}
	if len(nodes) != 3 || outS.Rate != grant {
		t.Fatalf("paced stream: channels %+v, rate %d; want one channel on each of three nodes at %d", outS.Channels, outS.Rate, grant)
	}
	start := time.Now()
	errc := make(chan error, len(outS.Listeners))
	for ch, addr := range outS.Listeners {
		go func() { errc <- echoOnce(addr, each, uint64(1000+ch)) }()
	}
	for range outS.Listeners {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	took := time.Since(start)
	least := time.Duration(float64(3*each*8) / (1.25 * grant) * float64(time.Second))
	t.Logf("paced stream: 3 x %d bytes echoed in %s at a grant of %d bit/s (no less than %s allowed)", each, took.Round(time.Millisecond), grant, least.Round(time.Millisecond))
	if took < least {
		t.Fatalf("a stream granted %d bit/s carried %d bytes over its three channels in %s: faster than the grant (at least %s); its nodes each paced at the whole grant", grant, 3*each, took, least)
	}
}

// echoGated sends pre random bytes through addr, marks halfway, waits
// for gate, sends post more, and checks that the echo of all of them
// comes back byte-exact and then ends.
func echoGated(addr string, pre, post int, seed uint64, gate <-chan struct{}, halfway *atomic.Bool) error {
	c, err := dialFrom("", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Minute))
	var hdr [8]byte
	binary.BigEndian.PutUint64(hdr[:], uint64(pre+post))
	sent, echoed := sha256.New(), sha256.New()
	type result struct {
		n   int64
		err error
	}
	readc := make(chan result, 1)
	go func() {
		n, err := io.Copy(echoed, c)
		readc <- result{n, err}
	}()
	r := rand.New(rand.NewPCG(seed, 9))
	send := func(n int) error {
		buf := make([]byte, 32<<10)
		for n > 0 {
			b := buf[:min(n, len(buf))]
			for i := range b {
				b[i] = byte(r.Uint32())
			}
			if _, err := c.Write(b); err != nil {
				return fmt.Errorf("write: %w", err)
			}
			sent.Write(b)
			n -= len(b)
		}
		return nil
	}
	if _, err := c.Write(hdr[:]); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	err = send(pre)
	halfway.Store(true)
	if err == nil {
		<-gate
		err = send(post)
	}
	if err != nil {
		c.Close()
		<-readc
		return err
	}
	c.CloseWrite()
	res := <-readc
	switch {
	case res.err != nil:
		return fmt.Errorf("read: %w", res.err)
	case res.n != int64(pre+post):
		return fmt.Errorf("silent end: the echo ended cleanly after %d of %d bytes", res.n, pre+post)
	case !bytes.Equal(sent.Sum(nil), echoed.Sum(nil)):
		return fmt.Errorf("the echo of %d bytes differs from what was sent", res.n)
	}
	return nil
}
