package main

import (
	"context"
	"flag"
	"io"
	"net"
	"slices"
	"time"

	"scistream/internal/exp/compare"
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

func parseRun(args []string, help io.Writer) (*compare.RemoteConfig, error) {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(help)
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
	if err := parseFlags(fs, args, runUsage, help); err != nil {
		return nil, err
	}
	cfg := &compare.RemoteConfig{Targets: map[string]string{}, Reps: *reps, Engine: *engine, WAN: *wanT, JSONPath: *jsonPath,
		PlotsDir: *plotsDir, PlotFormat: *plotFormat, Progress: *progressMode, RunTimeout: *runTimeout, Idle: *idle}
	for path, a := range map[string]string{record.PathDirect: *direct, record.PathGateways: *gateways} {
		if a == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, usagef("--%s %q: %v; give HOST:PORT, e.g. 10.0.0.2:8080", path, a, err)
		}
		cfg.Targets[path] = a
	}
	if len(cfg.Targets) == 0 {
		return nil, usagef("give --direct (the consumer's HOST:PORT), --gateways (the gateway listener's HOST:PORT), or both")
	}
	var err error
	if cfg.Pairs, err = parsePairs(*pairsS); err != nil {
		return nil, err
	}
	if cfg.Plan, err = resolveWorkload(&wf, slices.Max(cfg.Pairs)); err != nil {
		return nil, err
	}
	switch {
	case cfg.Reps < 1 || cfg.Reps > maxReps:
		return nil, usagef("--reps %d out of range: give 1 to %d", cfg.Reps, maxReps)
	}
	if err := checkExperimentFlags(cfg.Plan, cfg.RunTimeout, cfg.Idle, cfg.PlotFormat, cfg.Progress, cfg.JSONPath, cfg.PlotsDir); err != nil {
		return nil, err
	}
	return cfg, nil
}

func runDriver(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseRun(args, stdout)
	if err != nil {
		return err
	}
	_, err = compare.RunRemote(ctx, *cfg, stdout, stderr)
	return err
}
