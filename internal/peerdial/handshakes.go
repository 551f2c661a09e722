package peerdial

import (
	"context"
	"fmt"
	"scistream/internal/wan"
	"sync"
)

// Handshakes bounds the WAN handshakes (TCP connect, TLS, the preface) in
// flight from this gateway to each peer gateway. A burst of application
// connections on a starved gateway would otherwise start every
// handshake at once and finish none within its deadline (issue 27: 2,954
// of 5,000 reset at 10 s); bounded, the handshakes in flight finish, and
// the others wait for a slot, within the same deadline: their
// application's connect has succeeded already, and it can wait. The
// bound also keeps one gateway's burst under the peer's cap of
// connections in their handshake from one source (128), so the peer
// resets none of them.
//
// A nil *Handshakes bounds nothing. Its methods may be called
// concurrently.
type Handshakes struct {
	max int

	mu sync.Mutex // guards by
	by map[string]*peerSlots
}

// peerSlots are one peer's handshake slots and the dials that hold or
// wait for one.
type peerSlots struct {
	sem   chan struct{}
	users int
}

// DefaultHandshakesPerPeer is the bound NewHandshakes(0) sets: half the
// peer's cap of strangers from one source.
const DefaultHandshakesPerPeer = 64

// NewHandshakes returns a bound of max handshakes in flight per peer (0:
// DefaultHandshakesPerPeer).
func NewHandshakes(max int) *Handshakes {
	if max <= 0 {
		max = DefaultHandshakesPerPeer
	}
	return &Handshakes{max: max, by: map[string]*peerSlots{}}
}

// acquire waits for a handshake slot toward peer until ctx ends, and
// returns the function that gives it back.
func (h *Handshakes) acquire(ctx context.Context, peer string) (func(), error) {
	if h == nil {
		return func() {}, nil
	}
	h.mu.Lock()
	ps := h.by[peer]
	if ps == nil {
		ps = &peerSlots{sem: make(chan struct{}, h.max)}
		h.by[peer] = ps
	}
	ps.users++
	h.mu.Unlock()
	done := func() {
		h.mu.Lock()
		if ps.users--; ps.users == 0 {
			delete(h.by, peer)
		}
		h.mu.Unlock()
	}
	select {
	case ps.sem <- struct{}{}:
		return func() { <-ps.sem; done() }, nil
	case <-ctx.Done():
		done()
		return nil, fmt.Errorf("waiting for one of the %d WAN handshakes in flight to %s: %w", h.max, peer, ctx.Err())
	}
}

// inFlight returns the handshakes in flight toward peer (tests).
func (h *Handshakes) inFlight(peer string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ps := h.by[peer]; ps != nil {
		return len(ps.sem)
	}
	return 0
}

// Handshake runs dial, a WAN leg's dial toward target (its handshake
// included), in one of h's slots toward target's peer, waiting for one
// until ctx ends.
func Handshake[T any](ctx context.Context, h *Handshakes, target string, dial func(context.Context) (T, error)) (T, error) {
	release, err := h.acquire(ctx, wan.PeerOf(target))
	if err != nil {
		var zero T
		return zero, err
	}
	defer release()
	return dial(ctx)
}
