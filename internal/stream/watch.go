package stream

import (
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"scistream/internal/api"
	"scistream/internal/relay"
	"scistream/internal/wan"
)

// A stream's watch leg (wan/watch.go): how each gateway knows whether its
// peer is there. The outbound gateway dials it a second after a data leg
// has worked (so the inbound side is attached and will accept it, and a
// stream released at once never dials it) and dials it again
// while the stream lives whenever it ends without the peer's word; the
// inbound gateway takes it on the listener of channel 0. Its end says what
// became of the peer: released its side, stopping (it restores the stream
// when it starts again), or lost (said at warn, once per outage). QUIC
// streams have none: their QUIC connection's idle timeout and stateless
// reset tell the same.

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

// watchState is a stream's watch leg and what it says of the peer.
type watchState struct {
	peer    atomic.Int32 // peer* state
	started atomic.Bool  // outbound: the dial loop runs
	ended   atomic.Bool  // the stream ended for good: the leg says released
	// quietUntil, set when the peer said it is stopping: until then a
	// failed dial of the leg is expected (the peer restarts) and said at
	// debug only.
	quietUntil atomic.Int64
	// lost is set when the watch leg was lost and the stream aborted its
	// relays for it (their ends count as wan_lost), until a leg is up
	// again.
	lost atomic.Bool
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

// startWatch starts the outbound dial loop of the watch leg, once. Called
// when a data leg to the peer worked; not for QUIC streams.
func (st *Stream) startWatch(log *slog.Logger) {
	if st.wanT == api.WANQUIC || st.env.Facility || !st.watchSt.started.CompareAndSwap(false, true) {
		return
	}
	rec := st.Record()
	if len(rec.PeerNodes) > 0 {
		// The peer is a facility of several nodes: the node that
		// serves channel 0 cannot speak for the others, and its death
		// must not reset channels served elsewhere.
		return
	}
	leg := st.leg(rec, 0)
	target := rec.Targets[0]
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.stopped {
		return
	}
	st.wg.Add(1)
	go st.watchLoop(log.With("watch", target), target, leg)
}

// watchLoop dials the watch leg to target and waits on it, again after
// every end but the peer's release, until the stream stops.
func (st *Stream) watchLoop(log *slog.Logger, target string, leg *wan.Leg) {
	defer st.wg.Done()
	select {
	case <-st.Done():
		return
	case <-time.After(watchDelay):
	}
	backoff := watchBackoffMin
	for {
		w, err := wan.DialWatch(st.ctx, target, leg)
		if err == nil {
			backoff = watchBackoffMin
			if !st.holdWatch(w) {
				return // stopped while dialing
			}
			end, err := w.Wait()
			st.dropWatch(w)
			w.Close(wan.PeerLost) // ours ends too (a no-op if stop closed it)
			if st.ctx.Err() != nil {
				return
			}
			if st.peerEnded(log, end, err) == wan.PeerReleased {
				return
			}
		} else if st.ctx.Err() != nil {
			return
		} else if time.Now().UnixNano() < st.watchSt.quietUntil.Load() {
			log.Debug("dial watch leg while the peer restarts", "err", err)
		} else {
			st.watchSt.peer.Store(peerDown)
			st.wanDown(log, "cannot reach the peer gateway: application connections are reset until it answers", err)
		}
		select {
		case <-st.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, watchBackoffMax)
	}
}

// serveWatch takes the watch leg c that the outbound gateway dialed, in
// place of any earlier one, and waits on it.
func (st *Stream) serveWatch(log *slog.Logger, c net.Conn) {
	w := wan.NewWatch(c)
	if !st.holdWatch(w) {
		return
	}
	end, err := w.Wait()
	current := st.dropWatch(w)
	w.Close(wan.PeerLost) // ours ends too (a no-op if stop closed it)
	if !current || st.ctx.Err() != nil {
		return // replaced by a newer leg, or the stream stopped
	}
	st.peerEnded(log, end, err)
}

// holdWatch makes w the stream's watch leg, closing (without a word) the
// one it replaces, and notes that the peer is there. It reports false,
// closing w with the word the stream's end calls for, if the stream has
// stopped meanwhile.
func (st *Stream) holdWatch(w *wan.Watch) bool {
	st.mu.Lock()
	if st.stopped {
		st.mu.Unlock()
		w.Close(st.endWord())
		return false
	}
	old := st.watch
	st.watch = w
	st.mu.Unlock()
	if old != nil {
		old.Close(wan.PeerLost)
	}
	st.watchSt.peer.Store(peerUp)
	st.watchSt.lost.Store(false)
	st.wanUp(st.env.Log.With("uid", st.UID))
	return true
}

// dropWatch forgets w if it is still the stream's watch leg, and reports
// whether it was.
func (st *Stream) dropWatch(w *wan.Watch) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.watch != w {
		return false
	}
	st.watch = nil
	return true
}

// closeWatch ends the watch leg as the stream stops: with "released" if
// it ended for good, "stopping" if the gateway shuts down and will
// restore it.
func (st *Stream) closeWatch() {
	st.mu.Lock()
	w := st.watch
	st.watch = nil
	st.mu.Unlock()
	if w == nil {
		return
	}
	w.Close(st.endWord())
}

// endWord is what the watch leg says when the stream stops: released if
// it ended for good, stopping if the gateway shuts down and will restore
// it.
func (st *Stream) endWord() wan.PeerEnd {
	if st.watchSt.ended.Load() {
		return wan.PeerReleased
	}
	return wan.PeerStopping
}

// peerEnded records and says how the peer ended the watch leg.
func (st *Stream) peerEnded(log *slog.Logger, end wan.PeerEnd, err error) wan.PeerEnd {
	switch end {
	case wan.PeerReleased:
		st.watchSt.peer.Store(peerReleased)
		log.Info("the peer gateway released its side of the stream: release this side too")
	case wan.PeerStopping:
		st.watchSt.peer.Store(peerStopping)
		st.watchSt.quietUntil.Store(time.Now().Add(watchQuiet).UnixNano())
		log.Info("the peer gateway is stopping; it restores the stream when it starts again")
	default:
		st.watchSt.peer.Store(peerDown)
		st.wanDown(log, "lost the peer gateway: its watch leg ended without a word (its process died or restarted, or the path broke); application connections through it are reset", err)
		st.abortRelays()
	}
	return end
}

// abortRelays resets every connection the stream relays now: they lead
// through a peer or a path that is gone, and would otherwise hang on TCP
// retransmissions for many minutes before either application heard of it.
// Their ends count as wan_lost.
func (st *Stream) abortRelays() {
	st.watchSt.lost.Store(true)
	st.mu.Lock()
	conns := make([]net.Conn, 0, len(st.conns))
	for c := range st.conns {
		if st.watch == nil || c != st.watch.Conn() {
			conns = append(conns, c)
		}
	}
	st.mu.Unlock()
	for _, c := range conns {
		relay.Abort(c)
	}
}

// SayEnded makes the watch leg tell the peer, as the stream stops, that
// it was released or ended, not that this gateway is stopping.
func (st *Stream) SayEnded() { st.watchSt.ended.Store(true) }
