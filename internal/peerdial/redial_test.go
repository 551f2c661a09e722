package peerdial

import (
	"context"
	"errors"
	"fmt"
	"net"
	"scistream/internal/wan"
	"syscall"
	"testing"
	"time"
)

// TestRedial: Redial dials again only a reset before the peer answered
// (wan.ErrUnanswered), only within its window and its context, and tells
// of each dial again once its wait is over.
func TestRedial(t *testing.T) {
	reset := &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	unanswered := fmt.Errorf("tls handshake: %w", errors.Join(wan.ErrUnanswered, reset))
	// failing returns a dial that fails with err n times, then succeeds.
	failing := func(n int, err error) (func(context.Context) (int, error), *int) {
		calls := 0
		return func(context.Context) (int, error) {
			calls++
			if calls <= n {
				return 0, err
			}
			return 42, nil
		}, &calls
	}
	ctx := context.Background()

	dial, calls := failing(3, unanswered)
	var told []error
	if v, err := Redial(ctx, time.Minute, dial, func(err error) { told = append(told, err) }); err != nil || v != 42 || *calls != 4 || len(told) != 3 {
		t.Errorf("3 unanswered resets, then an answer: got %d, %v after %d dials (%d told); want 42 after 4 (3 told)", v, err, *calls, len(told))
	}

	for _, e := range []error{reset, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}} {
		dial, calls = failing(1, e)
		if _, err := Redial(ctx, time.Minute, dial, nil); !errors.Is(err, e) || *calls != 1 {
			t.Errorf("%v: %v after %d dials; want it after 1 (the peer answered, or nobody listens: never dialled again)", e, err, *calls)
		}
	}

	dial, calls = failing(1<<30, unanswered)
	start := time.Now()
	if _, err := Redial(ctx, 200*time.Millisecond, dial, nil); !errors.Is(err, wan.ErrUnanswered) || *calls < 2 {
		t.Errorf("always unanswered: %v after %d dials; want the reset after several", err, *calls)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("always unanswered with a window of 200ms: gave up after %v", el)
	}

	// Each dial gets a context that ends with the window.
	start = time.Now()
	if _, err := Redial(ctx, 100*time.Millisecond, func(ctx context.Context) (int, error) {
		<-ctx.Done()
		return 0, ctx.Err()
	}, nil); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
		t.Errorf("a dial that waits for its context, window 100ms: %v after %v; want the window's end", err, time.Since(start))
	}

	cctx, cancel := context.WithCancel(ctx)
	n := 0
	told = nil
	if _, err := Redial(cctx, time.Hour, func(context.Context) (int, error) {
		if n++; n == 2 {
			cancel() // during the second dial: its wait ends at once
		}
		return 0, unanswered
	}, func(err error) { told = append(told, err) }); !errors.Is(err, wan.ErrUnanswered) || n != 2 || len(told) != 1 {
		t.Errorf("cancelled during the second dial: %v after %d dials, %d told; want the reset after 2, 1 told", err, n, len(told))
	}
}
