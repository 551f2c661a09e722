// Package wantest is a test helper for the users of internal/wan, as
// httptest is for net/http: matching legs with fresh certificates, and
// a loopback listener that accepts legs with wan.AcceptLeg. Errors fail
// the test; everything it opens is closed when the test ends.
package wantest

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"testing"
	"time"

	"scistream/internal/api"
	"scistream/internal/certs"
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
