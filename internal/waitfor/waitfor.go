// Package waitfor polls a condition until it holds or a deadline passes:
// how tests wait on state that no event announces (a byte counter, a
// socket's queue, a goroutine count, a process that exits).
package waitfor

import (
	"runtime"
	"testing"
	"time"
)

// Interval is how often a condition is polled.
const Interval = time.Millisecond

// Cond polls cond every Interval until it returns true, and reports
// whether it did within the given time. cond runs on the caller's
// goroutine, first at once.
func Cond(within time.Duration, cond func() bool) bool {
	if cond() {
		return true
	}
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	tick := time.NewTicker(Interval)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			if cond() {
				return true
			}
		case <-deadline.C:
			return cond()
		}
	}
}

// Must is Cond that fails tb, saying what it waited for, when the time
// runs out. Call it from the test's goroutine.
func Must(tb testing.TB, within time.Duration, what string, cond func() bool) {
	tb.Helper()
	if !Cond(within, cond) {
		tb.Fatalf("timed out after %s waiting for %s", within, what)
	}
}

// Goroutines waits until at most n goroutines run in the process (the
// count before a test, so none of those it started is left) and reports
// whether that happened within the given time; if not it fails tb with
// every goroutine's stack.
func Goroutines(tb testing.TB, n int, within time.Duration) bool {
	tb.Helper()
	if Cond(within, func() bool { return runtime.NumGoroutine() <= n }) {
		return true
	}
	buf := make([]byte, 1<<20)
	tb.Errorf("goroutines: %d after %s, want at most %d\n%s", runtime.NumGoroutine(), within, n, buf[:runtime.Stack(buf, true)])
	return false
}
