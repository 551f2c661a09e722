package bench

import (
	"math"
	"testing"
	"time"
)

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

func TestArrivals(t *testing.T) {
	var a Arrivals
	// Arrivals at 0, 10, 30, 60 us: intervals 10, 20, 30 us.
	for _, us := range []int{0, 10, 30, 60} {
		a.Add(time.Duration(us) * time.Microsecond)
	}
	if a.Count() != 4 || a.Span() != 60*time.Microsecond {
		t.Fatalf("count %d span %v", a.Count(), a.Span())
	}
	if a.MeanInterval() != 20*time.Microsecond {
		t.Fatalf("mean %v", a.MeanInterval())
	}
	// Population variance: (100 + 0 + 100) / 3 us^2; std = sqrt(200/3) = 8.16497 us.
	if got, want := a.IntervalStdDev(), time.Duration(math.Round(math.Sqrt(200.0/3)*1e3)); got != want {
		t.Fatalf("std %v, want %v", got, want)
	}
	// 4 messages of 1000 B: 3000 B after the first over 60 us = 50e6 B/s;
	// 3 messages over 60 us = 50000 msg/s.
	m := Summarize(&a, 4000, 1000)
	if !near(m.GoodputBps, 50e6) || !near(m.MsgsPerSec, 50000) || !near(m.LatencyUS, 20) ||
		!near(m.JitterUS, math.Sqrt(200.0/3)) || m.Messages != 4 || m.Bytes != 4000 {
		t.Fatalf("%+v", m)
	}
}

func TestArrivalsConstantRate(t *testing.T) {
	var a Arrivals
	for i := range 1000 {
		a.Add(time.Duration(i) * 5 * time.Microsecond)
	}
	m := Summarize(&a, 1000*100, 100)
	// 999 * 100 B over 4995 us = 20 MB/s exactly; no jitter.
	if !near(m.GoodputBps, 20e6) || !near(m.LatencyUS, 5) || m.JitterUS > 1e-6 || !near(m.MsgsPerSec, 200000) {
		t.Fatalf("%+v", m)
	}
}

func TestArrivalsDegenerate(t *testing.T) {
	var a Arrivals
	if m := Summarize(&a, 0, 0); m != (Measure{}) {
		t.Fatalf("empty: %+v", m)
	}
	a.Add(time.Second)
	if m := Summarize(&a, 10, 10); m.GoodputBps != 0 || m.LatencyUS != 0 || m.JitterUS != 0 || m.Messages != 1 {
		t.Fatalf("one: %+v", m)
	}
	a.Add(time.Second) // all at once: no rate
	if m := Summarize(&a, 20, 10); m.GoodputBps != 0 || m.MsgsPerSec != 0 || m.LatencyUS != 0 {
		t.Fatalf("simultaneous: %+v", m)
	}
}

func TestMedianMinMax(t *testing.T) {
	for _, c := range []struct {
		xs          []float64
		med, lo, hi float64
	}{
		{[]float64{3}, 3, 3, 3},
		{[]float64{5, 1, 3}, 3, 1, 5},
		{[]float64{4, 1, 3, 2}, 2.5, 1, 4},
		{[]float64{10, 10, 1, 1000, 7}, 10, 1, 1000},
	} {
		orig := append([]float64(nil), c.xs...)
		lo, hi := MinMax(c.xs)
		if m := Median(c.xs); m != c.med || lo != c.lo || hi != c.hi {
			t.Errorf("%v: median %v min %v max %v", c.xs, m, lo, hi)
		}
		for i := range orig {
			if orig[i] != c.xs[i] {
				t.Fatalf("Median modified its input")
			}
		}
	}
	if lo, hi := MinMax(nil); !math.IsNaN(Median(nil)) || !math.IsNaN(lo) || !math.IsNaN(hi) {
		t.Error("empty input: want NaN")
	}
}
