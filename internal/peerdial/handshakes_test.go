package peerdial

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"scistream/internal/waitfor"
)

// TestHandshakesBound (issue 27, finding 5): a burst of dials toward one
// peer runs at most the bound at once; the others wait for a slot and
// then dial, within their deadline; one whose deadline passes while it
// waits never dials; another peer's dials do not wait.
func TestHandshakesBound(t *testing.T) {
	h := NewHandshakes(4)
	var now, most, dialled atomic.Int64
	gate := make(chan struct{})
	dial := func(ctx context.Context) (int, error) {
		dialled.Add(1)
		n := now.Add(1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		defer now.Add(-1)
		select {
		case <-gate:
			return 1, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const burst = 20
	var wg sync.WaitGroup
	errs := make(chan error, burst)
	for range burst {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := Handshake(ctx, h, "192.0.2.1:5100", dial)
			errs <- err
		}()
	}
	waitfor.Must(t, 10*time.Second, "the bound's dials to start", func() bool { return now.Load() == 4 })
	// Another peer is not held up by this one's.
	other := make(chan error, 1)
	go func() {
		_, err := Handshake(ctx, h, "198.51.100.1:5100", func(context.Context) (int, error) { return 1, nil })
		other <- err
	}()
	if err := <-other; err != nil {
		t.Fatalf("another peer's dial: %v", err)
	}
	// One whose deadline passes while it waits gives up without dialling.
	short, cancelShort := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancelShort()
	before := dialled.Load()
	if _, err := Handshake(short, h, "192.0.2.1:5100", dial); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a dial whose deadline passed while it waited: %v", err)
	}
	if dialled.Load() != before {
		t.Fatal("a dial that gave up waiting dialled anyway")
	}
	close(gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a dial of the burst failed: %v", err)
		}
	}
	if most.Load() != 4 || dialled.Load() != burst {
		t.Fatalf("%d dials at most at once, %d in all; want 4 and %d", most.Load(), dialled.Load(), burst)
	}
	if n := h.inFlight("192.0.2.1"); n != 0 || len(h.by) != 0 {
		t.Fatalf("%d in flight, %d peers remembered after the burst", n, len(h.by))
	}
	// Nil bounds nothing.
	if v, err := Handshake(ctx, (*Handshakes)(nil), "x:1", func(context.Context) (int, error) { return 7, nil }); v != 7 || err != nil {
		t.Fatalf("nil Handshakes: %d, %v", v, err)
	}
}
