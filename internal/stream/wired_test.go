package stream

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"scistream/internal/api"
	"scistream/internal/certs"
	"scistream/internal/egress"
	"scistream/internal/legpool"
	"scistream/internal/pace"
	"scistream/internal/ports"
	"scistream/internal/relay"
	"scistream/internal/store"
	"scistream/internal/strangers"
	"scistream/internal/waitfor"
	"scistream/internal/wan"
)

// wiredPair is an inbound and an outbound stream of one UID on this
// process's loopback, wired to each other as two gateways' would be,
// in front of an echoing application; told counts, per role, the calls
// of Env.Settled.
type wiredPair struct {
	in, out *Stream
	told    map[api.Role]*atomic.Int64
}

// newWiredPair starts the two streams over transport wanT (pool: the
// outbound side's wan_pool); target, if not empty, replaces the inbound
// listener the outbound side dials.
func newWiredPair(t *testing.T, wanT string, pool int, target string) *wiredPair {
	t.Helper()
	ip := fmt.Sprintf("127.%d.%d.%d", 1+rand.N(250), 1+rand.N(250), 1+rand.N(250)) // apart from other runs' ports
	id, _, _, err := certs.LoadOrGenerate(t.TempDir(), []string{ip})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := relay.New(relay.Options{})
	if err != nil {
		t.Fatal(err)
	}
	splice, _ := eng.Get("splice")
	log := slog.New(slog.DiscardHandler)
	loop := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	p := &wiredPair{told: map[api.Role]*atomic.Int64{api.RoleInbound: {}, api.RoleOutbound: {}}}
	env := &Env{
		Log: log, Alloc: ports.New(ip, ports.Range{Lo: 5100, Hi: 5120}), Cert: &id.TLS,
		Strangers: strangers.New(strangers.Limits{}, log, time.Now()),
		Targets:   egress.New(loop, "--allow_targets", &egress.Self{}), Peers: egress.New(loop, "--allow_peers", &egress.Self{}),
		Legs: legpool.New(legpool.Config{}, log), Files: NewSlots(0), BestEffort: pace.NewBestEffort(0), Paceable: splice,
		Settled: func(st *Stream) { p.told[st.Role].Add(1) },
	}
	app, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { app.Close() })
	go echo(app)
	secret := wan.NewSecret()
	base := store.Record{UID: "0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b6c", Owner: "alice", State: api.StateWired, NumConn: 1, WAN: wanT,
		Secret: secret, PeerCertSHA256: id.SHA256, Created: time.Now()}
	start := func(rec *store.Record, udp bool) *Stream {
		listen := env.Alloc.Listen
		if udp {
			listen = env.Alloc.ListenWithUDP
		}
		lns, err := listen(1)
		if err != nil {
			t.Fatal(err)
		}
		st, err := New(context.Background(), env, rec, lns, splice)
		if err != nil {
			t.Fatal(err)
		}
		st.Start()
		t.Cleanup(st.Stop)
		return st
	}
	in := base
	in.Role, in.Targets = api.RoleInbound, []string{app.Addr().String()}
	p.in = start(&in, wanT == api.WANQUIC)
	out := base
	out.Role, out.Allow, out.WANPool = api.RoleOutbound, []string{"127.0.0.0/8"}, pool
	out.Targets = p.in.ListenerAddrs()
	if target != "" {
		out.Targets = []string{target}
	}
	p.out = start(&out, false)
	return p
}

// echo answers every connection to ln with what it read, until ln closes.
func echo(ln *net.TCPListener) {
	for {
		c, err := ln.AcceptTCP()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			io.Copy(c, c)
			c.CloseWrite()
		}()
	}
}

// roundTrip sends msg through the outbound side's listener and returns
// what came back before the end of stream.
func (p *wiredPair) roundTrip(msg string) (string, error) {
	c, err := net.DialTimeout("tcp", p.out.ListenerAddrs()[0], 10*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(c, msg); err != nil {
		return "", err
	}
	c.(*net.TCPConn).CloseWrite()
	b, err := io.ReadAll(c)
	return string(b), err
}

func (p *wiredPair) states() (in, out api.State) {
	return p.in.Record().State, p.out.Record().State
}

// TestConnectedOnce: a wired stream goes connected on each side at the
// first connection whose data leg worked there (outbound: its WAN leg's
// handshake with the peer; inbound: the dial of the application), over
// every kind of WAN leg; many connections at once flip it, and tell the
// gateway, exactly once per side. Warm pooled legs dialed before any
// connection do not count: no application's data has used them.
func TestConnectedOnce(t *testing.T) {
	for _, c := range []struct {
		name string
		wan  string
		pool int
	}{
		{"tls", api.WANTLS, 0},
		{"tcp", api.WANTCP, 0},
		{"quic", api.WANQUIC, 0},
		{"tls pooled", api.WANTLS, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := newWiredPair(t, c.wan, c.pool, "")
			if c.pool > 0 {
				waitfor.Must(t, 10*time.Second, "the warm legs", func() bool { return p.out.Stats().LegsIdle == int64(c.pool) })
			}
			if in, out := p.states(); in != api.StateWired || out != api.StateWired || p.in.dataOK.Load() || p.out.dataOK.Load() {
				t.Fatalf("before any connection: inbound %s, outbound %s; want both wired", in, out)
			}
			const n = 24
			var wg sync.WaitGroup
			errs := make(chan error, n)
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					msg := fmt.Sprintf("connection %d", i)
					if got, err := p.roundTrip(msg); err != nil || got != msg {
						errs <- fmt.Errorf("connection %d: got %q, %v", i, got, err)
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			if in, out := p.states(); in != api.StateConnected || out != api.StateConnected {
				t.Errorf("after %d connections: inbound %s, outbound %s; want both connected", n, in, out)
			}
			for _, r := range []api.Role{api.RoleInbound, api.RoleOutbound} {
				if k := p.told[r].Load(); k != 1 {
					t.Errorf("the %s side told the gateway %d times that it went connected, want once", r, k)
				}
			}
			// A record from before the first data (an older write,
			// mirrored back) does not take the state back, and is
			// told once more, for the gateway to store again.
			old := p.out.Record()
			old.State = api.StateWired
			p.out.SetRecord(old)
			if s := p.out.Record().State; s != api.StateConnected || p.told[api.RoleOutbound].Load() != 2 {
				t.Errorf("a wired record set on a connected stream: %s, told %d times; want connected, told twice", s, p.told[api.RoleOutbound].Load())
			}
		})
	}
}

// TestWiredWrongPeer: an outbound stream given a peer listener nothing
// listens on stays wired (as does the inbound side, which no leg
// reaches), with the failed dial in its last errors; nobody is told it
// went connected.
func TestWiredWrongPeer(t *testing.T) {
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	p := newWiredPair(t, api.WANTLS, 0, closed)
	for i := range 3 {
		if got, err := p.roundTrip("hello"); err == nil && got != "" {
			t.Fatalf("connection %d through a wrong peer listener answered %q", i, got)
		}
	}
	waitfor.Must(t, 10*time.Second, "the failed dials to be counted", func() bool {
		return p.out.Stats().AbortedByKind[api.EndDialFailed] == 3
	})
	if in, out := p.states(); in != api.StateWired || out != api.StateWired {
		t.Errorf("after connections to a wrong peer listener: inbound %s, outbound %s; want both wired", in, out)
	}
	if k := p.told[api.RoleInbound].Load() + p.told[api.RoleOutbound].Load(); k != 0 {
		t.Errorf("told %d times that a side went connected, want never", k)
	}
	if l := p.out.Stats().LastErrors[api.EndDialFailed]; l.Reason == "" {
		t.Errorf("no last failed dial in the outbound side's stats")
	}
}
