package wan_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"scistream/internal/leakcheck"
	"scistream/internal/loopback"
	"scistream/internal/relay"
	"scistream/internal/relay/relaytest"
	"scistream/internal/waitfor"
)

// A release while the relay is blocked writing into a TLS leg whose
// reader does not read (bytes stuck in a batch flush) must end Relay
// promptly and close every descriptor.
func TestRelayTLSReleaseWithStuckReader(t *testing.T) {
	for _, e := range []relay.Engine{relaytest.Engine(t, "splice", relay.Options{}), relaytest.Engine(t, "buffer", relay.Options{})} {
		t.Run(e.Name(), func(t *testing.T) {
			leakcheck.Check(t) // after the three rounds and their cleanups
			for i := range 3 {
				t.Run(fmt.Sprint(i), func(t *testing.T) { releaseStuck(t, e) })
			}
		})
	}
}

func releaseStuck(t *testing.T, e relay.Engine) {
	A, ra := loopback.TCPPair(t)
	dc, ac := tlsPair(t)
	var moved atomic.Int64
	done := make(chan error, 1)
	go func() {
		done <- relay.Relay(e, ra, dc, func(n int64) { moved.Add(n) }, func(int64) {})
	}()
	A.SetWriteDeadline(time.Now().Add(testTimeout))
	go A.Write(make([]byte, 32<<20))
	// Wait until the relay has moved more than the socket
	// buffers can take without the acceptor reading: it is
	// blocked writing into the TLS leg.
	// Not reaching it means the relay blocked earlier: still a valid
	// release test.
	waitfor.Cond(testTimeout, func() bool { return moved.Load() >= 1<<20 })
	relay.Abort(ra)
	relay.Abort(dc)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Relay did not return after the release")
	}
	A.Close()
	ac.Close()
	dc.Close()
}
