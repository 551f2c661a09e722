package wanquic_test

import (
	"context"
	"crypto/rand"
	"net"
	"testing"
	"time"

	"scistream/internal/api"
	"scistream/internal/loopback"
	"scistream/internal/relay"
	"scistream/internal/relay/relaytest"
	"scistream/internal/wan"
	"scistream/internal/wan/wantest"
	"scistream/internal/wanquic"
)

// BenchmarkQUICLeg moves bytes over one QUIC stream on loopback (both
// gateways' halves of a WAN leg, in one process) in 64 KiB writes, as a
// relay would, and reports the ratio to a direct loopback TCP connection
// measured in the same run (x_direct). Profile with
//
//	go test -run '^$' -bench QUICLeg -benchtime 20x -cpuprofile cpu.out ./internal/wanquic
func BenchmarkQUICLeg(b *testing.B) {
	b.Run("gro", func(b *testing.B) { benchQUICLeg(b, wanquic.Config{}) })
	b.Run("no_gro", func(b *testing.B) { benchQUICLeg(b, wanquic.Config{DisableGRO: true}) })
}

func benchQUICLeg(b *testing.B, cfg wanquic.Config) {
	const op = 16 << 20 // bytes per iteration
	dc, ac, _, _, _ := quicPair(b, cfg)
	b.SetBytes(op)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := wantest.CPUTime(b)
	el := move(b, dc, ac, int64(b.N)*op)
	cpu := wantest.CPUTime(b) - cpu0
	b.StopTimer()
	x, y := loopback.TCPPair(b)
	cpu0 = wantest.CPUTime(b)
	direct := move(b, x, y, int64(b.N)*op)
	dcpu := wantest.CPUTime(b) - cpu0
	b.ReportMetric(direct.Seconds()/el.Seconds(), "x_direct")
	// CPU time (user+system, both ends) per MiB moved: steadier than
	// goodput on a shared machine.
	mib := float64(b.N) * op / (1 << 20)
	b.ReportMetric(cpu.Seconds()*1e3/mib, "cpu-ms/MiB")
	b.ReportMetric(dcpu.Seconds()*1e3/mib, "direct-cpu-ms/MiB")
}

// move writes total bytes to w in 64 KiB writes and reads them from r
// through a 256 KiB buffer, returning the time taken.
func move(b *testing.B, w, r net.Conn, total int64) time.Duration {
	b.Helper()
	chunk := make([]byte, 64<<10)
	rand.Read(chunk)
	buf := make([]byte, 256<<10)
	werr := make(chan error, 1)
	start := time.Now()
	go func() {
		var err error
		for left := total; left > 0 && err == nil; left -= int64(len(chunk)) {
			_, err = w.Write(chunk[:min(int64(len(chunk)), left)])
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
	el := time.Since(start)
	if err := <-werr; err != nil {
		b.Fatal(err)
	}
	return el
}

// BenchmarkGatewayPath moves bytes producer -> relay -> WAN leg -> relay
// -> consumer in one process, as the two gateways do (the buffer engine, the
// engine every encrypted leg uses), for the tls and quic legs, and reports
// goodput, CPU time per MiB (both gateways and both applications) and the
// ratio to a direct TCP connection measured in the same run.
func BenchmarkGatewayPath(b *testing.B) {
	for _, tr := range []string{api.WANTLS, api.WANQUIC} {
		b.Run(tr, func(b *testing.B) {
			var dc, ac net.Conn
			if tr == api.WANQUIC {
				dc, ac, _, _, _ = quicPair(b, wanquic.Config{})
			} else {
				dc, ac = tlsPair(b)
			}
			prodApp, prodGW := loopback.TCPPair(b)
			consGW, consApp := loopback.TCPPair(b)
			done := make(chan error, 2)
			eng := relaytest.Engine(b, "buffer", relay.Options{})
			go func() { done <- relay.Relay(eng, prodGW, dc, func(int64) {}, func(int64) {}) }()
			go func() { done <- relay.Relay(eng, consGW, ac, func(int64) {}, func(int64) {}) }()
			const op = 16 << 20
			b.SetBytes(op)
			b.ResetTimer()
			cpu0 := wantest.CPUTime(b)
			el := move(b, prodApp, consApp, int64(b.N)*op)
			cpu := wantest.CPUTime(b) - cpu0
			b.StopTimer()
			prodApp.Close()
			consApp.Close()
			<-done
			<-done
			x, y := loopback.TCPPair(b)
			direct := move(b, x, y, int64(b.N)*op)
			mib := float64(b.N) * op / (1 << 20)
			b.ReportMetric(direct.Seconds()/el.Seconds(), "x_direct")
			b.ReportMetric(cpu.Seconds()*1e3/mib, "cpu-ms/MiB")
		})
	}
}

// tlsPair returns the two ends of one TLS leg, for comparison.
func tlsPair(b *testing.B) (dc, ac net.Conn) {
	dl, al := wantest.Legs(b, api.WANTLS)
	addr, next := wantest.AcceptLegs(b, al)
	ctx, cancel := context.WithTimeout(context.Background(), wantest.Timeout)
	defer cancel()
	dc, err := wan.Dial(ctx, addr, dl)
	if err != nil {
		b.Fatalf("Dial: %v", err)
	}
	b.Cleanup(func() { dc.Close() })
	a := next(b)
	if a.Err != nil {
		b.Fatalf("AcceptLeg: %v", a.Err)
	}
	return dc, a.Conn
}
