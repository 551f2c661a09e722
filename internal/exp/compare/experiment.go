package compare

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"

	"scistream/internal/bench"
	"scistream/internal/bytesize"
	"scistream/internal/exp/plots"
	"scistream/internal/exp/progress"
	"scistream/internal/exp/record"
	"scistream/internal/exp/workload"
)

// Experiment is a series of runs of one plan over one or more paths,
// interleaved: for each pair count, repetition and size, every path in
// turn, so slow drifts of the machine touch every path alike. compare,
// run and testbed run are each one, with their own RunOne.
type Experiment struct {
	Plan        *workload.Plan // what each run sends; required
	Pairs       []int          // the pair counts, one after another; nil: 1
	Reps        int            // repetitions of each (size, path); 0: 1
	Paths       []string       // the paths, in the order each repetition runs them; required
	Engine, WAN string         // labels of the records ("" when unknown)
	// JSONPath, if set, is the file the records are written to (also
	// after a failure or an interrupt).
	JSONPath string
	// PlotsDir, if set, is the directory the plots go to, in PlotFormat
	// (svg or png; empty: svg).
	PlotsDir, PlotFormat string
	// Progress is the progress line's mode on stderr (progress.Auto, On
	// or Off; empty: off).
	Progress string
	CPU      bool // the records carry the gateways' CPU time: a column of the table
	// RunOne runs h over h.Path once, showing its progress on prog under
	// label; required. Its record holds what was measured also when it
	// fails.
	RunOne func(ctx context.Context, h bench.Hello, prog *progress.Display, label string) (record.Record, error)
	// OnFail, if set, is called after a run over path failed (not when
	// interrupted).
	OnFail func(path string)
}

// Run runs the experiment, printing a line per run and then the table
// to stdout, the progress line to stderr; it writes the JSON records
// (also after a failure or an interrupt) and the plots, and returns the
// records. The first failed run ends it with an error.
func (e *Experiment) Run(ctx context.Context, stdout, stderr io.Writer) ([]record.Record, error) {
	prog := progress.New(stderr, e.Progress)
	defer prog.Stop()
	p := e.Plan
	pairCounts, reps, format := e.Pairs, max(e.Reps, 1), e.PlotFormat
	if len(pairCounts) == 0 {
		pairCounts = []int{1}
	}
	if format == "" {
		format = "svg"
	}
	tag, seed := rand.Uint32(), rand.Uint64()
	var recs []record.Record
	total := len(pairCounts) * reps * len(p.Sizes) * len(e.Paths)
	for _, pairs := range pairCounts {
		for rep := 1; rep <= reps; rep++ {
			for _, size := range p.Sizes {
				for _, path := range e.Paths {
					per, _ := p.PerPair(size, pairs)
					h := bench.Hello{
						Mode:  p.Mode,
						Spec:  bench.Spec{Size: size, Bytes: per, Seed: seed, Run: tag},
						Group: tag, Pairs: pairs, Rate: p.Rate.PerSecond(size), Path: path, ReadEach: p.ReadEach,
					}
					tag += uint32(pairs) // every connection of the experiment has its own tag
					label := fmt.Sprintf("run %d/%d %-8s %7s x%d rep %d", len(recs)+1, total, path, bytesize.Format(int64(size)), pairs, rep)
					rec, rerr := e.RunOne(ctx, h, prog, label)
					rec.Rep, rec.Engine, rec.WAN, rec.Workload, rec.EachMessage = rep, e.Engine, e.WAN, p.Name, p.EachMessage()
					rec.ReadEach = p.ReadEach
					recs = append(recs, rec)
					fmt.Fprintf(stdout, "%s %9.1f MB/s %10.0f msgs/s  latency %9.2f us  jitter %9.2f us%s%s%s%s  %s\n",
						label, rec.GoodputMBps, rec.MsgsPerS, rec.LatencyUS, rec.JitterUS, record.RTTText(rec), record.CPUText(rec), record.PairsText(rec), record.GwRateText(rec), record.Status(ctx, rerr))
					if rerr != nil {
						// Keep what was measured, the failed run included.
						if e.JSONPath != "" {
							if jerr := record.WriteJSON(e.JSONPath, recs); jerr != nil {
								rerr = errors.Join(rerr, jerr)
							}
						}
						if ctx.Err() != nil {
							return recs, fmt.Errorf("interrupted during %s run %d: %w", path, rep, context.Cause(ctx))
						}
						if e.OnFail != nil {
							e.OnFail(path)
						}
						return recs, fmt.Errorf("%s run (%s, %d pairs, rep %d) FAILED: %w", path, bytesize.Format(int64(size)), pairs, rep, rerr)
					}
				}
			}
		}
	}
	prog.Stop()

	fmt.Fprintln(stdout)
	record.PrintTable(stdout, recs, p.Mode.RoundTrips(), e.CPU)
	if e.JSONPath != "" {
		if err := record.WriteJSON(e.JSONPath, recs); err != nil {
			return recs, err
		}
		fmt.Fprintf(stdout, "wrote %d records to %s\n", len(recs), e.JSONPath)
	}
	if e.PlotsDir != "" {
		files, err := plots.Write(e.PlotsDir, format, recs)
		if err != nil {
			return recs, fmt.Errorf("plots: %w", err)
		}
		for _, f := range files {
			fmt.Fprintf(stdout, "wrote plot %s\n", f)
		}
	}
	return recs, nil
}
