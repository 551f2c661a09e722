package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"scistream/internal/exp/record"
)

// TestCompareGatewayRates: the steady-state rate each gateway samples
// from its byte counters agrees with s2bench's goodput for the same run
// within 5%. The run is paced (24 MB/s for 3 s), so the rate is the same
// from its first second to its last whatever else the machine does, and
// the gateways sample every 100 ms (the steady state leaves out a second
// at each end, 10 samples).
func TestCompareGatewayRates(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	jsonPath := filepath.Join(t.TempDir(), "out.json")
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"compare", "--bytes", "72MiB", "--size", "64KiB", "--rate", "24MB/s", "--reps", "1",
		"--rate_interval", "100ms", "--json", jsonPath, "--s2cs", s2csBin}, &stdout, &stderr)
	t.Logf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	if err != nil {
		t.Fatal(err)
	}
	checkGone(t, gatewayPIDs(t, stdout.String()), tmp)
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var recs []record.Record
	if err := json.Unmarshal(b, &recs); err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 {
		t.Fatalf("%d records, want 2:\n%s", len(recs), b)
	}
	for _, r := range recs {
		if r.Path == record.PathDirect {
			if r.GwOutSteadyMBps != nil || r.GwRateNote != "" {
				t.Errorf("direct run with gateway rates: %+v", r)
			}
			continue
		}
		if r.GwOutSteadyMBps == nil || r.GwInSteadyMBps == nil || r.GwOverGoodput == nil {
			t.Fatalf("gateway run without the gateways' rates: note %q", r.GwRateNote)
		}
		// The gateways count the 24-byte header of every 64 KiB message.
		wire := r.GoodputMBps * (1 + 24.0/(64<<10))
		for _, g := range []struct {
			name string
			v    float64
		}{{"outbound", *r.GwOutSteadyMBps}, {"inbound", *r.GwInSteadyMBps}} {
			if math.Abs(g.v/wire-1) > 0.05 {
				t.Errorf("%s gateway's steady rate %.2f MB/s, s2bench's goodput %.2f MB/s (%.2f on the wire): more than 5%% apart", g.name, g.v, r.GoodputMBps, wire)
			}
		}
		if math.Abs(*r.GwOverGoodput-1) > 0.05 || r.GwSteadySamples < 5 {
			t.Errorf("gw_over_goodput %.3f from %d steady samples", *r.GwOverGoodput, r.GwSteadySamples)
		}
		t.Logf("goodput %.2f MB/s; gateways' steady %.2f±%.2f (out) %.2f±%.2f (in) MB/s over %d samples; x%.4f",
			r.GoodputMBps, *r.GwOutSteadyMBps, *r.GwOutSteadySDMBps, *r.GwInSteadyMBps, *r.GwInSteadySDMBps, r.GwSteadySamples, *r.GwOverGoodput)
	}
	if !strings.Contains(stdout.String(), "gw steady out ") {
		t.Errorf("the gateway run's line lacks the gateways' rates")
	}
}
