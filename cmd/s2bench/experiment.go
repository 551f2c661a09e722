package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"time"

	"scistream/internal/bench"
	"scistream/internal/bytesize"
	"scistream/internal/exp/plots"
	"scistream/internal/exp/progress"
	"scistream/internal/exp/record"
	"scistream/internal/exp/workload"
)

// experiment is a series of runs of one plan over one or more paths,
// interleaved: for each pair count, repetition and size, every path in
// turn, so slow drifts of the machine touch every path alike.
type experiment struct {
	plan        *workload.Plan
	pairs       []int
	reps        int
	paths       []string
	engine, wan string // labels of the records ("" when unknown)
	jsonPath    string
	plotsDir    string
	plotFormat  string
	progress    string
	cpu         bool // the records carry the gateways' CPU time
	// runOne runs h over h.Path once.
	runOne func(ctx context.Context, h bench.Hello, prog *progress.Display, label string) (record.Record, error)
	// onFail, if set, is called after a run over path failed (not when
	// interrupted).
	onFail func(path string)
}

// execute runs the experiment, printing a line per run and then the
// table; it writes the JSON records (also after a failure or an
// interrupt) and the plots. The first failed run ends it with an error.
func (e *experiment) execute(ctx context.Context, stdout, stderr io.Writer) error {
	prog := progress.New(stderr, e.progress)
	defer prog.Stop()
	p := e.plan
	tag, seed := rand.Uint32(), rand.Uint64()
	var recs []record.Record
	total := len(e.pairs) * e.reps * len(p.Sizes) * len(e.paths)
	for _, pairs := range e.pairs {
		for rep := 1; rep <= e.reps; rep++ {
			for _, size := range p.Sizes {
				for _, path := range e.paths {
					per, _ := p.PerPair(size, pairs)
					h := bench.Hello{
						Mode:  p.Mode,
						Spec:  bench.Spec{Size: size, Bytes: per, Seed: seed, Run: tag},
						Group: tag, Pairs: pairs, Rate: p.Rate.PerSecond(size), Path: path, ReadEach: p.ReadEach,
					}
					tag += uint32(pairs) // every connection of the experiment has its own tag
					label := fmt.Sprintf("run %d/%d %-8s %7s x%d rep %d", len(recs)+1, total, path, bytesize.Format(int64(size)), pairs, rep)
					rec, rerr := e.runOne(ctx, h, prog, label)
					rec.Rep, rec.Engine, rec.WAN, rec.Workload, rec.EachMessage = rep, e.engine, e.wan, p.Name, p.Each && p.Mode == bench.Throughput && p.Rate == (bench.Rate{})
					rec.ReadEach = p.ReadEach
					recs = append(recs, rec)
					fmt.Fprintf(stdout, "%s %9.1f MB/s %10.0f msgs/s  latency %9.2f us  jitter %9.2f us%s%s%s%s  %s\n",
						label, rec.GoodputMBps, rec.MsgsPerS, rec.LatencyUS, rec.JitterUS, record.RTTText(rec), record.CPUText(rec), record.PairsText(rec), record.GwRateText(rec), record.Status(ctx, rerr))
					if rerr != nil {
						// Keep what was measured, the failed run included.
						if e.jsonPath != "" {
							if jerr := record.WriteJSON(e.jsonPath, recs); jerr != nil {
								rerr = errors.Join(rerr, jerr)
							}
						}
						if ctx.Err() != nil {
							return fmt.Errorf("interrupted during %s run %d: %w", path, rep, context.Cause(ctx))
						}
						if e.onFail != nil {
							e.onFail(path)
						}
						return fmt.Errorf("%s run (%s, %d pairs, rep %d) FAILED: %w", path, bytesize.Format(int64(size)), pairs, rep, rerr)
					}
				}
			}
		}
	}
	prog.Stop()

	fmt.Fprintln(stdout)
	record.PrintTable(stdout, recs, p.Mode.RoundTrips(), e.cpu)
	if e.jsonPath != "" {
		if err := record.WriteJSON(e.jsonPath, recs); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote %d records to %s\n", len(recs), e.jsonPath)
	}
	if e.plotsDir != "" {
		files, err := plots.Write(e.plotsDir, e.plotFormat, recs)
		if err != nil {
			return fmt.Errorf("plots: %w", err)
		}
		for _, f := range files {
			fmt.Fprintf(stdout, "wrote plot %s\n", f)
		}
	}
	return nil
}

// checkExperimentFlags validates the flags that compare, run and testbed
// run share: the bounds of a run and where the results go.
func checkExperimentFlags(p *workload.Plan, runTimeout, idle time.Duration, plotFormat, progress, jsonPath, plotsDir string) error {
	switch {
	case runTimeout <= 0:
		return usagef("--run_timeout must be positive, e.g. 5m")
	case idle <= 0:
		return usagef("--idle_timeout must be positive, e.g. 30s")
	case plotFormat != "svg" && plotFormat != "png":
		return usagef("--plot_format %q: use svg or png", plotFormat)
	case progress != "auto" && progress != "on" && progress != "off":
		return usagef("--progress %q: use auto, on or off", progress)
	case p.Duration > 0 && p.Duration >= runTimeout:
		return usagef("--duration %s is not below --run_timeout %s: lower --duration or raise --run_timeout", p.Duration, runTimeout)
	}
	if jsonPath != "" {
		if err := checkOutPath("--json", jsonPath); err != nil {
			return err
		}
	}
	if plotsDir != "" {
		if st, err := os.Stat(plotsDir); err != nil || !st.IsDir() {
			return usagef("--plots %s is not a directory: create it (mkdir -p %s) or choose another", plotsDir, plotsDir)
		}
	}
	return nil
}
