package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"scistream/internal/bytesize"
)

// progress shows, during each run, a line with the payload verified so
// far and the current rate. On a terminal the line is rewritten in place
// twice a second and erased at the end of the run; elsewhere (--progress
// on) a line is printed every 2 seconds.
type progress struct {
	w        io.Writer
	enabled  bool
	terminal bool

	done chan struct{}  // closed by end to stop the current ticker
	wg   sync.WaitGroup // the ticker goroutine of the current run
}

func newProgress(w io.Writer, mode string) *progress {
	term := false
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			term = true
		}
	}
	return &progress{w: w, enabled: mode == "on" || mode == "auto" && term, terminal: term}
}

// start shows the progress of a run until end: counter counts verified
// payload bytes; want is the run's total (0 if open-ended).
func (p *progress) start(label string, counter *atomic.Int64, want int64) {
	if !p.enabled {
		return
	}
	p.done = make(chan struct{})
	every := 2 * time.Second
	if p.terminal {
		every = 500 * time.Millisecond
	}
	p.wg.Add(1)
	go func(done chan struct{}) {
		defer p.wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		begin, last, lastN := time.Now(), time.Now(), int64(0)
		for {
			select {
			case <-done:
				if p.terminal {
					fmt.Fprint(p.w, "\r\033[K")
				}
				return
			case now := <-t.C:
				n := counter.Load()
				rate := float64(n-lastN) / now.Sub(last).Seconds() / 1e6
				last, lastN = now, n
				of := ""
				if want > 0 {
					of = fmt.Sprintf(" of %s (%.0f%%)", bytesize.Format(want), 100*float64(n)/float64(want))
				}
				line := fmt.Sprintf("  %s: %.1f MB verified%s, %.0f MB/s now, %.0f s", label, float64(n)/1e6, of, rate, now.Sub(begin).Seconds())
				if p.terminal {
					fmt.Fprint(p.w, "\r\033[K"+line)
				} else {
					fmt.Fprintln(p.w, line)
				}
			}
		}
	}(p.done)
}

// end stops the current run's progress line. Idempotent.
func (p *progress) end() {
	if p.done != nil {
		close(p.done)
		p.done = nil
	}
	p.wg.Wait()
}

// stop ends any progress display (at the end, or on an early return).
func (p *progress) stop() { p.end() }
