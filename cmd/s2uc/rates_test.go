package main

import (
	"bytes"
	"strings"
	"testing"

	"scistream/internal/api"
)

// TestPrintRates: status gives each direction's rates over the window,
// the steady state and the life, and the last transfer's steady state.
func TestPrintRates(t *testing.T) {
	s := watchedStream()
	s.Stats.Rates.ToWAN.LastRun = &api.RateRun{Samples: 12, Bytes: 3 << 30, Ended: true,
		Steady: api.RateStat{Samples: 10, MeanBps: 305e6, StddevBps: 3.1e6, PeakBps: 320e6}}
	var b bytes.Buffer
	printStatus(&b, "gw:5000", &s)
	out := b.String()
	for _, want := range []string{
		"  rate samples every 1s; steady state leaves out 1 at each end of a transfer\n",
		"  to WAN   last 1m0s 300.1 ± 10.2 MB/s, peak 330.5; steady 305.0 ± 3.1 MB/s, peak 320.0; life -; last transfer (ended) 305.0 ± 3.1 MB/s, peak 320.0\n",
		"  from WAN last 1m0s -; steady -; life -\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
}
