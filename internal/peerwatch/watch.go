// Package peerwatch keeps a stream's watch leg (wan.Watch): how each
// gateway knows whether its peer is there. The outbound gateway dials it
// a second after a data leg has worked (so the inbound side is attached
// and will accept it, and a stream released at once never dials it), or
// after a restart a second after it restored a stream a data leg had
// worked on (so the peer that heard "stopping" hears it is back without
// waiting for data), and
// dials it again while the stream lives whenever it ends without the
// peer's word; the inbound gateway takes it on the listener of channel 0.
// Its end says what became of the peer: released its side, stopping (it
// restores the stream when it starts again), or lost (said at warn, once
// per outage). QUIC streams have none: their QUIC connection's idle
// timeout and stateless reset tell the same.
//
// A Watch knows its stream only as Stream: what it tells the stream (the
// peer answers, or not; abort the relays) and asks of it (has it
// stopped; a goroutine it waits for). Its methods may be called
// concurrently.
package peerwatch

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"scistream/internal/api"
	"scistream/internal/wan"
)

// Stream is what a Watch needs of its stream. A Watch calls none of its
// methods while it holds its own lock, except Stopped.
type Stream interface {
	// Go runs f in a goroutine the stream waits for as it stops, unless
	// it has stopped: then it runs nothing and reports false.
	Go(f func()) bool
	// Stopped reports whether the stream has stopped. Once it reports
	// true, the stream calls Close.
	Stopped() bool
	// PeerUp notes that the peer answers: the WAN side works.
	PeerUp()
	// PeerDown notes that the peer is lost or cannot be reached: msg
	// and err said on log at warn once per outage.
	PeerDown(log *slog.Logger, msg string, err error)
	// AbortRelays resets every connection the stream holds now but
	// those spare reports true for. spare may be called under the
	// stream's lock; it takes none.
	AbortRelays(spare func(net.Conn) bool)
}

// Peer states, as api.Stats.Peer reports them.
const (
	peerUnknown int32 = iota
	peerUp
	peerDown
	peerReleased
	peerStopping
)

func peerName(s int32) string {
	switch s {
	case peerUp:
		return api.PeerUp
	case peerDown:
		return api.PeerDown
	case peerReleased:
		return api.PeerReleased
	case peerStopping:
		return api.PeerStopping
	}
	return ""
}

// Watch is a stream's watch leg and what it says of the peer.
type Watch struct {
	ctx context.Context // the stream's: ends when it stops
	st  Stream

	peer  atomic.Int32 // peer* state
	ended atomic.Bool  // the stream ended for good: the leg says released
	// quietUntil, set when the peer said it is stopping: until then a
	// failed dial of the leg is expected (the peer restarts) and said at
	// debug only.
	quietUntil atomic.Int64
	// lost is set when the watch leg was lost and the stream aborted its
	// relays for it (their ends count as wan_lost), until a leg is up
	// again.
	lost atomic.Bool

	mu  sync.Mutex                // orders the changes of cur with the stream's stop
	cur atomic.Pointer[wan.Watch] // the watch leg, while open
}

// New returns the watch of the stream st, whose context ctx ends when it
// stops. It starts nothing: see Dial and Serve.
func New(ctx context.Context, st Stream) *Watch {
	return &Watch{ctx: ctx, st: st}
}

// The timing of the watch leg's dials.
const (
	watchBackoffMin = time.Second
	watchBackoffMax = 30 * time.Second
	// watchQuiet is how long a peer that said it is stopping may take to
	// come back before failing to reach it is worth a warning.
	watchQuiet = time.Minute
	// watchDelay is the pause between the first data leg that worked and
	// the first dial of the watch leg.
	watchDelay = time.Second
)

// Dial starts the outbound dial loop of the watch leg to target, leg
// its wan.Leg, in a goroutine of the stream (Stream.Go); the caller
// starts it once, when a data leg to the peer worked.
func (w *Watch) Dial(log *slog.Logger, target string, leg *wan.Leg) {
	w.st.Go(func() { w.dialLoop(log, target, leg) })
}

// dialLoop dials the watch leg to target and waits on it, again after
// every end but the peer's release, until the stream stops.
func (w *Watch) dialLoop(log *slog.Logger, target string, leg *wan.Leg) {
	select {
	case <-w.ctx.Done():
		return
	case <-time.After(watchDelay):
	}
	backoff := watchBackoffMin
	for {
		ww, err := wan.DialWatch(w.ctx, target, leg)
		if err == nil {
			backoff = watchBackoffMin
			if !w.hold(ww) {
				return // stopped while dialing
			}
			end, err := ww.Wait()
			w.drop(ww)
			ww.Close(wan.PeerLost) // ours ends too (a no-op if stop closed it)
			if w.ctx.Err() != nil {
				return
			}
			if w.peerEnded(log, end, err) == wan.PeerReleased {
				return
			}
		} else if w.ctx.Err() != nil {
			return
		} else if time.Now().UnixNano() < w.quietUntil.Load() {
			log.Debug("dial watch leg while the peer restarts", "err", err)
		} else {
			w.peer.Store(peerDown)
			w.st.PeerDown(log, "cannot reach the peer gateway: application connections are reset until it answers", err)
		}
		select {
		case <-w.ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, watchBackoffMax)
	}
}

// Serve takes the watch leg c that the outbound gateway dialed, in
// place of any earlier one, and waits on it. It returns when the leg
// ends.
func (w *Watch) Serve(log *slog.Logger, c net.Conn) {
	ww := wan.NewWatch(c)
	if !w.hold(ww) {
		return
	}
	end, err := ww.Wait()
	current := w.drop(ww)
	ww.Close(wan.PeerLost) // ours ends too (a no-op if stop closed it)
	if !current || w.ctx.Err() != nil {
		return // replaced by a newer leg, or the stream stopped
	}
	w.peerEnded(log, end, err)
}

// hold makes ww the stream's watch leg, closing (without a word) the
// one it replaces, and notes that the peer is there. It reports false,
// closing ww with the word the stream's end calls for, if the stream has
// stopped meanwhile.
func (w *Watch) hold(ww *wan.Watch) bool {
	w.mu.Lock()
	if w.st.Stopped() {
		w.mu.Unlock()
		ww.Close(w.endWord())
		return false
	}
	old := w.cur.Swap(ww)
	w.mu.Unlock()
	if old != nil {
		old.Close(wan.PeerLost)
	}
	w.peer.Store(peerUp)
	w.lost.Store(false)
	w.st.PeerUp()
	return true
}

// drop forgets ww if it is still the stream's watch leg, and reports
// whether it was.
func (w *Watch) drop(ww *wan.Watch) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cur.CompareAndSwap(ww, nil)
}

// Close ends the watch leg as the stream stops: with "released" if
// it ended for good (SayEnded), "stopping" if the gateway shuts down and
// will restore it. The stream calls it once Stopped reports true.
func (w *Watch) Close() {
	w.mu.Lock()
	ww := w.cur.Swap(nil)
	w.mu.Unlock()
	if ww == nil {
		return
	}
	ww.Close(w.endWord())
}

// endWord is what the watch leg says when the stream stops: released if
// it ended for good, stopping if the gateway shuts down and will restore
// it.
func (w *Watch) endWord() wan.PeerEnd {
	if w.ended.Load() {
		return wan.PeerReleased
	}
	return wan.PeerStopping
}

// peerEnded records and says how the peer ended the watch leg.
func (w *Watch) peerEnded(log *slog.Logger, end wan.PeerEnd, err error) wan.PeerEnd {
	switch end {
	case wan.PeerReleased:
		w.peer.Store(peerReleased)
		log.Info("the peer gateway released its side of the stream: release this side too")
	case wan.PeerStopping:
		w.peer.Store(peerStopping)
		w.quietUntil.Store(time.Now().Add(watchQuiet).UnixNano())
		log.Info("the peer gateway is stopping; it restores the stream when it starts again")
	default:
		w.peer.Store(peerDown)
		w.st.PeerDown(log, "lost the peer gateway: its watch leg ended without a word (its process died or restarted, or the path broke); application connections through it are reset, but those over resumable legs wait, parked, for a new leg within their resume window", err)
		w.abortRelays()
	}
	return end
}

// abortRelays resets every connection the stream relays now: they lead
// through a peer or a path that is gone, and would otherwise hang on TCP
// retransmissions for many minutes before either application heard of it.
// Their ends count as wan_lost (Lost).
func (w *Watch) abortRelays() {
	w.lost.Store(true)
	w.st.AbortRelays(func(c net.Conn) bool {
		cur := w.cur.Load()
		return cur != nil && c == cur.Conn()
	})
}

// SayEnded makes the watch leg tell the peer, as the stream stops, that
// it was released or ended, not that this gateway is stopping.
func (w *Watch) SayEnded() { w.ended.Store(true) }

// Peer returns what the watch leg says of the peer (api.Stats.Peer): up,
// down, released, stopping, or "" before it said anything.
func (w *Watch) Peer() string { return peerName(w.peer.Load()) }

// Lost reports whether the watch leg was lost and the stream's relays
// aborted for it, and no leg is up again since: a relay that ends now
// with net.ErrClosed was one of them (api.EndWANLost).
func (w *Watch) Lost() bool { return w.lost.Load() }
