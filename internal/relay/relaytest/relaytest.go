// Package relaytest runs relay.Relay between two applications for tests,
// as net/http/httptest runs a server: Start puts a relay between the
// application ends A and B of two loopback TCP connections and keeps what
// it counts; Engine builds an engine by name.
package relaytest

import (
	"io"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"scistream/internal/loopback"
	"scistream/internal/relay"
)

// Timeout bounds how long Wait, and the end of a test, wait for Relay to
// return.
const Timeout = 60 * time.Second

// Session is application A <-> [RA relay RB] <-> application B, where
// each <-> is a TCP connection on 127.0.0.1.
type Session struct {
	A, B   *net.TCPConn // the applications' ends
	RA, RB *net.TCPConn // the relay's ends: A's peer and B's peer

	ab, ba atomic.Int64 // bytes counted a->b and b->a
	maxAB  atomic.Int64 // the largest single count a->b

	done chan struct{} // closed when Relay returned, after err is set
	err  error
}

// Start runs relay.Relay(e, RA, RB, ...) in a goroutine and returns at
// once. When the test ends, A and B are closed with a reset (so Relay
// ends even if the test stopped midway) and the cleanup waits up to
// Timeout for Relay to return, failing tb if it does not; then every
// socket is closed. No deadline is set on any socket.
func Start(tb testing.TB, e relay.Engine) *Session {
	tb.Helper()
	s := &Session{done: make(chan struct{})}
	s.A, s.RA = loopback.TCPPair(tb)
	s.RB, s.B = loopback.TCPPair(tb)
	go func() {
		defer close(s.done)
		s.err = relay.Relay(e, s.RA, s.RB, s.countAB, func(n int64) { s.ba.Add(n) })
	}()
	tb.Cleanup(func() {
		s.A.SetLinger(0)
		s.A.Close()
		s.B.SetLinger(0)
		s.B.Close()
		select {
		case <-s.done:
		case <-time.After(Timeout):
			tb.Errorf("Relay did not return %s after both applications closed", Timeout)
		}
	})
	return s
}

func (s *Session) countAB(n int64) {
	s.ab.Add(n)
	for m := s.maxAB.Load(); n > m && !s.maxAB.CompareAndSwap(m, n); m = s.maxAB.Load() {
	}
}

// AB is the number of bytes Relay counted from A to B so far.
func (s *Session) AB() int64 { return s.ab.Load() }

// BA is the number of bytes Relay counted from B to A so far.
func (s *Session) BA() int64 { return s.ba.Load() }

// MaxChunkAB is the largest count Relay reported at once from A to B:
// what a live rate can jump by.
func (s *Session) MaxChunkAB() int64 { return s.maxAB.Load() }

// Done is closed when Relay has returned.
func (s *Session) Done() <-chan struct{} { return s.done }

// Wait waits for Relay to return and returns its result; after Timeout
// it fails tb with Fatal. It may be called any number of times.
func (s *Session) Wait(tb testing.TB) error {
	tb.Helper()
	select {
	case <-s.done:
		return s.err
	case <-time.After(Timeout):
		tb.Fatalf("Relay did not return within %s", Timeout)
		return nil
	}
}

// Engine returns the engine called name, built by relay.New(o); it fails
// tb with Fatal if New or the name is refused.
func Engine(tb testing.TB, name string, o relay.Options) relay.Engine {
	tb.Helper()
	set, err := relay.New(o)
	if err != nil {
		tb.Fatal(err)
	}
	e, err := set.Get(name)
	if err != nil {
		tb.Fatal(err)
	}
	return e
}

// RoundTrips is a request-reply benchmark's loop: b.N times it writes req
// to c in one call and reads a reply of replyLen bytes whole, then
// reports the round trips' median and 99th percentile (p50-us, p99-us)
// beside allocations. The other end answers; the caller starts it.
func RoundTrips(b *testing.B, c net.Conn, req []byte, replyLen int) {
	b.Helper()
	rtts := make([]time.Duration, 0, b.N)
	got := make([]byte, replyLen)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, got); err != nil {
			b.Fatal(err)
		}
		rtts = append(rtts, time.Since(t0))
	}
	b.StopTimer()
	slices.Sort(rtts)
	b.ReportMetric(float64(rtts[len(rtts)/2].Nanoseconds())/1e3, "p50-us")
	b.ReportMetric(float64(rtts[len(rtts)*99/100].Nanoseconds())/1e3, "p99-us")
}
