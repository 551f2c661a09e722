package roles

import (
	"context"
	"errors"
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

// ConsumerConfig is the consumer role.
type ConsumerConfig struct {
	Listen   string // HOST:PORT to listen on (port 0: any free port, printed); required
	Runs     int    // return after this many runs; 0: serve until ctx is done
	JSONPath string // if set, every run is written there, after each run
	// RunTimeout bounds one connection; 0: 5 minutes.
	RunTimeout time.Duration
	// Idle fails a connection that makes no progress for this long, and
	// a run whose other connections do not come within it; 0: 30 s.
	Idle time.Duration
}

// maxConsumerConns bounds the connections a consumer serves at once, and
// maxPendingRuns the runs some of whose connections are still to come.
const (
	maxConsumerConns = 2 * bench.MaxPairs
	maxPendingRuns   = 64
)

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

// Consume serves producers on cfg.Listen: it prints "s2bench consumer:
// listening on ADDR" once it listens, a line per run when all the pairs
// of a run have ended, and writes the records after each run (JSONPath).
// It returns the records once Runs runs have ended or ctx is done, with
// an error if any run failed, or if ctx ended it before Runs (on a
// failed accept, with the error alone).
func Consume(ctx context.Context, cfg ConsumerConfig, stdout, stderr io.Writer) ([]record.Record, error) {
	if cfg.RunTimeout == 0 {
		cfg.RunTimeout = 5 * time.Minute
	}
	if cfg.Idle == 0 {
		cfg.Idle = 30 * time.Second
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w (is the port in use? pick another --listen)", cfg.Listen, err)
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
		if cfg.JSONPath != "" {
			if err := record.WriteJSON(cfg.JSONPath, recs); err != nil {
				outErr = err
				cancel()
			}
		}
		if cfg.Runs > 0 && finished >= cfg.Runs {
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
			return nil, fmt.Errorf("accept: %w", err)
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
			res, err := bench.Receive(ctx, c, bench.ReceiveOptions{Idle: cfg.Idle, End: time.Now().Add(cfg.RunTimeout), Epoch: epoch, Check: check})
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
				cr.wait = time.AfterFunc(cfg.Idle, func() {
					mu.Lock()
					defer mu.Unlock()
					if cr.done == countSeen(cr.seen) {
						cr.err = errors.Join(cr.err, fmt.Errorf("only %d of %d connections arrived within %s", cr.done, cr.hello.Pairs, cfg.Idle))
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
		return recs, outErr
	case failures > 0:
		return recs, fmt.Errorf("%d of %d runs FAILED (see above)", failures, finished)
	case cfg.Runs > 0 && finished < cfg.Runs:
		return recs, fmt.Errorf("interrupted after %d of %d runs: %w", finished, cfg.Runs, context.Cause(ctx))
	}
	fmt.Fprintf(stdout, "s2bench consumer: %d run(s), all verified\n", finished)
	return recs, nil
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
