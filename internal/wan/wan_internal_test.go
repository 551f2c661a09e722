package wan

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"scistream/internal/api"
	"scistream/internal/certs"
)

const itTimeout = 5 * time.Second

func itCert(t *testing.T) (*tls.Certificate, string) {
	t.Helper()
	certPEM, keyPEM, err := certs.SelfSigned([]string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return &c, certs.Fingerprint(c.Certificate[0])
}

// acceptor listens on loopback and runs Accept with l on every connection,
// reporting each result on the returned channel.
func acceptor(t *testing.T, l *Leg) (string, <-chan error, <-chan net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	errc := make(chan error, 8)
	connc := make(chan net.Conn, 8)
	go func() {
		for {
			raw, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				c, err := Accept(context.Background(), raw, l)
				if c != nil {
					t.Cleanup(func() { c.Close() })
					connc <- c
				}
				errc <- err
			}()
		}
	}()
	return ln.Addr().String(), errc, connc
}

func wait[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(itTimeout):
		t.Fatal("timed out")
		panic("unreachable")
	}
}

func dialRaw(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(itTimeout))
	return c
}

// A preface captured on one plaintext connection is useless on another:
// each connection gets a fresh nonce.
func TestTCPPrefaceReplay(t *testing.T) {
	secret := NewSecret()
	l := &Leg{Transport: api.WANTCP, UID: "s", Channel: 1, Secret: secret}
	addr, errc, _ := acceptor(t, l)

	c1 := dialRaw(t, addr)
	var n1 [nonceLen]byte
	if _, err := io.ReadFull(c1, n1[:]); err != nil {
		t.Fatal(err)
	}
	captured := AppendPreface(nil, &Preface{UID: "s", Channel: 1, MAC: computeMAC(secret, n1[:], "s", 1)})
	if _, err := c1.Write(captured); err != nil {
		t.Fatal(err)
	}
	if err := wait(t, errc); err != nil {
		t.Fatalf("genuine preface rejected: %v", err)
	}

	c2 := dialRaw(t, addr)
	var n2 [nonceLen]byte
	if _, err := io.ReadFull(c2, n2[:]); err != nil {
		t.Fatal(err)
	}
	if n1 == n2 {
		t.Fatal("two connections got the same nonce")
	}
	if _, err := c2.Write(captured); err != nil {
		t.Fatal(err)
	}
	if err := wait(t, errc); !errors.Is(err, ErrBadSecret) {
		t.Fatalf("replayed preface: Accept error %v, want ErrBadSecret", err)
	}
}

// tlsDial performs the dialer side by hand over conn, returning the TLS
// connection and its exported binding.
func tlsDial(t *testing.T, conn net.Conn, cert *tls.Certificate) (*tls.Conn, []byte) {
	t.Helper()
	tc := tls.Client(conn, &tls.Config{
		InsecureSkipVerify: true, MinVersion: tls.VersionTLS13,
		Certificates: []tls.Certificate{*cert},
	})
	if err := tc.Handshake(); err != nil {
		t.Fatalf("handshake: %v", err)
	}
	cs := tc.ConnectionState()
	b, err := cs.ExportKeyingMaterial(exportLabel, nil, nonceLen)
	if err != nil {
		t.Fatal(err)
	}
	return tc, b
}

// A preface captured from one TLS session (e.g. by a peer that holds the
// pinned certificate but not the secret) does not verify on another.
func TestTLSPrefaceReplay(t *testing.T) {
	dcert, dpin := itCert(t)
	acert, _ := itCert(t)
	secret := NewSecret()
	l := &Leg{Transport: api.WANTLS, UID: "s", Channel: 1, Secret: secret,
		Cert: acert, PeerSHA256: func() string { return dpin }}
	addr, errc, _ := acceptor(t, l)

	tc1, b1 := tlsDial(t, dialRaw(t, addr), dcert)
	captured := AppendPreface(nil, &Preface{UID: "s", Channel: 1, MAC: computeMAC(secret, b1, "s", 1)})
	if _, err := tc1.Write(captured); err != nil {
		t.Fatal(err)
	}
	if err := wait(t, errc); err != nil {
		t.Fatalf("genuine preface rejected: %v", err)
	}

	tc2, b2 := tlsDial(t, dialRaw(t, addr), dcert)
	if bytes.Equal(b1, b2) {
		t.Fatal("two sessions exported the same binding")
	}
	if _, err := tc2.Write(captured); err != nil {
		t.Fatal(err)
	}
	if err := wait(t, errc); !errors.Is(err, ErrBadSecret) {
		t.Fatalf("replayed preface: Accept error %v, want ErrBadSecret", err)
	}
}

// cutConn forwards only the first limit bytes of the next Write once
// limit is set, to end a TCP stream in the middle of a TLS record.
type cutConn struct {
	net.Conn
	limit int
}

func (c *cutConn) Write(b []byte) (int, error) {
	if c.limit > 0 && len(b) > c.limit {
		if _, err := c.Conn.Write(b[:c.limit]); err != nil {
			return 0, err
		}
		return len(b), nil
	}
	return c.Conn.Write(b)
}

// A FIN in the middle of a TLS record is an error, never a clean EOF.
func TestTruncationMidRecord(t *testing.T) {
	dcert, dpin := itCert(t)
	acert, _ := itCert(t)
	secret := NewSecret()
	l := &Leg{Transport: api.WANTLS, UID: "s", Channel: 1, Secret: secret,
		Cert: acert, PeerSHA256: func() string { return dpin }}
	addr, errc, connc := acceptor(t, l)

	raw := dialRaw(t, addr)
	cut := &cutConn{Conn: raw}
	tc, b := tlsDial(t, cut, dcert)
	if _, err := tc.Write(AppendPreface(nil, &Preface{UID: "s", Channel: 1, MAC: computeMAC(secret, b, "s", 1)})); err != nil {
		t.Fatal(err)
	}
	if err := wait(t, errc); err != nil {
		t.Fatalf("Accept: %v", err)
	}
	ac := wait(t, connc)

	cut.limit = 10 // a 5-byte header and half the payload of the next record
	if _, err := tc.Write([]byte("hello, world")); err != nil {
		t.Fatal(err)
	}
	if err := raw.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	ac.SetReadDeadline(time.Now().Add(itTimeout))
	n, err := ac.Read(make([]byte, 64))
	if n != 0 || !errors.Is(err, ErrTruncated) {
		t.Fatalf("Read = %d, %v; want ErrTruncated (not io.EOF)", n, err)
	}
}

// What Dial sends on a TLS leg is the preface of the package doc, its MAC
// over keying material exported under the literal label: computed here
// from the format alone (not with computeMAC or AppendPreface), so a
// change to either side of the binding shows.
func TestTLSDialPrefaceWire(t *testing.T) {
	dcert, _ := itCert(t)
	acert, apin := itCert(t)
	secret := NewSecret()
	l := &Leg{Transport: api.WANTLS, UID: "stream-7", Channel: 0x0102, Secret: secret,
		Cert: dcert, PeerSHA256: func() string { return apin }}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	type result struct {
		got, want []byte
		err       error
	}
	res := make(chan result, 1)
	go func() {
		raw, err := ln.Accept()
		if err != nil {
			res <- result{err: err}
			return
		}
		defer raw.Close()
		raw.SetDeadline(time.Now().Add(itTimeout))
		tc := tls.Server(raw, &tls.Config{MinVersion: tls.VersionTLS13,
			Certificates: []tls.Certificate{*acert}, ClientAuth: tls.RequireAnyClientCert})
		if err := tc.Handshake(); err != nil {
			res <- result{err: err}
			return
		}
		cs := tc.ConnectionState()
		binding, err := cs.ExportKeyingMaterial("EXPORTER-scistream-wan-v1", nil, 32)
		if err != nil {
			res <- result{err: err}
			return
		}
		m := hmac.New(sha256.New, secret)
		m.Write([]byte("scistream wan v1"))
		m.Write(binding)
		m.Write([]byte("stream-7"))
		m.Write([]byte{0x01, 0x02})
		want := append([]byte("S2W1\x08stream-7\x01\x02"), m.Sum(nil)...)
		got, err := io.ReadAll(tc) // up to the dialer's close_notify
		res <- result{got, want, err}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), itTimeout)
	defer cancel()
	c, err := Dial(ctx, ln.Addr().String(), l)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	defer c.Close()
	if err := c.(*Conn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	r := wait(t, res)
	if r.err != nil {
		t.Fatalf("acceptor after %d bytes: %v", len(r.got), r.err)
	}
	if !bytes.Equal(r.got, r.want) {
		t.Fatalf("Dial sent the preface\n%x\nwant\n%x", r.got, r.want)
	}
}

// TestReadBufferAfterBulk: a TLS leg reads into crypto/tls's own small
// buffer until it has carried bulkAfter bytes, and only then reads into a
// large read buffer, so a handshake in progress, an idle leg or a watch
// leg holds none; and it holds that buffer only while it has unread
// bytes, so a bulk leg that has been read to the end holds none either.
func TestReadBufferAfterBulk(t *testing.T) {
	d, a := tlsPair(t)
	if a.raw.rbuf != nil {
		t.Fatal("the accepted leg got its read buffer in the handshake")
	}
	go d.Write(make([]byte, 4<<10))
	if _, err := io.ReadFull(a, make([]byte, 4<<10)); err != nil {
		t.Fatal(err)
	}
	if a.raw.rbuf != nil {
		t.Fatal("a leg that carried 4 KiB got its read buffer")
	}
	go d.Write(make([]byte, 2*bulkAfter))
	if _, err := io.ReadFull(a, make([]byte, 2*bulkAfter)); err != nil {
		t.Fatal(err)
	}
	if a.raw.bufReads == 0 {
		t.Fatalf("a leg that carried %d bytes never read into its read buffer", a.raw.read)
	}
	if a.raw.rbuf != nil {
		t.Fatal("a leg read to the end still holds its read buffer")
	}
}

// tlsPair returns the two ends of a TLS leg over loopback, the dialer's
// and the acceptor's, with deadlines of itTimeout.
func tlsPair(t *testing.T) (d, a *Conn) {
	t.Helper()
	certA, pinA := itCert(t)
	certB, pinB := itCert(t)
	secret := NewSecret()
	al := &Leg{Transport: api.WANTLS, UID: "s", Channel: 0, Secret: secret, Cert: certB, PeerSHA256: func() string { return pinA }}
	dl := &Leg{Transport: api.WANTLS, UID: "s", Channel: 0, Secret: secret, Cert: certA, PeerSHA256: func() string { return pinB }}
	addr, errc, connc := acceptor(t, al)
	ctx, cancel := context.WithTimeout(context.Background(), itTimeout)
	defer cancel()
	dc, err := Dial(ctx, addr, dl)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dc.Close() })
	if err := wait(t, errc); err != nil {
		t.Fatal(err)
	}
	d, a = dc.(*Conn), wait(t, connc).(*Conn)
	a.SetDeadline(time.Now().Add(itTimeout))
	d.SetDeadline(time.Now().Add(itTimeout))
	return d, a
}

// countingWriter counts the writes that reach a leg's socket.
type countingWriter struct {
	io.ReadWriter
	writes int
}

func (w *countingWriter) Write(b []byte) (int, error) {
	w.writes++
	return w.ReadWriter.Write(b)
}

// TestWriteOneSocketWrite: a Write of a copy buffer's size (256 or
// 512 KiB, 16 or 32 full records) reaches the socket in one system call,
// its records' framing included (a batch of exactly 256 KiB wrote the
// 16th record alone), and a Write larger than the largest batch in
// several, every byte delivered in order.
func TestWriteOneSocketWrite(t *testing.T) {
	d, a := tlsPair(t)
	cw := &countingWriter{ReadWriter: d.raw.io}
	d.raw.io = cw // before any write of data: the handshake is over
	for _, tc := range []struct{ size, maxWrites int }{
		{256 << 10, 1}, {512 << 10, 1}, {100 << 10, 1}, {3 << 20, 6},
	} {
		msg := make([]byte, tc.size)
		for i := range msg {
			msg[i] = byte(i * 7)
		}
		cw.writes = 0
		werr := make(chan error, 1)
		go func() {
			_, err := d.Write(msg)
			werr <- err
		}()
		got := make([]byte, tc.size)
		if _, err := io.ReadFull(a, got); err != nil {
			t.Fatal(err)
		}
		if err := wait(t, werr); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, msg) {
			t.Fatalf("a %d-byte Write arrived changed", tc.size)
		}
		if cw.writes < 1 || cw.writes > tc.maxWrites {
			t.Errorf("a %d-byte Write took %d socket writes, want 1 to %d", tc.size, cw.writes, tc.maxWrites)
		}
	}
}

// TestBulkPoolClasses: a read or a batch takes the smallest buffer that
// holds it, the largest for anything larger, and a buffer goes back to
// the pool of its own size.
func TestBulkPoolClasses(t *testing.T) {
	p := newBulkPools(100)
	for _, tc := range []struct{ n, want int }{
		{0, 256 << 10}, {1, 256 << 10}, {256 << 10, 256 << 10}, {256<<10 + 1, 512 << 10}, {512 << 10, 512 << 10}, {4 << 20, 512 << 10},
	} {
		b := p.get(tc.n)
		if len(*b) != tc.want+100 {
			t.Errorf("get(%d): %d bytes, want %d", tc.n, len(*b), tc.want+100)
		}
		if got := bulkSizes[p.class(cap(*b)-p.extra)]; got != tc.want {
			t.Errorf("put of get(%d)'s buffer: into the pool of %d, want %d", tc.n, got, tc.want)
		}
		p.put(b)
	}
}
