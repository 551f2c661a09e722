package stream

import (
	"context"
	"log/slog"
	"net"
	"time"

	"scistream/internal/peerdial"
	"scistream/internal/relay"
	"scistream/internal/store"
	"scistream/internal/wan"
)

// The channels of a running stream, one by one: on a node of a facility
// a stream serves only the channels the node claimed (facility.go),
// opening and closing them as they move between nodes; and an outbound
// stream whose peer is a facility finds a moved channel on the peer's
// other nodes.

// OpenChannel starts serving channel ch on ln, a listener bound for it
// after the stream started. It reports false if the stream stopped or
// serves ch already; the caller then releases ln.
func (st *Stream) OpenChannel(ch int, ln *net.TCPListener) bool {
	st.mu.Lock()
	if st.stopped || ch >= len(st.listeners) || st.listeners[ch] != nil {
		st.mu.Unlock()
		return false
	}
	st.listeners[ch] = ln
	st.sharePaceLocked()
	st.wg.Add(1)
	go st.acceptLoop(ch, ln)
	pooled := st.rec.WANPool > 0
	st.mu.Unlock()
	if pooled {
		st.env.Legs.ChannelOpened(legOwner{st}) // its warmer dials the channel's legs
	}
	return true
}

// CloseChannel stops serving channel ch: its listener closes (its port
// returns to the allocator) and the connections accepted on it are
// reset.
func (st *Stream) CloseChannel(ch int) {
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
	pooled := st.rec.WANPool > 0
	st.mu.Unlock()
	st.env.Alloc.Release(ln)
	for _, c := range conns {
		relay.Abort(c)
	}
	if pooled {
		st.env.Legs.DropChannel(legOwner{st}, ch)
	}
}

// sharePaceLocked gives the stream's buckets the part of its grant that
// the channels served here carry (streamPace); on a gateway of one node
// they keep the whole grant. st.mu must be held.
func (st *Stream) sharePaceLocked() {
	if !st.env.Facility {
		return
	}
	served := 0
	for _, ln := range st.listeners {
		if ln != nil {
			served++
		}
	}
	st.Pace.SetShare(served, len(st.listeners))
}

// ChannelIdle reports whether no connection accepted on channel ch is
// open.
func (st *Stream) ChannelIdle(ch int) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, on := range st.conns {
		if on == ch {
			return false
		}
	}
	return true
}

// HasChannel reports whether the stream serves channel ch here.
func (st *Stream) HasChannel(ch int) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return ch < len(st.listeners) && st.listeners[ch] != nil
}

// peerStagger is how long dialPeer waits for one of a peer facility's
// nodes to answer before it dials the next as well: long enough that a
// live node's handshake usually wins alone (a TLS leg takes two to three
// round trips), short enough that a node that stopped answering (hung,
// or cut off, dropping packets rather than refusing) costs a channel's
// connections well under the handshake's timeout.
const peerStagger = 500 * time.Millisecond

// dialPeer dials the WAN leg of an application connection on channel
// ch: the peer listener the record gives (or the one that answered
// last), and, if the peer is a facility of several nodes
// (rec.PeerNodes), the channel's port on each of its other nodes too,
// one after another as each fails or stays silent for peerStagger,
// remembering the one that answers. A channel's port is the facility's
// alone, so only the node serving the channel can answer on it.
func (st *Stream) dialPeer(log *slog.Logger, ch int, rec *store.Record, leg *wan.Leg) (net.Conn, error) {
	if len(rec.Targets) == 0 {
		return nil, errNoPeers // peerca.go
	}
	first := rec.Targets[ch%len(rec.Targets)]
	if p := st.peerAt[ch].Load(); p != nil {
		first = *p
	}
	if len(rec.PeerNodes) == 0 {
		return st.dialWAN(st.ctx, first, leg)
	}
	targets := []string{first}
	if _, port, err := net.SplitHostPort(first); err == nil {
		for _, h := range rec.PeerNodes {
			if t := net.JoinHostPort(h, port); t != first {
				targets = append(targets, t)
			}
		}
	}
	w, at, err := peerdial.Race(st.ctx, &st.wg, targets, peerStagger, func(ctx context.Context, t string) (net.Conn, error) {
		return st.dialWAN(ctx, t, leg)
	})
	if err == nil && at != first {
		st.peerAt[ch].Store(&at)
		log.Info("the peer's channel answers on another node of its facility", "was", first, "now", at)
	}
	return w, err
}
