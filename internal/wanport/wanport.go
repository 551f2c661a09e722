// Package wanport is a gateway's shared WAN port (s2cs --wan_port): one
// TCP listener and one UDP socket that carry the inbound WAN legs of
// every stream created on it (store.Record.ServerName). A leg names its
// stream by the TLS server name (wan/shared.go); the gateway's table of
// names (the lookup given to Open) is the router, so creating or ending a
// stream changes one map entry and never touches another stream's
// connections. Everything after the routing is a stream's own: its pin,
// its secret, its channels, its connections and counters
// (stream.Stream.ServeRouted). The strangers' caps apply per source and
// in all; the per-listener cap does not (the port serves every stream).
// Behind a router that sends the PROXY protocol (Config.ProxyProtocol),
// the source is the one its header names, and only the routers may
// connect. Config holds the port's settings, their checks and defaults,
// and the naming of its streams (NewServerName).
package wanport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"time"

	"scistream/internal/api"
	"scistream/internal/handoff"
	"scistream/internal/proxyproto"
	"scistream/internal/relay"
	"scistream/internal/sockio"
	"scistream/internal/strangers"
	"scistream/internal/stream"
	"scistream/internal/wan"
	"scistream/internal/wanquic"
)

// Port is a running shared WAN port. Its methods may be called
// concurrently.
type Port struct {
	log     *slog.Logger
	strange *strangers.Gate
	cert    *tls.Certificate
	lookup  func(name string) *stream.Stream // a live stream by server name, or nil
	// proxy: every connection starts with a PROXY protocol v2 header
	// from a router in front, whose addresses proxyFrom lists
	// (Config.ProxyProtocol, ProxyFrom).
	proxy     bool
	proxyFrom []netip.Prefix
	unheard   strangers.Unheard // proxy: connections whose header has not come yet

	ln   *net.TCPListener
	udp  *net.UDPConn
	quic *wanquic.Listener

	slots strangers.Listener                    // connections in their handshake
	trust strangers.SharedTrust[*stream.Stream] // the sources each stream's peer authenticated from lately

	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex // guards the following fields
	hs     map[net.Conn]struct{}
	closed bool

	wg sync.WaitGroup // accept loops, connections in their handshake
}

// Open binds the shared WAN port cfg (cfg.Port on bind, TCP and UDP)
// through sockets (a live upgrade's, or nil); Start starts accepting on
// it. lookup finds a live stream by its server name.
func Open(bind string, cfg Config, e *stream.Env, quicCfg wanquic.Config, lookup func(string) *stream.Stream, sockets *handoff.Sockets) (*Port, error) {
	proxyFrom := cfg.routers()
	addr := net.JoinHostPort(bind, strconv.Itoa(cfg.Port))
	l, err := sockets.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("bind the shared WAN port: %w", err)
	}
	ln := l.(*net.TCPListener)
	pc, err := sockets.ListenPacket("udp", addr)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("bind the shared WAN port for QUIC (UDP): %w", err)
	}
	udp := pc.(*net.UDPConn)
	ctx, cancel := context.WithCancel(context.Background())
	wp := &Port{
		log:       e.Log,
		strange:   e.Strangers,
		cert:      e.Cert,
		lookup:    lookup,
		proxy:     proxyFrom != nil,
		proxyFrom: proxyFrom,
		ln:        ln,
		udp:       udp,
		slots:     strangers.Listener{Shared: true},
		trust:     strangers.SharedTrust[*stream.Stream]{},
		ctx:       ctx,
		cancel:    cancel,
		hs:        map[net.Conn]struct{}{},
	}
	quicCfg.Logger = e.Log.With("wan_port", addr)
	quicCfg.OnReject = func(remote net.Addr, err error) {
		wp.strange.Refuse(strangers.ReasonOf(err), remote)
		wp.log.Debug("WAN connection refused", "wan", api.WANQUIC, "peer", addrString(remote), "err", err)
	}
	wp.quic, err = wanquic.ListenRouted(udp, e.Cert, wp.route, quicCfg)
	if err != nil {
		cancel()
		ln.Close()
		udp.Close()
		return nil, err
	}
	return wp, nil
}

// Start starts accepting legs. The server calls it once it restored its
// streams (on a node of a facility: mirrored the facility's), so a leg
// that comes meanwhile waits in the listen queue instead of being refused
// for a name the node does not know yet. It does nothing once closed.
func (wp *Port) Start() {
	wp.mu.Lock()
	defer wp.mu.Unlock()
	if wp.closed {
		return
	}
	wp.wg.Add(2)
	go wp.acceptTCP()
	go wp.acceptQUIC()
}

// route is the wan.Router of the port: the shared leg of the live stream
// that owns name.
func (wp *Port) route(name string) *wan.Leg {
	if st := wp.lookup(name); st != nil {
		return st.Shared
	}
	return nil
}

// Close stops accepting, ends the connections still in their handshake
// and the QUIC listener (every QUIC connection on it), and waits for the
// port's goroutines. Legs already handed to streams are theirs. It
// closes the sockets. Idempotent.
func (wp *Port) Close() {
	wp.mu.Lock()
	if wp.closed {
		wp.mu.Unlock()
		wp.wg.Wait()
		return
	}
	wp.closed = true
	hs := make([]net.Conn, 0, len(wp.hs))
	for c := range wp.hs {
		hs = append(hs, c)
	}
	wp.mu.Unlock()
	wp.cancel()
	wp.ln.Close()
	for _, c := range hs {
		relay.Abort(c)
	}
	wp.quic.Close()
	wp.udp.Close()
	wp.wg.Wait()
}

func (wp *Port) acceptTCP() {
	defer wp.wg.Done()
	var backoff time.Duration
	for {
		c, err := wp.ln.AcceptTCP()
		if err != nil {
			if wp.ctx.Err() != nil {
				return
			}
			if ne, ok := err.(net.Error); ok && ne.Timeout() || stream.IsTemporary(err) {
				// e.g. EMFILE: back off instead of spinning.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				wp.log.Warn("accept on the shared WAN port", "err", err, "retry_in", backoff)
				select {
				case <-time.After(backoff):
					continue
				case <-wp.ctx.Done():
					return
				}
			}
			wp.log.Error("the shared WAN port stopped accepting", "err", err)
			return
		}
		backoff = 0
		sl, ok := wp.admit(c)
		if !ok {
			continue
		}
		wp.mu.Lock()
		if wp.closed {
			wp.mu.Unlock()
			wp.release(sl)
			relay.Abort(c)
			return
		}
		wp.hs[c] = struct{}{}
		wp.wg.Add(1)
		wp.mu.Unlock()
		go wp.serve(c, sl)
	}
}

// admit takes a handshake slot for c (strangers.Gate.Admit), or resets c if a
// cap is reached. Behind a router that speaks the PROXY protocol, c's
// own address is the router's, and must be one of proxyFrom: c then
// counts among the unheard (in all, and per router) until its header
// names its source (serve), and takes its slot then.
func (wp *Port) admit(c *net.TCPConn) (strangers.Slot, bool) {
	remote := c.RemoteAddr()
	if wp.proxy {
		src := strangers.SourceOf(remote)
		if !slices.ContainsFunc(wp.proxyFrom, func(p netip.Prefix) bool { return p.Contains(src) }) {
			wp.strange.Refuse(strangers.ReasonProxyFrom, remote)
			relay.Abort(c)
			return strangers.Slot{}, false
		}
		sl, ok := wp.unheard.Take(src, wp.strange.Limits().Total)
		if !ok {
			wp.strange.Refuse(strangers.ReasonCap, remote)
			relay.Abort(c)
		}
		return sl, ok
	}
	sl, ok := wp.strange.Admit(&wp.slots, remote, wp.trust.Has(strangers.SourceOf(remote), time.Now()))
	if !ok {
		wp.strange.Refuse(strangers.ReasonCap, remote)
		relay.Abort(c)
	}
	return sl, ok
}

// release frees what admit (or, behind a PROXY router, source) took for
// a connection: its handshake slot, or its place among the unheard.
func (wp *Port) release(sl strangers.Slot) { wp.strange.Release(sl) }

// source reads the PROXY header of raw (behind a router) and takes the
// handshake slot of the source it names, swapping the unheard count for
// it. It returns the source, or an error (raw is then closed and counted
// as refused) with the address to blame.
func (wp *Port) source(raw *net.TCPConn, heard strangers.Slot) (net.Addr, strangers.Slot, error) {
	h, err := proxyproto.Read(raw)
	wp.release(heard)
	if err != nil {
		return raw.RemoteAddr(), strangers.Slot{}, fmt.Errorf("%w: %w", strangers.ErrNoProxyHeader, err)
	}
	from := raw.RemoteAddr()
	if !h.Local && h.Source.IsValid() {
		from = net.TCPAddrFromAddrPort(h.Source)
	}
	sl, ok := wp.strange.Admit(&wp.slots, from, wp.trust.Has(strangers.SourceOf(from), time.Now()))
	if !ok {
		return from, strangers.Slot{}, strangers.ErrOverCap
	}
	return from, sl, nil
}

// serve authenticates a connection to the shared port and hands it to
// its stream.
func (wp *Port) serve(raw *net.TCPConn, sl strangers.Slot) {
	defer wp.wg.Done()
	remote := raw.RemoteAddr()
	untrack := func() {
		wp.mu.Lock()
		delete(wp.hs, raw)
		wp.mu.Unlock()
	}
	done := func() {
		wp.release(sl)
		untrack()
	}
	// As on a stream's own port: nothing but this goroutine's small
	// stack until the dialer's first byte (stream.serveInbound).
	raw.SetReadDeadline(time.Now().Add(wan.HandshakeTimeout))
	if err := sockio.WaitReadable(raw); err != nil {
		done()
		raw.Close()
		wp.refuse(nil, remote, fmt.Errorf("%w: %w", wan.ErrBadPreface, err))
		return
	}
	if wp.proxy {
		from, fromSlot, err := wp.source(raw, sl)
		if err != nil {
			untrack()
			relay.Abort(raw)
			wp.refuse(nil, from, err)
			return
		}
		remote, sl = from, fromSlot
	}
	var st *stream.Stream
	r, err := wan.AcceptRouted(wp.ctx, raw, wp.cert, func(name string) *wan.Leg {
		st = wp.lookup(name)
		if st == nil {
			return nil
		}
		return st.Shared
	})
	done()
	if err != nil {
		if errors.Is(err, wan.ErrUnknownName) {
			st = nil // a stream of another transport
		}
		wp.refuse(st, remote, err)
		return
	}
	if !st.Adopt(raw, r.Conn) {
		return // the stream stopped meanwhile: both are reset
	}
	wp.trust.Add(strangers.SourceOf(remote), st, time.Now())
	if wp.lookup(st.Shared.ServerName) != st {
		// Ended meanwhile: the gateway may have forgotten its trust
		// before this Add, which must not outlive it either.
		wp.trust.Forget(st)
	}
	go st.ServeRouted(raw, remote, r)
}

// refuse counts a connection to the shared port that did not
// authenticate: against its stream if it named one, else only in the
// gateway's summary of strangers.
func (wp *Port) refuse(st *stream.Stream, remote net.Addr, err error) {
	if wp.ctx.Err() != nil {
		return
	}
	if st != nil {
		st.RefuseWAN(-1, remote, err)
		return
	}
	wp.strange.Refuse(strangers.ReasonOf(err), remote)
	wp.log.Debug("WAN connection refused", "wan_port", wp.ln.Addr().String(), "peer", remote.String(), "err", err)
}

func (wp *Port) acceptQUIC() {
	defer wp.wg.Done()
	for {
		r, err := wp.quic.AcceptRouted(wp.ctx)
		if err != nil {
			return // closed
		}
		st := wp.lookup(r.Leg.ServerName)
		if st == nil || st.Shared != r.Leg {
			relay.Abort(r.Conn) // released since its handshake
			continue
		}
		if !st.AdmitConn(r.Channel, r.Conn.RemoteAddr()) {
			relay.Abort(r.Conn) // over a cap of connections at once
			continue
		}
		if !st.Adopt(r.Conn) {
			st.ReleaseConn()
			continue
		}
		go st.ServeInboundQUIC(r.Channel, r.Conn)
	}
}

func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}

// CloseQUICLeg ends the QUIC connections of the stream whose leg on the
// port is leg (stream.SharedPort).
func (wp *Port) CloseQUICLeg(leg *wan.Leg) { wp.quic.CloseLeg(leg) }

// Addr returns the port's TCP address.
func (wp *Port) Addr() net.Addr { return wp.ln.Addr() }

// Forget drops the trust st's peer earned on the port: st ended.
func (wp *Port) Forget(st *stream.Stream) { wp.trust.Forget(st) }

// Trusts reports whether the port trusts a source for st (tests).
func (wp *Port) Trusts(st *stream.Stream) bool { return wp.trust.Trusts(st) }

// Unheard returns how many connections from the routers have not sent
// their PROXY header yet (tests).
func (wp *Port) Unheard() int { return wp.unheard.N() }
