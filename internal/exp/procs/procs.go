// Package procs watches and bounds the processes an experiment runs: a
// process's resident memory sampled to its peak (WatchRSS), this
// process's limit of open files (NoFileLimit, RaiseNoFile), and the first
// bytes of a helper process's output (LimitWriter).
package procs

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"scistream/internal/bench"
)

// RSSWatch samples a process's resident memory (VmRSS) every 50 ms and
// keeps the peak. Stop ends its goroutine.
type RSSWatch struct {
	pid  int
	done chan struct{}
	wg   sync.WaitGroup
	max  atomic.Int64
}

// WatchRSS starts watching process pid. The caller must call Stop.
func WatchRSS(pid int) *RSSWatch {
	w := &RSSWatch{pid: pid, done: make(chan struct{})}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			w.Now()
			select {
			case <-w.done:
				return
			case <-t.C:
			}
		}
	}()
	return w
}

// Now returns the process's resident memory in bytes (0 if unknown) and
// keeps the peak.
func (w *RSSWatch) Now() int64 {
	v, err := bench.ProcessRSS(w.pid)
	if err != nil {
		return 0
	}
	for {
		m := w.max.Load()
		if v <= m || w.max.CompareAndSwap(m, v) {
			return v
		}
	}
}

// Peak returns the highest VmRSS seen, and starts over.
func (w *RSSWatch) Peak() int64 { return w.max.Swap(w.Now()) }

// Stop ends the sampling and waits for its goroutine.
func (w *RSSWatch) Stop() {
	close(w.done)
	w.wg.Wait()
}

// NoFileLimit returns this process's hard limit of open files: the
// processes it starts (s2cs, an s2bench consumer) run with their soft
// limit raised to one below it (the Go runtime does that at start).
func NoFileLimit() (int, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("read the limit of open files: %w", err)
	}
	return int(min(lim.Max, 1<<30)), nil
}

// RaiseNoFile makes room for n open descriptors in this process, raising
// the hard limit too if needed (root may).
func RaiseNoFile(n uint64) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	if lim.Cur >= n {
		return nil
	}
	lim.Cur, lim.Max = n, max(lim.Max, n)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("raise the limit of open files to %d: %w (run as root, or ulimit -n %d first)", n, err, n)
	}
	return nil
}

// LimitWriter returns a writer that passes the first n bytes written to
// it on to w and drops the rest, reporting every write as whole, so the
// copy from a helper process's output goes on to its end. It is safe
// for concurrent use.
func LimitWriter(w io.Writer, n int) io.Writer { return &limitedWriter{w: w, n: n} }

// limitedWriter keeps the first n bytes written to it.
type limitedWriter struct {
	mu sync.Mutex
	w  io.Writer
	n  int
}

func (l *limitedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n > 0 {
		k := min(len(b), l.n)
		l.w.Write(b[:k])
		l.n -= k
	}
	return len(b), nil
}
