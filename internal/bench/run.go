package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// RunOptions bound one run.
type RunOptions struct {
	// Timeout bounds the whole run. If zero, 5 minutes.
	Timeout time.Duration
	// Idle bounds every wait for progress: each connection reaching the
	// consumer, each read and each write. If zero, 30 seconds.
	Idle time.Duration
	// Duration is how long an open-ended run sends (see SendOptions).
	Duration time.Duration
	// Progress, if not nil, counts verified payload bytes at the
	// consumer as they arrive (Run only).
	Progress *atomic.Int64
	// Sent, if not nil, counts payload bytes the producers wrote.
	Sent *atomic.Int64
	// Dial, if not nil, connects each producer to addr instead of a
	// net.Dialer with timeout Idle: e.g. from another network namespace
	// (the producers run on goroutines of their own, so the caller's
	// thread's namespace would not reach them).
	Dial func(ctx context.Context, addr string) (*net.TCPConn, error)
	// EachMessage makes every producer write one message per write call
	// (see SendOptions).
	EachMessage bool
}

func (o *RunOptions) defaults() {
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Minute
	}
	if o.Idle <= 0 {
		o.Idle = 30 * time.Second
	}
}

// dial connects a producer to addr.
func (o *RunOptions) dial(ctx context.Context, addr string) (*net.TCPConn, error) {
	if o.Dial != nil {
		return o.Dial(ctx, addr)
	}
	d := net.Dialer{Timeout: o.Idle}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return nc.(*net.TCPConn), nil
}

// Pair is the outcome of one producer/consumer pair of a run.
type Pair struct {
	Send *SendResult    // producer side (nil if it never started)
	Recv *ReceiveResult // consumer side (nil if no connection arrived)
}

// RunResult is the outcome of one run.
type RunResult struct {
	// Pairs holds each pair's results, by pair index.
	Pairs []Pair
	// Summary aggregates the pairs.
	Summary Summary
}

// Run runs h's workload over h.Pairs connections at once, in one process:
// producer i dials target and runs Send with pair index i and run tag
// h.Spec.Run+i; the consumer accepts exactly h.Pairs connections on ln,
// each of which must carry a run header of this run (h.Group) for a pair
// not seen yet, and runs Receive on it. Every pair must verify completely
// for Run to succeed; the first integrity error is returned in preference
// to its consequences on other connections. Every wait is bounded by o,
// and cancelling ctx ends the run at once.
func Run(ctx context.Context, ln *net.TCPListener, target string, h Hello, o RunOptions) (*RunResult, error) {
	o.defaults()
	if h.Pairs == 0 {
		h.Pairs = 1
	}
	h.Pair = 0
	if err := h.Validate(); err != nil {
		return nil, err
	}
	if h.Spec.Open() && o.Duration <= 0 {
		return nil, errors.New("bench: an open-ended run needs a positive Duration")
	}
	ctx, cancel := context.WithTimeoutCause(ctx, o.Timeout, fmt.Errorf("run did not finish within %s", o.Timeout))
	defer cancel()
	end, _ := ctx.Deadline()
	epoch := time.Now()
	res := &RunResult{Pairs: make([]Pair, h.Pairs)}

	var (
		mu    sync.Mutex // guards the following
		seen  = make([]bool, h.Pairs)
		errs  []error
		integ error
	)
	record := func(err error) {
		if err == nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if IsIntegrity(err) && integ == nil {
			integ = err
		}
		errs = append(errs, err)
		cancel() // one failed pair fails the run: stop the others now
	}
	check := func(g Hello) error {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case g.Group != h.Group:
			return fmt.Errorf("connection of another run (group %08x, expected %08x)", g.Group, h.Group)
		case g.Pairs != h.Pairs || seen[g.Pair]:
			return fmt.Errorf("pair %d of %d is unexpected or a duplicate", g.Pair, g.Pairs)
		}
		seen[g.Pair] = true
		return nil
	}

	var wg sync.WaitGroup
	// Consumer: accept exactly h.Pairs connections.
	wg.Add(1)
	go func() {
		defer wg.Done()
		var cw sync.WaitGroup
		defer cw.Wait()
		stop := context.AfterFunc(ctx, func() { ln.SetDeadline(time.Unix(1, 0)) })
		defer stop()
		for i := 0; i < h.Pairs; i++ {
			ln.SetDeadline(deadline(o.Idle, end))
			c, err := ln.AcceptTCP()
			if err != nil {
				switch {
				case ctx.Err() != nil:
					record(fmt.Errorf("consumer: waiting for connection %d of %d: %w", i+1, h.Pairs, context.Cause(ctx)))
				default:
					record(fmt.Errorf("consumer: waiting for connection %d of %d: no connection for %s (%w)", i+1, h.Pairs, o.Idle, err))
				}
				return
			}
			cw.Add(1)
			go func() {
				defer cw.Done()
				rr, err := Receive(ctx, c, ReceiveOptions{Idle: o.Idle, End: end, Epoch: epoch, Received: o.Progress, Check: check})
				if rr != nil && rr.Hello.Pairs == h.Pairs {
					mu.Lock()
					res.Pairs[rr.Hello.Pair].Recv = rr
					mu.Unlock()
				}
				record(err)
			}()
		}
	}()
	// Producers.
	startProducers(ctx, &wg, &mu, target, h, o, end, res, record)
	wg.Wait()
	res.Summary = Aggregate(res.Pairs)
	switch {
	case integ != nil:
		return res, integ // the others are only its consequences
	case len(errs) > 1:
		return res, fmt.Errorf("%w (and %d more errors on the other connections, its consequences)", errs[0], len(errs)-1)
	case len(errs) == 1:
		return res, errs[0]
	}
	return res, nil
}

// startProducers starts h.Pairs producers dialling target; each stores
// its result in res.Pairs[i].Send (under mu) and passes its error to
// record.
func startProducers(ctx context.Context, wg *sync.WaitGroup, mu *sync.Mutex, target string, h Hello, o RunOptions, end time.Time, res *RunResult, record func(error)) {
	for i := 0; i < h.Pairs; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := h
			p.Pair, p.Spec.Run = i, h.Spec.Run+uint32(i)
			nc, err := o.dial(ctx, target)
			if err != nil {
				record(fmt.Errorf("producer %d: connect to %s: %w", i, target, err))
				return
			}
			defer nc.Close()
			sr, err := Send(ctx, nc, p, SendOptions{Idle: o.Idle, End: end, Duration: o.Duration, Sent: o.Sent, EachMessage: o.EachMessage})
			mu.Lock()
			res.Pairs[i].Send = sr
			mu.Unlock()
			if err != nil {
				err = fmt.Errorf("pair %d: %w", i, err)
			}
			record(err)
		}()
	}
}

// RunRemote runs h's workload over h.Pairs connections to target, where
// an s2bench consumer in another process (maybe on another host, maybe
// behind gateways) verifies them: like Run, but each pair's consumer side
// is what that consumer reported in its result frame. An integrity error
// at the consumer shows here as a reset connection (the consumer's own
// output names it).
func RunRemote(ctx context.Context, target string, h Hello, o RunOptions) (*RunResult, error) {
	o.defaults()
	if h.Pairs == 0 {
		h.Pairs = 1
	}
	h.Pair = 0
	if err := h.Validate(); err != nil {
		return nil, err
	}
	if h.Spec.Open() && o.Duration <= 0 {
		return nil, errors.New("bench: an open-ended run needs a positive Duration")
	}
	ctx, cancel := context.WithTimeoutCause(ctx, o.Timeout, fmt.Errorf("run did not finish within %s", o.Timeout))
	defer cancel()
	end, _ := ctx.Deadline()
	res := &RunResult{Pairs: make([]Pair, h.Pairs)}
	var (
		mu   sync.Mutex // guards errs and res
		errs []error
		wg   sync.WaitGroup
	)
	record := func(err error) {
		if err == nil {
			return
		}
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
		cancel()
	}
	startProducers(ctx, &wg, &mu, target, h, o, end, res, record)
	wg.Wait()
	for i := range res.Pairs {
		if s := res.Pairs[i].Send; s != nil {
			res.Pairs[i].Recv = s.Peer
		}
	}
	res.Summary = Aggregate(res.Pairs)
	switch {
	case len(errs) > 1:
		return res, fmt.Errorf("%w (and %d more errors on the other connections)", errs[0], len(errs)-1)
	case len(errs) == 1:
		return res, errs[0]
	}
	return res, nil
}
