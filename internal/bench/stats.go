package bench

import (
	"math"
	"slices"
	"time"
)

// Arrivals accumulates message arrival times in constant space: the first
// and last arrival and, over the intervals between consecutive arrivals,
// the running mean and sum of squared deviations (Welford's method).
type Arrivals struct {
	n           int64
	first, last time.Duration
	mean, m2    float64 // over intervals, in nanoseconds
}

// Add records an arrival at t. Times must not decrease.
func (a *Arrivals) Add(t time.Duration) {
	a.n++
	if a.n == 1 {
		a.first, a.last = t, t
		return
	}
	x := float64(t - a.last)
	a.last = t
	k := float64(a.n - 1) // intervals so far
	d := x - a.mean
	a.mean += d / k
	a.m2 += d * (x - a.mean)
}

// Count is the number of arrivals.
func (a *Arrivals) Count() int64 { return a.n }

// Span is the time from the first to the last arrival.
func (a *Arrivals) Span() time.Duration { return a.last - a.first }

// MeanInterval is the mean time between consecutive arrivals (0 with
// fewer than two arrivals).
func (a *Arrivals) MeanInterval() time.Duration {
	if a.n < 2 {
		return 0
	}
	return time.Duration(math.Round(a.mean))
}

// IntervalStdDev is the population standard deviation of the times
// between consecutive arrivals (0 with fewer than two arrivals).
func (a *Arrivals) IntervalStdDev() time.Duration {
	if a.n < 2 {
		return 0
	}
	return time.Duration(math.Round(math.Sqrt(a.m2 / float64(a.n-1))))
}

// Measure is the summary of one run at the consumer.
type Measure struct {
	Messages int64         // messages received
	Bytes    int64         // payload bytes received
	Span     time.Duration // first to last message arrival
	// GoodputBps is payload bytes per second from the first message's
	// arrival to the last one's: the payload of every message but the
	// first (which marks the start) divided by Span.
	GoodputBps float64
	// MsgsPerSec is the messages after the first divided by Span.
	MsgsPerSec float64
	// LatencyUS is the mean inter-arrival time in microseconds.
	LatencyUS float64
	// JitterUS is the standard deviation of the inter-arrival time in
	// microseconds.
	JitterUS float64
}

// Summarize computes the run's measure from its arrivals, the payload
// bytes of all messages and the payload of the first. Rates are zero when
// the span is zero (fewer than two messages, or all arrived at once).
func Summarize(a *Arrivals, payload, firstPayload int64) Measure {
	m := Measure{Messages: a.Count(), Bytes: payload, Span: a.Span()}
	if a.Count() >= 2 {
		m.LatencyUS = a.mean / 1e3
		m.JitterUS = math.Sqrt(a.m2/float64(a.n-1)) / 1e3
	}
	if s := a.Span().Seconds(); s > 0 {
		m.GoodputBps = float64(payload-firstPayload) / s
		m.MsgsPerSec = float64(a.Count()-1) / s
	}
	return m
}

// Median returns the median of xs (the mean of the two middle values for
// an even count), or NaN for none. xs is not modified.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	h := len(s) / 2
	if len(s)%2 == 1 {
		return s[h]
	}
	return (s[h-1] + s[h]) / 2
}

// MinMax returns the least and greatest of xs, or NaN, NaN for none.
func MinMax(xs []float64) (lo, hi float64) {
	if len(xs) == 0 {
		return math.NaN(), math.NaN()
	}
	return slices.Min(xs), slices.Max(xs)
}
