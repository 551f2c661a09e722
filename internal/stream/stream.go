package stream

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"scistream/internal/api"
	"scistream/internal/egress"
	"scistream/internal/fileplan"
	"scistream/internal/framed"
	"scistream/internal/legpool"
	"scistream/internal/pace"
	"scistream/internal/peerdial"
	"scistream/internal/peerwatch"
	"scistream/internal/ports"
	"scistream/internal/rates"
	"scistream/internal/relay"
	"scistream/internal/sockio"
	"scistream/internal/store"
	"scistream/internal/strangers"
	"scistream/internal/tcpcc"
	"scistream/internal/wan"
	"scistream/internal/wanquic"
)

// Env is what a running stream needs from its gateway, shared by every
// stream of one Server and never changed.
type Env struct {
	Log       *slog.Logger
	Alloc     *ports.Allocator // where its listeners return when it stops
	Cert      *tls.Certificate // the gateway's certificate, for WAN legs
	QUIC      wanquic.Config   // settings of QUIC WAN legs
	Rates     rates.Settings   // how streams sample their rates (internal/rates)
	Strangers *strangers.Gate  // caps and refusals of unauthenticated connections
	// Targets is what the inbound side may dial for its applications,
	// Peers what the outbound side may dial for its peer gateways: each
	// checked at every dial (Config.AllowTargets, AllowPeers).
	Targets, Peers *egress.Policy
	// WANCC is the congestion control set on both ends this gateway
	// holds of its streams' TCP WAN legs (Config.WANCC), "" none.
	WANCC string
	// Port is the shared WAN Port and advertise its address for peers,
	// if the gateway has one (wanport.go).
	Port      SharedPort
	Advertise string
	Legs      *legpool.Manager // pooled WAN legs of outbound streams
	// Handshakes bounds the WAN handshakes in flight to each peer
	// (internal/peerdial); nil bounds nothing.
	Handshakes *peerdial.Handshakes
	// AppWait is Config.AppWaitDefault, AppWaitMax Config.AppWaitMax,
	// resolved (0: no wait).
	AppWait, AppWaitMax time.Duration
	Files               *Slots           // the open files application connections may hold (Files)
	BestEffort          *pace.BestEffort // the pacing best-effort streams share
	Paceable            relay.Engine     // splice: what a paced connection of a sockmap stream runs on
	Kernel              bool             // the sockmap program is loaded (relay.Engines.Kernel)
	// Facility is set on a node of a Facility of several (Facility.go):
	// its streams keep no watch leg, which one node of several cannot
	// speak for.
	Facility bool
	// Reread reads a stream's record from the store again (on a node of a
	// facility: the pin of an attach stored a moment ago by another
	// node, stream.pin); nil on a gateway of one node.
	Reread func(store.Key) (*store.Record, error)
	// PeerCA verifies the WAN legs of the streams of SciStream 1.2
	// clients (store.Record.PeerCA, peerca.go); nil refuses them all.
	PeerCA *x509.CertPool
	// Resume is how framed connections run (internal/framed): their
	// windows, the gateway's budget, the default resume window and the
	// leg timeout; ResumeMax caps the resume window a request asks for.
	Resume    framed.Config
	ResumeMax time.Duration
	// Settled is told of a stream whose record moved on by itself, so
	// that the gateway stores the change: from wired to connected
	// (legWorked), or, on an inbound stream of a SciStream 1.2 client,
	// from listening to wired (its partner came: partnerCame,
	// peerca.go). It is called from a connection's goroutine, once per
	// change (again only if a stale record replaced the changed one and
	// was settled again), and must not block. nil: nobody is told.
	Settled func(*Stream)
}

// SharedPort is what a stream needs of the gateway's shared WAN port
// (which serves the legs of the streams on it).
type SharedPort interface {
	// CloseQUICLeg ends the QUIC connections of the stream whose leg on
	// the shared port is leg.
	CloseQUICLeg(leg *wan.Leg)
}

// Slots counts what application connections hold against a cap:
// connections (a stream's max_active_conns) or open files (the gateway's).
type Slots struct {
	max int64 // 0: no cap
	n   atomic.Int64
}

// take reserves k units, or reports false if that would pass the cap.
func (c *Slots) take(k int64) bool {
	for {
		n := c.n.Load()
		if c.max > 0 && n+k > c.max {
			return false
		}
		if c.n.CompareAndSwap(n, n+k) {
			return true
		}
	}
}

func (c *Slots) give(k int64) { c.n.Add(-k) }

// NewSlots returns slots capped at max units (0: no cap).
func NewSlots(max int64) *Slots { return &Slots{max: max} }

// Max returns the cap (0: none).
func (c *Slots) Max() int64 { return c.max }

// InUse returns the units held now.
func (c *Slots) InUse() int64 { return c.n.Load() }

// FilesOf is what one application connection of a stream over
// transport wanT holds open in the gateway: its socket and its WAN leg's,
// or over QUIC its socket alone (the channel's UDP socket carries every
// leg).
func FilesOf(wanT string) int64 {
	if wanT == api.WANQUIC {
		return 1
	}
	return fileplan.PerConn
}

// Stream is the running proxy of one Stream: one listener per channel and
// every connection accepted on them.
type Stream struct {
	env       *Env
	Key       store.Key // owner and UID
	UID       string
	PortsHeld int    // ports of the gateway's range held (quotas)
	wanT      string // WAN transport
	Role      api.Role
	NumConn   int
	engine    relay.Engine
	Allow     atomic.Pointer[[]netip.Prefix] // replaced by an update; read per connection
	Pace      pace.Grant                     // the rate granted and its buckets (internal/admission)
	SaveMu    sync.Mutex                     // orders the end's store write after any update's (end.go)
	ctx       context.Context
	cancel    context.CancelFunc

	PeerPin atomic.Pointer[string]
	pinRead atomic.Int64 // when pin last read the record again (Unix ns)
	// dataOK is set once a data leg worked on this gateway (legWorked),
	// or at New for a record stored connected: from then on the record
	// says connected, never wired again (settleLocked).
	dataOK atomic.Bool
	// partnerOK is set once a leg of the peer authenticated on an
	// inbound stream (partnerCame): from then on a 1.2 stream's record
	// says wired or connected, never listening again (settleLocked).
	partnerOK atomic.Bool
	// peerAt is, per channel of an outbound stream, the peer listener
	// that last answered when it was not the one first given (the peer
	// facility moved the channel to another node: dialPeer).
	peerAt []atomic.Pointer[string]
	// Shared is the leg of an inbound stream on the Shared WAN port (its
	// Channels admits every channel), which the port's router returns
	// for the stream's server name; nil for a stream with its own ports.
	Shared *wan.Leg
	// Trusted holds the sources the stream's peer authenticated from
	// lately (its own lock).
	Trusted strangers.Trust
	// watch is the watch leg and what it says of the peer (watch.go,
	// its own lock); watchStarted is set when an outbound stream starts
	// its dial loop.
	watch        *peerwatch.Watch
	watchStarted atomic.Bool

	mu        sync.Mutex // guards the following fields
	rec       *store.Record
	listeners []*net.TCPListener
	slots     []strangers.Listener // per listener: connections in their handshake
	conns     map[net.Conn]int     // every connection, by the channel it arrived on (-1: another leg of one)
	// resumable holds the connections of framed connections that wait
	// for a new leg when theirs is lost (framed.go): the loss of the
	// watch leg does not reset them.
	resumable map[net.Conn]struct{}
	stopped   bool
	quic      quicLegs // WAN legs over QUIC (quic.go)

	wg sync.WaitGroup // accept loops and connection handlers

	open                    Slots // admitted application connections, against the stream's max_active_conns
	Active, Total, rejected atomic.Int64
	// pooled legs (pool.go): dialed, taken from the pool, torn down at the cap
	legsCreated, legsReused, legsTornDown atomic.Int64
	WaitingApp                            atomic.Int64 // WAN legs waiting for the application (appwait.go)
	overCap                               atomic.Int64 // refused over the stream's or the gateway's cap
	redials                               atomic.Int64 // WAN dials the peer reset, dialled again (peerdial.Redial)
	ToWAN, FromWAN                        atomic.Int64
	ends                                  endsState // aborted connections, by kind (ends.go)

	Refused Refusals       // refusals by reason, for the metrics (metrics.go)
	Rates   *rates.Tracker // sampled rates (internal/rates)

	framed framed.Table // an inbound stream's framed connections, for their joins (framed.go)
	live   framed.Live  // its framed connections that run, for a hand-over (handover.go)
	resume resumeStats  // what its framed connections' legs did (framed.go)
}

// New builds the runtime of rec on its bound listeners, one per
// channel, relaying with engine eng. parent is the context whose end
// stops it. It starts nothing: see start.
func New(parent context.Context, e *Env, rec *store.Record, lns []*net.TCPListener, eng relay.Engine) (*Stream, error) {
	if len(lns) != rec.PortsHeld() || len(rec.Targets) == 0 && !awaitsPeers(rec) {
		return nil, fmt.Errorf("record has %d listeners, %d targets for num_conn %d", len(lns), len(rec.Targets), rec.NumConn)
	}
	if rec.Shared() && (e.Port == nil || rec.Role != api.RoleInbound) {
		return nil, fmt.Errorf("record names a stream on the shared WAN port (%s), which this gateway does not have; start s2cs with --wan_port", rec.ServerName)
	}
	allow, err := ParseAllow(rec.Allow)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(parent)
	st := &Stream{
		env:       e,
		Key:       rec.Key(),
		PortsHeld: rec.PortsHeld(),
		wanT:      rec.WAN,
		UID:       rec.UID,
		Role:      rec.Role,
		NumConn:   rec.NumConn,
		engine:    eng,
		ctx:       ctx,
		cancel:    cancel,
		rec:       rec,
		listeners: lns,
		slots:     make([]strangers.Listener, len(lns)),
		conns:     map[net.Conn]int{},
		open:      Slots{max: int64(rec.MaxActiveConns)},
		Rates:     rates.NewTracker(e.Rates, time.Now()),
		peerAt:    make([]atomic.Pointer[string], rec.NumConn),
	}
	st.watch = peerwatch.New(ctx, watchOf{st})
	st.Allow.Store(&allow)
	st.Pace.Set(pace.Rate(rec.Rate))
	st.dataOK.Store(rec.State == api.StateConnected) // a restored record keeps its state
	pin := rec.PeerCertSHA256
	st.PeerPin.Store(&pin)
	if rec.Shared() {
		st.Shared = st.leg(rec, 0)
		st.Shared.Channels = rec.NumConn
		st.Shared.ServerName = rec.ServerName // the router's key (wanPort.acceptQUIC)
	}
	return st, nil
}

func (st *Stream) Record() *store.Record {
	st.mu.Lock()
	defer st.mu.Unlock()
	r := *st.rec
	return &r
}

// SetRecord replaces st's record by r (r is not changed afterwards). A
// wired r of a stream a data leg has worked on is kept as connected: an
// older write mirrored from the store cannot take the state back.
func (st *Stream) SetRecord(r *store.Record) {
	st.mu.Lock()
	st.rec = r
	up := st.settleLocked()
	st.mu.Unlock()
	if up {
		st.tellSettled()
	}
}

func (st *Stream) ListenerAddrs() []string {
	if st.Shared != nil {
		return []string{st.env.Advertise}
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	var out []string
	for _, ln := range st.listeners {
		if ln != nil { // a channel another node of the facility serves
			out = append(out, ln.Addr().String())
		}
	}
	return out
}

// Start runs one accept loop per channel, and the watch leg's dials of
// an outbound stream the peer should hear from without waiting for data:
// a 1.2 stream whose peers are known (peerca.go), and one restored
// connected (a data leg worked before the gateway restarted: the peer
// hears that this gateway is back, watch.go). It does nothing once the
// stream has stopped.
func (st *Stream) Start() {
	st.mu.Lock()
	if st.stopped {
		st.mu.Unlock()
		return
	}
	st.sharePaceLocked()
	for i, ln := range st.listeners {
		if ln != nil {
			st.wg.Add(1)
			go st.acceptLoop(i, ln)
		}
	}
	st.startQUIC()
	if st.Role == api.RoleOutbound && st.rec.WANPool > 0 {
		st.wg.Add(1)
		go st.warmLegs(st.rec.WANPool)
	}
	watch := awaitsPeers(st.rec) && len(st.rec.Targets) > 0 || st.Role == api.RoleOutbound && st.dataOK.Load()
	st.mu.Unlock()
	if watch {
		st.startWatch(st.env.Log.With("uid", st.UID))
	}
}

// Stop closes the listeners (freeing their ports), aborts every
// connection and waits for every goroutine of the stream. Idempotent.
func (st *Stream) Stop() {
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
	st.env.Legs.Drop(legOwner{st})
	st.closeWatch()
	st.stopQUIC()
	for _, ln := range lns {
		if ln != nil {
			st.env.Alloc.Release(ln)
		}
	}
	for _, c := range conns {
		relay.Abort(c)
	}
	st.wg.Wait()
}

// track registers c so stop can abort it; it reports false (and aborts c)
// if the stream is already stopping.
func (st *Stream) track(c net.Conn) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.stopped {
		relay.Abort(c)
		return false
	}
	st.conns[c] = -1
	return true
}

// trackOn is track for a connection accepted on channel ch's listener:
// closeChannel aborts it.
func (st *Stream) trackOn(c net.Conn, ch int) bool {
	if !st.track(c) {
		return false
	}
	st.mu.Lock()
	st.conns[c] = ch
	st.mu.Unlock()
	return true
}

// Adopt registers conns, a leg accepted on the shared WAN port, so stop
// can abort them, and counts the goroutine that will serve them in the
// stream's WaitGroup; it reports false (and aborts them) if the stream is
// already stopping.
func (st *Stream) Adopt(conns ...net.Conn) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.stopped {
		for _, c := range conns {
			relay.Abort(c)
		}
		return false
	}
	for _, c := range conns {
		st.conns[c] = -1
	}
	st.wg.Add(1)
	return true
}

// ServeRouted serves a TLS leg of this stream that the shared WAN port
// authenticated (raw its TCP connection, from the peer address from), as
// serveInbound serves one accepted on the stream's own port; adopt
// registered both.
func (st *Stream) ServeRouted(raw net.Conn, from net.Addr, r *wan.Routed) {
	defer st.wg.Done()
	defer st.untrack(raw)
	defer st.untrack(r.Conn)
	st.serveLeg(from, r)
}

func (st *Stream) untrack(c net.Conn) {
	st.mu.Lock()
	delete(st.conns, c)
	delete(st.resumable, c)
	st.mu.Unlock()
}

// spareOnLoss marks tracked connections of a framed connection that
// resumes: the watch leg's loss leaves them be.
func (st *Stream) spareOnLoss(cs ...net.Conn) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.resumable == nil {
		st.resumable = map[net.Conn]struct{}{}
	}
	for _, c := range cs {
		if _, ok := st.conns[c]; ok {
			st.resumable[c] = struct{}{}
		}
	}
}

func (st *Stream) acceptLoop(ch int, ln *net.TCPListener) {
	defer st.wg.Done()
	if st.Role == api.RoleOutbound || st.wanT == api.WANTCP {
		// Connections accepted here are armed below (relay.ResetOnClose);
		// arming the listener arms them from their handshake on, so this
		// process's death before that call resets them too. Not a TLS
		// leg's listener: a refused handshake's alert must reach the peer.
		if err := relay.ResetOnCloseListener(ln); err != nil {
			st.env.Log.Warn("arm the listener to reset on close", "uid", st.UID, "channel", ch, "err", err)
		}
	}
	var backoff time.Duration
	for {
		c, err := ln.AcceptTCP()
		if err != nil {
			if st.ctx.Err() != nil {
				return
			}
			if ne, ok := err.(net.Error); ok && ne.Timeout() || IsTemporary(err) {
				// e.g. EMFILE: back off instead of spinning.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				st.env.Log.Warn("accept", "uid", st.UID, "channel", ch, "err", err, "retry_in", backoff)
				select {
				case <-time.After(backoff):
					continue
				case <-st.Done():
					return
				}
			}
			st.env.Log.Debug("accept loop ends", "uid", st.UID, "channel", ch, "err", err)
			return
		}
		backoff = 0
		var sl strangers.Slot
		if st.Role == api.RoleInbound {
			var ok bool
			if sl, ok = st.env.Strangers.Admit(&st.slots[ch], c.RemoteAddr(), st.Trusted.Has(c.RemoteAddr(), time.Now())); !ok {
				// Over a cap of connections in their handshake:
				// reset at once, before any TLS state exists.
				st.rejected.Add(1)
				st.Refused.HandshakeCap.Add(1)
				st.env.Strangers.Refuse(strangers.ReasonCap, c.RemoteAddr())
				st.env.Log.Debug("WAN connection refused", "uid", st.UID, "channel", ch, "peer", c.RemoteAddr().String(), "reason", strangers.ReasonCap)
				relay.Abort(c)
				continue
			}
		}
		if st.Role == api.RoleOutbound && !st.AdmitConn(ch, c.RemoteAddr()) {
			relay.Abort(c) // over a cap of connections at once: reset at once
			continue
		}
		if st.Role == api.RoleOutbound || st.wanT == api.WANTCP {
			// The application's socket, or a plaintext WAN leg (which
			// has no close_notify to tell an end from a death): from
			// now on only an orderly end of the relay may end it with
			// FIN (relay.ResetOnClose).
			relay.ResetOnClose(c)
		}
		if !st.trackOn(c, ch) { // stopping: c is reset
			if st.Role == api.RoleInbound {
				st.env.Strangers.Release(sl)
			} else {
				st.ReleaseConn()
			}
			continue
		}
		st.wg.Add(1)
		if st.Role == api.RoleOutbound {
			go st.serveOutbound(ch, c)
		} else {
			go st.serveInbound(ch, c, sl)
		}
	}
}

// AdmitConn takes a slot of the stream's cap and the gateway's open
// files for one application connection from remote (on an inbound
// stream: an authenticated WAN leg), or counts a refusal and reports
// false: the caller then resets the connection. releaseConn gives them
// back.
func (st *Stream) AdmitConn(ch int, remote net.Addr) bool {
	if st.open.take(1) {
		if st.env.Files.take(FilesOf(st.wanT)) {
			return true
		}
		st.open.give(1)
	}
	st.rejected.Add(1)
	st.overCap.Add(1)
	st.env.Strangers.Refuse(strangers.ReasonOverCap, remote)
	st.env.Log.Debug("connection refused", "uid", st.UID, "channel", ch, "peer", remote.String(), "reason", strangers.ReasonOverCap,
		"stream_cap", st.open.max, "gateway_files", st.env.Files.max)
	return false
}

func (st *Stream) ReleaseConn() {
	st.open.give(1)
	st.env.Files.give(FilesOf(st.wanT))
}

// IsTemporary reports an accept error worth retrying after a pause (EMFILE, say).
func IsTemporary(err error) bool {
	type temporary interface{ Temporary() bool }
	t, ok := err.(temporary)
	return ok && t.Temporary()
}

// serveOutbound relays an application connection accepted on the LAN
// listener of channel ch to the peer gateway's listener ch.
func (st *Stream) serveOutbound(ch int, app *net.TCPConn) {
	defer st.wg.Done()
	defer st.ReleaseConn()
	defer st.untrack(app)
	log := st.env.Log.With("uid", st.UID, "channel", ch, "app", app.RemoteAddr().String())
	if !st.Admits(app.RemoteAddr()) {
		st.rejected.Add(1)
		st.Refused.Allow.Add(1)
		st.env.Strangers.Refuse(strangers.ReasonAllow, app.RemoteAddr())
		log.Debug("connection refused: source not in the stream's allow-list", "allow", st.Record().Allow)
		relay.Abort(app)
		return
	}
	rec := st.Record()
	target := rec.Targets[ch%len(rec.Targets)]
	leg := st.leg(rec, ch)
	if rec.WANPool > 0 {
		st.relayPooled(log, app, ch, target, leg)
		return
	}
	w, err := st.dialPeer(log, ch, rec, leg)
	if err != nil {
		st.dialFailed(log, true, target, err)
		relay.Abort(app)
		return
	}
	if leg.Transport == api.WANTCP {
		relay.ResetOnClose(w)
	}
	st.wanUp(log)
	st.noteResume(w, false)
	if wan.Framed(w) {
		st.startWatch(log)
		if !st.track(w) {
			relay.Abort(app)
			return
		}
		defer st.untrack(w)
		st.relayFramedOut(log, app, w, ch, leg)
		return
	}
	answer := st.answer(log, w)
	st.startWatch(log)
	if !st.track(w) {
		relay.Abort(app)
		return
	}
	defer st.untrack(w)
	st.relay(log, app, w, answer)
}

// serveInbound authenticates a WAN connection accepted on channel ch and
// relays it to the application's port for that channel. sl is its
// handshake slot (strangers.Gate.Admit), which it releases.
func (st *Stream) serveInbound(ch int, raw *net.TCPConn, sl strangers.Slot) {
	defer st.wg.Done()
	defer st.untrack(raw)
	if st.wanT == api.WANTLS {
		// The dialer speaks first (its ClientHello): until it does,
		// this connection costs this goroutine's small stack and
		// nothing else; a stranger that says nothing costs no more.
		// (On a plaintext leg the acceptor speaks first, its nonce.)
		raw.SetReadDeadline(time.Now().Add(wan.HandshakeTimeout))
		if err := sockio.WaitReadable(raw); err != nil {
			st.env.Strangers.Release(sl)
			raw.Close()
			st.RefuseWAN(ch, raw.RemoteAddr(), fmt.Errorf("%w: %w", wan.ErrBadPreface, err))
			return
		}
	}
	r, err := wan.AcceptLeg(st.ctx, raw, st.leg(st.Record(), ch))
	st.env.Strangers.Release(sl)
	if err != nil {
		st.RefuseWAN(ch, raw.RemoteAddr(), err)
		return
	}
	if r.Conn != net.Conn(raw) {
		if !st.track(r.Conn) {
			return
		}
		defer st.untrack(r.Conn)
	}
	st.serveLeg(raw.RemoteAddr(), r)
}

// serveLeg serves an authenticated leg r from the peer address from, on
// the stream's own port or the shared one: the watch leg, a pooled leg
// (one session after another), or a leg of one application connection.
// The caller tracks r.Conn.
func (st *Stream) serveLeg(from net.Addr, r *wan.Routed) {
	st.Trusted.Add(from, time.Now())
	st.partnerCame()
	log := st.env.Log.With("uid", st.UID, "channel", r.Channel, "peer", from.String())
	st.wanAccepted(log, r.Conn)
	if r.Watch() {
		st.serveWatch(log, r.Conn)
		return
	}
	st.wanUp(log)
	st.noteResume(r.Conn, r.Pooled)
	if !r.Pooled && wan.Framed(r.Conn) {
		st.serveFramedIn(log, from, r.Channel, r.Conn, true)
		return
	}
	if !r.Pooled {
		if !st.AdmitConn(r.Channel, from) {
			relay.Abort(r.Conn) // over a cap of connections at once: reset at once
			return
		}
		defer st.ReleaseConn()
		st.relayToApp(log, st.Record(), r.Channel, r.Conn)
		return
	}
	p, err := legpool.NewPooledAcceptor(r.Conn)
	if err != nil {
		log.Debug("pooled leg refused", "err", err)
		relay.Abort(r.Conn)
		return
	}
	for {
		s, err := p.Next()
		if err != nil {
			if !errors.Is(err, io.EOF) && st.ctx.Err() == nil {
				log.Debug("pooled leg ends", "err", err)
			}
			return
		}
		if wan.Framed(s) {
			// Positioned frames (wan.ALPNFramedPools): the session
			// opens a connection that outlives the pooled leg.
			st.serveFramedIn(log, from, r.Channel, s, true)
			if !s.Clean() {
				return // its connection left the leg, or ended with a reset
			}
			continue
		}
		// Each session is one application connection: the caps count
		// it (one over resets its session, and so the leg).
		if !st.AdmitConn(r.Channel, from) {
			relay.Abort(s)
			return
		}
		st.relayToApp(log, st.Record(), r.Channel, s)
		st.ReleaseConn()
		if !s.Clean() {
			return // reset with its session
		}
	}
}

// RefuseWAN counts a WAN connection from remote on channel ch that did
// not authenticate (unless the stream stopped meanwhile): in the stream's
// counters and the gateway's refusal summary, and at debug in the log.
func (st *Stream) RefuseWAN(ch int, remote net.Addr, err error) {
	if st.ctx.Err() != nil {
		return // released or shut down meanwhile
	}
	st.rejected.Add(1)
	st.Refused.WANAuth.Add(1)
	st.env.Strangers.Refuse(strangers.ReasonOf(err), remote)
	st.env.Log.Debug("WAN connection refused", "uid", st.UID, "channel", ch, "peer", remote.String(), "err", err)
}

// relayToApp dials the application's port for channel ch, waiting for it
// as the stream says (appwait.go), and relays the authenticated WAN leg
// w to it; w is aborted if that fails.
func (st *Stream) relayToApp(log *slog.Logger, rec *store.Record, ch int, w net.Conn) {
	target := rec.Targets[ch%len(rec.Targets)]
	app, err := st.dialApp(log, w, target, st.env.AppWaitFor(rec))
	if err != nil {
		var re *relay.Error
		if errors.As(err, &re) {
			st.ended(log, err) // the leg ended while it waited
			relay.Abort(w)
			return
		}
		st.dialFailed(log, false, target, err)
		refuseLeg(w, appRefusal(err))
		return
	}
	relay.ResetOnClose(app)
	st.appUp(log)
	if wan.Answers(w) {
		if err := wan.WriteAnswer(w, ""); err != nil {
			relay.Abort(app)
			relay.Abort(w)
			st.ended(log, &relay.Error{Conn: relay.B, Op: "write", Err: fmt.Errorf("answer the peer: %w", err)})
			return
		}
	}
	st.legWorked()
	if !st.track(app) {
		relay.Abort(w)
		return
	}
	defer st.untrack(app)
	st.relay(log, app, w, nil)
}

// relay runs one application connection <-> WAN leg pair to its end;
// answer, if not nil, reads the peer's answer on w first (st.answer).
func (st *Stream) relay(log *slog.Logger, app, w net.Conn, answer func() error) {
	st.Active.Add(1)
	st.Total.Add(1)
	defer st.Active.Add(-1)
	// A paced direction waits in its count function: the connection's
	// context ends that wait when the stream stops or the relay aborts
	// the connection (the other direction failed), not a chunk's time
	// later.
	ctx, abort := context.WithCancel(st.ctx)
	defer abort()
	err := relay.RelayWith(st.EngineFor(), app, w, relay.Hooks{
		CountAB: st.counter(ctx, DirToWAN, &st.ToWAN), CountBA: st.counter(ctx, DirFromWAN, &st.FromWAN),
		OnAbort: abort, BeforeBA: answer,
	})
	st.ended(log, err)
}

func (st *Stream) leg(rec *store.Record, ch int) *wan.Leg {
	return &wan.Leg{
		Transport:  rec.WAN,
		UID:        rec.UID,
		Channel:    ch,
		Secret:     rec.Secret,
		Cert:       st.env.Cert,
		PeerSHA256: st.pin,
		ServerName: rec.PeerServerName,
		Control:    st.wanControl,
		PeerCA:     st.peerCA(rec),
		// A stream whose connections do not wait for a new leg
		// (resume window 0) dials its legs without frames: they cost
		// what the plain relay costs.
		// A striped one needs the frames all the same.
		Unframed: st.env.ResumeWindowFor(rec) == 0 && rec.Stripe <= 1,
	}
}

// wanControl is the Control of the stream's WAN dials: the check of the
// peer's address (Env.Peers), then, on a TCP socket, the gateway's
// congestion control of WAN legs (Env.WANCC).
func (st *Stream) wanControl(network, address string, rc syscall.RawConn) error {
	if st.env.Peers != nil {
		if err := st.env.Peers.Control(network, address, rc); err != nil {
			return err
		}
	}
	if !strings.HasPrefix(network, "tcp") {
		return nil // a QUIC connection's UDP socket: quic-go's own
	}
	return tcpcc.Set(rc, st.env.WANCC)
}

// wanAccepted sets the gateway's congestion control of WAN legs
// (Env.WANCC) on c, a WAN leg this side accepted and authenticated: the
// handshake ran on the host's default, the bytes run on the leg's.
func (st *Stream) wanAccepted(log *slog.Logger, c net.Conn) {
	if st.env.WANCC == "" {
		return
	}
	t := wan.TCPOf(c)
	if t == nil {
		return
	}
	rc, err := t.SyscallConn()
	if err == nil {
		err = tcpcc.Set(rc, st.env.WANCC)
	}
	if err != nil {
		log.Debug("set the WAN leg's congestion control", "cc", st.env.WANCC, "err", err)
	}
}

// pinReread is how often, at most, a stream with nothing pinned yet
// reads its record again for a leg that came (stream.pin).
const pinReread = 200 * time.Millisecond

// pin is the fingerprint of the certificate a WAN leg must present. On a
// node of a facility a leg may come before the node has learnt of the
// attach that pinned it (another node stored it milliseconds ago, and
// the application connected at once): while nothing is pinned here, the
// record is read again from the store, at most every pinReread, so that
// leg is not refused. Anyone's handshake can cause that read, hence the
// bound; once pinned, nothing is read.
func (st *Stream) pin() string {
	cur := st.PeerPin.Load()
	if *cur != "" || st.env.Reread == nil {
		return *cur
	}
	now := time.Now().UnixNano()
	last := st.pinRead.Load()
	if now-last < int64(pinReread) || !st.pinRead.CompareAndSwap(last, now) {
		return ""
	}
	rec, err := st.env.Reread(st.Key)
	if err != nil || rec.PeerCertSHA256 == "" || !rec.Created.Equal(st.Record().Created) {
		return ""
	}
	pin := rec.PeerCertSHA256
	st.PeerPin.CompareAndSwap(cur, &pin) // unless an attach stored it meanwhile
	return pin
}

func (st *Stream) Admits(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return false
	}
	ip, ok := netip.AddrFromSlice(ta.IP)
	if !ok {
		return false
	}
	ip = ip.Unmap()
	for _, p := range *st.Allow.Load() {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// Attach pins the peer's certificate and marks the stream wired (a stream
// attached again stays as it is, wired or connected). It reports false,
// changing nothing, if the stream is attached to another pin already. It
// returns the record as it is after the call.
func (st *Stream) Attach(pin string, now time.Time) (*store.Record, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.rec.State.Attached() && st.rec.PeerCertSHA256 != pin {
		r := *st.rec
		return &r, false
	}
	st.rec.PeerCertSHA256 = pin
	if !st.rec.State.Attached() {
		st.rec.State = api.StateWired
	}
	st.rec.Updated = now
	st.PeerPin.Store(&pin)
	r := *st.rec
	return &r, true
}

// Waiting reports whether the stream waits for its peer (listening): an
// inbound stream not attached yet, or a stream of a 1.2 client whose
// partner is not known yet (peerca.go).
func (st *Stream) Waiting() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.rec.State == api.StateListening && !st.stopped
}

// PendingSince returns how long the stream has waited for its peer, or
// 0 if it is not waiting.
func (st *Stream) PendingSince(now time.Time) time.Duration {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.rec.State != api.StateListening || st.stopped {
		return 0
	}
	return now.Sub(st.rec.Updated)
}

// Stats returns st's counters, what its record says it carried before a
// restart (store.Record.Carried) included.
func (st *Stream) Stats() *api.Stats {
	rt, rf := st.Rates.Current()
	var before store.Carried
	st.mu.Lock()
	if c := st.rec.Carried; c != nil {
		before = *c
	}
	st.mu.Unlock()
	s := &api.Stats{
		ActiveConns:   st.Active.Load(),
		WaitingConns:  st.WaitingApp.Load(),
		TotalConns:    before.Conns + st.Total.Load(),
		RejectedConns: st.rejected.Load(),
		OverCapConns:  st.overCap.Load(),
		BytesToWAN:    before.BytesToWAN + st.ToWAN.Load(),
		BytesFromWAN:  before.BytesFromWAN + st.FromWAN.Load(),
		RateToWAN:     rt,
		RateFromWAN:   rf,
		Rates:         st.Rates.View(false),
	}
	st.ends.Fill(s)
	st.fillResume(s)
	s.Peer = st.watch.Peer()
	s.LegsCreated, s.LegsReused, s.LegsTornDown = st.legsCreated.Load(), st.legsReused.Load(), st.legsTornDown.Load()
	if st.Role == api.RoleOutbound {
		s.LegsIdle = int64(st.env.Legs.IdleOf(legOwner{st}))
		s.WANRedials = st.redials.Load()
		s.PeerFlaps = st.ends.peer.Flapped()
	}
	return s
}

// Change applies f to st's record under its lock and returns a copy of
// the result.
func (st *Stream) Change(f func(*store.Record)) *store.Record {
	st.mu.Lock()
	f(st.rec)
	up := st.settleLocked() // f may have put back a record from before the first data
	r := *st.rec
	st.mu.Unlock()
	if up {
		st.tellSettled()
	}
	return &r
}

// HasStopped reports whether st has stopped (it is ending or ended).
func (st *Stream) HasStopped() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.stopped
}

// Lease returns when st's Lease runs out, and its length in seconds.
func (st *Stream) Lease() (time.Time, int) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.rec.Expires, st.rec.LeaseS
}

// KernelPaths reports whether st's open connections may be redirected in
// the kernel (sockmap between plain TCP sockets), beyond any pacing.
func (st *Stream) KernelPaths() bool {
	return st.env.Kernel && st.engine.Name() == "sockmap" && st.wanT == api.WANTCP && !st.paced() && st.Active.Load() > 0
}

// ParseAllow reads an allow-list whose entries parsePrefix accepts.
func ParseAllow(list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, a := range list {
		p, err := ParsePrefix(a)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// ParsePrefix reads an allow-list entry: a CIDR prefix or one address.
func ParsePrefix(s string) (netip.Prefix, error) {
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

// Done returns a channel closed when the stream stops (released, ended,
// or its gateway shut down).
func (st *Stream) Done() <-chan struct{} { return st.ctx.Done() }

// Parked returns how many of st's application connections wait, parked,
// for a new WAN leg now (Stats.ParkedConns), without building the stats.
func (st *Stream) Parked() int64 { return st.resume.parked.Load() }

// Admitted returns the application connections the stream holds against
// its max_active_conns now (relaying, or waiting for their other leg).
func (st *Stream) Admitted() int64 { return st.open.InUse() }

// Listeners returns the stream's bound listeners, one per channel of its
// own ports (none on the shared WAN port), for a look at their sockets.
func (st *Stream) Listeners() []*net.TCPListener {
	st.mu.Lock()
	defer st.mu.Unlock()
	return slices.Clone(st.listeners)
}

// Carried returns what st carried in all, before a restart included, as
// its record keeps it (store.Record.Carried).
func (st *Stream) Carried() *store.Carried {
	s := st.Stats()
	return &store.Carried{BytesToWAN: s.BytesToWAN, BytesFromWAN: s.BytesFromWAN, Conns: s.TotalConns}
}
