package waitfor_test

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"scistream/internal/waitfor"
)

func TestCond(t *testing.T) {
	var n atomic.Int64
	if !waitfor.Cond(time.Minute, func() bool { return n.Add(1) == 5 }) {
		t.Fatal("a condition that comes true was not seen")
	}
	if got := n.Load(); got != 5 {
		t.Fatalf("polled %d times after it held, want to stop at 5", got)
	}
	start := time.Now()
	if waitfor.Cond(20*time.Millisecond, func() bool { return false }) {
		t.Fatal("a false condition reported true")
	}
	if el := time.Since(start); el < 20*time.Millisecond {
		t.Fatalf("gave up after %s, before the 20ms deadline", el)
	}
}

func TestGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	stop := make(chan struct{})
	go func() { <-stop }()
	if runtime.NumGoroutine() <= before {
		t.Fatal("the extra goroutine is not counted")
	}
	close(stop)
	if !waitfor.Goroutines(t, before, time.Minute) {
		t.Fatal("the goroutine that ended was still counted")
	}
}
