package wanquic

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"scistream/internal/api"
	"scistream/internal/wan"
	"scistream/internal/wan/wantest"
)

// deafConn sends what quic-go writes and never hands a datagram up: a
// client that floods Initial packets and ignores every answer (as one
// with a spoofed source address would never see them).
type deafConn struct {
	c    *net.UDPConn
	once sync.Once
	done chan struct{}
}

func (d *deafConn) ReadFrom([]byte) (int, net.Addr, error) {
	<-d.done
	return 0, nil, net.ErrClosed
}
func (d *deafConn) WriteTo(b []byte, a net.Addr) (int, error) { return d.c.WriteTo(b, a) }
func (d *deafConn) Close() error                              { d.stop(); return d.c.Close() }
func (d *deafConn) LocalAddr() net.Addr                       { return d.c.LocalAddr() }
func (d *deafConn) SetDeadline(time.Time) error               { return nil }
func (d *deafConn) SetReadDeadline(time.Time) error           { d.stop(); return nil }
func (d *deafConn) SetWriteDeadline(time.Time) error          { return nil }
func (d *deafConn) stop()                                     { d.once.Do(func() { close(d.done) }) }

// TestQUICHandshakeFlood: a flood of Initial packets from a peer that
// never answers costs the listener a handshake (goroutines, memory, a
// signature, for the handshake timeout) only within a small budget;
// beyond it the peer gets a stateless Retry. A real dialer still gets
// through during the flood (it answers the Retry).
func TestQUICHandshakeFlood(t *testing.T) {
	cert, certPin := wantest.NewCert(t)
	secret := wan.NewSecret()
	al := &wan.Leg{Transport: api.WANQUIC, UID: "u", Channel: 0, Secret: secret, Cert: cert, PeerSHA256: func() string { return certPin }}
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	ql, err := Listen(udp, al, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer ql.Close()

	cu, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	flood := &quic.Transport{Conn: &deafConn{c: cu, done: make(chan struct{})}}
	defer flood.Close()

	const initials = 200
	before := runtime.NumGoroutine()
	start := time.Now()
	for range initials {
		// Each Dial sends its Initial at once and gives up soon after.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Millisecond)
		flood.Dial(ctx, udp.LocalAddr(), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{wan.ALPN}}, &quic.Config{})
		cancel()
	}
	elapsed := time.Since(start)
	// Handshakes the budget allows in that time, a few goroutines each.
	allowed := handshakeBurst + int(elapsed.Seconds()*handshakeRate) + 1
	limit := before + 6*allowed + 20
	var grew int
	// Let the listener take in what is queued, then count.
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		grew = max(grew, runtime.NumGoroutine())
		runtime.Gosched()
	}
	if grew > limit {
		t.Fatalf("%d unanswered Initials in %s: goroutines %d -> %d, want at most %d (a budget of %d handshakes)",
			initials, elapsed.Round(time.Millisecond), before, grew, limit, allowed)
	}
	t.Logf("%d unanswered Initials in %s: goroutines %d -> at most %d (limit %d)", initials, elapsed.Round(time.Millisecond), before, grew, limit)

	// A real dialer, with the budget spent, answers the Retry and gets in.
	dl := &wan.Leg{Transport: api.WANQUIC, UID: "u", Channel: 0, Secret: secret, Cert: cert, PeerSHA256: func() string { return certPin }}
	d := NewDialer(Config{})
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := d.Dial(ctx, udp.LocalAddr().String(), dl)
	if err != nil {
		t.Fatalf("Dial during the flood: %v", err)
	}
	defer c.Close()
	c.Write([]byte("through"))
	ac, err := ql.Accept(ctx)
	if err != nil {
		t.Fatalf("Accept during the flood: %v", err)
	}
	defer ac.Close()
	ac.SetReadDeadline(time.Now().Add(5 * time.Second))
	b := make([]byte, 7)
	if _, err := ac.Read(b); err != nil || string(b) != "through" {
		t.Fatalf("acceptor read %q, %v", b, err)
	}
}

// TestQUICPrefaceReplay: a preface captured on one QUIC connection (by a
// peer that holds the pinned certificate but not the secret) does not
// verify on another connection to the same listener, nor does a genuine
// preface of another stream's UID on this stream's port.
func TestQUICPrefaceReplay(t *testing.T) {
	dcert, dpin := wantest.NewCert(t)
	acert, _ := wantest.NewCert(t)
	secret := wan.NewSecret()
	rejected := make(chan error, 8)
	al := &wan.Leg{Transport: api.WANQUIC, UID: "s", Channel: 1, Secret: secret, Cert: acert, PeerSHA256: func() string { return dpin }}
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	ql, err := Listen(udp, al, Config{OnReject: func(_ net.Addr, err error) { rejected <- err }})
	if err != nil {
		t.Fatal(err)
	}
	defer ql.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tc := &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{*dcert}, NextProtos: []string{wan.ALPN}}
	conn := func() (*quic.Conn, []byte) {
		c, err := quic.DialAddr(ctx, udp.LocalAddr().String(), tc, &quic.Config{})
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		b, err := quicBinding(c)
		if err != nil {
			t.Fatal(err)
		}
		return c, b
	}
	// send writes pre on a new stream of c and reports whether the
	// listener refused it (the stream or connection fails).
	send := func(c *quic.Conn, pre []byte) error {
		s, err := c.OpenStreamSync(ctx)
		if err != nil {
			return err
		}
		s.Write(pre)
		s.Write([]byte("x"))
		s.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = s.Read(make([]byte, 1))
		return err
	}

	c1, b1 := conn()
	defer c1.CloseWithError(0, "")
	captured := wan.AppendPreface(nil, (&wan.Leg{UID: "s", Channel: 1, Secret: secret}).Preface(b1))
	go send(c1, captured)
	ac, err := ql.Accept(ctx)
	if err != nil {
		t.Fatalf("genuine preface not accepted: %v", err)
	}
	ac.Close()

	c2, b2 := conn()
	defer c2.CloseWithError(0, "")
	if bytes.Equal(b1, b2) {
		t.Fatal("two connections exported the same binding")
	}
	if err := send(c2, captured); err == nil {
		t.Fatal("a preface replayed on another connection was not refused")
	}
	c3, b3 := conn()
	defer c3.CloseWithError(0, "")
	other := wan.AppendPreface(nil, (&wan.Leg{UID: "t", Channel: 1, Secret: secret}).Preface(b3))
	if err := send(c3, other); err == nil {
		t.Fatal("a preface for another stream's UID was not refused")
	}
	// The listener reports a refusal right after resetting the stream.
	for _, want := range []error{wan.ErrBadSecret, wan.ErrWrongStream} {
		select {
		case err := <-rejected:
			if !errors.Is(err, want) {
				t.Fatalf("rejection %v, want %v", err, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no rejection reported, want %v", want)
		}
	}
}

// The stateless-reset key is stable for one gateway key and address (a
// restarted gateway can reset its previous run's connections) and differs
// between addresses and between gateways (no socket can be made to
// reveal another's reset tokens).
func TestResetKeyPerAddress(t *testing.T) {
	c1, _ := wantest.NewCert(t)
	c2, _ := wantest.NewCert(t)
	a := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5100}
	b := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5101}
	k := resetKey(c1, a)
	if k == nil {
		t.Fatal("no key")
	}
	if again := resetKey(c1, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5100}); *again != *k {
		t.Error("same gateway key and address, different reset keys")
	}
	if *resetKey(c1, b) == *k {
		t.Error("two addresses of one gateway share a reset key")
	}
	if *resetKey(c2, a) == *k {
		t.Error("two gateways share a reset key")
	}
}
