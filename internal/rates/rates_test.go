package rates

import (
	"math"
	"testing"
	"time"

	"scistream/internal/api"
)

// feed samples tr once per interval from start, the counter to the WAN
// starting at to and growing by each step (the one from it by half as
// much), and returns the time of the last sample and the counter.
func feed(tr *Tracker, start time.Time, to int64, interval time.Duration, steps []int64) (time.Time, int64) {
	now := start
	for _, b := range steps {
		now = now.Add(interval)
		to += b
		tr.Sample(now, to, to/2)
	}
	return now, to
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

func checkStat(t *testing.T, what string, got api.RateStat, n int64, mean, sd, peak float64) {
	t.Helper()
	if got.Samples != n || !near(got.MeanBps, mean) || !near(got.StddevBps, sd) || !near(got.PeakBps, peak) {
		t.Errorf("%s: %+v, want samples %d mean %g sd %g peak %g", what, got, n, mean, sd, peak)
	}
}

// TestRatesSteadyState checks seed 004's slicing on a known transfer at
// one sample a second: idle seconds, a partial first second, three full
// ones, a partial last one, idle again. The steady state is the three
// full seconds; the life counts every sample.
func TestRatesSteadyState(t *testing.T) {
	set := NewSettings(time.Second, time.Minute)
	if set.trim != 1 || set.window != 60 {
		t.Fatalf("settings at 1s/1m: trim %d window %d, want 1 and 60", set.trim, set.window)
	}
	start := time.Unix(1000, 0)
	tr := NewTracker(set, start)
	now, _ := feed(tr, start, 0, time.Second, []int64{0, 0, 50, 100, 120, 80, 30})

	v := tr.View(false)
	// Still in the run: the last sample (30) may be the tail, so it is
	// pending; 100, 120 and 80 counted (50 is the ramp-up).
	checkStat(t, "steady before the run ended", v.ToWAN.Steady, 3, 100, math.Sqrt(800.0/3), 120)
	if r := v.ToWAN.LastRun; r == nil || r.Ended || r.Samples != 5 || r.Bytes != 380 || !r.Start.Equal(start.Add(3*time.Second)) {
		t.Fatalf("last run while in it: %+v", r)
	}
	tr.Sample(now.Add(time.Second), 380, 190) // idle: the run ends, 30 was its tail
	v = tr.View(true)
	checkStat(t, "steady", v.ToWAN.Steady, 3, 100, math.Sqrt(800.0/3), 120)
	checkStat(t, "last run's steady", v.ToWAN.LastRun.Steady, 3, 100, math.Sqrt(800.0/3), 120)
	if !v.ToWAN.LastRun.Ended {
		t.Errorf("last run not ended after an idle sample")
	}
	// Life: 8 samples, 380 bytes in 8 s.
	if v.ToWAN.Life.Samples != 8 || !near(v.ToWAN.Life.MeanBps, 380.0/8) || v.ToWAN.Life.PeakBps != 120 {
		t.Errorf("life: %+v, want 8 samples, mean %g, peak 120", v.ToWAN.Life, 380.0/8)
	}
	// The other direction moved half of each step.
	checkStat(t, "from_wan steady", v.FromWAN.Steady, 3, 50, math.Sqrt(200.0/3), 60)
	if h := v.History; h == nil || len(h.ToWAN) != 8 || h.ToWAN[2] != 50 || h.ToWAN[7] != 0 || !h.End.Equal(now.Add(time.Second)) {
		t.Errorf("history: %+v", h)
	}
	if cur, _ := tr.Current(); cur != 0 {
		t.Errorf("current rate %g after an idle second, want 0", cur)
	}
}

// TestRatesRuns: a second run adds to the life's steady state and
// becomes the last run; a run too short for a steady state adds nothing.
func TestRatesRuns(t *testing.T) {
	start := time.Unix(0, 0)
	tr := NewTracker(NewSettings(time.Second, time.Minute), start)
	now, to := feed(tr, start, 0, time.Second, []int64{10, 40, 40, 10, 0, 5, 5, 0, 20, 60, 60, 60, 20, 0})
	v := tr.View(false)
	// Steady: 40, 40 of the first run, nothing of the second (5 is its
	// ramp-up, 5 its tail), 60, 60, 60 of the third.
	sd := math.Sqrt((2*144 + 3*64) / 5.0)
	checkStat(t, "steady over both long runs", v.ToWAN.Steady, 5, 52, sd, 60)
	r := v.ToWAN.LastRun
	if r == nil || !r.Ended || r.Samples != 5 || r.Bytes != 220 || !r.Start.Equal(start.Add(9*time.Second)) {
		t.Fatalf("last run: %+v", r)
	}
	checkStat(t, "last run's steady", r.Steady, 3, 60, 0, 60)
	// A short run (2 samples: ramp-up and tail only).
	feed(tr, now, to, time.Second, []int64{7, 7, 0})
	v = tr.View(false)
	if r := v.ToWAN.LastRun; r.Samples != 2 || r.Steady.Samples != 0 || !r.Ended {
		t.Errorf("short run: %+v, want 2 samples and no steady state", r)
	}
	checkStat(t, "steady unchanged by the short run", v.ToWAN.Steady, 5, 52, sd, 60)
}

// TestRatesWindow: the window holds the last RateWindow of samples,
// oldest first, and its statistics are theirs alone.
func TestRatesWindow(t *testing.T) {
	start := time.Unix(0, 0)
	tr := NewTracker(NewSettings(100*time.Millisecond, 500*time.Millisecond), start)
	if tr.set.window != 5 || tr.set.trim != 10 {
		t.Fatalf("settings at 100ms/500ms: window %d trim %d, want 5 and 10", tr.set.window, tr.set.trim)
	}
	feed(tr, start, 0, 100*time.Millisecond, []int64{1, 2, 3, 4, 5, 6, 7})
	v := tr.View(true)
	want := []float64{30, 40, 50, 60, 70} // bytes per 0.1 s
	for i, w := range want {
		if !near(v.History.ToWAN[i], w) {
			t.Fatalf("history %v, want %v", v.History.ToWAN, want)
		}
	}
	checkStat(t, "window", v.ToWAN.Window, 5, 50, math.Sqrt(200), 70)
	if v.WindowS != 0.5 || v.IntervalS != 0.1 || v.TrimSamples != 10 {
		t.Errorf("rates settings %+v", v)
	}
}

// TestRatesTiming: a late sample is a rate over the time that actually
// passed, and a sample not after the previous one is ignored.
func TestRatesTiming(t *testing.T) {
	start := time.Unix(0, 0)
	tr := NewTracker(NewSettings(time.Second, time.Minute), start)
	tr.Sample(start.Add(2500*time.Millisecond), 1000, 0) // the sampler woke late
	if to, _ := tr.Current(); !near(to, 400) {
		t.Errorf("rate over 2.5 s of 1000 bytes: %g, want 400", to)
	}
	tr.Sample(start.Add(2500*time.Millisecond), 5000, 0) // same instant
	tr.Sample(start.Add(time.Second), 9000, 0)           // the past
	if to, _ := tr.Current(); !near(to, 400) || tr.View(false).ToWAN.Life.Samples != 1 {
		t.Errorf("samples at or before the previous one were taken: rate %g, %d samples", to, tr.View(false).ToWAN.Life.Samples)
	}
}

// TestRatesWeighted: samples of unequal length (the sampler woke late
// once) weigh by their time, so the means are the bytes over the time.
func TestRatesWeighted(t *testing.T) {
	start := time.Unix(0, 0)
	tr := NewTracker(NewSettings(time.Second, time.Minute), start)
	// 100 B/s throughout, sampled at 1 s, 2.6 s (late), 3 s, 4 s, 5 s,
	// 6 s, then a burst of 700 B in the 7th second, then idle.
	var to int64
	last := start
	for _, at := range []time.Duration{1000, 2600, 3000, 4000, 5000, 6000} {
		now := start.Add(at * time.Millisecond)
		to += int64(100 * now.Sub(last).Seconds())
		tr.Sample(now, to, 0)
		last = now
	}
	tr.Sample(start.Add(7*time.Second), to+700, 0)
	tr.Sample(start.Add(8*time.Second), to+700, 0)
	v := tr.View(false)
	// Life: 1300 B over 8 s, whatever the samples' lengths.
	if v.ToWAN.Life.Samples != 8 || !near(v.ToWAN.Life.MeanBps, 1300.0/8) {
		t.Errorf("life %+v, want 8 samples of mean %g", v.ToWAN.Life, 1300.0/8)
	}
	// Steady: the samples at 2.6 s (1.6 s long), 3, 4, 5 and 6 s, all at
	// 100 B/s (the 1 s ramp-up and the burst, the tail, left out).
	checkStat(t, "steady", v.ToWAN.Steady, 5, 100, 0, 100)
}

// TestRatesLongLife: a month of samples at one a second keeps the mean
// and the standard deviation exact (Welford's algorithm; a running sum of
// squares of rates near 1e10 would lose them).
func TestRatesLongLife(t *testing.T) {
	var w welford
	const n = 30 * 24 * 3600
	for i := range n {
		w.add(1e10+float64(i%2)*2, 1) // 1e10 and 1e10+2: mean 1e10+1, sd 1
	}
	s := w.stat()
	if s.Samples != n || math.Abs(s.MeanBps-(1e10+1)) > 1e-3 || math.Abs(s.StddevBps-1) > 1e-6 {
		t.Errorf("after %d samples: %+v, want mean 1e10+1, sd 1", n, s)
	}
}

func TestRateSettingsBounds(t *testing.T) {
	for _, c := range []struct {
		iv, win      time.Duration
		window, trim int
	}{
		{0, 0, 60, 1},
		{10 * time.Millisecond, time.Hour, MaxWindowSamples, 100},
		{1500 * time.Millisecond, time.Minute, 40, 1},
		{time.Minute, time.Minute, 1, 1},
		{300 * time.Millisecond, time.Second, 3, 4},
	} {
		s := NewSettings(c.iv, c.win)
		if s.window != c.window || s.trim != c.trim {
			t.Errorf("interval %s window %s: %d samples, trim %d; want %d, %d", c.iv, c.win, s.window, s.trim, c.window, c.trim)
		}
	}
}
