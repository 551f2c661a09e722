package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync/atomic"
	"time"

	"scistream/internal/bench"
	"scistream/internal/bytesize"
	"scistream/internal/exp/progress"
	"scistream/internal/exp/record"
	"scistream/internal/exp/workload"
)

type producerConfig struct {
	plan       *workload.Plan
	connect    string
	path       string
	pairs      int
	reps       int
	jsonPath   string
	progress   string
	runTimeout time.Duration
	idle       time.Duration
}

const producerUsage = `usage: s2bench producer --connect HOST:PORT [--path direct|gateways] [--workload ...] [--bytes N | --messages N | --duration D]
                        [--rate R] [--mode throughput|rr] [--pairs N] [--reps 1] [--json FILE]

The producer role as its own process: opens --pairs connections to HOST:PORT
(an s2bench consumer, or a gateway listener in front of one), sends each a run
header then the verified messages. The consumer verifies every message, measures
goodput, latency and jitter, and returns them at the end of each connection;
the producer prints them with, in rr mode, the round-trip times it measured.
--path labels the records of both sides. (s2bench run drives both paths.)`

func parseProducer(args []string, stderr io.Writer) (*producerConfig, error) {
	fs := flag.NewFlagSet("producer", flag.ContinueOnError)
	fs.SetOutput(stderr)
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
	if err := parseFlags(fs, args, producerUsage, stderr); err != nil {
		return nil, err
	}
	cfg := &producerConfig{connect: *connect, path: *path, pairs: *pairs, reps: *reps, jsonPath: *jsonPath,
		progress: *progressMode, runTimeout: *runTimeout, idle: *idle}
	if cfg.connect == "" {
		return nil, usagef("--connect is required: give the consumer's (or the gateway listener's) HOST:PORT")
	}
	if _, _, err := net.SplitHostPort(cfg.connect); err != nil {
		return nil, usagef("--connect %q: %v; give HOST:PORT, e.g. 127.0.0.1:8080", cfg.connect, err)
	}
	if err := (bench.Hello{Spec: bench.Spec{Size: 1, Bytes: 1}, Pairs: 1, Path: cfg.path}).Validate(); err != nil {
		return nil, usagef("--path %q: give a word of at most %d printable characters, e.g. gateways", cfg.path, bench.MaxPathLen)
	}
	if cfg.pairs < 1 || cfg.pairs > workload.MaxPairs {
		return nil, usagef("--pairs %d out of range: give 1 to %d", cfg.pairs, workload.MaxPairs)
	}
	var err error
	if cfg.plan, err = resolveWorkload(&wf, cfg.pairs); err != nil {
		return nil, err
	}
	switch {
	case cfg.reps < 1 || cfg.reps > maxReps:
		return nil, usagef("--reps %d out of range: give 1 to %d", cfg.reps, maxReps)
	case cfg.runTimeout <= 0:
		return nil, usagef("--run_timeout must be positive, e.g. 5m")
	case cfg.idle <= 0:
		return nil, usagef("--idle_timeout must be positive, e.g. 30s")
	case cfg.progress != "auto" && cfg.progress != "on" && cfg.progress != "off":
		return nil, usagef("--progress %q: use auto, on or off", cfg.progress)
	case cfg.plan.Duration > 0 && cfg.plan.Duration >= cfg.runTimeout:
		return nil, usagef("--duration %s is not below --run_timeout %s: lower --duration or raise --run_timeout", cfg.plan.Duration, cfg.runTimeout)
	}
	if cfg.jsonPath != "" {
		if err := checkOutPath("--json", cfg.jsonPath); err != nil {
			return nil, err
		}
	}
	return cfg, nil
}

func runProducer(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseProducer(args, stderr)
	if err != nil {
		return err
	}
	p := cfg.plan
	fmt.Fprintf(stdout, "s2bench producer: to %s (path %s), workload %s, %d size(s), %d pair(s), %d repetition(s)\n",
		cfg.connect, cfg.path, p.Name, len(p.Sizes), cfg.pairs, cfg.reps)
	prog := progress.New(stderr, cfg.progress)
	defer prog.Stop()
	tag, seed := rand.Uint32(), rand.Uint64()
	var recs []record.Record
	for rep := 1; rep <= cfg.reps; rep++ {
		for _, size := range p.Sizes {
			per, _ := p.PerPair(size, cfg.pairs)
			h := bench.Hello{Mode: p.Mode, Spec: bench.Spec{Size: size, Bytes: per, Seed: seed, Run: tag},
				Group: tag, Pairs: cfg.pairs, Rate: p.Rate.PerSecond(size), Path: cfg.path, ReadEach: p.ReadEach}
			tag += uint32(cfg.pairs)
			label := fmt.Sprintf("run %d %s x%d rep %d", len(recs)+1, bytesize.Format(int64(size)), cfg.pairs, rep)
			var counter atomic.Int64
			prog.Start(label, &counter, per*int64(cfg.pairs))
			rec, err := produceRun(ctx, cfg, h, &counter)
			prog.End()
			rec.Rep, rec.Workload = rep, p.Name
			recs = append(recs, rec)
			fmt.Fprintf(stdout, "%s: %d messages, %d bytes, consumer: %.1f MB/s, latency %.2f us, jitter %.2f us%s  %s\n",
				label, rec.Messages, rec.Bytes, rec.GoodputMBps, rec.LatencyUS, rec.JitterUS, record.RTTText(rec), record.Status(ctx, err))
			if cfg.jsonPath != "" {
				if jerr := record.WriteJSON(cfg.jsonPath, recs); jerr != nil {
					return errors.Join(err, jerr)
				}
			}
			if err != nil {
				if ctx.Err() != nil {
					return fmt.Errorf("interrupted: %w", context.Cause(ctx))
				}
				return fmt.Errorf("run %d (%s) FAILED: %w", len(recs), bytesize.Format(int64(size)), err)
			}
		}
	}
	if cfg.jsonPath != "" {
		fmt.Fprintf(stdout, "wrote %d records to %s\n", len(recs), cfg.jsonPath)
	}
	return nil
}

// produceRun sends one run over cfg.pairs connections at once. Its record
// holds the producer's round-trip times and, from the consumer's result
// frames, the consumer's goodput, latency and jitter (side "producer").
func produceRun(ctx context.Context, cfg *producerConfig, h bench.Hello, counter *atomic.Int64) (record.Record, error) {
	rec := record.Record{Path: h.Path, Side: "producer", SizeBytes: h.Spec.Size, Pairs: h.Pairs, Mode: h.Mode.String(), RateMsgsPerS: h.Rate}
	if cfg.plan.Duration > 0 {
		rec.DurationS = cfg.plan.Duration.Seconds()
	}
	res, err := bench.RunRemote(ctx, cfg.connect, h, bench.RunOptions{Timeout: cfg.runTimeout, Idle: cfg.idle, Duration: cfg.plan.Duration, Sent: counter, EachMessage: cfg.plan.Each})
	rec.Fill(res)
	if res != nil && rec.Messages == 0 { // no consumer report: count what was sent
		for _, p := range res.Pairs {
			if p.Send != nil {
				rec.Messages += p.Send.Messages
				rec.Bytes += p.Send.Bytes
			}
		}
	}
	if err != nil {
		rec.Error = err.Error()
		return rec, err
	}
	rec.IntegrityOK = true
	return rec, nil
}
