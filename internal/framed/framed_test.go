package framed

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"scistream/internal/api"
	"scistream/internal/carry"
	"scistream/internal/relay"
	"scistream/internal/wan"
	"scistream/internal/wan/wantest"
)

// legs is an acceptor of framed TLS legs of one stream on loopback, as
// the inbound gateway's listener is, and the dialer's leg.
type legs struct {
	dial, accept *wan.Leg
	addr         string
	next         func(testing.TB) wantest.Accepted
}

func newLegs(t *testing.T) *legs {
	t.Helper()
	d, a := wantest.Legs(t, api.WANTLS)
	addr, next := wantest.AcceptLegs(t, a)
	return &legs{dial: d, accept: a, addr: addr, next: next}
}

func (l *legs) dialLeg(ctx context.Context) (net.Conn, error) { return wan.Dial(ctx, l.addr, l.dial) }

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (*net.TCPConn, *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ch := make(chan net.Conn, 1)
	go func() { c, _ := ln.Accept(); ch <- c }()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b := <-ch
	t.Cleanup(func() { a.Close(); b.Close() })
	return a.(*net.TCPConn), b.(*net.TCPConn)
}

// conn is one application connection through Out and a Table.
type conn struct {
	prodApp, consApp *net.TCPConn
	outErr, inErr    chan error
	table            *Table
	legs             []net.Conn // the acceptor's ends, first leg first
}

// open starts a connection over l: Out on the dialer's side, the table's
// Open on the acceptor's; later legs that come are served as joins.
func open(t *testing.T, l *legs, cfg Config) *conn { return openLive(t, l, cfg, cfg) }

// openLive is open with a configuration for each side.
func openLive(t *testing.T, l *legs, ocfg, icfg Config) *conn {
	t.Helper()
	return openWith(t, l, ocfg, icfg, Hooks{})
}

// openWith is openLive with the outbound connection's hooks oh.
func openWith(t *testing.T, l *legs, ocfg, icfg Config, oh Hooks) *conn {
	t.Helper()
	c := &conn{outErr: make(chan error, 1), inErr: make(chan error, 1), table: &Table{}}
	prodApp, prodGW := tcpPair(t)
	consGW, consApp := tcpPair(t)
	c.prodApp, c.consApp = prodApp, consApp
	w, err := l.dialLeg(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	go func() { c.outErr <- Out(context.Background(), ocfg, prodGW, w, l.dial.Secret, l.dialLeg, oh) }()
	a := l.next(t)
	if a.Err != nil {
		t.Fatal(a.Err)
	}
	h, o, _, err := First(a.Conn)
	if err != nil || h.Type != carry.TypeOpen {
		t.Fatalf("first frame %q: %v", h.Type, err)
	}
	c.legs = append(c.legs, a.Conn)
	go func() {
		c.inErr <- c.table.Open(context.Background(), icfg, a.Conn, consGW, o, l.accept.Secret, Hooks{})
	}()
	return c
}

// joined is a leg served as a join, or why it was not taken.
type joined struct {
	leg net.Conn
	err error
}

// serveJoins serves the legs that come next as joins (or stripes), until
// n came.
func (c *conn) serveJoins(t *testing.T, l *legs, n int) chan joined {
	out := make(chan joined, n)
	go func() {
		for range n {
			a := l.next(t)
			if a.Err != nil {
				out <- joined{err: a.Err}
				continue
			}
			h, _, j, err := First(a.Conn)
			switch {
			case err == nil && h.Type == carry.TypeStripe:
				err = c.table.Stripe(a.Conn, h, j)
			case err == nil:
				err = c.table.Join(a.Conn, h, j)
			}
			out <- joined{a.Conn, err}
		}
	}()
	return out
}

// TestOutJoinsOverTLS: a connection over pinned TLS legs whose leg is
// reset three times is joined by a new one each time, and every byte
// arrives once, in order, with neither application reset.
func TestOutJoinsOverTLS(t *testing.T) {
	l := newLegs(t)
	c := open(t, l, Config{ResumeWindow: 10 * time.Second, Window: 1 << 20})
	joins := c.serveJoins(t, l, 3)
	data := make([]byte, 24<<20)
	rand.Read(data)
	go func() {
		c.prodApp.Write(data)
		c.prodApp.CloseWrite()
	}()
	got := make(chan []byte, 1)
	go func() { b, _ := io.ReadAll(c.consApp); got <- b }()
	latest := c.legs[0]
	for i := range 3 {
		// Cut the acceptor's end of the latest leg (a reset both ways).
		time.Sleep(20 * time.Millisecond) // between cuts, some bytes pass: the fault's own timing
		relay.Abort(latest)
		j := <-joins
		if j.err != nil {
			t.Fatalf("join %d: %v", i, j.err)
		}
		latest = j.leg
	}
	b := <-got
	if !bytes.Equal(b, data) {
		t.Fatalf("the consumer got %d bytes, equal %v; want the %d sent", len(b), bytes.Equal(b, data), len(data))
	}
	c.consApp.CloseWrite()
	if err := <-c.outErr; err != nil {
		t.Fatalf("outbound: %v", err)
	}
	if err := <-c.inErr; err != nil {
		t.Fatalf("inbound: %v", err)
	}
}

// TestJoinRefused: legs that cannot take a connection over are refused,
// "no such connection" whatever the reason, and the connection they
// aimed at carries on untouched: a stranger's join (the stream's pinned
// key and secret, but no resume key: a made-up proof), a replay of the
// dialer's real join on another leg (the proof covers its own leg's
// session only), a join of an ID that does not exist.
func TestJoinRefused(t *testing.T) {
	l := newLegs(t)
	c := open(t, l, Config{ResumeWindow: 10 * time.Second})
	c.prodApp.Write([]byte("before"))
	buf := make([]byte, 6)
	if _, err := io.ReadFull(c.consApp, buf); err != nil {
		t.Fatal(err)
	}
	var id carry.ID
	c.table.mu.Lock()
	for k := range c.table.m {
		id = k
	}
	key := c.table.m[id].key
	c.table.mu.Unlock()

	attempt := func(name string, proof func(binding []byte) [32]byte, jid carry.ID) {
		t.Helper()
		nl, err := l.dialLeg(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer nl.Close()
		res := make(chan error, 1)
		go func() {
			a := l.next(t)
			h, _, j, err := First(a.Conn)
			if err != nil {
				res <- err
				return
			}
			res <- c.table.Join(a.Conn, h, j)
		}()
		_, _, jerr := join(nl, carry.AppendJoin(nil, carry.Join{ID: jid, Proof: proof(wan.BindingOf(nl)), Window: 1 << 20}, 0))
		nl.Close() // (the refusing side reads until the dialer ends the leg)
		var re *carry.RefusedError
		if !errors.As(jerr, &re) || re.Reason != "no such connection on this stream (it ended, or never was)" {
			t.Errorf("%s: the dialer heard %v; want the refusal that names nothing", name, jerr)
		}
		if err := <-res; err == nil {
			t.Errorf("%s: the join was taken", name)
		}
	}
	attempt("stranger", func([]byte) [32]byte { var p [32]byte; rand.Read(p[:]); return p }, id)
	// The real proof, made for one leg, replayed on another.
	first, err := l.dialLeg(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	go l.next(t) // accepted, never used
	real := wan.JoinProof(key, wan.BindingOf(first), id)
	first.Close()
	attempt("replay", func([]byte) [32]byte { return real }, id)
	attempt("unknown id", func(b []byte) [32]byte { return wan.JoinProof(key, b, carry.ID{9}) }, carry.ID{9})

	// The connection carries on.
	c.prodApp.Write([]byte("after"))
	buf = make([]byte, 5)
	c.consApp.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c.consApp, buf); err != nil || string(buf) != "after" {
		t.Fatalf("after the refused joins the connection read %q, %v", buf, err)
	}
	c.prodApp.CloseWrite()
	c.consApp.CloseWrite()
	io.Copy(io.Discard, c.consApp)
	io.Copy(io.Discard, c.prodApp)
	<-c.outErr
	<-c.inErr
}

// TestAnotherStreamsPeer: the peer of another stream of the same
// gateways (its own pinned keys and secret) cannot join: its preface
// does not prove this stream's secret, so its leg is refused before any
// frame, as wan's checks of every leg do.
func TestAnotherStreamsPeer(t *testing.T) {
	l := newLegs(t)
	other := *l.dial
	other.Secret = wan.NewSecret()
	if _, err := wan.Dial(context.Background(), l.addr, &other); err != nil {
		t.Fatal(err) // the dial itself completes: TLS 1.3's dialer finishes first
	}
	if a := l.next(t); a.Err == nil || !errors.Is(a.Err, wan.ErrBadSecret) {
		t.Fatalf("a leg with another stream's secret: %v; want it refused for its secret", a.Err)
	}
}
