package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"scistream/internal/bench"
	"scistream/internal/bytesize"
	"scistream/internal/exp/record"
	"scistream/internal/subcmd"
)

type consumerConfig struct {
	listen     string
	runs       int
	jsonPath   string
	runTimeout time.Duration
	idle       time.Duration
}

// maxConsumerConns bounds the connections a consumer serves at once, and
// maxPendingRuns the runs some of whose connections are still to come.
const (
	maxConsumerConns = 2 * bench.MaxPairs
	maxPendingRuns   = 64
)

const consumerUsage = `usage: s2bench consumer --listen HOST:PORT [--runs N] [--json FILE]

The consumer role as its own process: accepts connections from s2bench
producers (directly or through gateways), reads each one's run header, verifies
every message (count, order, CRC-32C), answers in rr mode, and when all the
pairs of a run have finished prints and records goodput, latency and jitter.
A run with any error fails loudly. Serves until --runs runs have completed, or
until interrupted (Ctrl-C); the exit status is 1 if any run failed.`

func parseConsumer(args []string, stderr io.Writer) (*consumerConfig, error) {
	fs := flag.NewFlagSet("consumer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		listen     = fs.String("listen", "", "HOST:PORT to listen on (port 0: any free port, printed) (required)")
		runs       = fs.Int("runs", 0, "exit after this many runs (0: serve until interrupted)")
		jsonPath   = fs.String("json", "", "write every run as a JSON array of records to FILE (rewritten after each run)")
		runTimeout = fs.Duration("run_timeout", 5*time.Minute, "upper bound of one connection")
		idle       = fs.Duration("idle_timeout", 30*time.Second, "fail a connection that makes no progress for this long")
	)
	if err := parseFlags(fs, args, consumerUsage, stderr); err != nil {
		return nil, err
	}
	cfg := &consumerConfig{listen: *listen, runs: *runs, jsonPath: *jsonPath, runTimeout: *runTimeout, idle: *idle}
	if cfg.listen == "" {
		return nil, usagef("--listen is required: give HOST:PORT, e.g. 127.0.0.1:8080")
	}
	if _, _, err := net.SplitHostPort(cfg.listen); err != nil {
		return nil, usagef("--listen %q: %v; give HOST:PORT, e.g. 127.0.0.1:8080", cfg.listen, err)
	}
	switch {
	case cfg.runs < 0:
		return nil, usagef("--runs %d: give 0 (serve until interrupted) or a positive count", cfg.runs)
	case cfg.runTimeout <= 0:
		return nil, usagef("--run_timeout must be positive, e.g. 5m")
	case cfg.idle <= 0:
		return nil, usagef("--idle_timeout must be positive, e.g. 30s")
	}
	if cfg.jsonPath != "" {
		if err := checkOutPath("--json", cfg.jsonPath); err != nil {
			return nil, err
		}
	}
	return cfg, nil
}

// consumerRun collects the pairs of one run (one Hello.Group).
type consumerRun struct {
	hello bench.Hello
	pairs []bench.Pair
	seen  []bool
	done  int
	err   error
	// wait fails the run if its missing connections do not come within
	// the idle timeout after the last one ended (a producer that died).
	wait *time.Timer
}

func runConsumer(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseConsumer(args, stderr)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w (is the port in use? pick another --listen)", cfg.listen, err)
	}
	tln := ln.(*net.TCPListener)
	defer tln.Close()
	fmt.Fprintf(stdout, "s2bench consumer: listening on %s\n", tln.Addr())

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { tln.Close() })
	defer stop()

	epoch := time.Now()
	var (
		mu       sync.Mutex // guards the following
		runs     = map[uint32]*consumerRun{}
		recs     []record.Record
		finished int
		failures int
		outErr   error
	)
	// finish records a completed (or abandoned) run; mu is held.
	finish := func(cr *consumerRun) {
		if runs[cr.hello.Group] != cr {
			return // finished already
		}
		if cr.wait != nil {
			cr.wait.Stop()
		}
		delete(runs, cr.hello.Group)
		s := bench.Aggregate(cr.pairs)
		rec := record.Record{Path: cr.hello.Path, Side: "consumer", SizeBytes: cr.hello.Spec.Size, Pairs: cr.hello.Pairs,
			Mode: cr.hello.Mode.String(), RateMsgsPerS: cr.hello.Rate}
		rec.Fill(&bench.RunResult{Pairs: cr.pairs, Summary: s})
		state := "integrity ok"
		if cr.err != nil {
			rec.Error = cr.err.Error()
			failures++
			state = "FAILED: " + subcmd.OneLine(cr.err)
			if bench.IsIntegrity(cr.err) {
				state = "INTEGRITY FAILED: " + subcmd.OneLine(cr.err)
			}
		} else {
			rec.IntegrityOK = true
		}
		recs = append(recs, rec)
		finished++
		fmt.Fprintf(stdout, "run %d (path %s, %s x%d, %s): %d messages, %d bytes, %.1f MB/s, %.0f msgs/s, latency %.2f us, jitter %.2f us  %s\n",
			finished, rec.Path, bytesize.Format(int64(rec.SizeBytes)), rec.Pairs, rec.Mode, rec.Messages, rec.Bytes,
			rec.GoodputMBps, rec.MsgsPerS, rec.LatencyUS, rec.JitterUS, state)
		if cfg.jsonPath != "" {
			if err := record.WriteJSON(cfg.jsonPath, recs); err != nil {
				outErr = err
				cancel()
			}
		}
		if cfg.runs > 0 && finished >= cfg.runs {
			cancel()
		}
	}

	var wg sync.WaitGroup
	sem := make(chan struct{}, maxConsumerConns)
	// The loop ends when the listener closes (ctx done); each accepted
	// connection is bounded by --run_timeout.
	for {
		c, err := tln.AcceptTCP()
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			cancel()
			wg.Wait()
			return fmt.Errorf("accept: %w", err)
		}
		select {
		case sem <- struct{}{}:
		default:
			fmt.Fprintf(stderr, "s2bench consumer: refusing %s: %d connections already\n", c.RemoteAddr(), maxConsumerConns)
			c.Close()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			var cr *consumerRun
			check := func(h bench.Hello) error {
				mu.Lock()
				defer mu.Unlock()
				r := runs[h.Group]
				if r == nil {
					if len(runs) >= maxPendingRuns {
						return fmt.Errorf("%d runs are waiting for connections already; refusing run %08x", len(runs), h.Group)
					}
					r = &consumerRun{hello: h, pairs: make([]bench.Pair, h.Pairs), seen: make([]bool, h.Pairs)}
					runs[h.Group] = r
				}
				if r.wait != nil {
					r.wait.Stop()
				}
				if r.hello.Pairs != h.Pairs || r.seen[h.Pair] {
					return fmt.Errorf("pair %d of %d of run %08x is unexpected or a duplicate", h.Pair, h.Pairs, h.Group)
				}
				r.seen[h.Pair] = true
				cr = r
				return nil
			}
			res, err := bench.Receive(ctx, c, bench.ReceiveOptions{Idle: cfg.idle, End: time.Now().Add(cfg.runTimeout), Epoch: epoch, Check: check})
			mu.Lock()
			defer mu.Unlock()
			if cr == nil { // no valid run header: not attributable to a run
				failures++
				fmt.Fprintf(stderr, "s2bench consumer: connection from %s: %v\n", c.RemoteAddr(), subcmd.OneLine(err))
				return
			}
			cr.pairs[res.Hello.Pair].Recv = res
			if err != nil && cr.err == nil {
				cr.err = fmt.Errorf("pair %d: %w", res.Hello.Pair, err)
			}
			if cr.done++; cr.done == cr.hello.Pairs {
				finish(cr)
			} else if cr.done == countSeen(cr.seen) {
				// Every connection that came has ended; give the rest
				// the idle timeout to arrive.
				cr.wait = time.AfterFunc(cfg.idle, func() {
					mu.Lock()
					defer mu.Unlock()
					if cr.done == countSeen(cr.seen) {
						cr.err = errors.Join(cr.err, fmt.Errorf("only %d of %d connections arrived within %s", cr.done, cr.hello.Pairs, cfg.idle))
						finish(cr)
					}
				})
			}
		}()
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	for _, cr := range runs { // runs some of whose connections never came
		cr.err = errors.Join(cr.err, fmt.Errorf("only %d of %d connections arrived", cr.done, cr.hello.Pairs))
		finish(cr)
	}
	runs = nil // a timer firing from now on finds nothing to finish
	switch {
	case outErr != nil:
		return outErr
	case failures > 0:
		return fmt.Errorf("%d of %d runs FAILED (see above)", failures, finished)
	case cfg.runs > 0 && finished < cfg.runs:
		return fmt.Errorf("interrupted after %d of %d runs: %w", finished, cfg.runs, context.Cause(ctx))
	}
	fmt.Fprintf(stdout, "s2bench consumer: %d run(s), all verified\n", finished)
	return nil
}

func countSeen(seen []bool) int {
	n := 0
	for _, s := range seen {
		if s {
			n++
		}
	}
	return n
}
