package peerwatch

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"scistream/internal/api"
	"scistream/internal/waitfor"
	"scistream/internal/wan"
	"scistream/internal/wan/wantest"
)

// stream is a Stream that records what its Watch tells it.
type stream struct {
	wg      sync.WaitGroup
	stopped atomic.Bool
	up      atomic.Int64
	down    atomic.Int64

	mu      sync.Mutex // guards conns and aborted
	conns   []net.Conn // the stream's connections, as AbortRelays sees them
	aborted []net.Conn
}

func (s *stream) Go(f func()) bool {
	if s.stopped.Load() {
		return false
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
	return true
}

func (s *stream) Stopped() bool                        { return s.stopped.Load() }
func (s *stream) PeerUp()                              { s.up.Add(1) }
func (s *stream) PeerDown(*slog.Logger, string, error) { s.down.Add(1) }

func (s *stream) AbortRelays(spare func(net.Conn) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		if !spare(c) {
			s.aborted = append(s.aborted, c)
		}
	}
}

func (s *stream) abortedOnes() []net.Conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]net.Conn(nil), s.aborted...)
}

// newWatch returns a Watch of a stream whose context ends, and whose
// goroutines are waited for, when the test ends.
func newWatch(t *testing.T) (*Watch, *stream) {
	ctx, cancel := context.WithCancel(context.Background())
	st := &stream{}
	t.Cleanup(func() { cancel(); st.wg.Wait() })
	return New(ctx, st), st
}

// watchPair returns both ends of one watch leg over TLS on loopback:
// the outbound gateway's, dialled, and the inbound's connection,
// accepted.
func watchPair(t *testing.T) (dialled *wan.Watch, accepted net.Conn) {
	t.Helper()
	dl, al := wantest.Legs(t, api.WANTLS)
	dl.Channel, al.Channel = 0, 0
	addr, next := wantest.AcceptLegs(t, al)
	dialled, err := wan.DialWatch(context.Background(), addr, dl)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dialled.Close(wan.PeerLost) })
	r := next(t)
	if r.Err != nil || !r.Watch {
		t.Fatalf("the watch leg accepted: watch %v, %v", r.Watch, r.Err)
	}
	return dialled, r.Conn
}

// serve runs w.Serve on c; the channel is closed when it returns.
func serve(w *Watch, c net.Conn) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Serve(slog.New(slog.DiscardHandler), c)
	}()
	return done
}

func returns(t *testing.T, done <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not return", what)
	}
}

// TestServe: the inbound side's watch leg says the peer is up while it
// is open, and then what its end said: released, stopping, or lost
// without a word, which alone aborts the stream's relays, sparing the
// watch leg that is open now, and marks their ends as lost.
func TestServe(t *testing.T) {
	for _, c := range []struct {
		end  wan.PeerEnd
		peer string
	}{
		{wan.PeerReleased, api.PeerReleased},
		{wan.PeerStopping, api.PeerStopping},
		{wan.PeerLost, api.PeerDown},
	} {
		t.Run(c.end.String(), func(t *testing.T) {
			w, st := newWatch(t)
			relayed := &net.TCPConn{} // one of the stream's relays
			dialled, accepted := watchPair(t)
			st.conns = []net.Conn{relayed, accepted}
			if w.Peer() != "" {
				t.Fatalf("peer %q before any watch leg; want \"\"", w.Peer())
			}
			done := serve(w, accepted)
			waitfor.Must(t, 10*time.Second, "the peer up", func() bool { return w.Peer() == api.PeerUp && st.up.Load() == 1 })
			dialled.Close(c.end)
			returns(t, done, "Serve")
			if w.Peer() != c.peer {
				t.Fatalf("after the peer's %s: peer %q, want %q", c.end, w.Peer(), c.peer)
			}
			lost := c.end == wan.PeerLost
			if got := st.down.Load(); (got != 0) != lost {
				t.Fatalf("after the peer's %s: the stream told %d times of the peer down", c.end, got)
			}
			if aborted := st.abortedOnes(); lost != (len(aborted) > 0) || w.Lost() != lost {
				t.Fatalf("after the peer's %s: relays aborted %v, lost %v; want %v", c.end, aborted, w.Lost(), lost)
			}
		})
	}
	t.Run("spares the open leg", func(t *testing.T) {
		w, st := newWatch(t)
		relayed := &net.TCPConn{}
		dialled, accepted := watchPair(t)
		st.conns = []net.Conn{relayed, accepted}
		done := serve(w, accepted)
		waitfor.Must(t, 10*time.Second, "the peer up", func() bool { return w.Peer() == api.PeerUp })
		w.abortRelays() // as a leg replaced meanwhile, lost, would
		if aborted := st.abortedOnes(); len(aborted) != 1 || aborted[0] != relayed {
			t.Fatalf("aborted %v; want the relay alone, not the open watch leg", aborted)
		}
		dialled.Close(wan.PeerReleased)
		returns(t, done, "Serve")
	})
}

// TestClose: as the stream stops, its watch leg tells the peer that it
// was released (SayEnded) or that the gateway is stopping; a leg that
// comes after the stream stopped is told the same at once.
func TestClose(t *testing.T) {
	for _, ended := range []bool{true, false} {
		want := wan.PeerStopping
		if ended {
			want = wan.PeerReleased
		}
		t.Run(want.String(), func(t *testing.T) {
			w, st := newWatch(t)
			dialled, accepted := watchPair(t)
			done := serve(w, accepted)
			waitfor.Must(t, 10*time.Second, "the peer up", func() bool { return w.Peer() == api.PeerUp })
			if ended {
				w.SayEnded()
			}
			st.stopped.Store(true)
			w.Close()
			if end, _ := dialled.Wait(); end != want {
				t.Fatalf("the peer heard %s; want %s", end, want)
			}
			returns(t, done, "Serve")

			late, accepted := watchPair(t)
			returns(t, serve(w, accepted), "Serve of a leg after the stop")
			if end, _ := late.Wait(); end != want {
				t.Fatalf("a leg after the stop: the peer heard %s; want %s", end, want)
			}
		})
	}
}

// TestDial: the outbound side dials the watch leg, dials it again when
// it is lost, and stops dialling when the peer released its side.
func TestDial(t *testing.T) {
	w, st := newWatch(t)
	dl, al := wantest.Legs(t, api.WANTLS)
	dl.Channel, al.Channel = 0, 0
	addr, next := wantest.AcceptLegs(t, al)
	w.Dial(slog.New(slog.DiscardHandler), addr, dl)

	// wantest's wait (5 s) covers the delay before the first dial (1 s)
	// and the backoff before the next (1 s).
	first := next(t)
	if first.Err != nil || !first.Watch {
		t.Fatalf("the first watch leg: watch %v, %v", first.Watch, first.Err)
	}
	waitfor.Must(t, 10*time.Second, "the peer up", func() bool { return w.Peer() == api.PeerUp })
	wan.NewWatch(first.Conn).Close(wan.PeerLost) // the peer's process dies
	waitfor.Must(t, 10*time.Second, "the peer down", func() bool { return w.Peer() == api.PeerDown && st.down.Load() == 1 })

	again := next(t)
	if again.Err != nil || !again.Watch {
		t.Fatalf("the watch leg dialled again: watch %v, %v", again.Watch, again.Err)
	}
	waitfor.Must(t, 10*time.Second, "the peer up again", func() bool { return w.Peer() == api.PeerUp && !w.Lost() })
	wan.NewWatch(again.Conn).Close(wan.PeerReleased)
	done := make(chan struct{})
	go func() { st.wg.Wait(); close(done) }()
	returns(t, done, "the dial loop, after the peer released its side,")
	if w.Peer() != api.PeerReleased {
		t.Fatalf("peer %q after its release; want %q", w.Peer(), api.PeerReleased)
	}
}
