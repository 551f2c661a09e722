package bench

import (
	"math"
	"os"
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

func TestPercentileNearestRank(t *testing.T) {
	xs := []float64{15, 20, 35, 40, 50} // the textbook example
	for _, c := range []struct{ p, want float64 }{
		{5, 15}, {30, 20}, {40, 20}, {50, 35}, {90, 50}, {99, 50}, {100, 50},
	} {
		if got := Percentile(xs, c.p); got != c.want {
			t.Errorf("P%v = %v, want %v", c.p, got, c.want)
		}
	}
	// 1..100: Pp is p itself.
	var h []float64
	for i := 1; i <= 100; i++ {
		h = append(h, float64(i))
	}
	for _, p := range []float64{1, 50, 90, 99, 100} {
		if got := Percentile(h, p); got != p {
			t.Errorf("1..100: P%v = %v", p, got)
		}
	}
	if !math.IsNaN(Percentile(nil, 50)) || !math.IsNaN(Percentile(xs, 0)) || !math.IsNaN(Percentile(xs, 101)) {
		t.Error("want NaN for no values or p outside (0, 100]")
	}
}

func TestSummarizeRTT(t *testing.T) {
	var ds []time.Duration
	for _, us := range []int{400, 100, 300, 200, 1000} {
		ds = append(ds, time.Duration(us)*time.Microsecond)
	}
	// sorted 100 200 300 400 1000: P50 = rank ceil(2.5)=3 -> 300; P90 = rank 5 -> 1000.
	q := SummarizeRTT(ds)
	if q.N != 5 || q.Mean != 400 || q.P50 != 300 || q.P90 != 1000 || q.P99 != 1000 || q.Max != 1000 {
		t.Fatalf("%+v", q)
	}
}

func TestCDF(t *testing.T) {
	x, y := CDF([]float64{1, 2, 2, 3}, 0)
	if len(x) != 3 || x[0] != 1 || y[0] != 0.25 || x[1] != 2 || y[1] != 0.75 || x[2] != 3 || y[2] != 1 {
		t.Fatalf("x %v y %v", x, y)
	}
	var many []float64
	for i := range 1000 {
		many = append(many, float64(i))
	}
	x, y = CDF(many, 10)
	if len(x) != 10 || x[9] != 999 || y[9] != 1 || x[0] != 99 || y[0] != 0.1 {
		t.Fatalf("thinned: x %v y %v", x, y)
	}
}

// Two pairs: A gets 3 messages of 100 B at 10, 20, 30 us; B 2 of 100 B at
// 15, 45 us. Span 10..45 us = 35 us; payload after the first arrival
// 500-100 = 400 B -> 400/35e-6 B/s; 4 messages after the first -> 4/35e-6.
// Latency: mean of A's 10 us and B's 30 us = 20 us; jitter: (0 + 0)/2.
func TestAggregateHandComputed(t *testing.T) {
	mk := func(us ...int) *ReceiveResult {
		var a Arrivals
		for _, u := range us {
			a.Add(time.Duration(u) * time.Microsecond)
		}
		return &ReceiveResult{Measure: Summarize(&a, int64(100*len(us)), 100), First: a.First(), Last: a.Last(), FirstPayload: 100}
	}
	s := Aggregate([]Pair{
		{Recv: mk(10, 20, 30), Send: &SendResult{RTT: []time.Duration{time.Millisecond}}},
		{Recv: mk(15, 45), Send: &SendResult{RTT: []time.Duration{3 * time.Millisecond}}},
		{}, // a pair that never connected
	})
	if s.Pairs != 2 || s.Messages != 5 || s.Bytes != 500 || !near(s.GoodputBps, 400/35e-6) || !near(s.MsgsPerSec, 4/35e-6) ||
		!near(s.LatencyUS, 20) || s.JitterUS != 0 || s.RTT.N != 2 || s.RTT.P50 != 1000 || s.RTT.Max != 3000 || s.RTT.Mean != 2000 {
		t.Fatalf("%+v", s)
	}
}

func TestParseStatCPU(t *testing.T) {
	// Fields 14 and 15 (utime, stime) are 250 and 50 ticks: 3 s at 100 Hz.
	// The name holds a space and a parenthesis.
	line := "1234 (s2cs (x) y) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 8 0 100 1000000 200 18446744073709551615"
	d, err := parseStatCPU(line)
	if err != nil || d != 3*time.Second {
		t.Fatalf("got %v, %v", d, err)
	}
	for _, bad := range []string{"", "1 (x) S 1 2", "1 (x) S 1 1 1 0 -1 0 0 0 0 0 ab 0 0 0"} {
		if _, err := parseStatCPU(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	self, err := ProcessCPU(os.Getpid())
	if err != nil || self < 0 {
		t.Fatalf("own CPU time: %v, %v", self, err)
	}
}
