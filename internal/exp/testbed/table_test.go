package testbed

import (
	"bytes"
	"strings"
	"testing"

	"scistream/internal/exp/record"
	"scistream/internal/netbed"
)

// TestTableCells: the table's cells are, per case, the median of every
// direct run of the case and of the gateway runs of each stripe; a
// failed or corrupt run is counted apart, never in the median; and the
// printed row gives the share of the link and the ratio to direct.
func TestTableCells(t *testing.T) {
	cases := TableCases(0.001, 50e6)
	p, err := netbed.LookupPreset("longwan")
	if err != nil {
		t.Fatal(err)
	}
	cfg := TableConfig{Run: RunConfig{Bed: netbed.Config{Preset: p, CC: "cubic"}}, Cases: cases, Stripes: []int{1, 4}}
	run := func(c string, path string, stripe int, mbps float64, ok bool) record.Record {
		return record.Record{Case: c, Path: path, Stripe: stripe, GoodputMBps: mbps, IntegrityOK: ok}
	}
	cap := cases[1].Name
	recs := []record.Record{
		run(cap, record.PathDirect, 1, 2, true), run(cap, record.PathDirect, 4, 3, true), run(cap, record.PathDirect, 4, 4, true),
		run(cap, record.PathGateways, 1, 6, true),
		run(cap, record.PathGateways, 4, 20, true), run(cap, record.PathGateways, 4, 22, true), run(cap, record.PathGateways, 4, 99, false),
	}
	cells := tableCells(cfg, recs)
	want := map[int]Cell{0: {Runs: 3, Median: 3, Min: 2, Max: 4}, 1: {Runs: 1, Median: 6, Min: 6, Max: 6}, 4: {Runs: 2, Median: 21, Min: 20, Max: 22, Bad: 1}}
	for _, c := range cells {
		if c.Case != cap {
			if c.Runs != 0 {
				t.Errorf("case %s has %d runs, want none", c.Case, c.Runs)
			}
			continue
		}
		w := want[c.Stripe]
		w.Case, w.Stripe = cap, c.Stripe
		if c != w {
			t.Errorf("stripe %d: %+v, want %+v", c.Stripe, c, w)
		}
	}
	var out bytes.Buffer
	printTable(&out, cfg, cells)
	// 21 MB/s of the 25 MB/s link is 0.84 of it; 7x the direct median.
	if row := out.String(); !strings.Contains(row, "21.0 (20.0-22.0) [1 failed]") || !strings.Contains(row, "0.84") || !strings.Contains(row, "7.00") {
		t.Errorf("the table does not say the stripe-4 cell, its share and ratio:\n%s", row)
	}
}
