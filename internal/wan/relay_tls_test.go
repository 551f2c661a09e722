package wan_test

import (
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"scistream/internal/relay"
	"scistream/internal/waitfor"
)

// A release while the relay is blocked writing into a TLS leg whose
// reader does not read (bytes stuck in a batch flush) must end Relay
// promptly and close every descriptor.
func TestRelayTLSReleaseWithStuckReader(t *testing.T) {
	for _, e := range []relay.Engine{relayEngine(t, "splice"), relayEngine(t, "buffer")} {
		t.Run(e.Name(), func(t *testing.T) {
			ents, err := os.ReadDir("/proc/self/fd")
			if err != nil {
				t.Skip(err)
			}
			before := len(ents)
			for i := range 3 {
				t.Run(fmt.Sprint(i), func(t *testing.T) { releaseStuck(t, e) })
			}
			ents, _ = os.ReadDir("/proc/self/fd")
			if len(ents) > before {
				t.Fatalf("open descriptors: %d before, %d after", before, len(ents))
			}
		})
	}
}

func releaseStuck(t *testing.T, e relay.Engine) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	appc := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		appc <- c
	}()
	A, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	ra := <-appc
	ln.Close()
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

// relayEngine returns the relay engine called name, built with default
// options.
func relayEngine(tb testing.TB, name string) relay.Engine {
	tb.Helper()
	set, err := relay.New(relay.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	e, err := set.Get(name)
	if err != nil {
		tb.Fatal(err)
	}
	return e
}
