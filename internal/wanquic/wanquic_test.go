package wanquic_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"scistream/internal/api"
	"scistream/internal/leakcheck"
	"scistream/internal/loopback"
	"scistream/internal/relay"
	"scistream/internal/relay/relaytest"
	"scistream/internal/wan"
	"scistream/internal/wan/wantest"
	"scistream/internal/wanquic"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// quicLegs returns a matching dialer and acceptor leg pair for the quic
// transport, each pinning the other's fresh certificate.
func quicLegs(t testing.TB) (dial, accept *wan.Leg) {
	t.Helper()
	return wantest.Legs(t, api.WANQUIC)
}

type rejects struct {
	mu   sync.Mutex
	errs []error
	ch   chan struct{}
}

func newRejects() *rejects { return &rejects{ch: make(chan struct{}, 64)} }

func (r *rejects) add(_ net.Addr, err error) {
	r.mu.Lock()
	r.errs = append(r.errs, err)
	r.mu.Unlock()
	select {
	case r.ch <- struct{}{}:
	default:
	}
}

// wait returns the first rejection, waiting up to wantest.Timeout.
func (r *rejects) wait(t *testing.T) error {
	t.Helper()
	select {
	case <-r.ch:
	case <-time.After(wantest.Timeout):
		t.Fatal("no rejection reported")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.errs[0]
}

// quicListen binds a UDP socket on loopback and listens for l on it.
func quicListen(t testing.TB, l *wan.Leg, cfg wanquic.Config) (*wanquic.Listener, *net.UDPConn) {
	t.Helper()
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	ql, err := wanquic.Listen(udp, l, cfg)
	if err != nil {
		udp.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { ql.Close(); udp.Close() })
	return ql, udp
}

func quicDialer(t testing.TB, cfg wanquic.Config) *wanquic.Dialer {
	d := wanquic.NewDialer(cfg)
	t.Cleanup(func() { d.Close() })
	return d
}

func quicDial(t testing.TB, d *wanquic.Dialer, addr string, l *wan.Leg) (net.Conn, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wantest.Timeout)
	defer cancel()
	c, err := d.Dial(ctx, addr, l)
	if c != nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, err
}

func quicAccept(t testing.TB, ql *wanquic.Listener) net.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wantest.Timeout)
	defer cancel()
	c, err := ql.Accept(ctx)
	if err != nil {
		t.Fatalf("Accept: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// quicPair returns the two ends of one authenticated QUIC stream.
func quicPair(t testing.TB, cfg wanquic.Config) (dc, ac net.Conn, ql *wanquic.Listener, udp *net.UDPConn, d *wanquic.Dialer) {
	t.Helper()
	dl, al := quicLegs(t)
	ql, udp = quicListen(t, al, cfg)
	d = quicDialer(t, cfg)
	dc, err := quicDial(t, d, udp.LocalAddr().String(), dl)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	return dc, quicAccept(t, ql), ql, udp, d
}

// TestQUICHalfClose: bytes both ways, and each direction ends on its own:
// the dialer's FIN reads as EOF at the acceptor while the acceptor can
// still answer, and the answer ends with EOF too.
func TestQUICHalfClose(t *testing.T) {
	dc, ac, _, _, _ := quicPair(t, wanquic.Config{})
	up := bytes.Repeat([]byte("dialer->acceptor "), 64<<10)
	go func() { dc.Write(up); dc.(interface{ CloseWrite() error }).CloseWrite() }()
	ac.SetReadDeadline(time.Now().Add(wantest.Timeout))
	got, err := io.ReadAll(ac)
	if err != nil || !bytes.Equal(got, up) {
		t.Fatalf("acceptor read %d/%d bytes, err %v; want all then EOF", len(got), len(up), err)
	}
	down := bytes.Repeat([]byte("reply "), 32<<10)
	if _, err := ac.Write(down); err != nil {
		t.Fatalf("acceptor write after the dialer's FIN: %v", err)
	}
	wantest.CloseWrite(t, ac)
	dc.SetReadDeadline(time.Now().Add(wantest.Timeout))
	got, err = io.ReadAll(dc)
	if err != nil || !bytes.Equal(got, down) {
		t.Fatalf("dialer read %d/%d bytes, err %v; want all then EOF", len(got), len(down), err)
	}
}

// TestQUICHalfCloseFromAcceptor: the other way round.
func TestQUICHalfCloseFromAcceptor(t *testing.T) {
	dc, ac, _, _, _ := quicPair(t, wanquic.Config{})
	dc.Write([]byte("hello"))
	if b, err := wantest.ReadFull(t, ac, 5); err != nil || string(b) != "hello" {
		t.Fatalf("acceptor read %q, %v", b, err)
	}
	ac.Write([]byte("bye"))
	wantest.CloseWrite(t, ac)
	dc.SetReadDeadline(time.Now().Add(wantest.Timeout))
	if got, err := io.ReadAll(dc); err != nil || string(got) != "bye" {
		t.Fatalf("dialer read %q, %v; want \"bye\" then EOF", got, err)
	}
	if _, err := dc.Write([]byte("still here")); err != nil {
		t.Fatalf("dialer write after the acceptor's FIN: %v", err)
	}
	wantest.CloseWrite(t, dc)
	ac.SetReadDeadline(time.Now().Add(wantest.Timeout))
	if got, err := io.ReadAll(ac); err != nil || string(got) != "still here" {
		t.Fatalf("acceptor read %q, %v", got, err)
	}
}

// TestQUICAbort: relay.Abort on one end resets the stream: the other end's
// read fails (it is not an orderly EOF), in both directions.
func TestQUICAbort(t *testing.T) {
	for _, side := range []string{"dialer", "acceptor"} {
		t.Run(side, func(t *testing.T) {
			dc, ac, _, _, _ := quicPair(t, wanquic.Config{})
			dc.Write([]byte("x"))
			if _, err := wantest.ReadFull(t, ac, 1); err != nil {
				t.Fatal(err)
			}
			a, b := dc, ac
			if side == "acceptor" {
				a, b = ac, dc
			}
			relay.Abort(a)
			_, err := wantest.ReadFull(t, b, 1)
			var se *quic.StreamError
			if !errors.As(err, &se) || !se.Remote {
				t.Fatalf("read after the peer's abort: %v, want a remote *quic.StreamError", err)
			}
			if _, err := a.Read(make([]byte, 1)); err == nil {
				t.Fatal("read on the aborted end succeeded")
			}
		})
	}
}

// TestQUICPinning: each side accepts only the certificate pinned for the
// stream; an empty pin (not attached yet) refuses everyone.
func TestQUICPinning(t *testing.T) {
	certC, pinC := wantest.NewCert(t)
	pin := func(s string) func() string { return func() string { return s } }
	cases := []struct {
		name   string
		mutate func(dial, accept *wan.Leg)
		// byAcceptor: the acceptor refuses (and reports it); otherwise the
		// dialer refuses and Dial fails.
		byAcceptor bool
	}{
		{"dialer presents an unpinned cert", func(d, _ *wan.Leg) { d.Cert = certC }, true},
		{"acceptor presents an unpinned cert", func(_, a *wan.Leg) { a.Cert = certC }, false},
		{"dialer pins another cert", func(d, _ *wan.Leg) { d.PeerSHA256 = pin(pinC) }, false},
		{"acceptor not attached yet", func(_, a *wan.Leg) { a.PeerSHA256 = pin("") }, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dl, al := quicLegs(t)
			c.mutate(dl, al)
			rj := newRejects()
			ql, udp := quicListen(t, al, wanquic.Config{OnReject: rj.add})
			d := quicDialer(t, wanquic.Config{})
			qc, err := quicDial(t, d, udp.LocalAddr().String(), dl)
			if !c.byAcceptor && err == nil {
				t.Fatal("Dial succeeded although the acceptor's certificate is not the pinned one")
			}
			if err == nil {
				// The dialer may finish before the acceptor checks the
				// client certificate (TLS 1.3): then the stream fails.
				if b, err := wantest.ReadFull(t, qc, 1); err == nil {
					t.Fatalf("dialer read %q over a connection with the wrong certificate", b)
				}
			}
			if c.byAcceptor {
				if err := rj.wait(t); err == nil || !strings.Contains(err.Error(), "tls handshake") {
					t.Fatalf("acceptor reported %v, want a refused tls handshake", err)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			if c, err := ql.Accept(ctx); err == nil {
				t.Fatalf("acceptor accepted a stream from %s", c.RemoteAddr())
			}
		})
	}
}

// TestQUICRejectsPreface: a peer with the right certificate but the wrong
// secret, uid or channel gets nothing through; the acceptor reports why and
// closes the QUIC connection.
func TestQUICRejectsPreface(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*wan.Leg)
		want   error
	}{
		{"wrong secret", func(d *wan.Leg) { d.Secret = wan.NewSecret() }, wan.ErrBadSecret},
		{"wrong uid", func(d *wan.Leg) { d.UID = "stream-2" }, wan.ErrWrongStream},
		{"wrong channel", func(d *wan.Leg) { d.Channel = 4 }, wan.ErrWrongStream},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dl, al := quicLegs(t)
			c.mutate(dl)
			rj := newRejects()
			ql, udp := quicListen(t, al, wanquic.Config{OnReject: rj.add})
			d := quicDialer(t, wanquic.Config{})
			dc, err := quicDial(t, d, udp.LocalAddr().String(), dl)
			if err != nil {
				t.Fatalf("Dial: %v (the dialer cannot know yet)", err)
			}
			dc.Write([]byte("payload"))
			if err := rj.wait(t); !errors.Is(err, c.want) {
				t.Fatalf("rejection %v, want %v", err, c.want)
			}
			if b, err := wantest.ReadFull(t, dc, 1); err == nil {
				t.Fatalf("dialer read %q from a refused stream", b)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			if c, err := ql.Accept(ctx); err == nil {
				t.Fatalf("acceptor handed out a refused stream from %s", c.RemoteAddr())
			}
		})
	}
}

// TestQUICManyStreams: 64 application connections at once on one QUIC
// connection, each arriving intact on its own stream.
func TestQUICManyStreams(t *testing.T) {
	dl, al := quicLegs(t)
	ql, udp := quicListen(t, al, wanquic.Config{})
	d := quicDialer(t, wanquic.Config{})
	const streams, size = 64, 64 << 10
	sent := make(chan [32]byte, streams)
	var wg sync.WaitGroup
	for i := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := quicDial(t, d, udp.LocalAddr().String(), dl)
			if err != nil {
				t.Error(err)
				return
			}
			b := bytes.Repeat([]byte{byte(i), byte(i >> 8), 0xa5}, size/3+1)[:size]
			sent <- sha256.Sum256(b)
			c.Write(b)
			c.(interface{ CloseWrite() error }).CloseWrite()
		}()
	}
	got := make(chan [32]byte, streams)
	for range streams {
		c := quicAccept(t, ql)
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Generous: 64 streams share the connection fairly, so on a
			// loaded machine under -race all of them finish late.
			c.SetReadDeadline(time.Now().Add(60 * time.Second))
			b, err := io.ReadAll(c)
			if err != nil || len(b) != size {
				t.Errorf("stream: %d bytes, %v", len(b), err)
			}
			got <- sha256.Sum256(b)
		}()
	}
	wg.Wait()
	close(sent)
	close(got)
	want := map[[32]byte]bool{}
	for s := range sent {
		want[s] = true
	}
	n := 0
	for s := range got {
		if !want[s] {
			t.Fatal("a stream arrived altered")
		}
		n++
	}
	if n != streams || len(want) != streams {
		t.Fatalf("%d streams arrived, %d distinct sent; want %d", n, len(want), streams)
	}
}

// TestQUICPeerDeath: when the acceptor's gateway dies without a word (its
// socket gone, no CONNECTION_CLOSE), the dialer's streams fail once the
// idle timeout passes, and the next Dial dials a fresh connection to the
// restarted acceptor on the same port.
func TestQUICPeerDeath(t *testing.T) {
	cfg := wanquic.Config{MaxIdleTimeout: 600 * time.Millisecond}
	dl, al := quicLegs(t)
	ql, udp := quicListen(t, al, cfg)
	addr := udp.LocalAddr().String()
	d := quicDialer(t, cfg)
	dc, err := quicDial(t, d, addr, dl)
	if err != nil {
		t.Fatal(err)
	}
	ac := quicAccept(t, ql)
	dc.Write([]byte("x"))
	if _, err := wantest.ReadFull(t, ac, 1); err != nil {
		t.Fatal(err)
	}
	udp.Close() // the peer vanishes: nothing more is sent or received
	_, err = wantest.ReadFull(t, dc, 1)
	var idle *quic.IdleTimeoutError
	if !errors.As(err, &idle) {
		t.Fatalf("dialer read after the peer died: %v, want an idle timeout", err)
	}
	ql.Close()

	// The acceptor comes back on the same port (a restarted gateway).
	udp2, err := net.ListenUDP("udp", udp.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	ql2, err := wanquic.Listen(udp2, al, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ql2.Close(); udp2.Close() })
	dc2, err := quicDial(t, d, addr, dl)
	if err != nil {
		t.Fatalf("Dial after the peer came back: %v", err)
	}
	ac2 := quicAccept(t, ql2)
	dc2.Write([]byte("again"))
	if b, err := wantest.ReadFull(t, ac2, 5); err != nil || string(b) != "again" {
		t.Fatalf("after redial acceptor read %q, %v", b, err)
	}
}

// TestQUICPeerRestartReset: the acceptor's gateway dies silently and
// comes back on the same port with the same key; the dialer's old
// connection is ended by a stateless reset at its next packet, long before
// the idle timeout, and the next Dial works.
func TestQUICPeerRestartReset(t *testing.T) {
	dl, al := quicLegs(t)
	ql, udp := quicListen(t, al, wanquic.Config{}) // 15 s idle timeout
	addr := udp.LocalAddr().String()
	d := quicDialer(t, wanquic.Config{})
	dc, err := quicDial(t, d, addr, dl)
	if err != nil {
		t.Fatal(err)
	}
	ac := quicAccept(t, ql)
	dc.Write([]byte("x"))
	if _, err := wantest.ReadFull(t, ac, 1); err != nil {
		t.Fatal(err)
	}
	udp.Close()
	ql.Close()
	udp2, err := net.ListenUDP("udp", udp.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	ql2, err := wanquic.Listen(udp2, al, wanquic.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ql2.Close(); udp2.Close() })
	dc.Write([]byte("into the old connection"))
	_, err = wantest.ReadFull(t, dc, 1)
	var sr *quic.StatelessResetError
	if !errors.As(err, &sr) {
		t.Fatalf("dialer read on the old connection: %v, want a stateless reset", err)
	}
	dc2, err := quicDial(t, d, addr, dl)
	if err != nil {
		t.Fatalf("Dial after the reset: %v", err)
	}
	dc2.Write([]byte("again"))
	if b, err := wantest.ReadFull(t, quicAccept(t, ql2), 5); err != nil || string(b) != "again" {
		t.Fatalf("acceptor read %q, %v", b, err)
	}
}

// TestQUICDialerClose: the outbound side releases the stream (closes its
// dialer); the acceptor's streams fail with the peer's close, not EOF.
func TestQUICDialerClose(t *testing.T) {
	dc, ac, _, _, d := quicPair(t, wanquic.Config{})
	dc.Write([]byte("x"))
	if _, err := wantest.ReadFull(t, ac, 1); err != nil {
		t.Fatal(err)
	}
	d.Close()
	_, err := wantest.ReadFull(t, ac, 1)
	var ae *quic.ApplicationError
	if !errors.As(err, &ae) || !ae.Remote {
		t.Fatalf("acceptor read after the dialer closed: %v, want a remote application error", err)
	}
	if _, err := d.Dial(context.Background(), "127.0.0.1:1", func() *wan.Leg { l, _ := quicLegs(t); return l }()); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Dial after Close: %v, want net.ErrClosed", err)
	}
}

// TestQUICListenerClose: closing the listener (a release) ends every
// stream at the dialer with an error, and Accept returns net.ErrClosed.
func TestQUICListenerClose(t *testing.T) {
	dc, ac, ql, _, _ := quicPair(t, wanquic.Config{})
	dc.Write([]byte("x"))
	if _, err := wantest.ReadFull(t, ac, 1); err != nil {
		t.Fatal(err)
	}
	ql.Close()
	if _, err := wantest.ReadFull(t, dc, 1); err == nil || errors.Is(err, io.EOF) {
		t.Fatalf("dialer read after release: %v, want an error other than EOF", err)
	}
	if _, err := ql.Accept(context.Background()); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close: %v, want net.ErrClosed", err)
	}
	ql.Close() // idempotent
}

// TestQUICRelay drives relay.Relay over a QUIC leg with TCP on both
// sides, as the gateways do: half-close both ways and an abort.
func TestQUICRelay(t *testing.T) {
	dc, ac, _, _, _ := quicPair(t, wanquic.Config{})
	// producer <-> [relay] <-> dc ~quic~ ac <-> [relay] <-> consumer
	prodApp, prodGW := loopback.TCPPair(t)
	consGW, consApp := loopback.TCPPair(t)
	done := make(chan error, 2)
	eng := relaytest.Engine(t, "buffer", relay.Options{})
	go func() { done <- relay.Relay(eng, prodGW, dc, func(int64) {}, func(int64) {}) }()
	go func() { done <- relay.Relay(eng, consGW, ac, func(int64) {}, func(int64) {}) }()
	prodApp.Write([]byte("request"))
	prodApp.CloseWrite()
	consApp.SetReadDeadline(time.Now().Add(wantest.Timeout))
	if b, err := io.ReadAll(consApp); err != nil || string(b) != "request" {
		t.Fatalf("consumer read %q, %v", b, err)
	}
	consApp.Write([]byte("response"))
	consApp.CloseWrite()
	prodApp.SetReadDeadline(time.Now().Add(wantest.Timeout))
	if b, err := io.ReadAll(prodApp); err != nil || string(b) != "response" {
		t.Fatalf("producer read %q, %v", b, err)
	}
	for range 2 {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("relay: %v", err)
			}
		case <-time.After(wantest.Timeout):
			t.Fatal("relay did not finish after both half-closes")
		}
	}
}

// TestQUICRelayAbort: the producer resets its connection mid-transfer; the
// consumer sees a reset, not a clean end.
func TestQUICRelayAbort(t *testing.T) {
	dc, ac, _, _, _ := quicPair(t, wanquic.Config{})
	prodApp, prodGW := loopback.TCPPair(t)
	consGW, consApp := loopback.TCPPair(t)
	done := make(chan error, 2)
	eng := relaytest.Engine(t, "buffer", relay.Options{})
	go func() { done <- relay.Relay(eng, prodGW, dc, func(int64) {}, func(int64) {}) }()
	go func() { done <- relay.Relay(eng, consGW, ac, func(int64) {}, func(int64) {}) }()
	prodApp.Write([]byte("partial"))
	if b, err := wantest.ReadFull(t, consApp, 7); err != nil {
		t.Fatalf("consumer read %q, %v", b, err)
	}
	prodApp.SetLinger(0)
	prodApp.Close()
	consApp.SetReadDeadline(time.Now().Add(wantest.Timeout))
	if b, err := io.ReadAll(consApp); err == nil {
		t.Fatalf("consumer read %q then a clean EOF after the producer's reset; want an error", b)
	}
	for range 2 {
		select {
		case err := <-done:
			if err == nil {
				t.Fatal("relay reported success for an aborted connection")
			}
		case <-time.After(wantest.Timeout):
			t.Fatal("relay did not finish after an abort")
		}
	}
}

// TestQUICStreamLimit: a channel carries at most MaxStreams application
// connections at once; one more waits and is refused at its deadline with
// a message that names the limit, and gets through once a slot frees.
func TestQUICStreamLimit(t *testing.T) {
	dl, al := quicLegs(t)
	ql, udp := quicListen(t, al, wanquic.Config{MaxStreams: 2})
	d := quicDialer(t, wanquic.Config{MaxStreams: 2})
	addr := udp.LocalAddr().String()
	// One at a time, so open[i] and accepted[i] are the two ends of one
	// stream (Accept hands out streams in the order their prefaces check).
	var open, accepted []net.Conn
	for range 2 {
		c, err := quicDial(t, d, addr, dl)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, c)
		accepted = append(accepted, quicAccept(t, ql))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := d.Dial(ctx, addr, dl); err == nil || !strings.Contains(err.Error(), "the limit") {
		t.Fatalf("third Dial over a limit of 2: %v, want an error naming the limit", err)
	}
	// End one connection in both directions: its slot frees.
	wantest.CloseWrite(t, open[0])
	accepted[0].SetReadDeadline(time.Now().Add(wantest.Timeout))
	if _, err := io.ReadAll(accepted[0]); err != nil {
		t.Fatalf("acceptor read: %v", err)
	}
	wantest.CloseWrite(t, accepted[0])
	open[0].SetReadDeadline(time.Now().Add(wantest.Timeout))
	if _, err := io.ReadAll(open[0]); err != nil {
		t.Fatalf("dialer read: %v", err)
	}
	c, err := quicDial(t, d, addr, dl)
	if err != nil {
		t.Fatalf("Dial after a slot freed: %v", err)
	}
	c.Write([]byte("third"))
	if b, err := wantest.ReadFull(t, quicAccept(t, ql), 5); err != nil || string(b) != "third" {
		t.Fatalf("acceptor read %q, %v", b, err)
	}
}

// TestQUICEarlyResetSparesSiblings: an application connection that resets
// right after the outbound gateway opened its QUIC stream (the reset may
// overtake the preface, which the dialer wrote but QUIC then discards) is
// refused on its own; the other application connections of the channel,
// on the same QUIC connection, carry on.
func TestQUICEarlyResetSparesSiblings(t *testing.T) {
	dl, al := quicLegs(t)
	rj := newRejects()
	ql, udp := quicListen(t, al, wanquic.Config{OnReject: rj.add})
	d := quicDialer(t, wanquic.Config{})
	addr := udp.LocalAddr().String()
	dc, err := quicDial(t, d, addr, dl)
	if err != nil {
		t.Fatal(err)
	}
	ac := quicAccept(t, ql)
	dc.Write([]byte("a"))
	if _, err := wantest.ReadFull(t, ac, 1); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		c, err := quicDial(t, d, addr, dl)
		if err != nil {
			t.Fatalf("Dial: %v", err)
		}
		relay.Abort(c) // the application reset at once
	}
	// Each early reset is either refused quietly or, if its preface got
	// through first, handed out (and then fails on its own). Drain those.
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			c, err := ql.Accept(ctx)
			cancel()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	<-drained
	dc.Write([]byte("b"))
	if b, err := wantest.ReadFull(t, ac, 1); err != nil || string(b) != "b" {
		t.Fatalf("sibling stream after early resets: read %q, %v; want it unharmed", b, err)
	}
	ac.Write([]byte("c"))
	if b, err := wantest.ReadFull(t, dc, 1); err != nil || string(b) != "c" {
		t.Fatalf("sibling stream after early resets: dialer read %q, %v; want it unharmed", b, err)
	}
}

// TestEndedUnread: wantest.EndedUnread on QUIC streams, which wan.Ended
// asks through their Ended method.
func TestEndedUnread(t *testing.T) {
	wantest.EndedUnread(t, func() (dc, ac net.Conn) {
		dc, ac, _, _, _ = quicPair(t, wanquic.Config{})
		return dc, ac
	})
}
