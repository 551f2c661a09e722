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
)

// experiment is a series of runs of one plan over one or more paths,
// interleaved: for each pair count, repetition and size, every path in
// turn, so slow drifts of the machine touch every path alike.
type experiment struct {
	plan        *plan
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
	runOne func(ctx context.Context, h bench.Hello, prog *progress, label string) (record, error)
	// onFail, if set, is called after a run over path failed (not when
	// interrupted).
	onFail func(path string)
}

// execute runs the experiment, printing a line per run and then the
// table; it writes the JSON records (also after a failure or an
// interrupt) and the plots. The first failed run ends it with an error.
func (e *experiment) execute(ctx context.Context, stdout, stderr io.Writer) error {
	prog := newProgress(stderr, e.progress)
	defer prog.stop()
	p := e.plan
	tag, seed := rand.Uint32(), rand.Uint64()
	var recs []record
	total := len(e.pairs) * e.reps * len(p.sizes) * len(e.paths)
	for _, pairs := range e.pairs {
		for rep := 1; rep <= e.reps; rep++ {
			for _, size := range p.sizes {
				for _, path := range e.paths {
					per, _ := p.perPair(size, pairs)
					h := bench.Hello{
						Mode:  p.mode,
						Spec:  bench.Spec{Size: size, Bytes: per, Seed: seed, Run: tag},
						Group: tag, Pairs: pairs, Rate: p.rate.PerSecond(size), Path: path, ReadEach: p.readEach,
					}
					tag += uint32(pairs) // every connection of the experiment has its own tag
					label := fmt.Sprintf("run %d/%d %-8s %7s x%d rep %d", len(recs)+1, total, path, bytesize.Format(int64(size)), pairs, rep)
					rec, rerr := e.runOne(ctx, h, prog, label)
					rec.Rep, rec.Engine, rec.WAN, rec.Workload, rec.EachMessage = rep, e.engine, e.wan, p.name, p.each && p.mode == bench.Throughput && p.rate == (bench.Rate{})
					rec.ReadEach = p.readEach
					recs = append(recs, rec)
					fmt.Fprintf(stdout, "%s %9.1f MB/s %10.0f msgs/s  latency %9.2f us  jitter %9.2f us%s%s%s%s  %s\n",
						label, rec.GoodputMBps, rec.MsgsPerS, rec.LatencyUS, rec.JitterUS, rttText(rec), cpuText(rec), pairsText(rec), gwRateText(rec), status(ctx, rerr))
					if rerr != nil {
						// Keep what was measured, the failed run included.
						if e.jsonPath != "" {
							if jerr := writeJSON(e.jsonPath, recs); jerr != nil {
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
	prog.stop()

	fmt.Fprintln(stdout)
	printTable(stdout, recs, p.mode.RoundTrips(), e.cpu)
	if e.jsonPath != "" {
		if err := writeJSON(e.jsonPath, recs); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote %d records to %s\n", len(recs), e.jsonPath)
	}
	if e.plotsDir != "" {
		files, err := writePlots(e.plotsDir, e.plotFormat, recs)
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
func checkExperimentFlags(p *plan, runTimeout, idle time.Duration, plotFormat, progress, jsonPath, plotsDir string) error {
	switch {
	case runTimeout <= 0:
		return usagef("--run_timeout must be positive, e.g. 5m")
	case idle <= 0:
		return usagef("--idle_timeout must be positive, e.g. 30s")
	case plotFormat != "svg" && plotFormat != "png":
		return usagef("--plot_format %q: use svg or png", plotFormat)
	case progress != "auto" && progress != "on" && progress != "off":
		return usagef("--progress %q: use auto, on or off", progress)
	case p.duration > 0 && p.duration >= runTimeout:
		return usagef("--duration %s is not below --run_timeout %s: lower --duration or raise --run_timeout", p.duration, runTimeout)
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
