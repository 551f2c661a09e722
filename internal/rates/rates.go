// Package rates samples a stream's byte counters into rates and their
// volatility (seed 004: transfer rate from byte counters
// read at intervals, its standard deviation, and the steady state with
// ramp-up and ramp-down sliced off).
//
// One goroutine per gateway, the sampler, wakes every Settings interval
// and reads every live stream's two byte counters (Tracker.Sample); the bytes moved since the stream's previous sample over the
// time between the two readings is one rate sample per direction,
// B = (Q2 - Q1) / (t2 - t1) on the monotonic clock (the time actually
// elapsed, so a late wake-up does not skew it). Each direction keeps,
// in O(1) per sample and bounded memory:
//
//   - life: mean, standard deviation and peak of every sample since the
//     stream started on this gateway, idle samples included (so its mean
//     is the bytes over the time);
//   - window: the same over the samples of the last the window, kept in
//     a ring that is also the history the status page draws;
//   - steady: the same over the steady-state samples (the rule below),
//     over the stream's life and over its latest run.
//
// The steady-state rule. A run is a sequence of consecutive samples in
// each of which at least one byte moved; an idle sample ends it. In every
// run the first T samples are its ramp-up and the last T its tail, and
// neither counts, where T = ceil(1 s / RateInterval), at least 1: at the
// default interval of one second, the partial second in which a transfer
// started (with its first round trips of TCP slow start) and the partial
// second in which it stopped. A sample is counted once T more samples of
// its run have come (until then it may be the tail), so the steady
// figures lag the live rate by T intervals, and a run of fewer than 2T+1
// samples has no steady state. A run's steady figures are final once the
// run has ended (api.RateRun.Ended).
//
// Each sample weighs as much as the time it covers (a late wake-up makes
// one sample longer and the next shorter), so a mean is the bytes of its
// samples over their time, and the standard deviation is the population's
// (the samples are the whole of what is described, not a draw from it),
// weighted the same way; with samples of equal length both are the plain
// ones. They are kept with West's weighted form of Welford's online
// algorithm, so months of samples lose no precision.
package rates

import (
	"math"
	"sync"
	"time"

	"scistream/internal/api"
)

// Defaults and bounds of the settings (a gateway's observe.Config).
const (
	DefaultInterval = time.Second
	DefaultWindow   = time.Minute
	MinInterval     = 10 * time.Millisecond
	MaxInterval     = time.Minute
	// MaxWindowSamples bounds the samples a stream's window holds (16
	// bytes each), whatever RateWindow/RateInterval asks for.
	MaxWindowSamples = 3600
	// steadyTrimSpan is the least time trimmed at each end of a run.
	steadyTrimSpan = time.Second
)

// Settings are the resolved rate settings every stream of a gateway
// shares.
type Settings struct {
	interval time.Duration
	window   int // samples in the window
	trim     int // T of the steady-state rule
}

// NewSettings resolves a sampling interval and a window (zero or
// negative: the defaults).
func NewSettings(interval, window time.Duration) Settings {
	if interval <= 0 {
		interval = DefaultInterval
	}
	if window <= 0 {
		window = DefaultWindow
	}
	return Settings{
		interval: interval,
		window:   int(min(max(1, window/interval), MaxWindowSamples)),
		trim:     int(max(1, (steadyTrimSpan+interval-1)/interval)),
	}
}

// Interval returns the time between two samples.
func (s Settings) Interval() time.Duration { return s.interval }

// Last returns the time of the tracker's latest sample (its start before
// the first).
func (t *Tracker) Last() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.last
}

// welford accumulates the weighted mean and variance of a set of samples
// (West's weighted form of Welford's online algorithm), their count and
// their peak.
type welford struct {
	n        int64
	sumW     float64
	mean, m2 float64
	peak     float64
}

// add takes sample x of weight w (> 0).
func (a *welford) add(x, w float64) {
	a.n++
	a.sumW += w
	d := x - a.mean
	a.mean += d * w / a.sumW
	a.m2 += w * d * (x - a.mean)
	a.peak = max(a.peak, x) // rates are never negative
}

func (a *welford) stat() api.RateStat {
	if a.n == 0 {
		return api.RateStat{}
	}
	return api.RateStat{Samples: a.n, MeanBps: a.mean, StddevBps: math.Sqrt(max(0, a.m2/a.sumW)), PeakBps: a.peak}
}

// sample is one rate sample: the rate and the seconds it covers.
type sample struct{ r, dt float64 }

// dirRates are the samples of one direction of a stream.
type dirRates struct {
	life, steady welford
	// The current run, or the last one if inRun is false.
	inRun    bool
	runSeen  bool // a run has started
	runStart time.Time
	runN     int64
	runBytes int64
	run      welford  // its steady-state samples
	pending  []sample // its latest samples past the ramp-up that may still be its tail (at most trim)
}

// add takes one sample: bytes moved in the dt seconds that ended at now,
// at rate r.
func (d *dirRates) add(now time.Time, bytes int64, r, dt float64, trim int) {
	d.life.add(r, dt)
	if bytes <= 0 {
		d.inRun = false
		d.pending = d.pending[:0] // the run's tail
		return
	}
	if !d.inRun {
		d.inRun, d.runSeen = true, true
		d.runStart, d.runN, d.runBytes, d.run = now, 0, 0, welford{}
	}
	d.runN++
	d.runBytes += bytes
	if d.runN <= int64(trim) {
		return // ramp-up
	}
	d.pending = append(d.pending, sample{r, dt})
	if len(d.pending) > trim {
		x := d.pending[0]
		d.pending = append(d.pending[:0], d.pending[1:]...)
		d.steady.add(x.r, x.dt)
		d.run.add(x.r, x.dt)
	}
}

func (d *dirRates) view() api.DirRate {
	v := api.DirRate{Life: d.life.stat(), Steady: d.steady.stat()}
	if d.runSeen {
		v.LastRun = &api.RateRun{Start: d.runStart, Samples: d.runN, Bytes: d.runBytes, Ended: !d.inRun, Steady: d.run.stat()}
	}
	return v
}

// Tracker samples one stream's byte counters (the sampler calls
// Sample) and summarises the samples. Its methods may be called
// concurrently.
type Tracker struct {
	set Settings

	mu               sync.Mutex // guards the following fields
	last             time.Time  // of the previous sample (or the stream's start)
	lastTo, lastFrom int64      // the counters then
	rateTo, rateFrom float64    // the latest sample
	to, from         dirRates
	ring             [][3]float64 // the window: rate to, rate from, dt; ring[head] is the oldest once full
	head             int
	end              time.Time // of the newest sample in ring
}

// NewTracker returns the tracker of a stream that started at start.
func NewTracker(set Settings, start time.Time) *Tracker {
	return &Tracker{set: set, last: start, ring: make([][3]float64, 0, set.window)}
}

// Sample takes the counters to and from (bytes to and from the WAN so
// far) at time now. A sample no later than the previous one is ignored.
func (t *Tracker) Sample(now time.Time, to, from int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	dt := now.Sub(t.last).Seconds()
	if dt <= 0 {
		return
	}
	bt, bf := to-t.lastTo, from-t.lastFrom
	t.rateTo, t.rateFrom = float64(bt)/dt, float64(bf)/dt
	t.last, t.lastTo, t.lastFrom = now, to, from
	t.to.add(now, bt, t.rateTo, dt, t.set.trim)
	t.from.add(now, bf, t.rateFrom, dt, t.set.trim)
	s := [3]float64{t.rateTo, t.rateFrom, dt}
	if len(t.ring) < cap(t.ring) {
		t.ring = append(t.ring, s)
	} else {
		t.ring[t.head] = s
		t.head = (t.head + 1) % len(t.ring)
	}
	t.end = now
}

// Current returns the latest sample of each direction.
func (t *Tracker) Current() (to, from float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.rateTo, t.rateFrom
}

// View summarises the samples, with the window's samples if history.
func (t *Tracker) View(history bool) *api.Rates {
	t.mu.Lock()
	defer t.mu.Unlock()
	v := &api.Rates{
		IntervalS:   t.set.interval.Seconds(),
		WindowS:     (time.Duration(t.set.window) * t.set.interval).Seconds(),
		TrimSamples: t.set.trim,
		ToWAN:       t.to.view(),
		FromWAN:     t.from.view(),
	}
	var wt, wf welford
	var h *api.RateHistory
	if history {
		h = &api.RateHistory{End: t.end, ToWAN: make([]float64, 0, len(t.ring)), FromWAN: make([]float64, 0, len(t.ring))}
	}
	for i := range t.ring {
		s := t.ring[(t.head+i)%len(t.ring)]
		wt.add(s[0], s[2])
		wf.add(s[1], s[2])
		if h != nil {
			h.ToWAN = append(h.ToWAN, s[0])
			h.FromWAN = append(h.FromWAN, s[1])
		}
	}
	v.ToWAN.Window, v.FromWAN.Window = wt.stat(), wf.stat()
	v.History = h
	return v
}
