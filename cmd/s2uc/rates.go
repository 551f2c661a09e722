package main

import (
	"fmt"
	"io"
	"time"

	"scistream/internal/api"
)

// How status and watch say a stream's sampled rates (api.Rates): in MB/s
// (10^6 bytes per second, as everywhere in s2uc), mean ± standard
// deviation, and the peak.

// fmtStat says a set of rate samples: "12.3 ± 0.4 MB/s, peak 13.0", or
// "-" with none.
func fmtStat(s api.RateStat) string {
	if s.Samples == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f ± %.1f MB/s, peak %.1f", s.MeanBps/1e6, s.StddevBps/1e6, s.PeakBps/1e6)
}

// fmtMeanSD says a set of rate samples without the unit and the peak:
// "12.3±0.4", or "-" with none.
func fmtMeanSD(s api.RateStat) string {
	if s.Samples == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f±%.1f", s.MeanBps/1e6, s.StddevBps/1e6)
}

// printRates writes the rates of each direction, one line each, the way
// s2uc status shows them.
func printRates(w io.Writer, r *api.Rates) {
	if r == nil {
		return
	}
	window := time.Duration(r.WindowS * float64(time.Second)).Round(time.Millisecond)
	fmt.Fprintf(w, "  rate samples every %s; steady state leaves out %d at each end of a transfer\n",
		time.Duration(r.IntervalS*float64(time.Second)).Round(time.Millisecond), r.TrimSamples)
	for _, d := range []struct {
		name string
		r    api.DirRate
	}{{"to WAN", r.ToWAN}, {"from WAN", r.FromWAN}} {
		fmt.Fprintf(w, "  %-8s last %s %s; steady %s; life %s", d.name, window, fmtStat(d.r.Window), fmtStat(d.r.Steady), fmtStat(d.r.Life))
		if lr := d.r.LastRun; lr != nil {
			state := "going on"
			if lr.Ended {
				state = "ended"
			}
			fmt.Fprintf(w, "; last transfer (%s) %s", state, fmtStat(lr.Steady))
		}
		fmt.Fprintln(w)
	}
}
