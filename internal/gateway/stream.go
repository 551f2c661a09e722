package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"scistream/internal/api"
	"scistream/internal/relay"
	"scistream/internal/store"
	"scistream/internal/wan"
)

// stream is the running proxy of one stream: one listener per channel and
// every connection accepted on them.
type stream struct {
	srv    *Server
	uid    string
	role   api.Role
	engine relay.Engine
	allow  []netip.Prefix
	ctx    context.Context
	cancel context.CancelFunc

	peerPin atomic.Pointer[string]

	mu        sync.Mutex // guards the following fields
	rec       *store.Record
	listeners []*net.TCPListener
	conns     map[net.Conn]struct{}
	stopped   bool
	quic      quicLegs // WAN legs over QUIC (quic.go)

	wg sync.WaitGroup // accept loops and connection handlers

	active, total, rejected, errs atomic.Int64
	toWAN, fromWAN                atomic.Int64

	rateMu           sync.Mutex // guards the following fields
	lastSample       time.Time
	lastTo, lastFrom int64
	rateTo, rateFrom float64
}

// newStream builds the runtime of rec on already-bound listeners.
func (s *Server) newStream(rec *store.Record, lns []*net.TCPListener) (*stream, error) {
	eng, err := s.engines.Get(rec.Engine)
	if err != nil {
		return nil, err
	}
	if eng.Name() == "sockmap" {
		// Said once per stream: the kernel redirect needs two plain
		// TCP sockets.
		switch {
		case s.cfg.Sockmap == nil:
			s.log.Warn("engine sockmap not loaded on this gateway (it loads with s2cs --type sockmap; see the start-up log): the stream uses splice", "uid", rec.UID)
		case rec.WAN != api.WANTCP:
			s.log.Info("engine sockmap redirects only between plain TCP sockets: this stream's WAN legs are encrypted (tls or quic), so they are copied in user space; use --wan tcp on trusted circuits for the kernel redirect", "uid", rec.UID, "wan", rec.WAN)
		}
	}
	if len(lns) != rec.NumConn || len(rec.Targets) == 0 {
		return nil, fmt.Errorf("record has %d listeners, %d targets for num_conn %d", len(lns), len(rec.Targets), rec.NumConn)
	}
	var allow []netip.Prefix
	for _, a := range rec.Allow {
		p, err := parsePrefix(a)
		if err != nil {
			return nil, err
		}
		allow = append(allow, p)
	}
	ctx, cancel := context.WithCancel(s.ctx)
	st := &stream{
		srv:       s,
		uid:       rec.UID,
		role:      rec.Role,
		engine:    eng,
		allow:     allow,
		ctx:       ctx,
		cancel:    cancel,
		rec:       rec,
		listeners: lns,
		conns:     map[net.Conn]struct{}{},
	}
	pin := rec.PeerCertSHA256
	st.peerPin.Store(&pin)
	return st, nil
}

func (st *stream) record() *store.Record {
	st.mu.Lock()
	defer st.mu.Unlock()
	r := *st.rec
	return &r
}

func (st *stream) setRecord(r *store.Record) {
	st.mu.Lock()
	st.rec = r
	st.mu.Unlock()
}

func (st *stream) listenerAddrs() []string {
	st.mu.Lock()
	defer st.mu.Unlock()
	var out []string
	for _, ln := range st.listeners {
		out = append(out, ln.Addr().String())
	}
	return out
}

// start runs one accept loop per channel.
func (st *stream) start() {
	st.mu.Lock()
	defer st.mu.Unlock()
	for i, ln := range st.listeners {
		st.wg.Add(1)
		go st.acceptLoop(i, ln)
	}
	st.startQUIC()
}

// stop closes the listeners (freeing their ports), aborts every
// connection and waits for every goroutine of the stream. Idempotent.
func (st *stream) stop() {
	st.mu.Lock()
	if st.stopped {
		st.mu.Unlock()
		st.wg.Wait()
		return
	}
	st.stopped = true
	lns := st.listeners
	conns := make([]net.Conn, 0, len(st.conns))
	for c := range st.conns {
		conns = append(conns, c)
	}
	st.mu.Unlock()
	st.cancel()
	st.stopQUIC()
	for _, ln := range lns {
		st.srv.alloc.Release(ln)
	}
	for _, c := range conns {
		relay.Abort(c)
	}
	st.wg.Wait()
}

// track registers c so stop can abort it; it reports false (and aborts c)
// if the stream is already stopping.
func (st *stream) track(c net.Conn) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.stopped {
		relay.Abort(c)
		return false
	}
	st.conns[c] = struct{}{}
	return true
}

func (st *stream) untrack(c net.Conn) {
	st.mu.Lock()
	delete(st.conns, c)
	st.mu.Unlock()
}

func (st *stream) acceptLoop(ch int, ln *net.TCPListener) {
	defer st.wg.Done()
	var backoff time.Duration
	for {
		c, err := ln.AcceptTCP()
		if err != nil {
			if st.ctx.Err() != nil {
				return
			}
			if ne, ok := err.(net.Error); ok && ne.Timeout() || isTemporary(err) {
				// e.g. EMFILE: back off instead of spinning.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				st.srv.log.Warn("accept", "uid", st.uid, "channel", ch, "err", err, "retry_in", backoff)
				select {
				case <-time.After(backoff):
					continue
				case <-st.ctx.Done():
					return
				}
			}
			st.srv.log.Debug("accept loop ends", "uid", st.uid, "channel", ch, "err", err)
			return
		}
		backoff = 0
		if !st.track(c) {
			continue
		}
		st.wg.Add(1)
		if st.role == api.RoleOutbound {
			go st.serveOutbound(ch, c)
		} else {
			go st.serveInbound(ch, c)
		}
	}
}

func isTemporary(err error) bool {
	type temporary interface{ Temporary() bool }
	t, ok := err.(temporary)
	return ok && t.Temporary()
}

// serveOutbound relays an application connection accepted on the LAN
// listener of channel ch to the peer gateway's listener ch.
func (st *stream) serveOutbound(ch int, app *net.TCPConn) {
	defer st.wg.Done()
	defer st.untrack(app)
	log := st.srv.log.With("uid", st.uid, "channel", ch, "app", app.RemoteAddr().String())
	if !st.admits(app.RemoteAddr()) {
		st.rejected.Add(1)
		log.Warn("connection refused: source not in the stream's allow-list", "allow", st.record().Allow)
		relay.Abort(app)
		return
	}
	rec := st.record()
	target := rec.Targets[ch%len(rec.Targets)]
	leg := st.leg(rec, ch)
	w, err := st.dialWAN(target, leg)
	if err != nil {
		st.errs.Add(1)
		log.Warn("dial peer gateway", "target", target, "err", err)
		relay.Abort(app)
		return
	}
	if !st.track(w) {
		relay.Abort(app)
		return
	}
	defer st.untrack(w)
	st.relay(log, app, w)
}

// serveInbound authenticates a WAN connection accepted on channel ch and
// relays it to the application's port for that channel.
func (st *stream) serveInbound(ch int, raw *net.TCPConn) {
	defer st.wg.Done()
	defer st.untrack(raw)
	log := st.srv.log.With("uid", st.uid, "channel", ch, "peer", raw.RemoteAddr().String())
	rec := st.record()
	w, err := wan.Accept(st.ctx, raw, st.leg(rec, ch))
	if err != nil {
		st.rejected.Add(1)
		log.Warn("WAN connection refused", "err", err)
		return
	}
	if w != net.Conn(raw) {
		if !st.track(w) {
			return
		}
		defer st.untrack(w)
	}
	st.relayToApp(log, rec, ch, w)
}

// relayToApp dials the application's port for channel ch and relays the
// authenticated WAN leg w to it; w is aborted if that fails.
func (st *stream) relayToApp(log *slog.Logger, rec *store.Record, ch int, w net.Conn) {
	target := rec.Targets[ch%len(rec.Targets)]
	d := net.Dialer{Timeout: 10 * time.Second}
	app, err := d.DialContext(st.ctx, "tcp", target)
	if err != nil {
		st.errs.Add(1)
		log.Warn("dial application", "target", target, "err", err)
		relay.Abort(w)
		return
	}
	if !st.track(app) {
		relay.Abort(w)
		return
	}
	defer st.untrack(app)
	st.relay(log, app, w)
}

// relay runs one application connection <-> WAN leg pair to its end.
func (st *stream) relay(log interface {
	Debug(string, ...any)
	Info(string, ...any)
}, app, w net.Conn) {
	st.active.Add(1)
	st.total.Add(1)
	defer st.active.Add(-1)
	err := relay.Relay(st.engine, app, w,
		func(n int64) { st.toWAN.Add(n) },
		func(n int64) { st.fromWAN.Add(n) })
	if err != nil && st.ctx.Err() == nil {
		st.errs.Add(1)
		if relay.IsRoutine(err) {
			log.Debug("connection aborted", "err", err)
		} else {
			log.Info("connection aborted", "err", err)
		}
	}
}

func (st *stream) leg(rec *store.Record, ch int) *wan.Leg {
	return &wan.Leg{
		Transport:  rec.WAN,
		UID:        rec.UID,
		Channel:    ch,
		Secret:     rec.Secret,
		Cert:       &st.srv.cfg.Identity.TLS,
		PeerSHA256: func() string { return *st.peerPin.Load() },
	}
}

func (st *stream) admits(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return false
	}
	ip, ok := netip.AddrFromSlice(ta.IP)
	if !ok {
		return false
	}
	ip = ip.Unmap()
	for _, p := range st.allow {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// attach pins the peer's certificate and marks the stream connected.
func (st *stream) attach(pin string, now time.Time) *store.Record {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.rec.PeerCertSHA256 = pin
	st.rec.State = api.StateConnected
	st.rec.Updated = now
	st.peerPin.Store(&pin)
	r := *st.rec
	return &r
}

// pendingSince returns how long an inbound stream has waited for its
// peer, or 0 if it is not waiting.
func (st *stream) pendingSince(now time.Time) time.Duration {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.rec.Role != api.RoleInbound || st.rec.State != api.StateListening || st.stopped {
		return 0
	}
	return now.Sub(st.rec.Updated)
}

func (st *stream) sample(now time.Time) {
	to, from := st.toWAN.Load(), st.fromWAN.Load()
	st.rateMu.Lock()
	defer st.rateMu.Unlock()
	if !st.lastSample.IsZero() {
		dt := now.Sub(st.lastSample).Seconds()
		if dt > 0 {
			st.rateTo = float64(to-st.lastTo) / dt
			st.rateFrom = float64(from-st.lastFrom) / dt
		}
	}
	st.lastSample, st.lastTo, st.lastFrom = now, to, from
}

func (st *stream) stats() *api.Stats {
	st.rateMu.Lock()
	rt, rf := st.rateTo, st.rateFrom
	st.rateMu.Unlock()
	return &api.Stats{
		ActiveConns:   st.active.Load(),
		TotalConns:    st.total.Load(),
		RejectedConns: st.rejected.Load(),
		Errors:        st.errs.Load(),
		BytesToWAN:    st.toWAN.Load(),
		BytesFromWAN:  st.fromWAN.Load(),
		RateToWAN:     rt,
		RateFromWAN:   rf,
	}
}

func parsePrefix(s string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is neither an address nor a CIDR prefix", s)
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}
