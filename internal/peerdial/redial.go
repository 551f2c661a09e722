package peerdial

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"scistream/internal/wan"
)

// Dialling again a WAN leg the peer reset.
//
// A peer gateway resets a WAN connection at once, before it sends a byte
// or any TLS state exists, while it holds too many connections in their
// handshake from sources it does not trust yet (internal/strangers); a source
// becomes trusted when one of its connections authenticates. So a burst
// of a stream's first application connections (200 at once, before any
// leg has authenticated), or strangers flooding the peer's slots, gets
// resets that a moment later would have been connections. The dialer
// tries such a leg again, with growing jittered waits, for up to
// RedialWindow; the application connection waits meanwhile, unread, and
// is reset only if the window passes. Nothing of the application's has
// crossed yet, so dialling again cannot lose or repeat a byte. A reset
// after the peer answered (a refused certificate or preface) is an
// answer, and is not dialled again.

const (
	// RedialWindow bounds how long a leg the peer keeps resetting is
	// dialled again: a handshake's own timeout, which is also how long a
	// stranger can hold one of the peer's handshake slots.
	RedialWindow = wan.HandshakeTimeout
	// redialFirst is the wait before the first dial again; each later
	// wait doubles, to at most redialMax, and is jittered by up to half
	// so that a burst's refused dials do not come back together.
	redialFirst = 10 * time.Millisecond
	redialMax   = time.Second
)

// Redial calls dial, and again while the peer resets it before it
// answered (wan.ErrUnanswered), each under a context that ends with the
// window (window after the first call) or ctx; again, if not nil, is
// told of each reset dialled again, once its wait is over. It returns the
// last dial's result.
func Redial[T any](ctx context.Context, window time.Duration, dial func(context.Context) (T, error), again func(error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, window)
	defer cancel()
	wait := redialFirst
	for {
		c, err := dial(ctx)
		if err == nil || !errors.Is(err, wan.ErrUnanswered) {
			return c, err
		}
		t := time.NewTimer(wait/2 + rand.N(wait/2+1))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return c, err
		}
		if again != nil {
			again(err)
		}
		wait = min(2*wait, redialMax)
	}
}
