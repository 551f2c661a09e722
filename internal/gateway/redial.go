package gateway

import (
	"context"
	"errors"
	"math/rand/v2"
	"syscall"
	"time"

	"scistream/internal/wan"
)

// Dialling again a WAN leg the peer reset.
//
// A peer gateway resets a WAN connection at once, before any TLS state
// exists, while it holds too many connections in their handshake from
// sources it does not trust yet (strangers.go); a source becomes trusted
// when one of its connections authenticates. So a burst of a stream's
// first application connections (200 at once, before any leg has
// authenticated), or strangers flooding the peer's slots, gets resets
// that a moment later would have been connections. The dialer tries such
// a leg again, with growing jittered waits, for up to redialWindow; the
// application connection waits meanwhile, unread, and is reset only if
// the window passes. Nothing of the application's has crossed yet, so
// dialling again cannot lose or repeat a byte.

const (
	// redialWindow bounds how long a leg the peer keeps resetting is
	// dialled again: a handshake's own timeout, which is also how long a
	// stranger can hold one of the peer's handshake slots.
	redialWindow = wan.HandshakeTimeout
	// redialFirst is the wait before the first dial again; each later
	// wait doubles, to at most redialMax, and is jittered by up to half
	// so that a burst's refused dials do not come back together.
	redialFirst = 10 * time.Millisecond
	redialMax   = time.Second
)

// peerReset reports whether err is the peer resetting the connection
// (or the write that found it reset), as a handshake cap does.
func peerReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// redial calls dial, and again while it fails with a reset by the peer,
// until window has passed since the first call or ctx is done; again, if
// not nil, is told of each reset dialled again. It returns the last
// dial's result.
func redial[T any](ctx context.Context, window time.Duration, dial func() (T, error), again func(error)) (T, error) {
	end := time.Now().Add(window)
	wait := redialFirst
	for {
		c, err := dial()
		if err == nil || !peerReset(err) {
			return c, err
		}
		d := wait/2 + rand.N(wait/2+1)
		if time.Now().Add(d).After(end) {
			return c, err
		}
		if again != nil {
			again(err)
		}
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return c, err
		}
		wait = min(2*wait, redialMax)
	}
}
