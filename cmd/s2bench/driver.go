package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"slices"
	"sync/atomic"
	"time"

	"scistream/internal/bench"
	"scistream/internal/exp/progress"
	"scistream/internal/exp/record"
	"scistream/internal/exp/workload"
)

const runUsage = `usage: s2bench run --direct CONSUMER:PORT --gateways PROXY_P:PORT [--workload ...] [--bytes N | --messages N | --duration D]
                   [--rate R] [--mode throughput|rr] [--pairs N[,N...]] [--reps 3] [--json FILE] [--plots DIR]

The driver of an experiment across hosts: an s2bench consumer runs on the
consumer's host (s2bench consumer --listen ...), the gateways are wired to it
(s2uc), and this command, on the producer's host, runs the same workload to the
consumer directly and through the producer-side gateway listener, interleaved,
with the table, JSON and plots of compare. The consumer verifies every message
and returns what it measured at the end of each connection. Either path may be
left out. The gateways' CPU is not measured (they are not local).`

type runConfig struct {
	plan       *workload.Plan
	targets    map[string]string // path -> address
	pairs      []int
	reps       int
	engine     string
	wan        string
	jsonPath   string
	plotsDir   string
	plotFormat string
	progress   string
	runTimeout time.Duration
	idle       time.Duration
}

func parseRun(args []string, stderr io.Writer) (*runConfig, error) {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var wf workload.Flags
	wf.Register(fs)
	var (
		direct       = fs.String("direct", "", "HOST:PORT of the s2bench consumer, reached directly")
		gateways     = fs.String("gateways", "", "HOST:PORT of the producer-side gateway listener leading to the same consumer")
		pairsS       = fs.String("pairs", "1", "producer/consumer pairs at once, each its own connection; a list (1,2,4,8) runs each count")
		reps         = fs.Int("reps", 3, "repetitions of each (size, path), interleaved")
		engine       = fs.String("engine", "", "label for the records: the gateways' data-plane engine")
		wanT         = fs.String("wan", "", "label for the records: the gateways' WAN transport")
		jsonPath     = fs.String("json", "", "also write every run as a JSON array of records to FILE")
		plotsDir     = fs.String("plots", "", "write plots to DIR (as compare)")
		plotFormat   = fs.String("plot_format", "svg", "plot file format: svg or png")
		progressMode = fs.String("progress", "auto", "progress line on stderr: auto (when stderr is a terminal), on or off")
		runTimeout   = fs.Duration("run_timeout", 5*time.Minute, "upper bound of one run")
		idle         = fs.Duration("idle_timeout", 30*time.Second, "fail a run that makes no progress for this long")
	)
	if err := parseFlags(fs, args, runUsage, stderr); err != nil {
		return nil, err
	}
	cfg := &runConfig{targets: map[string]string{}, reps: *reps, engine: *engine, wan: *wanT, jsonPath: *jsonPath,
		plotsDir: *plotsDir, plotFormat: *plotFormat, progress: *progressMode, runTimeout: *runTimeout, idle: *idle}
	for path, a := range map[string]string{record.PathDirect: *direct, record.PathGateways: *gateways} {
		if a == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, usagef("--%s %q: %v; give HOST:PORT, e.g. 10.0.0.2:8080", path, a, err)
		}
		cfg.targets[path] = a
	}
	if len(cfg.targets) == 0 {
		return nil, usagef("give --direct (the consumer's HOST:PORT), --gateways (the gateway listener's HOST:PORT), or both")
	}
	var err error
	if cfg.pairs, err = parsePairs(*pairsS); err != nil {
		return nil, err
	}
	if cfg.plan, err = resolveWorkload(&wf, slices.Max(cfg.pairs)); err != nil {
		return nil, err
	}
	switch {
	case cfg.reps < 1 || cfg.reps > maxReps:
		return nil, usagef("--reps %d out of range: give 1 to %d", cfg.reps, maxReps)
	}
	if err := checkExperimentFlags(cfg.plan, cfg.runTimeout, cfg.idle, cfg.plotFormat, cfg.progress, cfg.jsonPath, cfg.plotsDir); err != nil {
		return nil, err
	}
	return cfg, nil
}

func runDriver(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseRun(args, stderr)
	if err != nil {
		return err
	}
	var ps []string
	for _, p := range []string{record.PathDirect, record.PathGateways} {
		if a, ok := cfg.targets[p]; ok {
			ps = append(ps, p)
			fmt.Fprintf(stdout, "path %s: %s\n", p, a)
		}
	}
	fmt.Fprintf(stdout, "s2bench run: workload %s, %d size(s), pairs %v, %d repetition(s) per path\n",
		cfg.plan.Name, len(cfg.plan.Sizes), cfg.pairs, cfg.reps)
	e := &experiment{
		plan: cfg.plan, pairs: cfg.pairs, reps: cfg.reps, paths: ps, engine: cfg.engine, wan: cfg.wan,
		jsonPath: cfg.jsonPath, plotsDir: cfg.plotsDir, plotFormat: cfg.plotFormat, progress: cfg.progress,
		runOne: func(ctx context.Context, h bench.Hello, prog *progress.Display, label string) (record.Record, error) {
			rec := record.Record{Path: h.Path, SizeBytes: h.Spec.Size, Pairs: h.Pairs, Mode: h.Mode.String(), RateMsgsPerS: h.Rate}
			if cfg.plan.Duration > 0 {
				rec.DurationS = cfg.plan.Duration.Seconds()
			}
			var sent atomic.Int64
			prog.Start(label, &sent, h.Spec.Bytes*int64(h.Pairs))
			res, err := bench.RunRemote(ctx, cfg.targets[h.Path], h, bench.RunOptions{Timeout: cfg.runTimeout, Idle: cfg.idle, Duration: cfg.plan.Duration, Sent: &sent, EachMessage: cfg.plan.Each})
			prog.End()
			rec.Fill(res)
			if err != nil {
				rec.Error = err.Error()
				return rec, fmt.Errorf("%w (the consumer's output says why if it refused the data)", err)
			}
			for i, p := range res.Pairs {
				if p.Recv == nil || p.Recv.Measure.Messages != p.Send.Messages || p.Recv.Measure.Bytes != p.Send.Bytes {
					return rec, fmt.Errorf("pair %d: the consumer reports %+v; the producer sent %d messages", i, p.Recv, p.Send.Messages)
				}
			}
			if res.Summary.GoodputBps <= 0 {
				return rec, fmt.Errorf("run too short to time (every message arrived at once): raise --bytes")
			}
			rec.IntegrityOK = true
			return rec, nil
		},
	}
	return e.execute(ctx, stdout, stderr)
}
