package wan_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"scistream/internal/api"
	"scistream/internal/certs"
	"scistream/internal/leakcheck"
	"scistream/internal/wan"
	"scistream/internal/wan/wantest"
)

// testTimeout bounds every blocking step of a test; far below the package's
// 10 s HandshakeTimeout so a hang shows up as a failure, not a slow pass.
const testTimeout = 5 * time.Second

var transports = []string{api.WANTLS, api.WANTCP}

func TestMain(m *testing.M) { leakcheck.Main(m) }

// newCert returns a fresh self-signed certificate and its pin.
func newCert(t testing.TB) (*tls.Certificate, string) { t.Helper(); return wantest.NewCert(t) }

var (
	certOnce            sync.Once
	certA, certB, certC *tls.Certificate
	pinA, pinB, pinC    string
)

// testCerts returns three distinct identities shared by the tests of this
// file (generating ECDSA keys is cheap, but there is no need to repeat it).
func testCerts(t testing.TB) {
	t.Helper()
	certOnce.Do(func() {
		certA, pinA = newCert(t)
		certB, pinB = newCert(t)
		certC, pinC = newCert(t)
	})
}

func pin(s string) func() string { return func() string { return s } }

// legs returns a matching dialer (A) and acceptor (B) leg pair.
func legs(t testing.TB, transport string) (dial, accept *wan.Leg) {
	t.Helper()
	testCerts(t)
	secret := wan.NewSecret()
	dial = &wan.Leg{Transport: transport, UID: "stream-1", Channel: 7, Secret: secret}
	accept = &wan.Leg{Transport: transport, UID: "stream-1", Channel: 7, Secret: bytes.Clone(secret)}
	if transport == api.WANTLS {
		dial.Cert, dial.PeerSHA256 = certA, pin(pinB)
		accept.Cert, accept.PeerSHA256 = certB, pin(pinA)
	}
	return dial, accept
}

type acceptResult struct {
	conn net.Conn
	err  error
}

// listen starts a loopback listener and returns its address and a channel
// that yields the result of wan.Accept on the first connection it accepts.
func listen(t testing.TB, l *wan.Leg) (string, <-chan acceptResult) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	ch := make(chan acceptResult, 1)
	go func() {
		raw, err := ln.Accept()
		if err != nil {
			ch <- acceptResult{err: err}
			return
		}
		c, err := wan.Accept(context.Background(), raw, l)
		if c != nil {
			t.Cleanup(func() { c.Close() })
		}
		ch <- acceptResult{c, err}
	}()
	return ln.Addr().String(), ch
}

func waitAccept(t testing.TB, ch <-chan acceptResult) acceptResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(testTimeout):
		t.Fatal("Accept did not return")
		return acceptResult{}
	}
}

func dial(t testing.TB, addr string, l *wan.Leg) (net.Conn, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c, err := wan.Dial(ctx, addr, l)
	if c != nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, err
}

func TestDialAcceptBytesBothWays(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			dl, al := legs(t, tr)
			addr, ch := listen(t, al)
			dc, err := dial(t, addr, dl)
			if err != nil {
				t.Fatalf("Dial: %v", err)
			}
			r := waitAccept(t, ch)
			if r.err != nil {
				t.Fatalf("Accept: %v", r.err)
			}
			ac := r.conn
			if tr == api.WANTLS {
				if _, ok := dc.(*wan.Conn); !ok {
					t.Errorf("tls Dial returned %T, want *wan.Conn", dc)
				}
				if _, ok := ac.(*wan.Conn); !ok {
					t.Errorf("tls Accept returned %T, want *wan.Conn", ac)
				}
			}

			// Larger than one TLS record and than a socket buffer would
			// hold if nobody read: write and read concurrently.
			up := bytes.Repeat([]byte("dialer->acceptor "), 64<<10)
			down := bytes.Repeat([]byte("acceptor->dialer "), 48<<10)
			errc := make(chan error, 2)
			go func() { _, err := dc.Write(up); errc <- err }()
			go func() { _, err := ac.Write(down); errc <- err }()
			got, err := wantest.ReadFull(t, ac, len(up))
			if err != nil || !bytes.Equal(got, up) {
				t.Fatalf("acceptor read %d/%d bytes, err %v", len(got), len(up), err)
			}
			got, err = wantest.ReadFull(t, dc, len(down))
			if err != nil || !bytes.Equal(got, down) {
				t.Fatalf("dialer read %d/%d bytes, err %v", len(got), len(down), err)
			}
			for range 2 {
				if err := <-errc; err != nil {
					t.Fatalf("Write: %v", err)
				}
			}
			// The preface must not leak into application bytes, and
			// nothing extra must follow: close and expect a clean end.
			if cw, ok := dc.(interface{ CloseWrite() error }); ok {
				if err := cw.CloseWrite(); err != nil {
					t.Fatalf("CloseWrite: %v", err)
				}
			}
			if b, err := wantest.ReadFull(t, ac, 1); err != io.EOF {
				t.Fatalf("after CloseWrite acceptor read %q, %v; want io.EOF", b, err)
			}
		})
	}
}

func TestAcceptRejects(t *testing.T) {
	type tc struct {
		name   string
		mutate func(dial *wan.Leg)
		want   error
	}
	cases := []tc{
		{"wrong secret", func(d *wan.Leg) { d.Secret = wan.NewSecret() }, wan.ErrBadSecret},
		{"wrong uid", func(d *wan.Leg) { d.UID = "stream-2" }, wan.ErrWrongStream},
		{"uid prefix", func(d *wan.Leg) { d.UID = "stream-" }, wan.ErrWrongStream},
		{"uid longer", func(d *wan.Leg) { d.UID = "stream-10" }, wan.ErrWrongStream},
		{"wrong channel", func(d *wan.Leg) { d.Channel = 8 }, wan.ErrWrongStream},
		{"channel 0", func(d *wan.Leg) { d.Channel = 0 }, wan.ErrWrongStream},
	}
	for _, tr := range transports {
		for _, c := range cases {
			t.Run(tr+"/"+c.name, func(t *testing.T) {
				dl, al := legs(t, tr)
				c.mutate(dl)
				addr, ch := listen(t, al)
				dc, err := dial(t, addr, dl)
				if err != nil {
					t.Fatalf("Dial: %v (the dialer cannot know yet)", err)
				}
				r := waitAccept(t, ch)
				if !errors.Is(r.err, c.want) {
					t.Fatalf("Accept error = %v, want %v", r.err, c.want)
				}
				if r.conn != nil {
					t.Fatalf("Accept returned a conn with error %v", r.err)
				}
				// Accept closed the connection: the dialer sees its
				// end rather than application data.
				if b, err := wantest.ReadFull(t, dc, 1); err == nil {
					t.Fatalf("dialer read %q from a rejected leg", b)
				}
			})
		}
	}
}

func TestTLSPinning(t *testing.T) {
	testCerts(t)
	t.Run("dialer presents unpinned cert", func(t *testing.T) {
		dl, al := legs(t, api.WANTLS)
		dl.Cert = certC // acceptor pins certA
		addr, ch := listen(t, al)
		dc, dialErr := dial(t, addr, dl)
		r := waitAccept(t, ch)
		if r.err == nil {
			t.Fatal("Accept succeeded with an unpinned client certificate")
		}
		if !strings.Contains(r.err.Error(), "tls handshake") || !errors.Is(r.err, certs.ErrPinMismatch) {
			t.Fatalf("Accept error = %v, want a tls handshake error wrapping ErrPinMismatch", r.err)
		}
		// In TLS 1.3 the client finishes its handshake before the
		// server has checked the client certificate, so Dial may
		// succeed; the leg must then fail on first read.
		if dialErr == nil {
			if b, err := wantest.ReadFull(t, dc, 1); err == nil {
				t.Fatalf("dialer read %q on a leg the acceptor refused", b)
			}
		}
	})
	t.Run("acceptor presents unpinned cert", func(t *testing.T) {
		dl, al := legs(t, api.WANTLS)
		al.Cert = certC // dialer pins certB
		addr, ch := listen(t, al)
		_, err := dial(t, addr, dl)
		if err == nil {
			t.Fatal("Dial succeeded against an unpinned server certificate")
		}
		if !errors.Is(err, certs.ErrPinMismatch) {
			t.Fatalf("Dial error = %v, want ErrPinMismatch", err)
		}
		if r := waitAccept(t, ch); r.err == nil {
			t.Fatal("Accept succeeded although the dialer aborted")
		}
	})
	t.Run("dialer with empty pin", func(t *testing.T) {
		dl, al := legs(t, api.WANTLS)
		dl.PeerSHA256 = pin("")
		addr, ch := listen(t, al)
		if _, err := dial(t, addr, dl); err == nil || !strings.Contains(err.Error(), "pinned") {
			t.Fatalf("Dial error = %v, want refusal for want of a pin", err)
		}
		if r := waitAccept(t, ch); r.err == nil {
			t.Fatal("Accept succeeded although the dialer aborted")
		}
	})
	t.Run("acceptor with empty pin", func(t *testing.T) {
		dl, al := legs(t, api.WANTLS)
		al.PeerSHA256 = pin("")
		addr, ch := listen(t, al)
		dc, dialErr := dial(t, addr, dl)
		r := waitAccept(t, ch)
		if r.err == nil || !strings.Contains(r.err.Error(), "pinned") {
			t.Fatalf("Accept error = %v, want refusal for want of a pin", r.err)
		}
		if dialErr == nil {
			if b, err := wantest.ReadFull(t, dc, 1); err == nil {
				t.Fatalf("dialer read %q on a leg the acceptor refused", b)
			}
		}
	})
	t.Run("pin is consulted per connection", func(t *testing.T) {
		// The pin function is called at handshake time, so a pin
		// relayed after the leg was configured takes effect.
		dl, al := legs(t, api.WANTLS)
		var mu sync.Mutex
		cur := ""
		dl.PeerSHA256 = func() string { mu.Lock(); defer mu.Unlock(); return cur }
		addr, ch := listen(t, al)
		if _, err := dial(t, addr, dl); err == nil {
			t.Fatal("Dial succeeded before a pin was set")
		}
		waitAccept(t, ch)
		mu.Lock()
		cur = strings.ToUpper(pinB) // hex is case-insensitive
		mu.Unlock()
		addr, ch = listen(t, al)
		if _, err := dial(t, addr, dl); err != nil {
			t.Fatalf("Dial after pin set: %v", err)
		}
		if r := waitAccept(t, ch); r.err != nil {
			t.Fatalf("Accept: %v", r.err)
		}
	})
}

func TestTLSRequiresClientCert(t *testing.T) {
	_, al := legs(t, api.WANTLS)
	addr, ch := listen(t, al)
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	tc := tls.Client(raw, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
	tc.SetDeadline(time.Now().Add(testTimeout))
	tc.Handshake() // may "succeed" on the client side in TLS 1.3
	tc.Write([]byte("x"))
	if r := waitAccept(t, ch); r.err == nil || !strings.Contains(r.err.Error(), "tls handshake") {
		t.Fatalf("Accept error = %v, want tls handshake error", r.err)
	}
}

func TestTLSRejectsOldVersions(t *testing.T) {
	_, al := legs(t, api.WANTLS)
	addr, ch := listen(t, al)
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	tc := tls.Client(raw, &tls.Config{
		InsecureSkipVerify: true, MaxVersion: tls.VersionTLS12,
		Certificates: []tls.Certificate{*certA},
	})
	tc.SetDeadline(time.Now().Add(testTimeout))
	if err := tc.Handshake(); err == nil {
		t.Fatal("TLS 1.2 handshake succeeded")
	}
	if r := waitAccept(t, ch); r.err == nil {
		t.Fatal("Accept succeeded over TLS 1.2")
	}
}

// garbagePeer connects to addr, completes the transport layer as a correct
// dialer would (TLS handshake with the pinned cert, or reading the TCP
// nonce) and then sends payload instead of a preface.
func garbagePeer(t *testing.T, transport, addr string, payload []byte, closeAfter bool) {
	t.Helper()
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	raw.SetDeadline(time.Now().Add(testTimeout))
	var c net.Conn = raw
	switch transport {
	case api.WANTLS:
		tc := tls.Client(raw, &tls.Config{
			InsecureSkipVerify: true, MinVersion: tls.VersionTLS13,
			Certificates: []tls.Certificate{*certA},
		})
		if err := tc.Handshake(); err != nil {
			t.Fatalf("handshake: %v", err)
		}
		c = tc
	case api.WANTCP:
		var nonce [32]byte
		if _, err := io.ReadFull(raw, nonce[:]); err != nil {
			t.Fatalf("read nonce: %v", err)
		}
	}
	if _, err := c.Write(payload); err != nil {
		t.Fatalf("write: %v", err)
	}
	if closeAfter {
		if tc, ok := c.(*tls.Conn); ok {
			tc.CloseWrite()
		} else {
			raw.(*net.TCPConn).CloseWrite()
		}
	}
}

func TestAcceptBadPreface(t *testing.T) {
	valid := func(uidLen int) []byte {
		return wan.AppendPreface(nil, &wan.Preface{UID: strings.Repeat("u", uidLen), Channel: 7})
	}
	cases := []struct {
		name    string
		payload []byte
		close   bool
	}{
		{"garbage", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n" + strings.Repeat("z", 100)), false},
		{"bad magic", append([]byte("S2W2"), valid(8)[4:]...), false},
		{"zero uid length", append([]byte("S2W1\x00"), make([]byte, 64)...), false},
		{"uid too long", append([]byte("S2W1\x41"), make([]byte, 200)...), false},
		{"uid length 255", append([]byte("S2W1\xff"), make([]byte, 300)...), false},
		{"short header then end", []byte("S2W"), true},
		{"truncated mac then end", valid(8)[:len(valid(8))-1], true},
		{"empty then end", nil, true},
	}
	for _, tr := range transports {
		for _, c := range cases {
			t.Run(tr+"/"+c.name, func(t *testing.T) {
				_, al := legs(t, tr)
				addr, ch := listen(t, al)
				garbagePeer(t, tr, addr, c.payload, c.close)
				r := waitAccept(t, ch)
				if !errors.Is(r.err, wan.ErrBadPreface) {
					t.Fatalf("Accept error = %v, want ErrBadPreface", r.err)
				}
			})
		}
	}
}

// A peer that says nothing during the TLS handshake is cut off when the
// caller's context ends (HandshakeTimeout, a 10 s const, bounds it too,
// but a test should not wait for that).
func TestAcceptSilentPeerTLSContext(t *testing.T) {
	_, al := legs(t, api.WANTLS)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	silent, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { silent.Close() })
	raw, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	c, err := wan.Accept(ctx, raw, al)
	if err == nil {
		c.Close()
		t.Fatal("Accept succeeded with a silent peer")
	}
	if d := time.Since(start); d > testTimeout {
		t.Fatalf("Accept took %v", d)
	}
	// Accept closed raw: the silent peer sees the end.
	silent.SetReadDeadline(time.Now().Add(testTimeout))
	if _, err := silent.Read(make([]byte, 1)); err == nil {
		t.Fatal("silent peer could still read")
	}
}

// TestDialSilentAcceptorContext: a dial whose acceptor completes the TCP
// handshake and then says nothing (a hung node) ends when its context
// does, on either transport, not after the handshake timeout; a facility
// node's race between a peer's nodes cancels the dials it no longer
// needs this way.
func TestDialSilentAcceptorContext(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			dl, _ := legs(t, tr)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() })
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			start := time.Now()
			c, err := wan.Dial(ctx, ln.Addr().String(), dl)
			if err == nil {
				c.Close()
				t.Fatal("Dial succeeded with a silent acceptor")
			}
			if d := time.Since(start); d > wan.HandshakeTimeout/2 {
				t.Fatalf("Dial took %v after its context ended (%v)", d, err)
			}
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("Dial = %v; want its context's end", err)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(l *wan.Leg)
	}{
		{"empty uid", func(l *wan.Leg) { l.UID = "" }},
		{"uid 65 bytes", func(l *wan.Leg) { l.UID = strings.Repeat("x", 65) }},
		{"negative channel", func(l *wan.Leg) { l.Channel = -1 }},
		{"channel 65536", func(l *wan.Leg) { l.Channel = 65536 }},
		{"no secret", func(l *wan.Leg) { l.Secret = nil }},
		{"short secret", func(l *wan.Leg) { l.Secret = l.Secret[:31] }},
		{"unknown transport", func(l *wan.Leg) { l.Transport = "udp" }},
		{"empty transport", func(l *wan.Leg) { l.Transport = "" }},
		{"tls without cert", func(l *wan.Leg) { l.Transport = api.WANTLS; l.Cert = nil }},
		{"tls without pin", func(l *wan.Leg) { l.Transport = api.WANTLS; l.PeerSHA256 = nil }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, l := legs(t, api.WANTLS)
			c.mutate(l)

			// Dial fails before touching the network: the address is
			// one nothing listens on and would give another error.
			if conn, err := wan.Dial(context.Background(), "127.0.0.1:1", l); err == nil {
				conn.Close()
				t.Fatal("Dial accepted an invalid leg")
			} else if strings.Contains(err.Error(), "refused") {
				t.Fatalf("Dial connected before validating: %v", err)
			}

			// Accept fails and closes raw.
			a, b := net.Pipe()
			t.Cleanup(func() { a.Close(); b.Close() })
			if conn, err := wan.Accept(context.Background(), a, l); err == nil {
				conn.Close()
				t.Fatal("Accept accepted an invalid leg")
			}
			b.SetReadDeadline(time.Now().Add(testTimeout))
			if _, err := b.Read(make([]byte, 1)); err != io.EOF {
				t.Fatalf("raw conn not closed by Accept: read err %v", err)
			}
		})
	}
	t.Run("boundaries are valid", func(t *testing.T) {
		for _, tr := range transports {
			for _, ch := range []int{0, 0xffff} {
				dl, al := legs(t, tr)
				dl.UID, al.UID = strings.Repeat("u", 64), strings.Repeat("u", 64)
				dl.Channel, al.Channel = ch, ch
				addr, rc := listen(t, al)
				if _, err := dial(t, addr, dl); err != nil {
					t.Fatalf("%s channel %d: Dial: %v", tr, ch, err)
				}
				if r := waitAccept(t, rc); r.err != nil {
					t.Fatalf("%s channel %d: Accept: %v", tr, ch, r.err)
				}
			}
		}
	})
}

// TestQUICOnTCPRefused: Dial and Accept refuse a quic leg (its streams
// listen and dial with internal/wanquic).
func TestQUICOnTCPRefused(t *testing.T) {
	dl, al := wantest.Legs(t, api.WANQUIC)
	if _, err := wan.Dial(context.Background(), "127.0.0.1:1", dl); !errors.Is(err, wan.ErrQUICOnTCP) {
		t.Fatalf("wan.Dial on a quic leg: %v, want ErrQUICOnTCP", err)
	}
	a, b := net.Pipe()
	defer b.Close()
	if _, err := wan.Accept(context.Background(), a, al); !errors.Is(err, wan.ErrQUICOnTCP) {
		t.Fatalf("wan.Accept on a quic leg: %v, want ErrQUICOnTCP", err)
	}
}

func TestNewSecret(t *testing.T) {
	a, b := wan.NewSecret(), wan.NewSecret()
	if len(a) != wan.SecretLen || len(b) != wan.SecretLen {
		t.Fatalf("lengths %d, %d; want %d", len(a), len(b), wan.SecretLen)
	}
	if bytes.Equal(a, b) {
		t.Fatal("two secrets are equal")
	}
}

// tlsPair returns a connected TLS dialer/acceptor pair.
func tlsPair(t testing.TB) (dc, ac *wan.Conn) {
	t.Helper()
	dl, al := legs(t, api.WANTLS)
	addr, ch := listen(t, al)
	d, err := dial(t, addr, dl)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	r := waitAccept(t, ch)
	if r.err != nil {
		t.Fatalf("Accept: %v", r.err)
	}
	return d.(*wan.Conn), r.conn.(*wan.Conn)
}

// rawTCP digs the *net.TCPConn out of a wan.Conn.
func rawTCP(t *testing.T, c net.Conn) *net.TCPConn {
	t.Helper()
	for {
		if tc, ok := c.(*net.TCPConn); ok {
			return tc
		}
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			t.Fatalf("%T has no NetConn", c)
		}
		c = u.NetConn()
	}
}

func TestTruncationDetected(t *testing.T) {
	dc, ac := tlsPair(t)
	if _, err := dc.Write([]byte("partial")); err != nil {
		t.Fatal(err)
	}
	// An injected FIN: the TCP stream ends with no close_notify.
	if err := rawTCP(t, dc).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := wantest.ReadFull(t, ac, len("partial"))
	if err != nil || string(got) != "partial" {
		t.Fatalf("read %q, %v", got, err)
	}
	n, err := ac.Read(make([]byte, 16))
	if n != 0 || !errors.Is(err, wan.ErrTruncated) {
		t.Fatalf("Read = %d, %v; want 0, ErrTruncated", n, err)
	}
	if errors.Is(err, io.EOF) {
		t.Fatal("ErrTruncated must not look like io.EOF")
	}
	// And it stays that way.
	if _, err := ac.Read(make([]byte, 16)); !errors.Is(err, wan.ErrTruncated) {
		t.Fatalf("second Read error = %v, want ErrTruncated", err)
	}
}

func TestCloseNotifyIsCleanEOF(t *testing.T) {
	dc, ac := tlsPair(t)
	if _, err := dc.Write([]byte("complete")); err != nil {
		t.Fatal(err)
	}
	if err := dc.CloseWrite(); err != nil {
		t.Fatalf("CloseWrite: %v", err)
	}
	got, err := wantest.ReadFull(t, ac, len("complete"))
	if err != nil || string(got) != "complete" {
		t.Fatalf("read %q, %v", got, err)
	}
	ac.SetReadDeadline(time.Now().Add(testTimeout))
	if n, err := ac.Read(make([]byte, 16)); n != 0 || err != io.EOF {
		t.Fatalf("Read = %d, %v; want 0, io.EOF", n, err)
	}
	// A FIN after close_notify does not turn the clean end into a
	// truncation.
	rawTCP(t, dc).CloseWrite()
	if _, err := ac.Read(make([]byte, 16)); err != io.EOF {
		t.Fatalf("Read after FIN = %v, want io.EOF", err)
	}
	// The other direction still works after a half-close.
	if _, err := ac.Write([]byte("reply")); err != nil {
		t.Fatalf("acceptor Write after peer CloseWrite: %v", err)
	}
	if got, err := wantest.ReadFull(t, dc, 5); err != nil || string(got) != "reply" {
		t.Fatalf("dialer read %q, %v", got, err)
	}
}

func TestPrefaceRoundTrip(t *testing.T) {
	for _, p := range []wan.Preface{
		{UID: "a", Channel: 0},
		{UID: strings.Repeat("z", 64), Channel: 0xffff},
		{UID: "stream-1", Channel: 258, MAC: [32]byte{1, 2, 3, 31: 0xff}},
	} {
		enc := wan.AppendPreface([]byte("prefix"), &p)
		if !bytes.HasPrefix(enc, []byte("prefix")) {
			t.Fatal("AppendPreface dropped its input")
		}
		got, err := wan.ReadPreface(bytes.NewReader(enc[len("prefix"):]))
		if err != nil {
			t.Fatalf("ReadPreface(%+v): %v", p, err)
		}
		if *got != p {
			t.Fatalf("round trip: got %+v, want %+v", *got, p)
		}
	}
}

func FuzzReadPreface(f *testing.F) {
	f.Add(wan.AppendPreface(nil, &wan.Preface{UID: "stream-1", Channel: 7, MAC: [32]byte{9}}))
	f.Add(wan.AppendPreface(nil, &wan.Preface{UID: strings.Repeat("u", 64), Channel: 0xffff}))
	f.Add(wan.AppendPreface(nil, &wan.Preface{UID: "x"}))
	f.Add(append(wan.AppendPreface(nil, &wan.Preface{UID: "x"}), "trailing"...))
	f.Add([]byte{})
	f.Add([]byte("S2W1"))
	f.Add([]byte("S2W1\x00"))
	f.Add([]byte("S2W1\x41"))
	f.Add([]byte("S2W1\xff"))
	f.Add([]byte("S2W1\x01u"))
	f.Add([]byte("s2w1\x01u\x00\x07"))
	f.Add(bytes.Repeat([]byte{0xff}, 200))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := wan.ReadPreface(bytes.NewReader(data))
		if err != nil {
			if p != nil {
				t.Fatal("non-nil preface with an error")
			}
			if !errors.Is(err, wan.ErrBadPreface) {
				t.Fatalf("error %v does not wrap ErrBadPreface", err)
			}
			return
		}
		if len(p.UID) == 0 || len(p.UID) > 64 || p.Channel < 0 || p.Channel > 0xffff {
			t.Fatalf("parsed out-of-range preface %+v", p)
		}
		enc := wan.AppendPreface(nil, p)
		if !bytes.HasPrefix(data, enc) {
			t.Fatalf("re-encoding %x is not a prefix of input %x", enc, data)
		}
		if len(enc) != 4+1+len(p.UID)+2+32 {
			t.Fatalf("encoding length %d", len(enc))
		}
	})
}

// TestTLSBulkMixedSizes drives the batched writes and buffered, coalescing
// reads of wan.Conn with sizes on both sides of every threshold (one
// record, the batch buffer, the read buffer), in both directions at once,
// and checks every byte.
func TestTLSBulkMixedSizes(t *testing.T) {
	dc, ac := tlsPair(t)
	rng := mrand.New(mrand.NewPCG(1, 2))
	sizes := []int{1, 100, 16<<10 - 1, 16 << 10, 16<<10 + 1, 64 << 10, 256<<10 - 7, 256 << 10, 256<<10 + 1, 700 << 10}
	payload := func() ([]byte, []int) {
		var ws []int
		total := 0
		for range 40 {
			n := sizes[rng.IntN(len(sizes))]
			ws = append(ws, n)
			total += n
		}
		b := make([]byte, total)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b, ws
	}
	up, upW := payload()
	down, downW := payload()
	send := func(c net.Conn, b []byte, ws []int, errc chan<- error) {
		c.SetWriteDeadline(time.Now().Add(testTimeout))
		for _, n := range ws {
			if _, err := c.Write(b[:n]); err != nil {
				errc <- err
				return
			}
			b = b[n:]
		}
		errc <- c.(interface{ CloseWrite() error }).CloseWrite()
	}
	recv := func(c net.Conn, want []byte, seed uint64, errc chan<- error) {
		r := mrand.New(mrand.NewPCG(seed, seed))
		c.SetReadDeadline(time.Now().Add(testTimeout))
		var got []byte
		buf := make([]byte, 1<<20)
		for {
			n, err := c.Read(buf[:sizes[r.IntN(len(sizes))]])
			got = append(got, buf[:n]...)
			if err == io.EOF {
				break
			}
			if err != nil {
				errc <- fmt.Errorf("read after %d bytes: %w", len(got), err)
				return
			}
		}
		if !bytes.Equal(got, want) {
			errc <- fmt.Errorf("received %d bytes that differ from the %d sent", len(got), len(want))
			return
		}
		errc <- nil
	}
	errc := make(chan error, 4)
	go send(dc, up, upW, errc)
	go send(ac, down, downW, errc)
	go recv(ac, up, 3, errc)
	go recv(dc, down, 4, errc)
	for range 4 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
}

// TestTLSReadDeadlineResumes checks that a read deadline expiring while
// records are half-received loses nothing: the stream resumes intact.
func TestTLSReadDeadlineResumes(t *testing.T) {
	dc, ac := tlsPair(t)
	want := bytes.Repeat([]byte("0123456789abcdef"), 40<<10) // 640 KiB
	buf := make([]byte, 1<<20)
	// Nothing sent yet: the deadline expires in Read.
	ac.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
	if n, err := ac.Read(buf); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read before any data = %d, %v; want 0, deadline exceeded", n, err)
	}
	errc := make(chan error, 1)
	go func() { _, err := dc.Write(want); errc <- err }()
	ac.SetReadDeadline(time.Now().Add(testTimeout))
	got, err := wantest.ReadFull(t, ac, len(want))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("after the deadline: read %d/%d bytes, %v", len(got), len(want), err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// TestDialUnanswered: a dial the acceptor resets before sending a byte
// (as a gateway over its cap of connections in their handshake does) is
// marked wan.ErrUnanswered, so a gateway dials it again; one reset after
// the acceptor answered (a refused certificate or preface) is not. (A
// plaintext leg's acceptor answers at once with its nonce, and a gateway
// resets one only once the dialer has sent its preface, after Dial.)
func TestDialUnanswered(t *testing.T) {
	for _, tr := range transports {
		for _, c := range []struct {
			name   string
			answer []byte // written, after the ClientHello came, before the reset
			want   bool
		}{
			{"reset at once", nil, true},
			// A TLS record header: the peer answered.
			{"reset after answering", []byte{0x16, 0x03, 0x03, 0x00, 0x40}, false},
		} {
			if tr == api.WANTCP && c.answer != nil {
				continue
			}
			t.Run(tr+"/"+c.name, func(t *testing.T) {
				dl, _ := legs(t, tr)
				ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { ln.Close() })
				done := make(chan struct{})
				go func() {
					defer close(done)
					raw, err := ln.AcceptTCP()
					if err != nil {
						return
					}
					if c.answer != nil {
						// The ClientHello's first bytes: the dialer is
						// past its connect.
						raw.SetReadDeadline(time.Now().Add(testTimeout))
						io.ReadFull(raw, make([]byte, 5))
						raw.Write(c.answer)
					}
					raw.SetLinger(0)
					raw.Close()
				}()
				_, err = dial(t, ln.Addr().String(), dl)
				<-done
				if err == nil {
					t.Fatal("Dial succeeded against a reset")
				}
				if got := errors.Is(err, wan.ErrUnanswered); got != c.want {
					t.Errorf("Dial = %v: marked unanswered %t, want %t", err, got, c.want)
				}
				if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) && c.want {
					t.Errorf("Dial = %v: the reset is lost from the error", err)
				}
			})
		}
	}
}

// TestConnectTimeout: a dial whose SYNs go unanswered (a listener whose
// accept queue is full drops them, as a path that is down does) fails
// within the leg's ConnectTimeout, not HandshakeTimeout (10 s), so a
// parked connection dials again soon after the path's return; RTTOf
// reads a leg's round trip through its wrappers.
func TestConnectTimeout(t *testing.T) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil { // a queue of one, never accepted
		t.Fatal(err)
	}
	sa, _ := syscall.Getsockname(fd)
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	// Fill the queue: the dials past it wait on SYNs the kernel drops.
	var fill []net.Conn
	defer func() {
		for _, c := range fill {
			c.Close()
		}
	}()
	for range 4 {
		if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
			fill = append(fill, c)
		}
	}
	dl, _ := legs(t, api.WANTLS)
	dl.ConnectTimeout = 300 * time.Millisecond
	start := time.Now()
	c, err := wan.Dial(context.Background(), addr, dl)
	if err == nil {
		c.Close()
		t.Fatal("a dial to a full accept queue succeeded")
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("the dial gave up after %s (%v), want its connect timeout, 300 ms", took, err)
	}

	d, a := tlsPair(t)
	defer d.Close()
	defer a.Close()
	if rtt, ok := wan.RTTOf(d); !ok || rtt <= 0 || rtt > time.Second {
		t.Errorf("RTTOf a loopback leg: %s, %v", rtt, ok)
	}
	if _, ok := wan.RTTOf(&net.UnixConn{}); ok {
		t.Error("RTTOf a connection on no TCP socket said it knows")
	}
}

// TestUnframedDial: a dialer that asks for no frames (a stream whose
// connections do not resume) gets an answering leg without them from an
// acceptor that offers both; a dialer that does not ask gets frames.
func TestUnframedDial(t *testing.T) {
	for _, unframed := range []bool{false, true} {
		dl, al := legs(t, api.WANTLS)
		dl.Unframed = unframed
		addr, ch := listen(t, al)
		d, err := dial(t, addr, dl)
		if err != nil {
			t.Fatalf("Dial: %v", err)
		}
		r := waitAccept(t, ch)
		if r.err != nil {
			t.Fatalf("Accept: %v", r.err)
		}
		if wan.Framed(d) == unframed || wan.Framed(r.conn) == unframed || wan.Answers(d) != unframed {
			t.Errorf("Unframed %v: framed %v/%v, answers %v", unframed, wan.Framed(d), wan.Framed(r.conn), wan.Answers(d))
		}
		d.Close()
		r.conn.Close()
	}
}
