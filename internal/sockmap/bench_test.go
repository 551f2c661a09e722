package sockmap_test

import (
	"io"
	"net"
	"slices"
	"testing"
	"time"

	"scistream/internal/loopback"
	"scistream/internal/relay"
	"scistream/internal/relay/relaytest"
	"scistream/internal/sockmap"
)

// path is an application pair, A -> B, either connected directly or
// through two relays in series (as through both gateways).
type path struct {
	name string
	A, B *net.TCPConn
}

func paths(b *testing.B) []path {
	r := newRedirector(b, sockmap.Config{})
	direct := path{name: "direct"}
	direct.A, direct.B = loopback.TCPPair(b)
	ps := []path{direct}
	for _, e := range []relay.Engine{relaytest.Engine(b, "splice", relay.Options{}), sockmapEngine(b, r)} {
		p := path{name: e.Name()}
		var ra, rb, ma, mb *net.TCPConn
		p.A, ra = loopback.TCPPair(b)
		rb, ma = loopback.TCPPair(b)
		mb, p.B = loopback.TCPPair(b)
		for _, hop := range [][2]*net.TCPConn{{ra, rb}, {ma, mb}} {
			done := make(chan struct{})
			go func() {
				defer close(done)
				relay.Relay(e, hop[0], hop[1], func(int64) {}, func(int64) {})
			}()
			b.Cleanup(func() {
				relay.Abort(hop[0])
				relay.Abort(hop[1])
				<-done
			})
		}
		ps = append(ps, p)
	}
	for _, p := range ps {
		p.A.SetNoDelay(true)
		p.B.SetNoDelay(true)
	}
	return ps
}

func pct(d []time.Duration, q float64) float64 {
	slices.Sort(d)
	return float64(d[int(q*float64(len(d)-1))].Nanoseconds()) / 1e3
}

// BenchmarkRequestReply16KiB: 16 KiB request, 16 KiB reply, through two
// relays, on each path in turn (so all see the same machine load). It
// reports p50/p99 in microseconds per path and their ratio to direct.
func BenchmarkRequestReply16KiB(b *testing.B) {
	ps := paths(b)
	const size = 16 << 10
	for _, p := range ps {
		go func() { // echo
			buf := make([]byte, size)
			for {
				if _, err := io.ReadFull(p.B, buf); err != nil {
					return
				}
				if _, err := p.B.Write(buf); err != nil {
					return
				}
			}
		}()
	}
	req := make([]byte, size)
	rep := make([]byte, size)
	lat := make([][]time.Duration, len(ps))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		for i, p := range ps {
			t0 := time.Now()
			if _, err := p.A.Write(req); err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadFull(p.A, rep); err != nil {
				b.Fatal(err)
			}
			lat[i] = append(lat[i], time.Since(t0))
		}
	}
	b.StopTimer()
	d50, d99 := pct(lat[0], 0.5), pct(lat[0], 0.99)
	for i, p := range ps {
		p50, p99 := pct(lat[i], 0.5), pct(lat[i], 0.99)
		b.ReportMetric(p50, p.name+"_p50_us")
		b.ReportMetric(p99, p.name+"_p99_us")
		if i > 0 {
			b.ReportMetric(p50/d50, p.name+"_p50/direct")
			b.ReportMetric(p99/d99, p.name+"_p99/direct")
		}
	}
}

// BenchmarkThroughput moves 64 MiB per iteration over each path and
// reports MB/s per path and the ratio to direct.
func BenchmarkThroughput(b *testing.B) {
	ps := paths(b)
	const op = 64 << 20
	chunk := make([]byte, 1<<20)
	rate := make([]float64, len(ps))
	b.SetBytes(op)
	b.ResetTimer()
	for range b.N {
		for i, p := range ps {
			t0 := time.Now()
			werr := make(chan error, 1)
			go func() {
				var err error
				for left := op; left > 0 && err == nil; left -= len(chunk) {
					_, err = p.A.Write(chunk)
				}
				werr <- err
			}()
			if _, err := io.ReadFull(p.B, make([]byte, op)); err != nil {
				b.Fatal(err)
			}
			if err := <-werr; err != nil {
				b.Fatal(err)
			}
			rate[i] += op / time.Since(t0).Seconds() / 1e6
		}
	}
	b.StopTimer()
	for i, p := range ps {
		b.ReportMetric(rate[i]/float64(b.N), p.name+"_MB/s")
		if i > 0 {
			b.ReportMetric(rate[i]/rate[0], p.name+"/direct")
		}
	}
}
