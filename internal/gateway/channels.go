package gateway

import (
	"log/slog"
	"net"

	"scistream/internal/relay"
	"scistream/internal/store"
	"scistream/internal/wan"
)

// The channels of a running stream, one by one: on a node of a facility
// a stream serves only the channels the node claimed (facility.go),
// opening and closing them as they move between nodes; and an outbound
// stream whose peer is a facility finds a moved channel on the peer's
// other nodes.

// openChannel starts serving channel ch on ln, a listener bound for it
// after the stream started. It reports false if the stream stopped or
// serves ch already; the caller then releases ln.
func (st *stream) openChannel(ch int, ln *net.TCPListener) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.stopped || ch >= len(st.listeners) || st.listeners[ch] != nil {
		return false
	}
	st.listeners[ch] = ln
	st.sharePaceLocked()
	st.wg.Add(1)
	go st.acceptLoop(ch, ln)
	return true
}

// closeChannel stops serving channel ch: its listener closes (its port
// returns to the allocator) and the connections accepted on it are
// reset.
func (st *stream) closeChannel(ch int) {
	st.mu.Lock()
	if ch >= len(st.listeners) || st.listeners[ch] == nil {
		st.mu.Unlock()
		return
	}
	ln := st.listeners[ch]
	st.listeners[ch] = nil
	st.sharePaceLocked()
	var conns []net.Conn
	for c, on := range st.conns {
		if on == ch {
			conns = append(conns, c)
		}
	}
	st.mu.Unlock()
	st.env.alloc.Release(ln)
	for _, c := range conns {
		relay.Abort(c)
	}
}

// sharePaceLocked gives the stream's buckets the part of its grant that
// the channels served here carry (streamPace); on a gateway of one node
// they keep the whole grant. st.mu must be held.
func (st *stream) sharePaceLocked() {
	if !st.env.facility {
		return
	}
	served := 0
	for _, ln := range st.listeners {
		if ln != nil {
			served++
		}
	}
	st.pace.setShare(served, len(st.listeners))
}

// channelIdle reports whether no connection accepted on channel ch is
// open.
func (st *stream) channelIdle(ch int) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, on := range st.conns {
		if on == ch {
			return false
		}
	}
	return true
}

// hasChannel reports whether the stream serves channel ch here.
func (st *stream) hasChannel(ch int) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return ch < len(st.listeners) && st.listeners[ch] != nil
}

// dialPeer dials the WAN leg of an application connection on channel
// ch: the peer listener the record gives (or the one that answered
// last), then, if that fails and the peer is a facility of several
// nodes (rec.PeerNodes), the channel's port on each of its other nodes,
// remembering the one that answers.
func (st *stream) dialPeer(log *slog.Logger, ch int, rec *store.Record, leg *wan.Leg) (net.Conn, error) {
	first := rec.Targets[ch%len(rec.Targets)]
	if p := st.peerAt[ch].Load(); p != nil {
		first = *p
	}
	w, err := st.dialWAN(first, leg)
	if err == nil || len(rec.PeerNodes) == 0 || st.ctx.Err() != nil {
		return w, err
	}
	_, port, perr := net.SplitHostPort(first)
	if perr != nil {
		return nil, err
	}
	for _, h := range rec.PeerNodes {
		t := net.JoinHostPort(h, port)
		if t == first {
			continue
		}
		if w, err2 := st.dialWAN(t, leg); err2 == nil {
			st.peerAt[ch].Store(&t)
			log.Info("the peer's channel answers on another node of its facility", "was", first, "now", t)
			return w, nil
		}
		if st.ctx.Err() != nil {
			break
		}
	}
	return nil, err
}
