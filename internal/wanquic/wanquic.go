// Package wanquic is the "quic" WAN transport. The two gateways of a
// stream keep one QUIC connection per channel (per inbound listener) and
// carry every application TCP connection of that channel as one
// bidirectional QUIC stream; the applications still speak plain TCP on
// the LAN legs. It builds on internal/wan, which keeps every check of a
// peer: the TLS configuration (wan.Leg.QUICTLSConfig), the preface and its
// MAC (wan.Leg.Preface, wan.Leg.CheckPreface), the routing of a shared WAN
// port (wan.Router).
//
// Security is the TLS transport's, inside QUIC: TLS 1.3, mutual, ALPN
// "scistream-wan/1", each side accepting only the certificate pinned for
// the stream (Leg.PeerSHA256). Every QUIC stream then begins with the same
// preface as a TLS leg (magic, UID, channel, HMAC of the stream secret over
// keying material exported from the QUIC connection's TLS session), so a
// preface recorded on one connection is useless on any other. The acceptor
// checks the preface before it dials the application; a QUIC connection
// whose peer sends a bad preface is closed, which ends its other streams
// too (the peer holds the pinned key but not the secret: nothing it sends
// is trusted).
//
// Ends of a stream map onto QUIC as relay.Relay expects of a net.Conn:
// CloseWrite sends FIN (Stream.Close), a received FIN reads as io.EOF, and
// relay.Abort resets both directions (CancelWrite and CancelRead with
// codeAborted), which the peer reads as a *quic.StreamError. A QUIC
// connection that dies (idle timeout, peer gone, release) fails every
// stream on it with that cause. The idle timeout is how the death of a
// silent peer is noticed: KeepAlivePeriod keeps a live but idle connection
// from reaching it.
package wanquic

import (
	"context"
	"crypto/hkdf"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/quic-go/quic-go"

	"scistream/internal/api"
	"scistream/internal/udpsock"
	"scistream/internal/wan"
)

// Stream and connection error codes sent to the peer.
const (
	// codeAborted resets a QUIC stream whose relay failed (a TCP side
	// reset, a release): the peer aborts its TCP side in turn.
	codeAborted quic.StreamErrorCode = 0x1
	// codeRefused resets a stream whose preface was not accepted.
	codeRefused quic.StreamErrorCode = 0x2
	// codeClosed ends a QUIC connection on release or shutdown.
	codeClosed quic.ApplicationErrorCode = 0x0
	// codeUnauthorized ends a QUIC connection that sent a bad preface.
	codeUnauthorized quic.ApplicationErrorCode = 0x1
)

// Config tunes the QUIC transport. Every zero value is a usable default.
type Config struct {
	// MaxIdleTimeout closes a QUIC connection (aborting its streams) after
	// this long without a packet from the peer: the time to notice that a
	// peer gateway died or the path broke. The effective value is the
	// smaller of both sides'. If zero, 15 s.
	MaxIdleTimeout time.Duration
	// KeepAlivePeriod is how often an idle connection sends a PING so it
	// does not reach the idle timeout. If zero, MaxIdleTimeout/3.
	KeepAlivePeriod time.Duration
	// MaxStreamReceiveWindow caps the flow-control window of one QUIC
	// stream (one application connection); it bounds that connection's
	// rate to window/RTT. If zero, 32 MiB (1.7 Gb/s at 150 ms RTT).
	MaxStreamReceiveWindow uint64
	// MaxConnectionReceiveWindow caps the window of a whole QUIC
	// connection (all application connections of a channel), and so the
	// memory it may hold for slow applications. If zero, 64 MiB.
	MaxConnectionReceiveWindow uint64
	// MaxStreams is how many application connections one channel may carry
	// at once; a further one waits up to wan.HandshakeTimeout for a free slot,
	// then is refused. If zero, 1024.
	MaxStreams int
	// DisableGRO reads datagrams one by one instead of with UDP receive
	// offload (for comparison; GRO is used only where the kernel has it).
	DisableGRO bool
	// Logger receives warnings (UDP buffers too small) and debug lines. If
	// nil, they are discarded.
	Logger *slog.Logger
	// OnReject, if set, is called for every refused peer or stream: a
	// certificate that is not the pinned one, a bad preface. It must not
	// block.
	OnReject func(remote net.Addr, err error)
}

func (c Config) withDefaults() Config {
	if c.MaxIdleTimeout == 0 {
		c.MaxIdleTimeout = 15 * time.Second
	}
	if c.KeepAlivePeriod == 0 {
		c.KeepAlivePeriod = c.MaxIdleTimeout / 3
	}
	if c.MaxStreamReceiveWindow == 0 {
		c.MaxStreamReceiveWindow = 32 << 20
	}
	if c.MaxConnectionReceiveWindow == 0 {
		c.MaxConnectionReceiveWindow = 64 << 20
	}
	if c.MaxStreams == 0 {
		c.MaxStreams = 1024
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.OnReject == nil {
		c.OnReject = func(net.Addr, error) {}
	}
	return c
}

// packetConn is what quic-go reads and writes: udp, with GRO unless
// disabled.
func (c Config) packetConn(udp *net.UDPConn) net.PacketConn {
	if c.DisableGRO {
		return udp
	}
	return udpsock.WithGRO(udp)
}

// quicConfig returns quic-go's configuration. Only the dialer opens
// streams (incoming == false refuses peer-opened streams).
func (c Config) quicConfig(incoming bool) *quic.Config {
	qc := &quic.Config{
		HandshakeIdleTimeout: wan.HandshakeTimeout / 2, // the whole handshake gets twice this
		MaxIdleTimeout:       c.MaxIdleTimeout,
		KeepAlivePeriod:      c.KeepAlivePeriod,
		// Start with windows that fill a fast LAN-scale path at once; the
		// auto-tuning grows them towards the maxima on long paths.
		InitialStreamReceiveWindow:     min(4<<20, c.MaxStreamReceiveWindow),
		MaxStreamReceiveWindow:         c.MaxStreamReceiveWindow,
		InitialConnectionReceiveWindow: min(8<<20, c.MaxConnectionReceiveWindow),
		MaxConnectionReceiveWindow:     c.MaxConnectionReceiveWindow,
		MaxIncomingStreams:             -1,
		MaxIncomingUniStreams:          -1,
	}
	if incoming {
		qc.MaxIncomingStreams = int64(c.MaxStreams)
	}
	return qc
}

func quicBinding(c *quic.Conn) ([]byte, error) {
	return wan.ExportBinding(c.ConnectionState().TLS)
}

// Listener accepts the QUIC legs of one channel of one stream on a UDP
// socket (Listen), or of every stream of a shared WAN port
// (ListenRouted), and hands out their authenticated streams.
type Listener struct {
	leg   *wan.Leg   // the one leg (Listen), or nil
	route wan.Router // the legs by server name (ListenRouted), or nil
	cfg   Config
	tr    *quic.Transport
	ln    *quic.Listener

	ctx    context.Context
	cancel context.CancelFunc
	ready  chan *wan.Routed // authenticated streams, for Accept

	mu     sync.Mutex // guards the following fields
	conns  map[*quic.Conn]*wan.Leg
	closed bool

	wg sync.WaitGroup // accept loop, one per connection, one per stream being checked
}

// Listen starts accepting QUIC connections for leg on udp. The caller
// keeps ownership of udp (it is not closed by Close).
func Listen(udp *net.UDPConn, l *wan.Leg, cfg Config) (*Listener, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	if l.Transport != api.WANQUIC {
		return nil, fmt.Errorf("wanquic.Listen on a %q leg", l.Transport)
	}
	return listenQUIC(udp, l.Cert, l, nil, cfg)
}

// ListenRouted starts accepting the QUIC connections of a shared WAN
// port on udp: each connection belongs to the stream whose leg route
// returns for its TLS server name (as AcceptRouted for TLS), and its QUIC
// streams' prefaces name that stream's channels. cert is the gateway's
// certificate. The caller keeps ownership of udp.
func ListenRouted(udp *net.UDPConn, cert *tls.Certificate, route wan.Router, cfg Config) (*Listener, error) {
	if cert == nil || route == nil {
		return nil, errors.New("wanquic.ListenRouted without certificate or router")
	}
	return listenQUIC(udp, cert, nil, route, cfg)
}

func listenQUIC(udp *net.UDPConn, cert *tls.Certificate, fixed *wan.Leg, route wan.Router, cfg Config) (*Listener, error) {
	cfg = cfg.withDefaults()
	udpsock.SetBuffers(udp, cfg.Logger)
	budget := &handshakeBudget{tokens: handshakeBurst}
	tr := &quic.Transport{
		Conn:                cfg.packetConn(udp),
		StatelessResetKey:   resetKey(cert, udp.LocalAddr()),
		VerifySourceAddress: budget.retry,
	}
	report := func(err error) {
		cfg.OnReject(nil, fmt.Errorf("tls handshake: %w", err))
	}
	var tc *tls.Config
	if fixed != nil {
		tc = fixed.QUICTLSConfig(report)
	} else {
		tc = wan.QUICRoutedTLSConfig(cert, route, report)
	}
	ln, err := tr.Listen(tc, cfg.quicConfig(true))
	if err != nil {
		tr.Close()
		return nil, fmt.Errorf("listen quic on %s: %w", udp.LocalAddr(), err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ql := &Listener{
		leg: fixed, route: route, cfg: cfg, tr: tr, ln: ln,
		ctx: ctx, cancel: cancel,
		ready: make(chan *wan.Routed),
		conns: map[*quic.Conn]*wan.Leg{},
	}
	ql.wg.Add(1)
	go ql.acceptConns()
	return ql, nil
}

// errNoRoute: a QUIC connection's server name led to no stream by the
// time it was accepted (released meanwhile).
var errNoRoute = errors.New("no stream for the connection's server name")

// Handshakes a listener starts for peers whose address is not validated
// yet: a burst, then a steady rate. Beyond that a new peer first gets a
// QUIC Retry and must echo its token (one more round trip) before the
// listener keeps any state or signs anything for it. A gateway dials one
// connection per channel and keeps it, so it never meets the limit; a
// flood of Initial packets (from spoofed addresses, say) would otherwise
// cost each a handshake's goroutines, memory and a signature for the 5 s
// handshake timeout, and three times its size in replies to the spoofed
// address.
const (
	handshakeBurst = 16
	handshakeRate  = 16 // per second
)

// handshakeBudget is a token bucket of handshakes without a Retry.
type handshakeBudget struct {
	mu     sync.Mutex // guards the following fields
	tokens float64
	last   time.Time
}

// retry reports whether a handshake from an unvalidated address must
// first go through a Retry (quic.Transport.VerifySourceAddress).
func (b *handshakeBudget) retry(net.Addr) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	if !b.last.IsZero() {
		b.tokens = min(handshakeBurst, b.tokens+now.Sub(b.last).Seconds()*handshakeRate)
	}
	b.last = now
	if b.tokens >= 1 {
		b.tokens--
		return false
	}
	return true
}

// Addr is the UDP address the listener receives on.
func (ql *Listener) Addr() net.Addr { return ql.ln.Addr() }

// Accept returns the next QUIC stream whose preface proved the stream
// secret, as a net.Conn that carries application bytes only. It blocks
// until one arrives, ctx ends, or the listener is closed (net.ErrClosed).
func (ql *Listener) Accept(ctx context.Context) (net.Conn, error) {
	r, err := ql.AcceptRouted(ctx)
	if err != nil {
		return nil, err
	}
	return r.Conn, nil
}

// AcceptRouted is Accept that also says which stream (the leg) and
// channel the QUIC stream's preface named: on a shared WAN port's
// listener (ListenRouted), the way to tell streams apart.
func (ql *Listener) AcceptRouted(ctx context.Context) (*wan.Routed, error) {
	select {
	case c := <-ql.ready:
		return c, nil
	case <-ql.ctx.Done():
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Close closes every QUIC connection (their streams fail at both ends),
// stops listening and waits for the listener's goroutines. It does not
// close the UDP socket. Idempotent.
func (ql *Listener) Close() error {
	ql.mu.Lock()
	if ql.closed {
		ql.mu.Unlock()
		ql.wg.Wait()
		return nil
	}
	ql.closed = true
	conns := make([]*quic.Conn, 0, len(ql.conns))
	for c := range ql.conns {
		conns = append(conns, c)
	}
	ql.mu.Unlock()
	ql.cancel()
	for _, c := range conns {
		c.CloseWithError(codeClosed, "stream released")
	}
	ql.ln.Close()
	ql.tr.Close()
	ql.wg.Wait()
	return nil
}

// CloseLeg closes the QUIC connections of the stream whose leg is l (as
// the wan.Router returned it), failing every QUIC stream on them at both
// ends: a stream released on a shared WAN port. Other streams' connections
// are not touched.
func (ql *Listener) CloseLeg(l *wan.Leg) {
	ql.mu.Lock()
	var conns []*quic.Conn
	for c, cl := range ql.conns {
		if cl == l {
			conns = append(conns, c)
		}
	}
	ql.mu.Unlock()
	for _, c := range conns {
		c.CloseWithError(codeClosed, "stream released")
	}
}

func (ql *Listener) acceptConns() {
	defer ql.wg.Done()
	for {
		c, err := ql.ln.Accept(ql.ctx)
		if err != nil {
			return // closed
		}
		ql.mu.Lock()
		if ql.closed {
			ql.mu.Unlock()
			c.CloseWithError(codeClosed, "stream released")
			return
		}
		leg := ql.leg
		if leg == nil {
			leg = ql.route.Leg(c.ConnectionState().TLS.ServerName, api.WANQUIC)
			if leg == nil { // released since its handshake
				ql.mu.Unlock()
				ql.cfg.OnReject(c.RemoteAddr(), errNoRoute)
				c.CloseWithError(codeClosed, "stream released")
				continue
			}
		}
		ql.conns[c] = leg
		ql.wg.Add(1)
		ql.mu.Unlock()
		go ql.serveConn(c, leg)
	}
}

func (ql *Listener) serveConn(c *quic.Conn, leg *wan.Leg) {
	defer ql.wg.Done()
	defer func() {
		ql.mu.Lock()
		delete(ql.conns, c)
		ql.mu.Unlock()
	}()
	binding, err := quicBinding(c)
	if err != nil {
		c.CloseWithError(codeUnauthorized, "no keying material")
		return
	}
	ql.cfg.Logger.Debug("quic connection accepted", "peer", c.RemoteAddr().String(), "gso", c.ConnectionState().GSO)
	for {
		s, err := c.AcceptStream(ql.ctx)
		if err != nil {
			ql.cfg.Logger.Debug("quic connection ends", "peer", c.RemoteAddr().String(), "cause", err)
			return
		}
		ql.wg.Add(1)
		go ql.serveStream(c, leg, s, binding)
	}
}

// serveStream checks the preface of s and hands it to Accept.
func (ql *Listener) serveStream(c *quic.Conn, leg *wan.Leg, s *quic.Stream, binding []byte) {
	defer ql.wg.Done()
	s.SetReadDeadline(time.Now().Add(wan.HandshakeTimeout))
	p, err := leg.CheckPreface(s, binding)
	if err != nil {
		s.CancelRead(codeRefused)
		s.CancelWrite(codeRefused)
		var se *quic.StreamError
		switch {
		case c.Context().Err() != nil:
			// The connection ended: every stream on it fails anyway.
		case errors.As(err, &se) && se.Remote:
			// The application connection was reset right after the
			// dialer opened this stream; the reset may overtake the
			// preface (QUIC discards data a reset abandons). Nothing
			// wrong with the connection: its other streams carry on.
			ql.cfg.Logger.Debug("quic stream reset before its preface", "peer", c.RemoteAddr().String(), "cause", err)
		case wan.PrefaceUnread(err):
			// The preface did not arrive whole in time (or the stream
			// ended first): refuse this stream only. A dialer whose
			// connection is blocked by flow control can be that late.
			ql.cfg.OnReject(c.RemoteAddr(), err)
		default:
			// A preface arrived and is wrong: the peer holds the pinned
			// key yet cannot prove the secret (or speaks garbage).
			// Trust nothing else it sends.
			ql.cfg.OnReject(c.RemoteAddr(), err)
			c.CloseWithError(codeUnauthorized, "preface refused")
		}
		return
	}
	s.SetReadDeadline(time.Time{})
	sc := newStreamConn(c, s, binding)
	select {
	case ql.ready <- &wan.Routed{Conn: sc, Leg: leg, Channel: p.Channel}:
	case <-ql.ctx.Done():
		sc.abort()
	}
}

// Dialer opens the QUIC legs of one stream: one QUIC connection per
// peer listener, dialed on the first application connection, kept while
// the dialer lives and dialed again if it died; each Dial opens one QUIC
// stream on it. The zero value is not usable; use NewDialer.
type Dialer struct {
	cfg Config

	mu     sync.Mutex // guards the following fields
	udp    *net.UDPConn
	tr     *quic.Transport
	conns  map[string]*dialing // by peer address
	closed bool
}

// dialing is a QUIC connection being dialed or established; done is
// closed once conn or err is set.
type dialing struct {
	done    chan struct{}
	conn    *quic.Conn
	binding []byte
	err     error
}

// NewDialer returns a dialer. It opens no socket until the first Dial.
func NewDialer(cfg Config) *Dialer {
	return &Dialer{cfg: cfg.withDefaults(), conns: map[string]*dialing{}}
}

// Dial opens a QUIC stream to the peer listener addr for leg l and sends
// the preface. The returned connection carries application bytes only.
func (d *Dialer) Dial(ctx context.Context, addr string, l *wan.Leg) (net.Conn, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	if l.Transport != api.WANQUIC {
		return nil, fmt.Errorf("wanquic.Dialer.Dial on a %q leg", l.Transport)
	}
	ctx, cancel := context.WithTimeout(ctx, wan.HandshakeTimeout)
	defer cancel()
	// A cached connection may have died since its last use: then dial a
	// fresh one, once.
	for attempt := 0; ; attempt++ {
		dc, err := d.conn(ctx, addr, l)
		if err != nil {
			return nil, err
		}
		s, err := dc.conn.OpenStreamSync(ctx)
		if err == nil {
			if _, err = s.Write(wan.AppendPreface(nil, l.Preface(dc.binding))); err == nil {
				return newStreamConn(dc.conn, s, dc.binding), nil
			}
			s.CancelWrite(codeAborted)
			s.CancelRead(codeAborted)
		}
		if ctx.Err() != nil {
			if errors.Is(ctx.Err(), context.DeadlineExceeded) && dc.conn.Context().Err() == nil {
				return nil, fmt.Errorf("open quic stream to %s: %d application connections already open on this channel (the limit): %w", addr, d.cfg.MaxStreams, err)
			}
			return nil, fmt.Errorf("open quic stream to %s: %w", addr, err)
		}
		if attempt > 0 {
			return nil, fmt.Errorf("open quic stream to %s: %w", addr, err)
		}
		// The connection failed (its context may not say so yet): dial
		// a fresh one.
		d.forget(addr, dc)
	}
}

// conn returns the live QUIC connection to addr, dialing it if needed.
// Concurrent callers share one dial.
func (d *Dialer) conn(ctx context.Context, addr string, l *wan.Leg) (*dialing, error) {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, net.ErrClosed
	}
	dc := d.conns[addr]
	if dc != nil {
		select {
		case <-dc.done:
			if dc.err != nil || dc.conn.Context().Err() != nil {
				dc = nil // failed or died: dial again
			}
		default:
		}
	}
	if dc != nil {
		d.mu.Unlock()
		select {
		case <-dc.done:
		case <-ctx.Done():
			return nil, fmt.Errorf("dial quic %s: %w", addr, ctx.Err())
		}
		if dc.err != nil {
			return nil, dc.err
		}
		return dc, nil
	}
	dc = &dialing{done: make(chan struct{})}
	d.conns[addr] = dc
	tr, err := d.transport(l.Cert)
	d.mu.Unlock()
	if err == nil {
		dc.conn, dc.binding, err = dial(ctx, tr, addr, l, d.cfg)
	}
	if err != nil {
		dc.err = fmt.Errorf("dial quic %s: %w", addr, err)
		d.forget(addr, dc)
	}
	close(dc.done)
	if err != nil {
		return nil, dc.err
	}
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed { // Close ran while we dialed and did not see this conn
		dc.conn.CloseWithError(codeClosed, "stream released")
		return nil, net.ErrClosed
	}
	return dc, nil
}

func dial(ctx context.Context, tr *quic.Transport, addr string, l *wan.Leg, cfg Config) (*quic.Conn, []byte, error) {
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, nil, err
	}
	if l.Control != nil {
		if err := l.Control("udp", ua.String(), nil); err != nil {
			return nil, nil, &net.OpError{Op: "dial", Net: "udp", Addr: ua, Err: err}
		}
	}
	var pinErr error
	c, err := tr.Dial(ctx, ua, l.QUICTLSConfig(func(err error) { pinErr = err }), cfg.quicConfig(false))
	if err != nil {
		if pinErr != nil {
			err = fmt.Errorf("%w (%v)", err, pinErr)
		}
		return nil, nil, err
	}
	binding, err := quicBinding(c)
	if err != nil {
		c.CloseWithError(codeUnauthorized, "no keying material")
		return nil, nil, err
	}
	cfg.Logger.Debug("quic connection dialed", "peer", addr, "gso", c.ConnectionState().GSO)
	return c, binding, nil
}

// transport returns the dialer's QUIC transport, opening its UDP socket on
// first use. d.mu must be held.
func (d *Dialer) transport(cert *tls.Certificate) (*quic.Transport, error) {
	if d.tr != nil {
		return d.tr, nil
	}
	udp, err := net.ListenUDP("udp", nil)
	if err != nil {
		return nil, fmt.Errorf("open UDP socket: %w", err)
	}
	udpsock.SetBuffers(udp, d.cfg.Logger)
	d.udp, d.tr = udp, &quic.Transport{Conn: d.cfg.packetConn(udp), StatelessResetKey: resetKey(cert, udp.LocalAddr())}
	return d.tr, nil
}

// resetKey derives the key of QUIC stateless resets from the gateway's
// private key and the UDP address it serves, so it survives a restart (a
// restored stream listens on the same address): a restarted gateway that
// receives packets of a connection its previous run held answers with a
// stateless reset the peer can verify, and the peer drops that connection
// (and dials a fresh one) within a round trip instead of waiting for the
// idle timeout. The address makes the key differ between the gateway's
// sockets: with one key for all of them, a packet sent to one socket with
// the connection ID of a connection on another would make it answer with
// that connection's reset token, which the sender could then use to end
// it (the "stateless reset oracle", RFC 9000 section 21.11). A leaked key
// lets an on-path attacker end connections, nothing more. Returns nil
// (resets off) if the key cannot be encoded.
func resetKey(cert *tls.Certificate, local net.Addr) *quic.StatelessResetKey {
	der, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		return nil
	}
	k, err := hkdf.Key(sha256.New, der, nil, "scistream quic stateless reset v2 "+local.String(), 32)
	if err != nil {
		return nil
	}
	var key quic.StatelessResetKey
	copy(key[:], k)
	return &key
}

func (d *Dialer) forget(addr string, dc *dialing) {
	d.mu.Lock()
	if d.conns[addr] == dc {
		delete(d.conns, addr)
	}
	d.mu.Unlock()
}

// Close closes every QUIC connection of the dialer (their streams fail at
// both ends) and its UDP socket. Idempotent.
func (d *Dialer) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	var conns []*quic.Conn
	for _, dc := range d.conns {
		select {
		case <-dc.done:
			if dc.conn != nil {
				conns = append(conns, dc.conn)
			}
		default: // its dialer sees closed and closes it
		}
	}
	tr, udp := d.tr, d.udp
	d.mu.Unlock()
	for _, c := range conns {
		c.CloseWithError(codeClosed, "stream released")
	}
	if tr != nil {
		tr.Close()
		udp.Close()
	}
	return nil
}

// streamConn is one QUIC stream seen as a net.Conn, with the half-close
// and abort semantics relay.Relay relies on.
type streamConn struct {
	s       *quic.Stream
	c       *quic.Conn
	binding []byte // of its QUIC connection (wan.ExportBinding)
}

func newStreamConn(c *quic.Conn, s *quic.Stream, binding []byte) *streamConn {
	return &streamConn{s: s, c: c, binding: binding}
}

// Framed reports whether the stream carries positioned frames
// (wan.Framed): its QUIC connection negotiated wan.ALPNFramed.
func (sc *streamConn) Framed() bool {
	return sc.c.ConnectionState().TLS.NegotiatedProtocol == wan.ALPNFramed
}

// Binding is its QUIC connection's binding (wan.BindingOf).
func (sc *streamConn) Binding() []byte { return sc.binding }

// PipelinedCopy marks the stream for relay.Splice: quic-go's Write
// returns only once its packets have taken every byte (relay.Pipelined).
func (sc *streamConn) PipelinedCopy() {}

// Answers reports whether the stream's acceptor answers (wan.Answers):
// its QUIC connection negotiated wan.ALPNAnswers.
func (sc *streamConn) Answers() bool {
	return sc.c.ConnectionState().TLS.NegotiatedProtocol == wan.ALPNAnswers
}

func (sc *streamConn) Read(b []byte) (int, error)  { return sc.s.Read(b) }
func (sc *streamConn) Write(b []byte) (int, error) { return sc.s.Write(b) }

// CloseWrite sends FIN after the bytes written so far: the peer reads EOF.
func (sc *streamConn) CloseWrite() error { return sc.s.Close() }

// Close ends the stream in an orderly way: FIN if not sent yet (bytes
// already written are still delivered), and the peer is told to stop
// sending if it has not finished. relay.Abort resets it instead, through
// NetConn.
func (sc *streamConn) Close() error {
	err := sc.s.Close()
	sc.s.CancelRead(codeAborted)
	return err
}

// Ended is wan.Ended for the stream, without reading it.
func (sc *streamConn) Ended() error {
	// The stream's context ends with its send side: when the peer
	// asks it to stop sending (its abort), when this side resets it,
	// and when the QUIC connection closes (release, idle timeout,
	// stateless reset); the cause is the error a read would get.
	ctx := sc.s.Context()
	if ctx.Err() == nil {
		return nil
	}
	err := context.Cause(ctx)
	var se *quic.StreamError
	if err == nil || errors.As(err, &se) && !se.Remote {
		return net.ErrClosed // this side reset it
	}
	return err
}

// abort resets both directions: the peer's reads and writes fail.
func (sc *streamConn) abort() {
	sc.s.CancelWrite(codeAborted)
	sc.s.CancelRead(codeAborted)
}

// NetConn returns a view of the stream whose Close resets it. relay.Abort
// closes the innermost NetConn first, as it does with a TCP socket under
// TLS (SO_LINGER 0 there): this is how an abort reaches a QUIC stream.
func (sc *streamConn) NetConn() net.Conn { return (*resetConn)(sc) }

func (sc *streamConn) LocalAddr() net.Addr                { return sc.c.LocalAddr() }
func (sc *streamConn) RemoteAddr() net.Addr               { return sc.c.RemoteAddr() }
func (sc *streamConn) SetDeadline(t time.Time) error      { return sc.s.SetDeadline(t) }
func (sc *streamConn) SetReadDeadline(t time.Time) error  { return sc.s.SetReadDeadline(t) }
func (sc *streamConn) SetWriteDeadline(t time.Time) error { return sc.s.SetWriteDeadline(t) }

// resetConn is the same stream with a Close that aborts. It has no NetConn
// method, so relay.Abort's unwrapping stops at it.
type resetConn streamConn

func (r *resetConn) Close() error {
	(*streamConn)(r).abort()
	return nil
}

func (r *resetConn) Read(b []byte) (int, error)         { return r.s.Read(b) }
func (r *resetConn) Write(b []byte) (int, error)        { return r.s.Write(b) }
func (r *resetConn) LocalAddr() net.Addr                { return r.c.LocalAddr() }
func (r *resetConn) RemoteAddr() net.Addr               { return r.c.RemoteAddr() }
func (r *resetConn) SetDeadline(t time.Time) error      { return r.s.SetDeadline(t) }
func (r *resetConn) SetReadDeadline(t time.Time) error  { return r.s.SetReadDeadline(t) }
func (r *resetConn) SetWriteDeadline(t time.Time) error { return r.s.SetWriteDeadline(t) }
