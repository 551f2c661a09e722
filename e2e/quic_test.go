package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"scistream/internal/api"
	"scistream/internal/certs"
	"scistream/internal/wan"
)

// The correctness suite of the other transports, through the real
// binaries with --wan quic: the gateways carry each application TCP
// connection as a QUIC stream.

// TestQUICGigabyte streams random bytes through both gateways over QUIC
// and checks they arrive byte-identical: 1 GiB, or 256 MiB in -short mode.
func TestQUICGigabyte(t *testing.T) {
	total := int64(1 << 30)
	if testing.Short() {
		total = 256 << 20
	}
	p := newPair(t, pairOpts{})
	app := newSink(t, "127.0.0.1", nil)
	so := p.wire("alice", app.host(), app.port(), 1, "--wan", "quic")
	c, err := dialFrom("", so.Listeners[0])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	sum := sendRandom(t, c, total, 3)
	c.CloseWrite()
	r := app.next(t, 3*time.Minute)
	el := time.Since(start)
	if r.err != nil || r.n != total || r.sum != sum {
		t.Fatalf("consumer got %d bytes (err %v), sha256 match %v; want %d identical bytes", r.n, r.err, r.sum == sum, total)
	}
	// The producer sees the consumer's end as EOF: nothing was cut.
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if b, err := io.ReadAll(c); err != nil || len(b) != 0 {
		t.Fatalf("producer read %d bytes, %v after the transfer; want a clean EOF", len(b), err)
	}
	t.Logf("%d MiB over wan=quic in %s (%.0f MB/s)", total>>20, el.Round(time.Millisecond), float64(total)/el.Seconds()/1e6)
}

// TestQUICHalfClose: the producer finishes sending, the consumer sees EOF,
// replies, and the producer still reads the reply, then EOF.
func TestQUICHalfClose(t *testing.T) {
	p := newPair(t, pairOpts{})
	reply := bytes.Repeat([]byte("thanks, got it "), 10000)
	app := newSink(t, "127.0.0.1", reply)
	so := p.wire("alice", app.host(), app.port(), 1, "--wan", "quic")
	c, err := dialFrom("", so.Listeners[0])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("request"))
	c.CloseWrite()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil || !bytes.Equal(got, reply) {
		t.Fatalf("producer read %d bytes, %v; want the %d-byte reply then EOF", len(got), err, len(reply))
	}
	if r := app.next(t, 5*time.Second); string(r.data) != "request" {
		t.Fatalf("consumer got %q", r.data)
	}
}

// TestQUICManyConnections: one channel (one QUIC connection) carries 64
// concurrent application connections, each arriving intact.
func TestQUICManyConnections(t *testing.T) {
	p := newPair(t, pairOpts{})
	app := newSink(t, "127.0.0.1", nil)
	so := p.wire("alice", app.host(), app.port(), 1, "--wan", "quic")
	const conns, size = 64, 1 << 20
	type sent struct {
		sum [32]byte
		err error
	}
	results := make(chan sent, conns)
	var wg sync.WaitGroup
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A generous dial timeout: 64 dials at once on a loaded
			// machine; a dial that gives up would still be accepted and
			// relayed as an empty connection.
			d := net.Dialer{Timeout: 30 * time.Second}
			nc, err := d.Dial("tcp", so.Listeners[0])
			if err != nil {
				results <- sent{err: err}
				return
			}
			c := nc.(*net.TCPConn)
			defer c.Close()
			c.SetDeadline(time.Now().Add(2 * time.Minute))
			h := sha256.New()
			block := bytes.Repeat([]byte{byte(i), byte(i >> 8), 0x5a, 0xc3}, size/4)
			h.Write(block)
			if _, err := c.Write(block); err != nil {
				results <- sent{err: err}
				return
			}
			c.CloseWrite()
			var r sent
			copy(r.sum[:], h.Sum(nil))
			_, r.err = io.Copy(io.Discard, c) // the far side finishes cleanly
			results <- r
		}()
	}
	got := map[[32]byte]bool{}
	var bad []string
	for i := range conns {
		r := app.next(t, 2*time.Minute)
		if r.n != size || r.err != nil {
			bad = append(bad, fmt.Sprintf("consumer connection %d: %d bytes, err %v", i, r.n, r.err))
			continue
		}
		got[r.sum] = true
	}
	wg.Wait()
	close(results)
	sums := map[[32]byte]bool{}
	for r := range results {
		if r.err != nil {
			bad = append(bad, fmt.Sprintf("producer: %v", r.err))
			continue
		}
		sums[r.sum] = true
	}
	if len(bad) > 0 {
		t.Fatalf("%d failures: %s", len(bad), strings.Join(bad, "; "))
	}
	if len(sums) != conns || len(got) != conns {
		t.Fatalf("%d distinct producer streams, %d distinct received; want %d", len(sums), len(got), conns)
	}
	for s := range sums {
		if !got[s] {
			t.Fatalf("a producer's stream never arrived intact")
		}
	}
}

// TestQUICReleaseMidTransfer: a release during a transfer aborts the
// producer's connection, ends the consumer's, frees the ports (TCP and
// UDP) and the descriptors, and a new stream gets the same ports.
func TestQUICReleaseMidTransfer(t *testing.T) {
	p := newPair(t, pairOpts{portRange: "5100-5103"})
	app := newSink(t, "127.0.0.1", nil)
	baseProd, baseCons := fdCount(p.prod.PID()), fdCount(p.cons.PID())
	so := p.wire("alice", app.host(), app.port(), 2, "--wan", "quic")
	c, err := dialFrom("", so.Listeners[0])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	chunk := make([]byte, 64<<10)
	written := 0
	// Data flows end to end before the release.
	for written < 8<<20 {
		n, err := c.Write(chunk)
		if err != nil {
			t.Fatal(err)
		}
		written += n
	}
	p.mustS2UC("alice", "release", so.UID)

	c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	var werr error
	for i := 0; i < 10000 && werr == nil; i++ {
		_, werr = c.Write(chunk)
	}
	if werr == nil || os.IsTimeout(werr) {
		t.Fatalf("producer connection still open after release (err %v)", werr)
	}
	r := app.next(t, 10*time.Second)
	if r.err == nil && r.n >= int64(written) {
		t.Logf("consumer got %d bytes with a clean end", r.n)
	}
	for _, l := range so.Listeners {
		if _, err := dialFrom("", l); err == nil {
			t.Fatalf("listener %s still accepts after release", l)
		}
		if !udpFree(l) {
			t.Fatalf("UDP port %s still bound after release", l)
		}
	}
	eventually(t, 5*time.Second, "gateways to return to their baseline descriptors", func() bool {
		return fdCount(p.prod.PID()) <= baseProd && fdCount(p.cons.PID()) <= baseCons
	})
	so2 := p.wire("alice", app.host(), app.port(), 2, "--wan", "quic")
	if strings.Join(so2.Listeners, ",") != strings.Join(so.Listeners, ",") {
		t.Fatalf("released ports not reused: %v then %v", so.Listeners, so2.Listeners)
	}
	c2, err := dialFrom("", so2.Listeners[1])
	if err != nil {
		t.Fatal(err)
	}
	c2.Write([]byte("new stream"))
	c2.CloseWrite()
	if r := app.next(t, 10*time.Second); string(r.data) != "new stream" {
		t.Fatalf("consumer got %q on the new stream", r.data)
	}
	c2.Close()
}

// TestQUICPeerDeath: the consumer's gateway is killed (SIGKILL) in the
// middle of a transfer; the producer's connection is aborted, not ended
// cleanly. Once the gateway is back (restored on the same ports, TCP and
// UDP) new connections work again, and again after the producer's gateway
// restarts.
func TestQUICPeerDeath(t *testing.T) {
	p := newPair(t, pairOpts{})
	app := newSink(t, "127.0.0.1", nil)
	so := p.wire("alice", app.host(), app.port(), 1, "--wan", "quic")
	c, err := dialFrom("", so.Listeners[0])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	chunk := make([]byte, 64<<10)
	for range 64 {
		if _, err := c.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	p.restart(&p.cons, false)
	// The dead gateway's QUIC connection ends by a stateless reset from
	// its restarted successor (or the idle timeout): the producer's
	// connection must fail, never read as a clean EOF.
	c.SetDeadline(time.Now().Add(30 * time.Second))
	var err2 error
	for i := 0; i < 100000 && err2 == nil; i++ {
		_, err2 = c.Write(chunk)
	}
	if err2 == nil || os.IsTimeout(err2) {
		t.Fatalf("producer connection not aborted after the consumer gateway died (err %v)", err2)
	}
	if r := app.next(t, 10*time.Second); r.err == nil && r.n > 0 {
		t.Logf("consumer's connection ended after %d bytes", r.n)
	}
	// New connections reach the restored stream (the outbound side dials
	// a fresh QUIC connection once it learns the old one is gone).
	eventually(t, 30*time.Second, "a new connection through the restarted gateway", func() bool {
		c, err := dialFrom("", so.Listeners[0])
		if err != nil {
			return false
		}
		defer c.Close()
		c.Write([]byte("after restart"))
		c.CloseWrite()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = io.Copy(io.Discard, c)
		return err == nil
	})
	for {
		r := app.next(t, 5*time.Second)
		if string(r.data) == "after restart" {
			break
		}
	}
	// The producer gateway restarts gracefully: its restored stream dials
	// a new QUIC connection on the first application connection.
	p.restart(&p.prod, true)
	c2, err := dialFrom("", so.Listeners[0])
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	c2.Write([]byte("after producer restart"))
	c2.CloseWrite()
	if r := app.next(t, 10*time.Second); string(r.data) != "after producer restart" {
		t.Fatalf("consumer got %q after the producer gateway restarted", r.data)
	}
}

// TestQUICRefusesStrangers: on an inbound QUIC stream's UDP port, a peer
// with another certificate, the producer gateway's own certificate without
// the stream secret, and a plain TCP connection to the same port are all
// refused and counted, and the stream keeps working.
func TestQUICRefusesStrangers(t *testing.T) {
	p := newPair(t, pairOpts{})
	app := newSink(t, "127.0.0.1", nil)
	so := p.wire("alice", app.host(), app.port(), 1, "--wan", "quic")
	var st api.Stream
	json.Unmarshal([]byte(p.mustS2UC("alice", "status", so.UID, "--s2cs", p.cons.Addr, "--server_cert", p.cons.CertFile, "--output", "json")), &st)
	wanAddr := st.Listeners[0]

	certPEM, keyPEM, _ := certs.SelfSigned([]string{"127.0.0.1"}, time.Hour)
	stranger, _ := tls.X509KeyPair(certPEM, keyPEM)
	prodID, err := certs.Load(filepath.Join(p.prod.Opts.StateDir, "s2cs.crt"), filepath.Join(p.prod.Opts.StateDir, "s2cs.key"))
	if err != nil {
		t.Fatal(err)
	}
	try := func(cert tls.Certificate, payload []byte) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err := quic.DialAddr(ctx, wanAddr, &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{cert},
			MinVersion: tls.VersionTLS13, NextProtos: []string{wan.ALPN}}, &quic.Config{})
		if err != nil {
			return err
		}
		defer c.CloseWithError(0, "")
		s, err := c.OpenStreamSync(ctx)
		if err != nil {
			return err
		}
		s.SetDeadline(time.Now().Add(5 * time.Second))
		s.Write(payload)
		// A refused stream is reset (and its connection closed): reading
		// never yields application bytes.
		_, err = s.Read(make([]byte, 1))
		return err
	}
	if err := try(stranger, []byte("hello")); err == nil {
		t.Fatal("a stranger's certificate was accepted")
	}
	fakePreface := append([]byte("S2W1"), byte(len(so.UID)))
	fakePreface = append(fakePreface, so.UID...)
	fakePreface = append(fakePreface, 0, 0)
	fakePreface = append(fakePreface, bytes.Repeat([]byte{0xAB}, 32)...)
	if err := try(prodID.TLS, fakePreface); err == nil {
		t.Fatal("a QUIC stream without the stream secret was accepted")
	}
	raw, err := dialFrom("", wanAddr)
	if err == nil {
		raw.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
		raw.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, _ := raw.Read(make([]byte, 64)); n > 0 {
			t.Fatalf("a TCP connection to a QUIC stream's port got %d bytes of answer", n)
		}
		raw.Close()
	}
	c, err := dialFrom("", so.Listeners[0])
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("unharmed"))
	c.Close()
	if r := app.next(t, 10*time.Second); string(r.data) != "unharmed" {
		t.Fatalf("stream broken after refused WAN connections: %q", r.data)
	}
	eventually(t, 5*time.Second, "the refusals to be counted", func() bool {
		var after api.Stream
		json.Unmarshal([]byte(p.mustS2UC("alice", "status", so.UID, "--s2cs", p.cons.Addr, "--server_cert", p.cons.CertFile, "--output", "json")), &after)
		return after.Stats != nil && after.Stats.RejectedConns >= 3
	})
}
