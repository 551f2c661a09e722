package stream

import (
	"context"
	"net"

	"scistream/internal/api"
	"scistream/internal/peerdial"
	"scistream/internal/relay"
	"scistream/internal/strangers"
	"scistream/internal/wan"
	"scistream/internal/wanquic"
)

// A stream with WAN transport "quic" (see internal/wanquic):
//
//   - inbound: each listener's port is bound for UDP too (ports.ListenWithUDP),
//     so the advertised listeners stay the same; a wanquic.Listener on that
//     UDP socket hands out authenticated QUIC streams, each relayed to the
//     application like an accepted TLS leg. The TCP listener stays bound
//     (the port is the stream's) and refuses connections (wan.ErrQUICOnTCP).
//   - outbound: one wanquic.Dialer for the stream keeps one QUIC connection
//     per peer listener, dialed on the first application connection and
//     again if it died; each application connection opens one QUIC stream.
//
// A release closes the QUIC connections, which fails every stream on them
// at both ends.

// quicLegs is the QUIC state of a stream; zero for other transports.
type quicLegs struct {
	listeners []*wanquic.Listener // inbound, one per channel
	dialer    *wanquic.Dialer     // outbound
}

func (st *Stream) quicConfig() wanquic.Config {
	cfg := st.env.QUIC
	cfg.Logger = st.env.Log.With("uid", st.UID)
	cfg.OnReject = func(remote net.Addr, err error) {
		st.rejected.Add(1)
		st.Refused.WANAuth.Add(1)
		st.env.Strangers.Refuse(strangers.ReasonQUIC, remote)
		peer := ""
		if remote != nil {
			peer = remote.String()
		}
		st.env.Log.Debug("WAN connection refused", "uid", st.UID, "wan", api.WANQUIC, "peer", peer, "err", err)
	}
	return cfg
}

// startQUIC starts the QUIC side of the stream. st.mu must be held.
func (st *Stream) startQUIC() {
	if st.rec.WAN != api.WANQUIC {
		return
	}
	if st.Role == api.RoleOutbound {
		st.quic.dialer = wanquic.NewDialer(st.quicConfig())
		return
	}
	if st.Shared != nil {
		return // the shared WAN port's QUIC listener serves it (wanport.go)
	}
	for ch, ln := range st.listeners {
		if ln == nil {
			continue
		}
		udp := st.env.Alloc.UDP(ln)
		if udp == nil {
			st.env.Log.Error("quic stream without a UDP socket on its port", "uid", st.UID, "channel", ch)
			continue
		}
		ql, err := wanquic.Listen(udp, st.leg(st.rec, ch), st.quicConfig())
		if err != nil {
			st.env.Log.Error("listen quic", "uid", st.UID, "channel", ch, "err", err)
			continue
		}
		st.quic.listeners = append(st.quic.listeners, ql)
		st.wg.Add(1)
		go st.quicAcceptLoop(ch, ql)
	}
}

// stopQUIC closes the stream's QUIC connections. Called by stop, before
// the listeners' ports (and so the UDP sockets) are released.
func (st *Stream) stopQUIC() {
	st.mu.Lock()
	q := st.quic
	st.mu.Unlock()
	for _, ql := range q.listeners {
		ql.Close()
	}
	if st.Shared != nil && st.wanT == api.WANQUIC {
		st.env.Port.CloseQUICLeg(st.Shared)
	}
	if q.dialer != nil {
		q.dialer.Close()
	}
}

func (st *Stream) quicAcceptLoop(ch int, ql *wanquic.Listener) {
	defer st.wg.Done()
	for {
		w, err := ql.Accept(st.ctx)
		if err != nil {
			return // released or shut down
		}
		if !st.AdmitConn(ch, w.RemoteAddr()) {
			relay.Abort(w) // over a cap of connections at once: reset at once
			continue
		}
		if !st.track(w) {
			st.ReleaseConn()
			continue
		}
		st.wg.Add(1)
		go st.ServeInboundQUIC(ch, w)
	}
}

// ServeInboundQUIC relays an authenticated QUIC stream of channel ch to
// the application's port for that channel.
func (st *Stream) ServeInboundQUIC(ch int, w net.Conn) {
	defer st.wg.Done()
	defer st.ReleaseConn()
	defer st.untrack(w)
	log := st.env.Log.With("uid", st.UID, "channel", ch, "peer", w.RemoteAddr().String())
	st.noteResume(w, false)
	if wan.Framed(w) {
		st.serveFramedIn(log, w.RemoteAddr(), ch, w, false)
		return
	}
	rec := st.Record()
	st.relayToApp(log, rec, ch, w)
}

// dialWAN opens the WAN leg of an application connection on channel ch.
func (st *Stream) dialWAN(ctx context.Context, target string, leg *wan.Leg) (net.Conn, error) {
	if leg.Transport == api.WANQUIC {
		st.mu.Lock()
		d := st.quic.dialer
		st.mu.Unlock()
		if d == nil {
			return nil, net.ErrClosed
		}
		return d.Dial(ctx, target, leg)
	}
	return peerdial.Redial(ctx, peerdial.RedialWindow, func(ctx context.Context) (net.Conn, error) {
		return st.dialWANOnce(ctx, target, leg)
	}, st.redialed(target))
}

// dialWANOnce is dialWAN without its dials again of a leg the peer reset
// before it answered: for a parked connection, whose own dials of a new
// leg go on until one joins (internal/framed).
func (st *Stream) dialWANOnce(ctx context.Context, target string, leg *wan.Leg) (net.Conn, error) {
	if leg.Transport == api.WANQUIC {
		st.mu.Lock()
		d := st.quic.dialer
		st.mu.Unlock()
		if d == nil {
			return nil, net.ErrClosed
		}
		return d.Dial(ctx, target, leg)
	}
	return peerdial.Handshake(ctx, st.env.Handshakes, target, func(ctx context.Context) (net.Conn, error) { return wan.Dial(ctx, target, leg) })
}

// redialed returns what peerdial.Redial tells of a leg to target it dials again:
// counted, and logged at debug (a burst gets one line per dial).
func (st *Stream) redialed(target string) func(error) {
	return func(err error) {
		st.redials.Add(1)
		st.env.Log.Debug("the peer reset a WAN dial before it answered: dialling again", "uid", st.UID, "target", target, "err", err)
	}
}
