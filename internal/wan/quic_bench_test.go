package wan_test

import (
	"crypto/rand"
	"net"
	"syscall"
	"testing"
	"time"

	"scistream/internal/wan"
)

// BenchmarkQUICLeg moves bytes over one QUIC stream on loopback (both
// gateways' halves of a WAN leg, in one process) in 64 KiB writes, as a
// relay would, and reports the ratio to a direct loopback TCP connection
// measured in the same run (x_direct). Profile with
//
//	go test -run '^$' -bench QUICLeg -benchtime 20x -cpuprofile cpu.out ./internal/wan
func BenchmarkQUICLeg(b *testing.B) {
	b.Run("gro", func(b *testing.B) { benchQUICLeg(b, wan.QUICConfig{}) })
	b.Run("no_gro", func(b *testing.B) { benchQUICLeg(b, wan.QUICConfig{DisableGRO: true}) })
}

func benchQUICLeg(b *testing.B, cfg wan.QUICConfig) {
	const op = 16 << 20 // bytes per iteration
	dc, ac, _, _, _ := quicPair(b, cfg)
	b.SetBytes(op)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	el := move(b, dc, ac, int64(b.N)*op)
	cpu := cpuTime() - cpu0
	b.StopTimer()
	x, y := tcpPair(b)
	cpu0 = cpuTime()
	direct := move(b, x, y, int64(b.N)*op)
	dcpu := cpuTime() - cpu0
	b.ReportMetric(direct.Seconds()/el.Seconds(), "x_direct")
	// CPU time (user+system, both ends) per MiB moved: steadier than
	// goodput on a shared machine.
	mib := float64(b.N) * op / (1 << 20)
	b.ReportMetric(cpu.Seconds()*1e3/mib, "cpu-ms/MiB")
	b.ReportMetric(dcpu.Seconds()*1e3/mib, "direct-cpu-ms/MiB")
}

// cpuTime is the user+system CPU time of this process so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
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
