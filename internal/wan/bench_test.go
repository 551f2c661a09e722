package wan_test

import (
	"crypto/rand"
	"fmt"
	"io"
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
	b.Run("relay", func(b *testing.B) {
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
		waitRelays(b, done)
	})
	b.Run("framed", func(b *testing.B) {
		p, outApp := loopback.TCPPair(b)
		inApp, c := loopback.TCPPair(b)
		dc, ac := tlsPair(b)
		done := make(chan error, 2)
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
		benchStream(b, p, c, size)
		p.CloseWrite()
		c.CloseWrite()
		waitRelays(b, done)
	})
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
