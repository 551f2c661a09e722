package wan_test

import (
	"crypto/rand"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"scistream/internal/carry"
	"scistream/internal/loopback"
	"scistream/internal/relay"
	"scistream/internal/relay/relaytest"
	"scistream/internal/wan/wantest"
)

// benchStream sends b.N chunks of size bytes from w to r, each written in
// one call and read with a buffer of the same size, and reports the
// process's CPU time per GB beside the usual MB/s and allocations. Both
// ends run in this process, so the CPU figure includes sender and
// receiver: compare engines by it, within one run.
func benchStream(b *testing.B, w io.Writer, r io.Reader, size int) {
	chunk := make([]byte, size)
	rand.Read(chunk)
	buf := make([]byte, size)
	total := int64(b.N) * int64(size)
	werr := make(chan error, 1)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	cpu0 := wantest.CPUTime(b)
	b.ResetTimer()
	go func() {
		var err error
		for i := 0; i < b.N && err == nil; i++ {
			_, err = w.Write(chunk)
		}
		werr <- err
	}()
	for got := int64(0); got < total; {
		n, err := r.Read(buf)
		got += int64(n)
		if err != nil {
			b.Fatalf("read after %d of %d bytes: %v", got, total, err)
		}
	}
	b.StopTimer()
	if err := <-werr; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric((wantest.CPUTime(b)-cpu0).Seconds()/(float64(total)/1e9), "cpu-s/GB")
}

// BenchmarkTLSLeg measures the TLS WAN leg as the relay drives it (256
// KiB writes and reads) against crypto/tls used directly on the same
// kind of connection (one write per record, one record per read) and
// against plaintext TCP, all measured in the same run.
func BenchmarkTLSLeg(b *testing.B) {
	const size = 256 << 10
	b.Run("wan.Conn", func(b *testing.B) {
		dc, ac := tlsPair(b)
		benchStream(b, dc, ac, size)
	})
	b.Run("crypto-tls", func(b *testing.B) {
		dc, ac := tlsPair(b)
		benchStream(b, dc.Conn, ac.Conn, size)
	})
	b.Run("tcp", func(b *testing.B) {
		c, s := loopback.TCPPair(b)
		benchStream(b, c, s, size)
	})
}

// BenchmarkTLSChain runs the data path of a gateway pair in one process:
// producer -> relay -> TLS WAN leg -> relay -> consumer, with 64 KiB
// messages, beside a direct producer -> consumer connection measured in
// the same run. cpu-s/GB covers the whole process (producer and consumer
// too): the gateways' share is chain minus direct.
func BenchmarkTLSChain(b *testing.B) {
	const size = 64 << 10
	b.Run("direct", func(b *testing.B) {
		p, c := loopback.TCPPair(b)
		benchStream(b, p, c, size)
	})
	b.Run("gateways", func(b *testing.B) {
		p, outApp := loopback.TCPPair(b)
		inApp, c := loopback.TCPPair(b)
		dc, ac := tlsPair(b)
		done := make(chan error, 2)
		eng := relaytest.Engine(b, "splice", relay.Options{})
		go func() { done <- relay.Relay(eng, outApp, dc, func(int64) {}, func(int64) {}) }()
		go func() { done <- relay.Relay(eng, ac, inApp, func(int64) {}, func(int64) {}) }()
		benchStream(b, p, c, size)
		p.CloseWrite()
		c.CloseWrite()
		for range 2 {
			select {
			case err := <-done:
				if err != nil {
					b.Fatalf("Relay: %v", err)
				}
			case <-time.After(testTimeout):
				b.Fatal("Relay did not return")
			}
		}
	})
}

// BenchmarkTLSChainFramed is BenchmarkTLSChain's gateways with the
// application connection carried as positioned frames (internal/carry,
// what a resumable leg runs), beside the plain relay in the same run.
func BenchmarkTLSChainFramed(b *testing.B) {
	const size = 64 << 10
	for _, framed := range []bool{false, true} {
		b.Run(chainName(framed), func(b *testing.B) {
			p, c, wait := chain(b, framed)
			benchStream(b, p, c, size)
			p.CloseWrite()
			c.CloseWrite()
			wait()
		})
	}
}

// BenchmarkTLSChainRequestReply is the request-reply of s2bench compare
// --mode rr through the chain: a 16 KiB message and its 24-byte header
// each way to the consumer, 16 bytes back, one at a time; it reports the
// round trip's median and 99th percentile, directly and through the
// plain relay and the framed one, in the same run. All of it runs in
// one process (s2bench's four processes wake each other across them):
// compare the paths with each other, not with s2bench's figures.
func BenchmarkTLSChainRequestReply(b *testing.B) {
	b.Run("direct", func(b *testing.B) {
		p, c := loopback.TCPPair(b)
		benchRR(b, p, c)
	})
	b.Run("naive", func(b *testing.B) {
		p, c := naiveChain(b)
		benchRR(b, p, c)
	})
	for _, framed := range []bool{false, true} {
		b.Run(chainName(framed), func(b *testing.B) {
			p, c, wait := chain(b, framed)
			benchRR(b, p, c)
			p.CloseWrite()
			c.CloseWrite()
			wait()
		})
	}
}

// naiveChain is s2bench's naive proxy pair in this process: io.Copy each
// way between the application connections and a plain crypto/tls
// connection over loopback TCP.
func naiveChain(b *testing.B) (p, c *net.TCPConn) {
	p, outApp := loopback.TCPPair(b)
	inApp, c := loopback.TCPPair(b)
	cert, _ := newCert(b)
	dr, ar := loopback.TCPPair(b)
	dc := tls.Client(dr, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
	ac := tls.Server(ar, &tls.Config{Certificates: []tls.Certificate{*cert}, MinVersion: tls.VersionTLS13})
	herr := make(chan error, 1)
	go func() { herr <- ac.Handshake() }()
	if err := dc.Handshake(); err != nil {
		b.Fatal(err)
	}
	if err := <-herr; err != nil {
		b.Fatal(err)
	}
	pipe := func(x, y net.Conn) {
		go func() { io.Copy(y, x); y.Close() }()
		go func() { io.Copy(x, y); x.Close() }()
	}
	pipe(outApp, dc)
	pipe(ac, inApp)
	b.Cleanup(func() { dc.Close(); ac.Close() })
	return p, c
}

func chainName(framed bool) string {
	if framed {
		return "framed"
	}
	return "relay"
}

// benchRR sends b.N requests of 16 KiB and a 24-byte header from p, each
// in one write, which c reads whole and answers with 16 bytes.
func benchRR(b *testing.B, p, c *net.TCPConn) {
	req, reply := make([]byte, 16<<10+24), make([]byte, 16)
	rand.Read(req)
	errc := make(chan error, 1)
	go func() {
		buf := make([]byte, len(req))
		for {
			if _, err := io.ReadFull(c, buf); err != nil {
				errc <- err
				return
			}
			if _, err := c.Write(reply); err != nil {
				errc <- err
				return
			}
		}
	}()
	relaytest.RoundTrips(b, p, req, len(reply))
	p.CloseWrite()
	if err := <-errc; err != io.EOF {
		b.Fatalf("consumer: %v", err)
	}
}

// chain starts a gateway pair's data path in this process: producer p ->
// relay -> TLS WAN leg -> relay -> consumer c, the legs carrying the
// bytes plain (relay.Relay) or as positioned frames (carry, what a
// resumable leg runs). wait waits for both relays, once p and c closed
// their writes.
func chain(b *testing.B, framed bool) (p, c *net.TCPConn, wait func()) {
	p, outApp := loopback.TCPPair(b)
	inApp, c := loopback.TCPPair(b)
	dc, ac := tlsPair(b)
	done := make(chan error, 2)
	wait = func() { waitRelays(b, done) }
	if !framed {
		eng := relaytest.Engine(b, "splice", relay.Options{})
		go func() { done <- relay.Relay(eng, outApp, dc, func(int64) {}, func(int64) {}) }()
		go func() { done <- relay.Relay(eng, ac, inApp, func(int64) {}, func(int64) {}) }()
		return p, c, wait
	}
	cfg := carry.Config{}
	go func() {
		d := carry.New(cfg, true)
		if _, err := dc.Write(carry.AppendOpen(nil, carry.Open{ID: carry.ID{1}, Window: d.Window(), Stripes: 1})); err != nil {
			done <- err
			return
		}
		done <- d.Relay(outApp, dc, carry.Counts{})
	}()
	go func() {
		buf := make([]byte, 64)
		h, err := carry.ReadHeader(ac, buf)
		if err != nil || h.Type != carry.TypeOpen {
			done <- fmt.Errorf("open: %v %q", err, h.Type)
			return
		}
		o := make([]byte, h.Length)
		if _, err := io.ReadFull(ac, o); err != nil {
			done <- err
			return
		}
		op, err := carry.ParseOpen(o)
		if err != nil {
			done <- err
			return
		}
		a := carry.New(cfg, false)
		a.SetPeerWindow(op.Window)
		if _, err := ac.Write(carry.AppendHeader(nil, carry.Header{Type: carry.TypeAccepted, Length: a.Window()})); err != nil {
			done <- err
			return
		}
		done <- a.Relay(inApp, ac, carry.Counts{})
	}()
	return p, c, wait
}

// waitRelays waits for both relays of a chain to end in order.
func waitRelays(b *testing.B, done chan error) {
	b.Helper()
	for range 2 {
		select {
		case err := <-done:
			if err != nil {
				b.Fatalf("relay: %v", err)
			}
		case <-time.After(testTimeout):
			b.Fatal("a relay did not return")
		}
	}
}
