// Package wantest is a test helper for the users of internal/wan, as
// httptest is for net/http: matching legs with fresh certificates, a
// loopback listener that accepts legs with wan.AcceptLeg, small helpers
// on a leg's ends, and EndedUnread, a check of wan.Ended that every
// transport's tests run on their own legs (as x/net/nettest.TestConn
// checks a net.Conn). Errors fail the test; everything it opens is closed
// when the test ends.
package wantest

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"scistream/internal/api"
	"scistream/internal/certs"
	"scistream/internal/relay"
	"scistream/internal/waitfor"
	"scistream/internal/wan"
)

// Timeout bounds every wait of the helpers: far below wan's 10 s
// HandshakeTimeout, so a hang shows up as a failure, not a slow pass.
const Timeout = 5 * time.Second

// NewCert returns a fresh self-signed certificate for loopback and its
// pin.
func NewCert(t testing.TB) (*tls.Certificate, string) {
	t.Helper()
	certPEM, keyPEM, err := certs.SelfSigned([]string{"127.0.0.1", "localhost"}, time.Hour)
	if err != nil {
		t.Fatalf("SelfSigned: %v", err)
	}
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatalf("X509KeyPair: %v", err)
	}
	return &c, certs.Fingerprint(c.Certificate[0])
}

// Legs returns a matching dialer and acceptor leg pair of stream
// "stream-1", channel 7, over transport, each pinning the other's fresh
// certificate when the transport pins.
func Legs(t testing.TB, transport string) (dial, accept *wan.Leg) {
	t.Helper()
	secret := wan.NewSecret()
	dial = &wan.Leg{Transport: transport, UID: "stream-1", Channel: 7, Secret: secret}
	accept = &wan.Leg{Transport: transport, UID: "stream-1", Channel: 7, Secret: bytes.Clone(secret)}
	if api.WANPinned(transport) {
		certA, pinA := NewCert(t)
		certB, pinB := NewCert(t)
		dial.Cert, dial.PeerSHA256 = certA, func() string { return pinB }
		accept.Cert, accept.PeerSHA256 = certB, func() string { return pinA }
	}
	return dial, accept
}

// Accepted is what AcceptLegs gives of one connection: the leg
// wan.AcceptLeg returned (its Conn closed when the test ends) and
// whether it is the watch leg, or its error.
type Accepted struct {
	Conn  net.Conn
	Watch bool
	Err   error
}

// AcceptLegs listens on loopback, accepts every connection with
// wan.AcceptLeg and l, and returns the address and a function that
// returns the next one accepted (failing the test after Timeout).
func AcceptLegs(t testing.TB, l *wan.Leg) (addr string, next func(testing.TB) Accepted) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan Accepted, 4)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			raw, err := ln.Accept()
			if err != nil {
				return
			}
			r, err := wan.AcceptLeg(context.Background(), raw, l)
			if err != nil {
				ch <- Accepted{Err: err}
				continue
			}
			t.Cleanup(func() { r.Conn.Close() })
			ch <- Accepted{r.Conn, r.Watch(), nil}
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String(), func(t testing.TB) Accepted {
		t.Helper()
		select {
		case r := <-ch:
			return r
		case <-time.After(Timeout):
			t.Fatal("AcceptLeg did not return")
			return Accepted{}
		}
	}
}

// ReadFull reads until n bytes or an error from c, bounded by Timeout.
func ReadFull(t testing.TB, c net.Conn, n int) ([]byte, error) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(Timeout))
	defer c.SetReadDeadline(time.Time{})
	b := make([]byte, n)
	m, err := io.ReadFull(c, b)
	return b[:m], err
}

// CloseWrite ends c's writes (its CloseWrite: a FIN, a close_notify, a
// QUIC FIN), failing the test if it cannot.
func CloseWrite(t testing.TB, c net.Conn) {
	t.Helper()
	if err := c.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
		t.Fatalf("CloseWrite: %v", err)
	}
}

// CPUTime is the CPU time (user+system) this process has used so far,
// for benchmarks that report CPU per byte.
func CPUTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// EndedUnread checks wan.Ended on the legs pair returns, the dialer's end
// and the acceptor's of one fresh leg each call: a leg held unread is not
// over while the peer's bytes and its orderly end wait (they read intact
// afterwards); once the peer aborts it, Ended says so without a read, as
// a reset by the peer; once this side closes it, as net.ErrClosed.
func EndedUnread(t *testing.T, pair func() (dc, ac net.Conn)) {
	t.Helper()
	dc, ac := pair()
	if _, err := dc.Write([]byte("held")); err != nil {
		t.Fatal(err)
	}
	CloseWrite(t, dc)
	// The bytes and the end reach the acceptor's buffers; no
	// read of ac tells when, so ask for a while: an Ended that
	// took the orderly end for an end would say so.
	var err error
	if waitfor.Cond(200*time.Millisecond, func() bool { err = wan.Ended(ac); return err != nil }) {
		t.Fatalf("a leg whose peer sent bytes and its end, unread: %v, want nil", err)
	}
	ac.SetReadDeadline(time.Now().Add(Timeout))
	if got, err := io.ReadAll(ac); err != nil || string(got) != "held" {
		t.Fatalf("read after holding: %q, %v; want \"held\" then EOF", got, err)
	}

	dc, ac = pair()
	dc.Write([]byte("lost"))
	relay.Abort(dc)
	waitfor.Must(t, Timeout, "Ended to see the peer's abort", func() bool { err = wan.Ended(ac); return err != nil })
	if !wan.ResetByPeer(err) {
		t.Fatalf("after the peer's abort: %v, want a reset by the peer", err)
	}

	_, ac = pair()
	relay.Abort(ac)
	if err := wan.Ended(ac); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("after this side's abort: %v, want net.ErrClosed", err)
	}
}
