package main

import (
	"context"
	"flag"
	"io"
	"net"
	"time"

	"scistream/internal/bench"
	"scistream/internal/exp/record"
	"scistream/internal/exp/roles"
	"scistream/internal/exp/workload"
)

const producerUsage = `usage: s2bench producer --connect HOST:PORT [--path direct|gateways] [--workload ...] [--bytes N | --messages N | --duration D]
                        [--rate R] [--mode throughput|rr] [--pairs N] [--reps 1] [--json FILE]

The producer role as its own process: opens --pairs connections to HOST:PORT
(an s2bench consumer, or a gateway listener in front of one), sends each a run
header then the verified messages. The consumer verifies every message, measures
goodput, latency and jitter, and returns them at the end of each connection;
the producer prints them with, in rr mode, the round-trip times it measured.
--path labels the records of both sides. (s2bench run drives both paths.)`

func parseProducer(args []string, help io.Writer) (*roles.ProducerConfig, error) {
	fs := flag.NewFlagSet("producer", flag.ContinueOnError)
	fs.SetOutput(help)
	var wf workload.Flags
	wf.Register(fs)
	var (
		connect      = fs.String("connect", "", "HOST:PORT of the consumer or of the producer-side gateway listener (required)")
		path         = fs.String("path", record.PathDirect, "label of the path in both sides' records: direct or gateways (any short word)")
		pairs        = fs.Int("pairs", 1, "connections at once, each its own pair")
		reps         = fs.Int("reps", 1, "repetitions of each size")
		jsonPath     = fs.String("json", "", "also write every run as a JSON array of records to FILE")
		progressMode = fs.String("progress", "auto", "progress line on stderr: auto (when stderr is a terminal), on or off")
		runTimeout   = fs.Duration("run_timeout", 5*time.Minute, "upper bound of one run")
		idle         = fs.Duration("idle_timeout", 30*time.Second, "fail a run that makes no progress for this long")
	)
	if err := parseFlags(fs, args, producerUsage, help); err != nil {
		return nil, err
	}
	cfg := &roles.ProducerConfig{Connect: *connect, Path: *path, Pairs: *pairs, Reps: *reps, JSONPath: *jsonPath,
		Progress: *progressMode, RunTimeout: *runTimeout, Idle: *idle}
	if cfg.Connect == "" {
		return nil, usagef("--connect is required: give the consumer's (or the gateway listener's) HOST:PORT")
	}
	if _, _, err := net.SplitHostPort(cfg.Connect); err != nil {
		return nil, usagef("--connect %q: %v; give HOST:PORT, e.g. 127.0.0.1:8080", cfg.Connect, err)
	}
	if err := (bench.Hello{Spec: bench.Spec{Size: 1, Bytes: 1}, Pairs: 1, Path: cfg.Path}).Validate(); err != nil {
		return nil, usagef("--path %q: give a word of at most %d printable characters, e.g. gateways", cfg.Path, bench.MaxPathLen)
	}
	if cfg.Pairs < 1 || cfg.Pairs > workload.MaxPairs {
		return nil, usagef("--pairs %d out of range: give 1 to %d", cfg.Pairs, workload.MaxPairs)
	}
	var err error
	if cfg.Plan, err = resolveWorkload(&wf, cfg.Pairs); err != nil {
		return nil, err
	}
	switch {
	case cfg.Reps < 1 || cfg.Reps > maxReps:
		return nil, usagef("--reps %d out of range: give 1 to %d", cfg.Reps, maxReps)
	case cfg.RunTimeout <= 0:
		return nil, usagef("--run_timeout must be positive, e.g. 5m")
	case cfg.Idle <= 0:
		return nil, usagef("--idle_timeout must be positive, e.g. 30s")
	case cfg.Progress != "auto" && cfg.Progress != "on" && cfg.Progress != "off":
		return nil, usagef("--progress %q: use auto, on or off", cfg.Progress)
	case cfg.Plan.Duration > 0 && cfg.Plan.Duration >= cfg.RunTimeout:
		return nil, usagef("--duration %s is not below --run_timeout %s: lower --duration or raise --run_timeout", cfg.Plan.Duration, cfg.RunTimeout)
	}
	if cfg.JSONPath != "" {
		if err := checkOutPath("--json", cfg.JSONPath); err != nil {
			return nil, err
		}
	}
	return cfg, nil
}

func runProducer(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseProducer(args, stdout)
	if err != nil {
		return err
	}
	_, err = roles.Produce(ctx, *cfg, stdout, stderr)
	return err
}

const consumerUsage = `usage: s2bench consumer --listen HOST:PORT [--runs N] [--json FILE]

The consumer role as its own process: accepts connections from s2bench
producers (directly or through gateways), reads each one's run header, verifies
every message (count, order, CRC-32C), answers in rr mode, and when all the
pairs of a run have finished prints and records goodput, latency and jitter.
A run with any error fails loudly. Serves until --runs runs have completed, or
until interrupted (Ctrl-C); the exit status is 1 if any run failed.`

func parseConsumer(args []string, help io.Writer) (*roles.ConsumerConfig, error) {
	fs := flag.NewFlagSet("consumer", flag.ContinueOnError)
	fs.SetOutput(help)
	var (
		listen     = fs.String("listen", "", "HOST:PORT to listen on (port 0: any free port, printed) (required)")
		runs       = fs.Int("runs", 0, "exit after this many runs (0: serve until interrupted)")
		jsonPath   = fs.String("json", "", "write every run as a JSON array of records to FILE (rewritten after each run)")
		runTimeout = fs.Duration("run_timeout", 5*time.Minute, "upper bound of one connection")
		idle       = fs.Duration("idle_timeout", 30*time.Second, "fail a connection that makes no progress for this long")
	)
	if err := parseFlags(fs, args, consumerUsage, help); err != nil {
		return nil, err
	}
	cfg := &roles.ConsumerConfig{Listen: *listen, Runs: *runs, JSONPath: *jsonPath, RunTimeout: *runTimeout, Idle: *idle}
	if cfg.Listen == "" {
		return nil, usagef("--listen is required: give HOST:PORT, e.g. 127.0.0.1:8080")
	}
	if _, _, err := net.SplitHostPort(cfg.Listen); err != nil {
		return nil, usagef("--listen %q: %v; give HOST:PORT, e.g. 127.0.0.1:8080", cfg.Listen, err)
	}
	switch {
	case cfg.Runs < 0:
		return nil, usagef("--runs %d: give 0 (serve until interrupted) or a positive count", cfg.Runs)
	case cfg.RunTimeout <= 0:
		return nil, usagef("--run_timeout must be positive, e.g. 5m")
	case cfg.Idle <= 0:
		return nil, usagef("--idle_timeout must be positive, e.g. 30s")
	}
	if cfg.JSONPath != "" {
		if err := checkOutPath("--json", cfg.JSONPath); err != nil {
			return nil, err
		}
	}
	return cfg, nil
}

func runConsumer(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseConsumer(args, stdout)
	if err != nil {
		return err
	}
	_, err = roles.Consume(ctx, *cfg, stdout, stderr)
	return err
}
