// Package progress shows, during each run of an experiment, a line on
// stderr with the payload verified so far and the current rate (s2bench
// --progress). On a terminal the line is rewritten in place twice a
// second and erased at the end of the run; elsewhere (--progress on) a
// line is printed every 2 seconds; with --progress off, nothing.
package progress

import (
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"scistream/internal/bytesize"
)

// Display is the progress line of one run at a time: Start, then End
// when the run is over. A nil or zero Display shows nothing; New makes
// one that does. A Display is used by one goroutine.
type Display struct {
	w        io.Writer
	enabled  bool
	terminal bool

	done chan struct{}  // closed by End to stop the current ticker
	wg   sync.WaitGroup // the ticker goroutine of the current run
}

// The values of New's mode (s2bench --progress).
const (
	Auto = "auto" // on when w is a terminal
	On   = "on"
	Off  = "off"
)

// New returns a Display that writes to w: mode is Auto (on if w is a
// terminal), On or Off.
func New(w io.Writer, mode string) *Display {
	term := false
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			term = true
		}
	}
	return &Display{w: w, enabled: mode == On || mode == Auto && term, terminal: term}
}

// Start shows the progress of a run until End: counter counts verified
// payload bytes; want is the run's total (0 if open-ended). The line is
// drawn by a goroutine of its own, which End stops and waits for.
func (p *Display) Start(label string, counter *atomic.Int64, want int64) {
	if p == nil || !p.enabled {
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

// End stops the current run's progress line and waits until it is
// erased. Idempotent.
func (p *Display) End() {
	if p == nil {
		return
	}
	if p.done != nil {
		close(p.done)
		p.done = nil
	}
	p.wg.Wait()
}

// Stop ends any progress display (at the end, or on an early return).
func (p *Display) Stop() { p.End() }
