package gateway

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
	"scistream/internal/proxyproto"
	"scistream/internal/relay"
	"scistream/internal/sockio"
	"scistream/internal/wan"
)

// The shared WAN port (Config.WANPort): one TCP listener and one UDP
// socket that carry the inbound WAN legs of every stream created on it
// (store.Record.ServerName). A leg names its stream by the TLS server
// name (wan/shared.go); the server's table of names (Server.names) is
// the router, so creating or ending a stream changes one map entry and
// never touches another stream's connections. Everything after the
// routing is a stream's own: its pin, its secret, its channels, its
// connections and counters (serveRouted). The strangers' caps apply per
// source and in all; the per-listener cap does not (the port serves
// every stream). Behind a router that sends the PROXY protocol
// (Config.WANProxyProtocol), the source is the one its header names.

// wanPort is a running shared WAN port.
type wanPort struct {
	log     *slog.Logger
	strange *strangers
	cert    *tls.Certificate
	lookup  func(name string) *stream // a live stream by server name, or nil
	// proxy: every connection starts with a PROXY protocol v2 header
	// from a router in front, whose addresses proxyFrom lists
	// (Config.WANProxyProtocol, WANProxyFrom).
	proxy     bool
	proxyFrom []netip.Prefix
	unheard   unheard // proxy: connections whose header has not come yet

	ln   *net.TCPListener
	udp  *net.UDPConn
	quic *wan.QUICListener

	slots listenerSlots // connections in their handshake
	trust sharedTrust   // the sources each stream's peer authenticated from lately

	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex // guards the following fields
	hs     map[net.Conn]struct{}
	closed bool

	wg sync.WaitGroup // accept loops, connections in their handshake
}

// openWANPort binds the shared WAN port on bind (TCP and UDP); start
// starts accepting on it. lookup finds a live stream by its server name.
// proxyFrom, if not nil, lists the routers that send every connection's
// PROXY protocol header.
func openWANPort(bind string, port int, proxyFrom []netip.Prefix, e *env, quicCfg wan.QUICConfig, lookup func(string) *stream) (*wanPort, error) {
	addr := net.JoinHostPort(bind, strconv.Itoa(port))
	ta, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		return nil, err
	}
	ln, err := net.ListenTCP("tcp", ta)
	if err != nil {
		return nil, fmt.Errorf("bind the shared WAN port: %w", err)
	}
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: ta.IP, Port: ta.Port, Zone: ta.Zone})
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("bind the shared WAN port for QUIC (UDP): %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	wp := &wanPort{
		log:       e.log,
		strange:   e.strange,
		cert:      e.cert,
		lookup:    lookup,
		proxy:     proxyFrom != nil,
		proxyFrom: proxyFrom,
		unheard:   unheard{by: map[netip.Addr]int{}},
		ln:        ln,
		udp:       udp,
		slots:     listenerSlots{shared: true},
		trust:     sharedTrust{by: map[netip.Addr]map[*stream]time.Time{}, count: map[*stream]int{}},
		ctx:       ctx,
		cancel:    cancel,
		hs:        map[net.Conn]struct{}{},
	}
	quicCfg.Logger = e.log.With("wan_port", addr)
	quicCfg.OnReject = func(remote net.Addr, err error) {
		wp.strange.refuse(refusalReason(err), remote)
		wp.log.Debug("WAN connection refused", "wan", api.WANQUIC, "peer", addrString(remote), "err", err)
	}
	wp.quic, err = wan.ListenQUICRouted(udp, e.cert, wp.route, quicCfg)
	if err != nil {
		cancel()
		ln.Close()
		udp.Close()
		return nil, err
	}
	return wp, nil
}

// start starts accepting legs. The server calls it once it restored its
// streams (on a node of a facility: mirrored the facility's), so a leg
// that comes meanwhile waits in the listen queue instead of being refused
// for a name the node does not know yet. It does nothing once closed.
func (wp *wanPort) start() {
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
func (wp *wanPort) route(name string) *wan.Leg {
	if st := wp.lookup(name); st != nil {
		return st.shared
	}
	return nil
}

// close stops accepting, ends the connections still in their handshake
// and the QUIC listener (every QUIC connection on it), and waits for the
// port's goroutines. Legs already handed to streams are theirs. It
// closes the sockets. Idempotent.
func (wp *wanPort) close() {
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

func (wp *wanPort) acceptTCP() {
	defer wp.wg.Done()
	var backoff time.Duration
	for {
		c, err := wp.ln.AcceptTCP()
		if err != nil {
			if wp.ctx.Err() != nil {
				return
			}
			if ne, ok := err.(net.Error); ok && ne.Timeout() || isTemporary(err) {
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

// admit takes a handshake slot for c (strangers.admit), or resets c if a
// cap is reached. Behind a router that speaks the PROXY protocol, c's
// own address is the router's, and must be one of proxyFrom: c then
// counts among the unheard (in all, and per router) until its header
// names its source (serve), and takes its slot then.
func (wp *wanPort) admit(c *net.TCPConn) (slot, bool) {
	remote := c.RemoteAddr()
	if wp.proxy {
		src := sourceOf(remote)
		if !slices.ContainsFunc(wp.proxyFrom, func(p netip.Prefix) bool { return p.Contains(src) }) {
			wp.strange.refuse(refusedProxyFrom, remote)
			relay.Abort(c)
			return slot{}, false
		}
		if !wp.unheard.take(src, wp.strange.limits.Total) {
			wp.strange.refuse(refusedCap, remote)
			relay.Abort(c)
			return slot{}, false
		}
		return slot{src: src, unheard: true}, true
	}
	sl, ok := wp.strange.admit(&wp.slots, remote, wp.trust.has(sourceOf(remote), time.Now()))
	if !ok {
		wp.strange.refuse(refusedCap, remote)
		relay.Abort(c)
	}
	return sl, ok
}

// release frees what admit (or, behind a PROXY router, source) took for
// a connection: its handshake slot if it holds one, else its place among
// the unheard.
func (wp *wanPort) release(sl slot) {
	if sl.unheard {
		wp.unheard.give(sl.src)
	} else {
		wp.strange.release(sl)
	}
}

// unheard counts the connections from the routers whose PROXY header has
// not come yet, in all and by router.
type unheard struct {
	mu sync.Mutex // guards the following fields
	n  int
	by map[netip.Addr]int
}

// take counts one more from router src, or reports false if that would
// pass total in all or half of it from src (so that one router, or one
// address in the routers' list, cannot keep another out).
func (u *unheard) take(src netip.Addr, total int) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.n >= total || u.by[src] >= max(1, total/2) {
		return false
	}
	u.n++
	u.by[src]++
	return true
}

func (u *unheard) give(src netip.Addr) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.n--
	if u.by[src]--; u.by[src] <= 0 {
		delete(u.by, src)
	}
}

// source reads the PROXY header of raw (behind a router) and takes the
// handshake slot of the source it names, swapping the unheard count for
// it. It returns the source, or an error (raw is then closed and counted
// as refused) with the address to blame.
func (wp *wanPort) source(raw *net.TCPConn, heard slot) (net.Addr, slot, error) {
	h, err := proxyproto.Read(raw)
	wp.release(heard)
	if err != nil {
		return raw.RemoteAddr(), slot{}, fmt.Errorf("%w: %w", errProxyHeader, err)
	}
	from := raw.RemoteAddr()
	if !h.Local && h.Source.IsValid() {
		from = net.TCPAddrFromAddrPort(h.Source)
	}
	sl, ok := wp.strange.admit(&wp.slots, from, wp.trust.has(sourceOf(from), time.Now()))
	if !ok {
		return from, slot{}, errOverCap
	}
	return from, sl, nil
}

var (
	errProxyHeader = errors.New("no valid PROXY protocol v2 header from the router")
	errOverCap     = errors.New("over the cap of connections in their handshake")
)

// serve authenticates a connection to the shared port and hands it to
// its stream.
func (wp *wanPort) serve(raw *net.TCPConn, sl slot) {
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
	var st *stream
	r, err := wan.AcceptRouted(wp.ctx, raw, wp.cert, func(name string) *wan.Leg {
		st = wp.lookup(name)
		if st == nil {
			return nil
		}
		return st.shared
	})
	done()
	if err != nil {
		if errors.Is(err, wan.ErrUnknownName) {
			st = nil // a stream of another transport
		}
		wp.refuse(st, remote, err)
		return
	}
	wp.trust.add(sourceOf(remote), st, time.Now())
	if !st.adopt(raw, r.Conn) {
		return // the stream stopped meanwhile: both are reset
	}
	go st.serveRouted(raw, remote, r)
}

// refuse counts a connection to the shared port that did not
// authenticate: against its stream if it named one, else only in the
// gateway's summary of strangers.
func (wp *wanPort) refuse(st *stream, remote net.Addr, err error) {
	if wp.ctx.Err() != nil {
		return
	}
	if st != nil {
		st.refuseWAN(-1, remote, err)
		return
	}
	wp.strange.refuse(refusalReason(err), remote)
	wp.log.Debug("WAN connection refused", "wan_port", wp.ln.Addr().String(), "peer", remote.String(), "err", err)
}

func (wp *wanPort) acceptQUIC() {
	defer wp.wg.Done()
	for {
		r, err := wp.quic.AcceptRouted(wp.ctx)
		if err != nil {
			return // closed
		}
		st := wp.lookup(r.Leg.ServerName)
		if st == nil || st.shared != r.Leg {
			relay.Abort(r.Conn) // released since its handshake
			continue
		}
		if !st.admitConn(r.Channel, r.Conn.RemoteAddr()) {
			relay.Abort(r.Conn) // over a cap of connections at once
			continue
		}
		if !st.adopt(r.Conn) {
			st.releaseConn()
			continue
		}
		go st.serveInboundQUIC(r.Channel, r.Conn)
	}
}

func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}

// sharedTrust is the trust of the shared port's streams: which sources
// each stream's peer authenticated from lately (as trust is for a stream
// on its own ports), indexed by source so that an accept, which does not
// know its stream yet, asks one map. A source is trusted while a live
// stream trusts it: forget drops a stream's trust when it ends.
type sharedTrust struct {
	mu    sync.Mutex // guards the following fields
	by    map[netip.Addr]map[*stream]time.Time
	count map[*stream]int // sources each stream trusts (at most maxTrusted)
}

// add notes that a leg of st authenticated from src at now.
func (t *sharedTrust) add(src netip.Addr, st *stream, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.by[src]
	if _, ok := m[st]; !ok && t.count[st] >= maxTrusted {
		t.dropOldest(st)
	}
	if m == nil {
		m = map[*stream]time.Time{}
		t.by[src] = m
	}
	if _, ok := m[st]; !ok {
		t.count[st]++
	}
	m[st] = now
}

// dropOldest drops the source st trusted longest ago. t.mu is held.
func (t *sharedTrust) dropOldest(st *stream) {
	var oldest netip.Addr
	var at time.Time
	for src, m := range t.by {
		if a, ok := m[st]; ok && (!oldest.IsValid() || a.Before(at)) {
			oldest, at = src, a
		}
	}
	if oldest.IsValid() {
		t.drop(oldest, st)
	}
}

// drop forgets that st trusts src. t.mu is held.
func (t *sharedTrust) drop(src netip.Addr, st *stream) {
	delete(t.by[src], st)
	if len(t.by[src]) == 0 {
		delete(t.by, src)
	}
	if t.count[st]--; t.count[st] <= 0 {
		delete(t.count, st)
	}
}

// has reports whether a stream trusts src at now, forgetting the trust
// of src that ran out.
func (t *sharedTrust) has(src netip.Addr, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	found := false
	for st, at := range t.by[src] {
		if now.Sub(at) > trustFor {
			t.drop(src, st)
		} else {
			found = true
		}
	}
	return found
}

// forget drops every trust st gave: the stream ended.
func (t *sharedTrust) forget(st *stream) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.count[st] == 0 {
		return
	}
	for src, m := range t.by {
		if _, ok := m[st]; ok {
			t.drop(src, st)
		}
	}
}
