// Package record is what s2bench keeps of a run of the verified
// workload: Record, one run (one path, one size, one pair count, one
// repetition) as the --json output holds it, filled from a
// bench.RunResult; the table of compare, run and testbed run over the
// records of an experiment; the texts of a run's line; and WriteJSON,
// which writes records so that a reader never sees half a file.
package record

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"text/tabwriter"
	"time"

	"scistream/internal/bench"
	"scistream/internal/bytesize"
)

// Paths a run takes, the values of Record.Path in compare, run and
// testbed run (facility names its own: nodesN).
const (
	PathDirect   = "direct"
	PathGateways = "gateways"
	PathNaive    = "naive" // compare --baseline: the naive proxy pair
)

// TablePaths returns the order of the paths in the table and the plots.
func TablePaths() []string { return []string{PathDirect, PathGateways, PathNaive} }

// Record is one run (one path, one size, one pair count, one repetition)
// in the --json output. The names of its fields are API: scripts read
// them; add fields, never rename one.
type Record struct {
	Path string `json:"path"`
	// Case and Stripe are a run's of the WAN table (s2bench testbed
	// table): its condition, and the stream's stripe (the WAN legs at
	// once of each connection through the gateways).
	Case   string `json:"case,omitempty"`
	Stripe int    `json:"stripe,omitempty"`
	// Side is "producer" or "consumer" in the records of those roles
	// (empty in compare, which measures both).
	Side     string `json:"side,omitempty"`
	Workload string `json:"workload"`
	Mode     string `json:"mode"`
	// EachMessage: the producer wrote one message per write call
	// (--writes each) instead of coalescing small messages.
	EachMessage bool `json:"each_message,omitempty"`
	// ReadEach: the consumer read message by message (--reads each).
	ReadEach    bool    `json:"read_each,omitempty"`
	Rep         int     `json:"rep"`
	SizeBytes   int     `json:"size_bytes"`
	Pairs       int     `json:"pairs"`
	Messages    int64   `json:"messages"`
	Bytes       int64   `json:"bytes"`
	GoodputMBps float64 `json:"goodput_MBps"`
	MsgsPerS    float64 `json:"msgs_per_s"`
	LatencyUS   float64 `json:"latency_us"`
	JitterUS    float64 `json:"jitter_us"`
	// Request-reply mode only: round-trip times at the producer, over
	// every message of every pair (nearest-rank percentiles).
	RTTSamples int     `json:"rtt_samples,omitempty"`
	RTTMeanUS  float64 `json:"rtt_mean_us,omitempty"`
	RTTP50US   float64 `json:"rtt_p50_us,omitempty"`
	RTTP90US   float64 `json:"rtt_p90_us,omitempty"`
	RTTP99US   float64 `json:"rtt_p99_us,omitempty"`
	RTTMaxUS   float64 `json:"rtt_max_us,omitempty"`
	// RateMsgsPerS is the pacing target per pair (0: as fast as possible).
	RateMsgsPerS float64 `json:"rate_msgs_per_s,omitempty"`
	// DurationS is the sending time of an open-ended run.
	DurationS float64 `json:"duration_s,omitempty"`
	// Gateway path with local gateways only: CPU seconds (user+system)
	// both s2cs processes used during the run, and per 10^9 payload bytes.
	GwCPUS      *float64 `json:"gw_cpu_s,omitempty"`
	GwCPUSPerGB *float64 `json:"gw_cpu_s_per_GB,omitempty"`
	IntegrityOK bool     `json:"integrity_ok"`
	Error       string   `json:"error,omitempty"`
	Engine      string   `json:"engine,omitempty"`
	WAN         string   `json:"wan,omitempty"`
	// PerPair holds each pair's own numbers when there are several.
	PerPair []Pair `json:"per_pair,omitempty"`
	// Testbed runs only: the emulated path's preset (or "custom") and
	// the RTT measured on the run's path before the experiment.
	Preset        string  `json:"preset,omitempty"`
	RTTmsMeasured float64 `json:"rtt_ms_measured,omitempty"`
	// Gateway path with local gateways: the run's steady-state rate as
	// each gateway sampled it from its byte counters (the outbound
	// gateway's to_wan, the inbound one's from_wan; api.Rates), in 10^6
	// wire bytes per second, with its standard deviation and the fewer
	// of the two gateways' steady samples; GwOverGoodput is the two
	// means' average over the goodput scaled to the wire bytes (1: they
	// agree). GwRateNote says why they are absent.
	GwOutSteadyMBps   *float64 `json:"gw_out_steady_MBps,omitempty"`
	GwOutSteadySDMBps *float64 `json:"gw_out_steady_sd_MBps,omitempty"`
	GwInSteadyMBps    *float64 `json:"gw_in_steady_MBps,omitempty"`
	GwInSteadySDMBps  *float64 `json:"gw_in_steady_sd_MBps,omitempty"`
	GwSteadySamples   int64    `json:"gw_steady_samples,omitempty"`
	GwOverGoodput     *float64 `json:"gw_over_goodput,omitempty"`
	GwRateNote        string   `json:"gw_rate_note,omitempty"`

	// RTT holds the round-trip samples, for the CDF plot; not in the
	// JSON output.
	RTT []time.Duration `json:"-"`
}

// Pair is one pair's share of a run.
type Pair struct {
	Pair        int     `json:"pair"`
	Messages    int64   `json:"messages"`
	Bytes       int64   `json:"bytes"`
	GoodputMBps float64 `json:"goodput_MBps"`
	LatencyUS   float64 `json:"latency_us"`
	JitterUS    float64 `json:"jitter_us"`
	RTTP50US    float64 `json:"rtt_p50_us,omitempty"`
	RTTP99US    float64 `json:"rtt_p99_us,omitempty"`
}

// Fill sets r's measurements from a run's result (none if res is nil).
func (r *Record) Fill(res *bench.RunResult) {
	if res == nil {
		return
	}
	s := res.Summary
	r.Messages, r.Bytes = s.Messages, s.Bytes
	r.GoodputMBps, r.MsgsPerS = s.GoodputBps/1e6, s.MsgsPerSec
	r.LatencyUS, r.JitterUS = s.LatencyUS, s.JitterUS
	if s.RTT.N > 0 {
		r.RTTSamples, r.RTTMeanUS = s.RTT.N, s.RTT.Mean
		r.RTTP50US, r.RTTP90US, r.RTTP99US, r.RTTMaxUS = s.RTT.P50, s.RTT.P90, s.RTT.P99, s.RTT.Max
		r.RTT = s.RTTSamples
	}
	if len(res.Pairs) < 2 {
		return
	}
	for i, p := range res.Pairs {
		pr := Pair{Pair: i}
		if p.Recv != nil {
			m := p.Recv.Measure
			pr.Messages, pr.Bytes, pr.GoodputMBps, pr.LatencyUS, pr.JitterUS = m.Messages, m.Bytes, m.GoodputBps/1e6, m.LatencyUS, m.JitterUS
		}
		if p.Send != nil && len(p.Send.RTT) > 0 {
			q := bench.SummarizeRTT(p.Send.RTT)
			pr.RTTP50US, pr.RTTP99US = q.P50, q.P99
		}
		r.PerPair = append(r.PerPair, pr)
	}
}

// groupKey identifies the runs one table row summarises.
type groupKey struct {
	pairs, size int
	path        string
}

// groups returns the distinct (pairs, size) in the order of recs.
func groups(recs []Record) [][2]int {
	var out [][2]int
	for _, r := range recs {
		k := [2]int{r.Pairs, r.SizeBytes}
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}

func pick(recs []Record, k groupKey, f func(Record) float64) []float64 {
	var xs []float64
	for _, r := range recs {
		if r.Pairs == k.pairs && r.SizeBytes == k.size && r.Path == k.path && r.IntegrityOK {
			xs = append(xs, f(r))
		}
	}
	return xs
}

// PrintTable prints one row per (pairs, size, path): the median, minimum
// and maximum goodput over the repetitions, the medians of the other
// measures, and on the gateways row the ratio of its median goodput to
// the direct path's; rr adds the round-trip columns, cpu the gateways'
// CPU per GB. A legend follows the table.
func PrintTable(w io.Writer, recs []Record, rr, cpu bool) {
	hasNaive := slices.ContainsFunc(recs, func(r Record) bool { return r.Path == PathNaive })
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	hdr := "pairs\tsize\tpath\truns\tgoodput MB/s\tmin\tmax\tmsgs/s\tlatency_us\tjitter_us\t"
	if rr {
		hdr += "rtt_p50_us\trtt_p99_us\t"
	}
	if cpu {
		hdr += "gw_cpu_s/GB\t"
	}
	fmt.Fprintln(tw, hdr+"gw/direct\tintegrity\t")
	for _, g := range groups(recs) {
		direct := bench.Median(pick(recs, groupKey{g[0], g[1], PathDirect}, func(r Record) float64 { return r.GoodputMBps }))
		for _, p := range TablePaths() {
			k := groupKey{g[0], g[1], p}
			n, ok := 0, 0
			for _, r := range recs {
				if r.Pairs == k.pairs && r.SizeBytes == k.size && r.Path == p {
					n++
					if r.IntegrityOK {
						ok++
					}
				}
			}
			if n == 0 {
				continue
			}
			gp := pick(recs, k, func(r Record) float64 { return r.GoodputMBps })
			lo, hi := bench.MinMax(gp)
			med := bench.Median(gp)
			line := fmt.Sprintf("%d\t%s\t%s\t%d\t%.1f\t%.1f\t%.1f\t%.0f\t%.2f\t%.2f\t", k.pairs, bytesize.Format(int64(k.size)), p, n,
				med, lo, hi, bench.Median(pick(recs, k, func(r Record) float64 { return r.MsgsPerS })),
				bench.Median(pick(recs, k, func(r Record) float64 { return r.LatencyUS })),
				bench.Median(pick(recs, k, func(r Record) float64 { return r.JitterUS })))
			if rr {
				line += fmt.Sprintf("%.1f\t%.1f\t", bench.Median(pick(recs, k, func(r Record) float64 { return r.RTTP50US })),
					bench.Median(pick(recs, k, func(r Record) float64 { return r.RTTP99US })))
			}
			if cpu {
				c := pick(recs, k, func(r Record) float64 {
					if r.GwCPUSPerGB == nil {
						return -1
					}
					return *r.GwCPUSPerGB
				})
				if p != PathDirect && len(c) > 0 && bench.Median(c) >= 0 {
					line += fmt.Sprintf("%.2f\t", bench.Median(c))
				} else {
					line += "-\t"
				}
			}
			if p != PathDirect && direct > 0 {
				line += fmt.Sprintf("%.3f\t", med/direct)
			} else {
				line += "\t"
			}
			fmt.Fprintf(tw, "%sok %d/%d\t\n", line, ok, n)
		}
	}
	tw.Flush()
	fmt.Fprintln(w, "(goodput MB/s = 10^6 payload bytes/s at the consumer from the first message's arrival to the last's, median over")
	fmt.Fprintln(w, " runs with min and max; latency_us = mean inter-arrival, jitter_us = its standard deviation, mean over pairs;")
	if rr {
		fmt.Fprintln(w, " rtt = request-reply round trip at the producer, nearest-rank percentiles over every message;")
	}
	if cpu {
		naive := ""
		if hasNaive {
			naive = " (naive: both proxies)"
		}
		fmt.Fprintf(w, " gw_cpu_s/GB = user+system CPU seconds of both s2cs processes%s per 10^9 payload bytes, %d ms resolution;\n", naive, 1000/bench.ClockTicks)
	}
	if hasNaive {
		fmt.Fprintln(w, " gw/direct = ratio of the median goodputs; naive row: naive/direct)")
	} else {
		fmt.Fprintln(w, " gw/direct = ratio of the median goodputs)")
	}
}

// WriteJSON writes v to path (through a temporary file, so a reader never
// sees half a file). Its errors name --json, the flag that gave path.
func WriteJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("--json: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("--json: %w", err)
	}
	return nil
}

// RTTText gives a run's round-trip percentiles, for its line (empty
// without round trips).
func RTTText(r Record) string {
	if r.RTTSamples == 0 {
		return ""
	}
	return fmt.Sprintf("  rtt p50 %8.1f p99 %8.1f us", r.RTTP50US, r.RTTP99US)
}

// PairsText gives the spread of the pairs' own goodputs, for a run's
// line (empty with one pair).
func PairsText(r Record) string {
	if len(r.PerPair) < 2 {
		return ""
	}
	var gp []float64
	for _, p := range r.PerPair {
		gp = append(gp, p.GoodputMBps)
	}
	lo, hi := bench.MinMax(gp)
	return fmt.Sprintf("  per pair %.1f..%.1f MB/s", lo, hi)
}

// CPUText gives the gateways' CPU per GB of a run, for its line (empty
// when not measured).
func CPUText(r Record) string {
	if r.GwCPUSPerGB == nil {
		return ""
	}
	return fmt.Sprintf("  gw cpu %5.2f s/GB", *r.GwCPUSPerGB)
}

// GwRateText says what the gateways saw of a run, for its line.
func GwRateText(r Record) string {
	switch {
	case r.GwRateNote != "":
		return "  gw steady n/a"
	case r.GwOutSteadyMBps == nil:
		return ""
	}
	s := fmt.Sprintf("  gw steady out %.1f±%.1f in %.1f±%.1f MB/s", *r.GwOutSteadyMBps, *r.GwOutSteadySDMBps, *r.GwInSteadyMBps, *r.GwInSteadySDMBps)
	if r.GwOverGoodput != nil {
		s += fmt.Sprintf(" (x%.3f)", *r.GwOverGoodput)
	}
	return s
}

// Status describes how a run ended, for its line: err is the run's,
// ctx the experiment's (an interrupt cancels it).
func Status(ctx context.Context, err error) string {
	switch {
	case err == nil:
		return "integrity ok"
	case bench.IsIntegrity(err):
		return "INTEGRITY FAILED"
	case ctx.Err() != nil:
		return "interrupted"
	}
	return "FAILED"
}
