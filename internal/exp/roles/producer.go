// Package roles is the producer and the consumer of the verified
// workload as processes of their own (s2bench producer, s2bench
// consumer), one per host: the producer opens its pairs' connections to
// a consumer or a gateway listener in front of one and sends each a run
// header then the messages; the consumer verifies every message (count,
// order, CRC-32C), answers in request-reply mode, and returns what it
// measured at the end of each connection. Both record every run.
package roles

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"scistream/internal/bench"
	"scistream/internal/bytesize"
	"scistream/internal/exp/progress"
	"scistream/internal/exp/record"
	"scistream/internal/exp/workload"
)

// ProducerConfig is the producer role.
type ProducerConfig struct {
	Plan    *workload.Plan // what each run sends; required
	Connect string         // HOST:PORT of the consumer or of the gateway listener in front of it; required
	// Path labels the records of both sides (a word of at most
	// bench.MaxPathLen printable characters); empty: direct.
	Path     string
	Pairs    int    // connections at once, each its own pair; 0: 1
	Reps     int    // repetitions of each size; 0: 1
	JSONPath string // if set, every run is written there, after each run
	// Progress is the progress line's mode on stderr (progress.Auto, On
	// or Off; empty: off).
	Progress string
	// RunTimeout bounds one run; 0: 5 minutes.
	RunTimeout time.Duration
	// Idle fails a run that makes no progress for this long; 0: 30 s.
	Idle time.Duration
}

func (cfg ProducerConfig) withDefaults() ProducerConfig {
	if cfg.Path == "" {
		cfg.Path = record.PathDirect
	}
	cfg.Pairs, cfg.Reps = max(cfg.Pairs, 1), max(cfg.Reps, 1)
	if cfg.RunTimeout == 0 {
		cfg.RunTimeout = 5 * time.Minute
	}
	if cfg.Idle == 0 {
		cfg.Idle = 30 * time.Second
	}
	return cfg
}

// Produce runs cfg, printing a line per run to stdout and the progress
// line to stderr, and writes the records after each run (JSONPath). It
// returns them; the first failed run ends it with an error.
func Produce(ctx context.Context, cfg ProducerConfig, stdout, stderr io.Writer) ([]record.Record, error) {
	cfg = cfg.withDefaults()
	p := cfg.Plan
	fmt.Fprintf(stdout, "s2bench producer: to %s (path %s), workload %s, %d size(s), %d pair(s), %d repetition(s)\n",
		cfg.Connect, cfg.Path, p.Name, len(p.Sizes), cfg.Pairs, cfg.Reps)
	prog := progress.New(stderr, cfg.Progress)
	defer prog.Stop()
	tag, seed := rand.Uint32(), rand.Uint64()
	var recs []record.Record
	for rep := 1; rep <= cfg.Reps; rep++ {
		for _, size := range p.Sizes {
			per, _ := p.PerPair(size, cfg.Pairs)
			h := bench.Hello{Mode: p.Mode, Spec: bench.Spec{Size: size, Bytes: per, Seed: seed, Run: tag},
				Group: tag, Pairs: cfg.Pairs, Rate: p.Rate.PerSecond(size), Path: cfg.Path, ReadEach: p.ReadEach}
			tag += uint32(cfg.Pairs)
			label := fmt.Sprintf("run %d %s x%d rep %d", len(recs)+1, bytesize.Format(int64(size)), cfg.Pairs, rep)
			var counter atomic.Int64
			prog.Start(label, &counter, per*int64(cfg.Pairs))
			rec, err := produceRun(ctx, &cfg, h, &counter)
			prog.End()
			rec.Rep, rec.Workload = rep, p.Name
			recs = append(recs, rec)
			fmt.Fprintf(stdout, "%s: %d messages, %d bytes, consumer: %.1f MB/s, latency %.2f us, jitter %.2f us%s  %s\n",
				label, rec.Messages, rec.Bytes, rec.GoodputMBps, rec.LatencyUS, rec.JitterUS, record.RTTText(rec), record.Status(ctx, err))
			if cfg.JSONPath != "" {
				if jerr := record.WriteJSON(cfg.JSONPath, recs); jerr != nil {
					return recs, errors.Join(err, jerr)
				}
			}
			if err != nil {
				if ctx.Err() != nil {
					return recs, fmt.Errorf("interrupted: %w", context.Cause(ctx))
				}
				return recs, fmt.Errorf("run %d (%s) FAILED: %w", len(recs), bytesize.Format(int64(size)), err)
			}
		}
	}
	if cfg.JSONPath != "" {
		fmt.Fprintf(stdout, "wrote %d records to %s\n", len(recs), cfg.JSONPath)
	}
	return recs, nil
}

// produceRun sends one run over cfg.Pairs connections at once. Its record
// holds the producer's round-trip times and, from the consumer's result
// frames, the consumer's goodput, latency and jitter (side "producer").
func produceRun(ctx context.Context, cfg *ProducerConfig, h bench.Hello, counter *atomic.Int64) (record.Record, error) {
	rec := record.Record{Path: h.Path, Side: "producer", SizeBytes: h.Spec.Size, Pairs: h.Pairs, Mode: h.Mode.String(), RateMsgsPerS: h.Rate}
	if cfg.Plan.Duration > 0 {
		rec.DurationS = cfg.Plan.Duration.Seconds()
	}
	res, err := bench.RunRemote(ctx, cfg.Connect, h, bench.RunOptions{Timeout: cfg.RunTimeout, Idle: cfg.Idle, Duration: cfg.Plan.Duration, Sent: counter, EachMessage: cfg.Plan.Each})
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
