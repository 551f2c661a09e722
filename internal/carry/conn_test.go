package carry

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"scistream/internal/relay"
	"scistream/internal/waitfor"
)

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t testing.TB) (*net.TCPConn, *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ch := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		ch <- c
	}()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b := <-ch
	if b == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a.(*net.TCPConn), b.(*net.TCPConn)
}

// rig is a connection carried between two gateways' Conns: the
// producer's application (prodApp, its end prodGW at the dialer), the
// consumer's (consApp, consGW at the acceptor), and the legs between
// the two Conns, which the test can cut and replace.
type rig struct {
	t               testing.TB
	dial, acc       *Conn
	prodApp         *net.TCPConn // the producer's end
	consApp         *net.TCPConn // the consumer's end
	dialErr, accErr chan error

	mu   sync.Mutex
	legs [][2]*net.TCPConn // every leg, dialer's end first
}

func newRig(t testing.TB, cfg Config) *rig {
	t.Helper()
	return newRigOf(t, cfg, cfg)
}

// newRigOf is newRig with the dialer's configuration dcfg and the
// acceptor's acfg.
func newRigOf(t testing.TB, dcfg, acfg Config) *rig {
	t.Helper()
	return newRigStriped(t, dcfg, acfg, 1)
}

// newRigStriped is newRigOf of a connection of stripes legs at once
// (stripe_test.go adds them).
func newRigStriped(t testing.TB, dcfg, acfg Config, stripes int) *rig {
	t.Helper()
	r := &rig{t: t, dialErr: make(chan error, 1), accErr: make(chan error, 1)}
	r.dial, r.acc = New(dcfg, true), New(acfg, false)
	r.dial.SetStripes(stripes)
	r.acc.SetStripes(stripes)
	prodApp, prodGW := tcpPair(t)
	consGW, consApp := tcpPair(t)
	relay.ResetOnClose(prodGW)
	relay.ResetOnClose(consGW)
	r.prodApp, r.consApp = prodApp, consApp
	ld, la := r.newLeg()
	// The handshake: open from the dialer, accepted from the acceptor.
	go func() {
		if _, err := ld.Write(AppendOpen(nil, Open{ID: ID{1}, Window: r.dial.Window(), Stripes: uint8(stripes)})); err != nil {
			r.dialErr <- err
			return
		}
		r.dialErr <- r.dial.Relay(prodGW, ld, Counts{})
	}()
	go func() {
		buf := make([]byte, HeaderLen+openLen)
		h, err := ReadHeader(la, buf)
		if err != nil || h.Type != TypeOpen {
			r.accErr <- fmt.Errorf("open: %v %q", err, h.Type)
			return
		}
		io.ReadFull(la, buf[:openLen])
		o, err := ParseOpen(buf[:openLen])
		if err != nil {
			r.accErr <- err
			return
		}
		r.acc.SetPeerWindow(o.Window)
		granted := uint8(0)
		if o.Stripes > 1 {
			granted = o.Stripes
		}
		la.Write(AppendHeader(nil, Header{Type: TypeAccepted, Length: r.acc.Window(), Stripes: granted}))
		r.accErr <- r.acc.Relay(consGW, la, Counts{})
	}()
	return r
}

// newLeg returns a fresh leg's two ends.
func (r *rig) newLeg() (*net.TCPConn, *net.TCPConn) {
	a, b := tcpPair(r.t)
	r.mu.Lock()
	r.legs = append(r.legs, [2]*net.TCPConn{a, b})
	r.mu.Unlock()
	return a, b
}

// cut resets the current leg at both ends, as a middlebox that lost its
// state would.
func (r *rig) cut() {
	r.mu.Lock()
	l := r.legs[len(r.legs)-1]
	r.mu.Unlock()
	relay.Abort(l[0])
	relay.Abort(l[1])
}

// resume gives both Conns a new leg, as the join handshake would: each
// is told the other's received position.
func (r *rig) resume() error {
	d, a := r.newLeg()
	dr, ar := r.dial.Received(), r.acc.Received()
	if err := r.acc.Resume(a, dr, r.dial.Room(), nil); err != nil {
		return err
	}
	return r.dial.Resume(d, ar, r.acc.Room(), nil)
}

// send writes n random bytes to c in chunks, then half-closes; it
// returns their digest.
func send(c *net.TCPConn, n int, errc chan<- error) [32]byte {
	h := sha256.New()
	buf := make([]byte, 64<<10)
	data := make(chan []byte, 4)
	go func() {
		defer close(data)
		for left := n; left > 0; {
			k := min(left, len(buf))
			b := make([]byte, k)
			rand.Read(b)
			data <- b
			left -= k
		}
	}()
	var all [][]byte
	for b := range data {
		h.Write(b)
		all = append(all, b)
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	go func() {
		for _, b := range all {
			if _, err := c.Write(b); err != nil {
				errc <- err
				return
			}
		}
		errc <- c.CloseWrite()
	}()
	return sum
}

// recvAll reads c to its end and returns the digest and count.
func recvAll(c net.Conn) ([32]byte, int64, error) {
	h := sha256.New()
	n, err := io.Copy(h, c)
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum, n, err
}

// TestBothWaysInOrder: bytes both ways at once, each ended with a
// half-close, arrive whole and in order, and both Conns end in order.
func TestBothWaysInOrder(t *testing.T) {
	r := newRig(t, Config{Window: 1 << 20})
	sent := make(chan error, 2)
	up := send(r.prodApp, 20<<20, sent)
	down := send(r.consApp, 7<<20, sent)
	type got struct {
		sum [32]byte
		n   int64
		err error
	}
	gc, gp := make(chan got, 1), make(chan got, 1)
	go func() { s, n, err := recvAll(r.consApp); gc <- got{s, n, err} }()
	go func() { s, n, err := recvAll(r.prodApp); gp <- got{s, n, err} }()
	c, p := <-gc, <-gp
	if c.err != nil || c.n != 20<<20 || c.sum != up {
		t.Fatalf("consumer got %d bytes (%v), digest match %v", c.n, c.err, c.sum == up)
	}
	if p.err != nil || p.n != 7<<20 || p.sum != down {
		t.Fatalf("producer got %d bytes (%v), digest match %v", p.n, p.err, p.sum == down)
	}
	for range 2 {
		if err := <-sent; err != nil {
			t.Fatal(err)
		}
	}
	if err := <-r.dialErr; err != nil {
		t.Fatalf("dialer: %v", err)
	}
	if err := <-r.accErr; err != nil {
		t.Fatalf("acceptor: %v", err)
	}
}

// TestResumeAfterCuts: the leg is reset under a transfer both ways,
// five times; each time both sides get a new leg, and every byte
// arrives once, in order, with neither application reset.
func TestResumeAfterCuts(t *testing.T) {
	r := newRig(t, Config{Window: 512 << 10, ResumeWindow: 10 * time.Second})
	sent := make(chan error, 2)
	up := send(r.prodApp, 64<<20, sent)
	down := send(r.consApp, 16<<20, sent)
	type got struct {
		sum [32]byte
		n   int64
		err error
	}
	gc, gp := make(chan got, 1), make(chan got, 1)
	var cmu sync.Mutex
	var cn int64
	counted := &countingConn{Conn: r.consApp, n: &cn, mu: &cmu}
	go func() { s, n, err := recvAll(counted); gc <- got{s, n, err} }()
	go func() { s, n, err := recvAll(r.prodApp); gp <- got{s, n, err} }()
	for i := range 5 {
		// Cut once a fifth more has arrived.
		want := int64(i+1) * (64 << 20) / 6
		waitfor.Must(t, 30*time.Second, "the consumer to read more", func() bool {
			cmu.Lock()
			defer cmu.Unlock()
			return cn >= want
		})
		r.cut()
		waitParked(t, r.dial)
		waitParked(t, r.acc)
		if err := r.resume(); err != nil {
			t.Fatalf("resume %d: %v", i, err)
		}
	}
	c, p := <-gc, <-gp
	if c.err != nil || c.n != 64<<20 || c.sum != up {
		t.Fatalf("consumer got %d bytes (%v), digest match %v", c.n, c.err, c.sum == up)
	}
	if p.err != nil || p.n != 16<<20 || p.sum != down {
		t.Fatalf("producer got %d bytes (%v), digest match %v", p.n, p.err, p.sum == down)
	}
	if err := <-r.dialErr; err != nil {
		t.Fatalf("dialer: %v", err)
	}
	if err := <-r.accErr; err != nil {
		t.Fatalf("acceptor: %v", err)
	}
}

// waitParked waits until c lost its leg.
func waitParked(t testing.TB, c *Conn) {
	t.Helper()
	waitfor.Must(t, 10*time.Second, "the connection to notice the lost leg", func() bool { p, _ := c.Parked(); return p })
}

type countingConn struct {
	net.Conn
	mu *sync.Mutex
	n  *int64
}

func (c *countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.mu.Lock()
	*c.n += int64(n)
	c.mu.Unlock()
	return n, err
}

// TestResumeWindowRunsOut: a leg lost and never replaced: past the
// window both applications are reset, and both Conns say why.
func TestResumeWindowRunsOut(t *testing.T) {
	r := newRig(t, Config{ResumeWindow: 300 * time.Millisecond})
	r.prodApp.Write([]byte("hello"))
	buf := make([]byte, 5)
	if _, err := io.ReadFull(r.consApp, buf); err != nil {
		t.Fatal(err)
	}
	r.cut()
	for _, c := range []struct {
		name string
		errc chan error
		app  *net.TCPConn
	}{{"dialer", r.dialErr, r.prodApp}, {"acceptor", r.accErr, r.consApp}} {
		err := <-c.errc
		if !errors.Is(err, ErrResumeWindow) {
			t.Errorf("%s ended with %v, want the resume window's end", c.name, err)
		}
		c.app.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.app.Read(buf); err == nil || errors.Is(err, io.EOF) {
			t.Errorf("%s's application read %v, want a reset", c.name, err)
		}
	}
}

// TestAppResetReachesPeer: an application that resets its connection:
// the other application is reset, not ended in order.
func TestAppResetReachesPeer(t *testing.T) {
	r := newRig(t, Config{ResumeWindow: 10 * time.Second})
	r.prodApp.Write([]byte("x"))
	if _, err := io.ReadFull(r.consApp, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	relay.Abort(r.prodApp)
	r.consApp.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := r.consApp.Read(make([]byte, 1))
	if err == nil || errors.Is(err, io.EOF) {
		t.Fatalf("the consumer read %v after the producer's reset, want a reset", err)
	}
	var re *relay.Error
	if err := <-r.dialErr; !errors.As(err, &re) || re.Conn != relay.A {
		t.Errorf("dialer: %v, want its application's failure", err)
	}
	if err := <-r.accErr; !errors.As(err, &re) || re.Conn != relay.B {
		t.Errorf("acceptor: %v, want the peer's reset", err)
	}
}

// freezableRig is a rig whose first leg passes through a relay the test
// can freeze (freeze): from then on it holds everything, silent, without
// closing, as a middlebox that drops every packet does. accepted is
// closed once the dialer has the acceptor's answer.
func freezableRig(t *testing.T, cfg Config) (r *rig, freeze func(), accepted <-chan struct{}) {
	t.Helper()
	r = &rig{t: t, dialErr: make(chan error, 1), accErr: make(chan error, 1)}
	acc := make(chan struct{})
	dcfg := cfg
	dcfg.OnAccepted = func() { close(acc) }
	r.dial, r.acc = New(dcfg, true), New(cfg, false)
	prodApp, prodGW := tcpPair(t)
	consGW, consApp := tcpPair(t)
	r.prodApp, r.consApp = prodApp, consApp
	ld, lx := tcpPair(t)
	ly, la := tcpPair(t)
	var frozen sync.WaitGroup
	frozen.Add(1)
	t.Cleanup(frozen.Done)
	stop := make(chan struct{})
	var once sync.Once
	fwd := func(dst, src net.Conn) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			select {
			case <-stop:
				frozen.Wait() // hold everything: silence, no close
				return
			default:
			}
			if err != nil {
				return
			}
			dst.Write(buf[:n])
		}
	}
	go fwd(ly, lx)
	go fwd(lx, ly)
	go func() {
		ld.Write(AppendOpen(nil, Open{ID: ID{2}, Window: r.dial.Window(), Stripes: 1}))
		r.dialErr <- r.dial.Relay(prodGW, ld, Counts{})
	}()
	go func() {
		buf := make([]byte, HeaderLen+openLen)
		ReadHeader(la, buf)
		io.ReadFull(la, buf[:openLen])
		la.Write(AppendHeader(nil, Header{Type: TypeAccepted, Length: r.acc.Window()}))
		r.accErr <- r.acc.Relay(consGW, la, Counts{})
	}()
	return r, func() { once.Do(func() { close(stop) }) }, acc
}

// TestSilentLeg: a leg that stops carrying anything without closing (a
// middlebox that drops every packet) is taken for lost after
// LegTimeout, and the connection resumes on a new one.
func TestSilentLeg(t *testing.T) {
	r, freeze, accepted := freezableRig(t, Config{ResumeWindow: 10 * time.Second, LegTimeout: 500 * time.Millisecond})
	r.prodApp.Write([]byte("before"))
	if _, err := io.ReadFull(r.consApp, make([]byte, 6)); err != nil {
		t.Fatal(err)
	}
	<-accepted // (a connection never accepted is not resumed: it is reset)
	freeze()
	r.prodApp.Write(bytes.Repeat([]byte("during"), 1000))
	waitParked(t, r.dial)
	if err := r.resume(); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 6000)
	r.consApp.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(r.consApp, got); err != nil || !bytes.Equal(got, bytes.Repeat([]byte("during"), 1000)) {
		t.Fatalf("after the silent leg the consumer read %v", err)
	}
	r.prodApp.Close()
	r.consApp.Close()
}

// TestIdleLegKeptAlive: an idle leg stays (the dialer's pings and their
// answers) for many KeepAlives; once its path goes silent, the side that
// only receives (the acceptor, with nothing in flight) takes it for lost
// too, within KeepAlive plus LegTimeout, and with no leg back within the
// window both applications are reset. Without the acceptor's own bound
// the consumer would wait for ever on a path that is gone.
func TestIdleLegKeptAlive(t *testing.T) {
	// Margins a starved machine keeps: the acceptor's bound (1.75 s)
	// is seven pings (250 ms apart) long.
	cfg := Config{ResumeWindow: 300 * time.Millisecond, LegTimeout: 1500 * time.Millisecond, KeepAlive: 250 * time.Millisecond}
	r, freeze, accepted := freezableRig(t, cfg)
	r.prodApp.Write([]byte("before"))
	if _, err := io.ReadFull(r.consApp, make([]byte, 6)); err != nil {
		t.Fatal(err)
	}
	<-accepted
	// Idle for sixteen KeepAlives (more than twice the acceptor's
	// bound): neither side parks (a parked side ends within its window,
	// 300 ms).
	select {
	case err := <-r.dialErr:
		t.Fatalf("the dialer ended on an idle leg of a live path: %v", err)
	case err := <-r.accErr:
		t.Fatalf("the acceptor ended on an idle leg of a live path: %v", err)
	case <-time.After(16 * cfg.KeepAlive):
	}
	for _, c := range []*Conn{r.dial, r.acc} {
		if p, _ := c.Parked(); p || c.Stats().Parked != 0 {
			t.Fatalf("an idle leg on a live path was taken for lost (dialer %v)", c == r.dial)
		}
	}
	r.prodApp.Write([]byte("still"))
	if _, err := io.ReadFull(r.consApp, make([]byte, 5)); err != nil {
		t.Fatal(err)
	}
	freeze()
	for _, side := range []struct {
		name string
		errc chan error
		app  net.Conn
	}{{"acceptor", r.accErr, r.consApp}, {"dialer", r.dialErr, r.prodApp}} {
		select {
		case err := <-side.errc:
			if !errors.Is(err, ErrResumeWindow) {
				t.Errorf("%s ended with %v, want the resume window's end", side.name, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("the %s never noticed the silent idle leg", side.name)
		}
		side.app.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := side.app.Read(make([]byte, 1)); err == nil || err == io.EOF || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("the %s's application read %v, want a reset", side.name, err)
		}
	}
}

// TestSlowReaderDecoupled: the producer's application sends 32 MiB and
// reads nothing until it is done, while the consumer sends it 32 MiB
// too: the consumer's bytes wait at the producer's gateway, within its
// window, and do not hold up the producer's (the acknowledgements of the
// producer's bytes keep coming). Then everything arrives.
func TestSlowReaderDecoupled(t *testing.T) {
	budget := NewBudget(0)
	r := newRig(t, Config{Window: 1 << 20, Budget: budget})
	sent := make(chan error, 2)
	up := send(r.prodApp, 32<<20, sent)
	down := send(r.consApp, 32<<20, sent)
	sum, n, err := recvAll(r.consApp)
	if err != nil || n != 32<<20 || sum != up {
		t.Fatalf("consumer got %d bytes (%v) while the producer read nothing", n, err)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	sum, n, err = recvAll(r.prodApp)
	if err != nil || n != 32<<20 || sum != down {
		t.Fatalf("producer got %d bytes (%v); dialer %v, acceptor %v", n, err, <-r.dialErr, <-r.accErr)
	}
	<-sent
	if err := <-r.dialErr; err != nil {
		t.Fatal(err)
	}
	if err := <-r.accErr; err != nil {
		t.Fatal(err)
	}
	if now, peak := budget.Held(); now != 0 || peak > 6<<20 {
		t.Fatalf("buffers held %d at the end, %d at most; want 0, and at most four windows with their chunks", now, peak)
	}
}

// TestBudgetBoundsSenders: the gateway's budget (s2cs --resume_buffer)
// bounds what a sender holds, below its window: the producer's
// gateway, with a budget of 1 MiB and a window of 8, never holds more
// than 1 MiB of the producer's bytes, and all 32 MiB arrive. (Before,
// a sender took its chunks whatever the budget held: a gateway with
// --resume_buffer 128MiB held 703 MB under 1,000 connections.)
func TestBudgetBoundsSenders(t *testing.T) {
	budget := NewBudget(1 << 20)
	r := newRigOf(t, Config{Window: 8 << 20, Budget: budget}, Config{Window: 8 << 20})
	sent := make(chan error, 1)
	up := send(r.prodApp, 32<<20, sent)
	r.consApp.CloseWrite()
	sum, n, err := recvAll(r.consApp)
	if err != nil || n != 32<<20 || sum != up {
		t.Fatalf("consumer got %d bytes (%v)", n, err)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	if err := <-r.dialErr; err != nil {
		t.Fatal(err)
	}
	if err := <-r.accErr; err != nil {
		t.Fatal(err)
	}
	if now, peak := budget.Held(); now != 0 || peak > 1<<20 {
		t.Fatalf("the sender held %d at the end, %d at most; want 0, and at most its budget of 1 MiB", now, peak)
	}
}

// TestAppResetMidTransfer: the consumer's application resets its
// connection while the producer's bytes stream in: the producer's
// gateway hears it as the peer's reset (its write may meet the leg's
// end first: the reset frame waiting to be read still says why), and
// does not park the connection to resume it, twenty times over.
func TestAppResetMidTransfer(t *testing.T) {
	for i := 0; i < 20; i++ {
		r := newRig(t, Config{ResumeWindow: 5 * time.Second})
		sent := make(chan error, 1)
		send(r.prodApp, 64<<20, sent)
		io.CopyN(io.Discard, r.consApp, 4<<20)
		relay.Abort(r.consApp)
		select {
		case err := <-r.dialErr:
			if !strings.Contains(err.Error(), "reset the connection") {
				t.Fatalf("%d: the producer's gateway ended with %v, want the peer's reset", i, err)
			}
		case <-time.After(4 * time.Second):
			p, _ := r.dial.Parked()
			t.Fatalf("%d: the producer's gateway did not end (parked %v)", i, p)
		}
		var re *relay.Error
		if err := <-r.accErr; !errors.As(err, &re) {
			t.Fatal(err)
		}
	}
}
