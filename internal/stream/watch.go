package stream

import (
	"log/slog"
	"net"

	"scistream/internal/api"
	"scistream/internal/relay"
)

// A stream's watch leg (internal/peerwatch): how each gateway knows
// whether its peer is there. The outbound side dials it once a data leg
// has worked, the inbound side serves it on the listener of channel 0;
// QUIC streams, the streams of a node of a facility of several, and
// those whose peer is one have none.

// startWatch starts the outbound dial loop of the watch leg, once. Called
// when a data leg to the peer worked, or as a stream restored connected
// starts (Start): the peer, which heard "stopping" as this gateway went
// down, then hears it is back at once, not at the next data leg; not for
// QUIC streams.
func (st *Stream) startWatch(log *slog.Logger) {
	if st.wanT == api.WANQUIC || st.env.Facility || !st.watchStarted.CompareAndSwap(false, true) {
		return
	}
	rec := st.Record()
	if len(rec.PeerNodes) > 0 {
		// The peer is a facility of several nodes: the node that
		// serves channel 0 cannot speak for the others, and its death
		// must not reset channels served elsewhere.
		return
	}
	target := rec.Targets[0]
	st.watch.Dial(log.With("watch", target), target, st.leg(rec, 0))
}

// serveWatch takes the watch leg c that the outbound gateway dialed, in
// place of any earlier one, and waits on it.
func (st *Stream) serveWatch(log *slog.Logger, c net.Conn) { st.watch.Serve(log, c) }

// closeWatch ends the watch leg as the stream stops: with "released" if
// it ended for good, "stopping" if the gateway shuts down and will
// restore it.
func (st *Stream) closeWatch() { st.watch.Close() }

// SayEnded makes the watch leg tell the peer, as the stream stops, that
// it was released or ended, not that this gateway is stopping.
func (st *Stream) SayEnded() { st.watch.SayEnded() }

// watchOf is st as its watch leg knows it (peerwatch.Stream).
type watchOf struct{ st *Stream }

func (o watchOf) Go(f func()) bool {
	st := o.st
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.stopped {
		return false
	}
	st.wg.Add(1)
	go func() {
		defer st.wg.Done()
		f()
	}()
	return true
}

func (o watchOf) Stopped() bool { return o.st.HasStopped() }

func (o watchOf) PeerUp() { o.st.wanUp(o.st.env.Log.With("uid", o.st.UID)) }

func (o watchOf) PeerDown(log *slog.Logger, msg string, err error) { o.st.wanDown(log, msg, err) }

// AbortRelays resets every connection the stream relays now but the
// watch leg's (spare) and those of framed connections that wait for a
// new leg (resumable): they lead through a peer or a path that is gone.
func (o watchOf) AbortRelays(spare func(net.Conn) bool) {
	st := o.st
	st.mu.Lock()
	conns := make([]net.Conn, 0, len(st.conns))
	for c := range st.conns {
		if _, ok := st.resumable[c]; !ok && !spare(c) {
			conns = append(conns, c)
		}
	}
	st.mu.Unlock()
	for _, c := range conns {
		relay.Abort(c)
	}
}
