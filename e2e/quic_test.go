package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"scistream/internal/api"
	"scistream/internal/certs"
	"scistream/internal/wan"
)

// QUIC-specific behaviour through the real binaries with --wan quic (the
// correctness suite every configuration passes, QUIC included, is
// TestEngineSuite): a gateway's death and restart, and refusal of
// strangers on a stream's UDP port.

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
	// The writes above may all sit in socket buffers: the consumer
	// gateway dies only once it has carried the connection through to
	// the application, whose end is checked below.
	eventually(t, 10*time.Second, "the consumer application to accept the relayed connection", func() bool {
		return app.accepted.Load() >= 1
	})
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
