package testbed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"scistream/internal/bench"
	"scistream/internal/exp/plots"
	"scistream/internal/exp/record"
	"scistream/internal/netbed"
)

// The WAN table (s2bench testbed table): one emulated path under the
// limits one TCP flow meets on a real WAN (random loss, a per-flow
// policer, neither), and on each the direct path against the gateways
// with each stripe asked (the WAN legs at once of a connection). Each
// (case, stripe) is a testbed run of its own (direct and gateways
// interleaved); the testbed is brought up for each case and taken down
// after it.

// A Case is one condition of the WAN table.
type Case struct {
	// Name says it in the table.
	Name string
	// Loss and FlowRateBps are the testbed's (netbed.Preset's).
	Loss        float64
	FlowRateBps int64
}

// TableCases are the cases of the table: random loss of loss, each flow
// policed to flowRate bits per second, and neither.
func TableCases(loss float64, flowRate int64) []Case {
	return []Case{
		{Name: fmt.Sprintf("%g%% random loss", loss*100), Loss: loss},
		{Name: "per-flow cap " + netbed.FormatRate(float64(flowRate)), FlowRateBps: flowRate},
		{Name: "no loss, no cap"},
	}
}

// TableConfig is a WAN table to measure.
type TableConfig struct {
	// Run is each run's configuration: the testbed (its Preset's Loss
	// and FlowRateBps are each case's) and the experiment (its
	// Compare.Stripe each column's; its JSONPath and PlotsDir are the
	// table's, for every run at once).
	Run RunConfig
	// Cases are the rows, Stripes the columns through the gateways.
	Cases   []Case
	Stripes []int
}

// A Cell is what the table says of one (case, path).
type Cell struct {
	Case   string
	Stripe int // 0: the direct path
	Runs   int
	Median float64 // goodput, MB/s
	Min    float64
	Max    float64
	Bad    int // runs that failed or lost integrity
}

// Table runs the table's cases and prints it; it returns every run's
// records, each with its case and stripe.
func Table(ctx context.Context, cfg TableConfig, stdout, stderr io.Writer) (recs []record.Record, cells []Cell, err error) {
	bed := cfg.Run.Bed
	if _, err := netbed.Load(bed.StateRoot, bed.Name); err == nil {
		return nil, nil, fmt.Errorf("testbed %s is up: the table brings up its own for each case; take it down first (s2bench testbed down --name %s) or give another --name", bed.Name, bed.Name)
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, nil, err
	}
	jsonPath, plotsDir := cfg.Run.Compare.JSONPath, cfg.Run.Compare.PlotsDir
	asked := map[string]bool{"preset": true, "rtt": true, "wan_rate": true, "loss": true, "flow_rate": true, "host_cc": true}
	for _, c := range cfg.Cases {
		caseRecs, err := tableCase(ctx, cfg, c, asked, stdout, stderr)
		recs = append(recs, caseRecs...)
		if err != nil {
			return recs, nil, fmt.Errorf("case %s: %w", c.Name, err)
		}
	}
	cells = tableCells(cfg, recs)
	printTable(stdout, cfg, cells)
	if jsonPath != "" {
		if err := record.WriteJSON(jsonPath, recs); err != nil {
			return recs, cells, err
		}
	}
	if plotsDir != "" {
		f, err := writeTablePlot(plotsDir, cfg.Run.Compare.PlotFormat, cfg, cells)
		if err != nil {
			return recs, cells, err
		}
		fmt.Fprintf(stdout, "plot: %s\n", f)
	}
	return recs, cells, nil
}

// tableCase runs one case: a testbed run for each stripe on a testbed
// brought up for it, taken down after.
func tableCase(ctx context.Context, cfg TableConfig, c Case, asked map[string]bool, stdout, stderr io.Writer) (recs []record.Record, err error) {
	rc := cfg.Run
	rc.Bed.Preset.Loss, rc.Bed.Preset.FlowRateBps = c.Loss, c.FlowRateBps
	rc.Asked, rc.Keep = asked, true
	rc.Compare.JSONPath, rc.Compare.PlotsDir = "", ""
	defer func() {
		if _, lerr := netbed.Load(rc.Bed.StateRoot, rc.Bed.Name); lerr == nil {
			if derr := netbed.DownByName(rc.Bed.StateRoot, rc.Bed.Name); derr != nil {
				err = errors.Join(err, fmt.Errorf("take testbed %s down: %w", rc.Bed.Name, derr))
			}
		}
	}()
	for _, s := range cfg.Stripes {
		fmt.Fprintf(stdout, "\n== %s, stripe %d\n", c.Name, s)
		rc.Compare.Stripe = s
		got, err := Run(ctx, rc, stdout, stderr)
		for i := range got {
			got[i].Case, got[i].Stripe = c.Name, s
		}
		recs = append(recs, got...)
		if err != nil {
			return recs, err
		}
	}
	return recs, nil
}

// tableCells sums up recs into the table's cells: per case, the direct
// path over every run of the case, and the gateways per stripe.
func tableCells(cfg TableConfig, recs []record.Record) []Cell {
	var cells []Cell
	for _, c := range cfg.Cases {
		for _, s := range append([]int{0}, cfg.Stripes...) {
			cell := Cell{Case: c.Name, Stripe: s}
			var xs []float64
			for _, r := range recs {
				direct := r.Path == record.PathDirect
				if r.Case != c.Name || direct != (s == 0) || !direct && r.Stripe != s {
					continue
				}
				if r.Error != "" || !r.IntegrityOK {
					cell.Bad++
					continue
				}
				xs = append(xs, r.GoodputMBps)
			}
			cell.Runs = len(xs)
			if len(xs) > 0 {
				cell.Median, cell.Min, cell.Max = bench.Median(xs), slices.Min(xs), slices.Max(xs)
			}
			cells = append(cells, cell)
		}
	}
	return cells
}

// printTable prints the cells: a row per case, the direct path and each
// stripe, with the share of the link and the ratio to direct.
func printTable(w io.Writer, cfg TableConfig, cells []Cell) {
	link := float64(cfg.Run.Bed.Preset.RateBps) / 8 / 1e6
	fmt.Fprintf(w, "\nWAN table: %s, link %s (%.1f MB/s); goodput MB/s, median of the runs (min-max); x link = of the link's rate, x direct = of the direct path's median\n",
		cfg.Run.Bed.Preset, netbed.FormatRate(float64(cfg.Run.Bed.Preset.RateBps)), link)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := []string{"case", "direct (host " + cfg.Run.Bed.CC + ")"}
	for _, s := range cfg.Stripes {
		head = append(head, "gateways, stripe "+strconv.Itoa(s), "x link", "x direct")
	}
	fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
	for _, c := range cfg.Cases {
		var direct Cell
		row := []string{c.Name}
		for _, cell := range cells {
			if cell.Case != c.Name {
				continue
			}
			if cell.Stripe == 0 {
				direct = cell
				row = append(row, cellText(cell))
				continue
			}
			ratio := "-"
			if direct.Median > 0 && cell.Runs > 0 {
				ratio = fmt.Sprintf("%.2f", cell.Median/direct.Median)
			}
			row = append(row, cellText(cell), fmt.Sprintf("%.2f", cell.Median/link), ratio)
		}
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	tw.Flush()
}

func cellText(c Cell) string {
	if c.Runs == 0 {
		return fmt.Sprintf("no run (%d failed)", c.Bad)
	}
	s := fmt.Sprintf("%.1f (%.1f-%.1f)", c.Median, c.Min, c.Max)
	if c.Bad > 0 {
		s += fmt.Sprintf(" [%d failed]", c.Bad)
	}
	return s
}

// writeTablePlot draws the table: a group per case, a bar for the
// direct path and each stripe, and the link's rate.
func writeTablePlot(dir, format string, cfg TableConfig, cells []Cell) (string, error) {
	if format == "" {
		format = "svg"
	}
	var groups []string
	for _, c := range cfg.Cases {
		groups = append(groups, c.Name)
	}
	var series []plots.BarSeries
	for k, s := range append([]int{0}, cfg.Stripes...) {
		bs := plots.BarSeries{Label: "direct (host " + cfg.Run.Bed.CC + ")", Path: record.PathDirect}
		if s > 0 {
			bs = plots.BarSeries{Label: "gateways, stripe " + strconv.Itoa(s), Path: record.PathGateways, Shade: k - 1}
		}
		for _, c := range cfg.Cases {
			v := 0.0
			for _, cell := range cells {
				if cell.Case == c.Name && cell.Stripe == s {
					v = cell.Median
				}
			}
			bs.Values = append(bs.Values, v)
		}
		series = append(series, bs)
	}
	link := float64(cfg.Run.Bed.Preset.RateBps) / 8 / 1e6
	return plots.Bars(dir, format, "wan_table", "Goodput of one connection: "+cfg.Run.Bed.Preset.String(), "goodput (MB/s)", groups, series, link, "the link")
}
