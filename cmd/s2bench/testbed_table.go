package main

import (
	"context"
	"flag"
	"io"
	"slices"

	"scistream/internal/exp/testbed"
	"scistream/internal/exp/workload"
)

// testbed table: the WAN table of one connection's goodput (issue 38):
// random loss, a per-flow policer and neither, each direct and through
// the gateways with each stripe.

func parseTestbedTable(args []string, stdout, help io.Writer) (*testbed.TableConfig, error) {
	fs := flag.NewFlagSet("testbed table", flag.ContinueOnError)
	bf := addBedFlags(fs)
	cf := compareFlags{wf: workload.Flags{}}
	cf.register(fs, 3)
	stripes := fs.String("stripes", "1,4", "the stripes through the gateways, a column each (the WAN legs at once of each connection), 1 to 16")
	// The table's own defaults: the long WAN, its loss and its cap.
	for name, v := range map[string]string{"preset": "longwan", "loss": "0.001", "flow_rate": "50mbit"} {
		fs.Set(name, v)
		fs.Lookup(name).DefValue = v
	}
	fs.Lookup("loss").Usage = "the random loss of the table's loss case"
	fs.Lookup("flow_rate").Usage = "the per-flow cap of the table's cap case"
	fs.Lookup("stripe").Usage = "(testbed table: see --stripes)"
	if err := parseFlags(fs, args, testbedUsage, help); err != nil {
		return nil, err
	}
	given := flagsSet(fs)
	if !given["workload"] && !given["size"] {
		fs.Set("workload", "1MiB")
	}
	if !given["bytes"] && !given["messages"] && !given["duration"] {
		fs.Set("duration", "20s")
	}
	if given["stripe"] {
		return nil, usagef("--stripe: the table's columns are --stripes (default 1,4)")
	}
	bed, err := bf.config(stdout)
	if err != nil {
		return nil, err
	}
	loss, flowRate := bed.Preset.Loss, bed.Preset.FlowRateBps
	switch {
	case loss <= 0 || loss >= 1:
		return nil, usagef("--loss %g: give the loss case's probability, e.g. 0.001", loss)
	case flowRate <= 0:
		return nil, usagef("--flow_rate: give the cap case's per-flow rate, e.g. 50mbit")
	}
	cmp, err := cf.config(fs)
	if err != nil {
		return nil, err
	}
	cols, err := parsePairs(*stripes)
	if err != nil {
		return nil, usagef("--stripes: %v", err)
	}
	if slices.Max(cols) > 16 {
		return nil, usagef("--stripes: give 1 to 16 legs at once")
	}
	if cmp.WAN != "tls" && slices.Max(cols) > 1 {
		return nil, usagef("--stripes with --wan %s: striping carries tls legs; use --wan tls", cmp.WAN)
	}
	bed.Preset.Loss, bed.Preset.FlowRateBps = 0, 0
	return &testbed.TableConfig{Run: testbed.RunConfig{Bed: bed, Compare: *cmp}, Cases: testbed.TableCases(loss, flowRate), Stripes: cols}, nil
}

func testbedTableCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseTestbedTable(args, stdout, stdout)
	if err != nil {
		return err
	}
	_, _, err = testbed.Table(ctx, *cfg, stdout, stderr)
	return err
}
