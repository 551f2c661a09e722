package peerdial

import (
	"context"
	"net"
	"sync"
	"time"
)

// Race dials targets in order, starting the next one when every
// dial started has failed or stagger has passed since the last start;
// while a dial stays silent after every target was tried, it tries the
// ones that failed again, one per stagger, in turn (a channel taken over
// meanwhile answers on its new node). It returns the first connection
// made and its target; the other dials are cancelled, and a connection
// they make meanwhile is closed. Its goroutines are counted in wg (the
// caller's, which must be above zero already), and the winner does not
// wait for the cancelled dials. When every dial has failed and none is
// left silent, the error is the first target's.
func Race(ctx context.Context, wg *sync.WaitGroup, targets []string, stagger time.Duration, dial func(context.Context, string) (net.Conn, error)) (net.Conn, string, error) {
	ctx, cancel := context.WithCancel(ctx)
	type result struct {
		i   int
		c   net.Conn
		err error
	}
	results := make(chan result) // unbuffered: after the race, a dial's send cannot land
	running := make([]bool, len(targets))
	nRunning, tried := 0, 0
	start := func(i int) {
		running[i] = true
		nRunning++
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := dial(ctx, targets[i])
			select {
			case results <- result{i, c, err}:
			case <-ctx.Done(): // the race is over
				if err == nil {
					c.Close()
				}
			}
		}()
	}
	// again returns a target to dial once more: the one after last that
	// is not being dialled.
	last := 0
	again := func() int {
		for k := 1; k <= len(targets); k++ {
			if i := (last + k) % len(targets); !running[i] {
				last = i
				return i
			}
		}
		return -1
	}
	timer := time.NewTimer(stagger)
	defer timer.Stop()
	start(0)
	tried = 1
	var firstErr error
	for nRunning > 0 {
		select {
		case r := <-results:
			running[r.i] = false
			nRunning--
			if r.err == nil {
				cancel() // the others return, closing what they made
				return r.c, targets[r.i], nil
			}
			if r.i == 0 && firstErr == nil {
				firstErr = r.err
			}
			if nRunning == 0 && tried < len(targets) && ctx.Err() == nil {
				start(tried)
				last, tried = tried, tried+1
				timer.Reset(stagger)
			}
		case <-ctx.Done(): // the caller's context: the stream stops
			cancel()
			if firstErr == nil {
				firstErr = ctx.Err()
			}
			return nil, "", firstErr
		case <-timer.C:
			if tried < len(targets) {
				start(tried)
				last, tried = tried, tried+1
			} else if i := again(); i >= 0 {
				start(i)
			}
			timer.Reset(stagger)
		}
	}
	cancel()
	return nil, "", firstErr
}
