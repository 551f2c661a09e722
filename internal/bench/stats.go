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

// First is the time of the first arrival.
func (a *Arrivals) First() time.Duration { return a.first }

// Last is the time of the last arrival.
func (a *Arrivals) Last() time.Duration { return a.last }

// Percentile returns the p-th percentile (0 < p <= 100) of xs by the
// nearest-rank method: the smallest value such that at least p percent
// of the values are less than or equal to it, i.e. sorted[ceil(p/100*n)-1].
// It returns NaN for no values. sorted must be in ascending order.
func Percentile(sorted []float64, p float64) float64 {
	n := len(sorted)
	if n == 0 || !(p > 0 && p <= 100) {
		return math.NaN()
	}
	k := int(math.Ceil(p / 100 * float64(n)))
	return sorted[min(max(k, 1), n)-1]
}

// RTTStats summarises round-trip times, in microseconds.
type RTTStats struct {
	N                  int
	Mean               float64
	P50, P90, P99, Max float64
}

// SummarizeRTT computes RTTStats over samples (nearest-rank percentiles).
func SummarizeRTT(samples []time.Duration) RTTStats {
	if len(samples) == 0 {
		return RTTStats{}
	}
	us := MicrosSorted(samples)
	var sum float64
	for _, x := range us {
		sum += x
	}
	return RTTStats{N: len(us), Mean: sum / float64(len(us)),
		P50: Percentile(us, 50), P90: Percentile(us, 90), P99: Percentile(us, 99), Max: us[len(us)-1]}
}

// MicrosSorted returns the durations in microseconds, in ascending order.
func MicrosSorted(ds []time.Duration) []float64 {
	us := make([]float64, len(ds))
	for i, d := range ds {
		us[i] = float64(d) / 1e3
	}
	slices.Sort(us)
	return us
}

// CDF returns the empirical distribution function of sorted (ascending)
// values as points (x[i], y[i]): y[i] is the fraction of values <= x[i],
// one point per distinct value. At most maxPoints points are returned
// (evenly spaced in rank, always including the last) when maxPoints > 0.
func CDF(sorted []float64, maxPoints int) (x, y []float64) {
	n := len(sorted)
	for i := 0; i < n; i++ {
		if i+1 < n && sorted[i+1] == sorted[i] {
			continue // the last of equal values carries their rank
		}
		x = append(x, sorted[i])
		y = append(y, float64(i+1)/float64(n))
	}
	if maxPoints > 0 && len(x) > maxPoints {
		xs, ys := make([]float64, 0, maxPoints), make([]float64, 0, maxPoints)
		for j := 0; j < maxPoints; j++ {
			k := (j + 1) * len(x) / maxPoints
			xs, ys = append(xs, x[k-1]), append(ys, y[k-1])
		}
		x, y = xs, ys
	}
	return x, y
}

// Summary aggregates the pairs of one run.
type Summary struct {
	// Pairs is the number of pairs that delivered at least one message.
	Pairs int
	// Messages and Bytes (payload) verified at the consumers.
	Messages, Bytes int64
	// GoodputBps is the payload of every message but the first to arrive
	// (on any connection) over the time from that first arrival to the
	// last arrival on any connection. MsgsPerSec likewise.
	GoodputBps, MsgsPerSec float64
	// LatencyUS and JitterUS are the means over the pairs of their mean
	// inter-arrival time and its standard deviation.
	LatencyUS, JitterUS float64
	// RTT pools the round-trip times of every pair (request-reply).
	RTT RTTStats
	// RTTSamples are those round-trip times (for a CDF).
	RTTSamples []time.Duration
}

// Aggregate summarises the pairs of a run. With one pair, goodput,
// message rate, latency and jitter are that pair's.
func Aggregate(pairs []Pair) Summary {
	var (
		s           Summary
		first, last time.Duration
		firstLen    int64
	)
	for _, p := range pairs {
		if p.Send != nil {
			s.RTTSamples = append(s.RTTSamples, p.Send.RTT...)
		}
		r := p.Recv
		if r == nil || r.Measure.Messages == 0 {
			continue
		}
		if s.Pairs == 0 || r.First < first {
			first, firstLen = r.First, r.FirstPayload
		}
		if s.Pairs == 0 || r.Last > last {
			last = r.Last
		}
		s.Pairs++
		s.Messages += r.Measure.Messages
		s.Bytes += r.Measure.Bytes
		s.LatencyUS += r.Measure.LatencyUS
		s.JitterUS += r.Measure.JitterUS
	}
	if s.Pairs == 0 {
		return s
	}
	s.LatencyUS /= float64(s.Pairs)
	s.JitterUS /= float64(s.Pairs)
	if span := (last - first).Seconds(); span > 0 {
		s.GoodputBps = float64(s.Bytes-firstLen) / span
		s.MsgsPerSec = float64(s.Messages-1) / span
	}
	s.RTT = SummarizeRTT(s.RTTSamples)
	return s
}
