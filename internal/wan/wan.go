// Package wan opens and accepts the connections between two gateways (the
// WAN legs) and binds each one to its stream.
//
// Three transports exist. "tls" (the default) is mutual TLS 1.3 where each
// side accepts only the certificate pinned for the stream. "tcp" is
// plaintext for trusted circuits. "quic" carries each leg as a stream of a
// QUIC connection with the same pinned TLS 1.3: the transport is
// internal/wanquic, its TLS configuration and preface checks are here
// (quictls.go, Leg.CheckPreface). Either way the dialer's first bytes are a
// preface naming the stream and channel and proving knowledge of the
// stream secret:
//
//	magic   "S2W1"              4 bytes
//	uidLen  uint8               1..64
//	uid     [uidLen]byte
//	channel uint16 big-endian
//	mac     [32]byte            HMAC-SHA256(secret, label | binding | uid | channel)
//
// The binding makes a captured preface useless on any other connection:
// on TLS it is keying material exported from the session (RFC 8446 sec.
// 7.5); on plaintext TCP the acceptor first sends a random 32-byte nonce.
package wan

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"scistream/internal/api"
	"scistream/internal/certs"
	"scistream/internal/sockio"
)

const (
	magic       = "S2W1"
	label       = "scistream wan v1"
	exportLabel = "EXPORTER-scistream-wan-v1"
	nonceLen    = 32
	macLen      = sha256.Size
	maxUID      = 64
	// SecretLen is the length of a stream secret.
	SecretLen = 32
	// HandshakeTimeout bounds the TLS handshake and the preface exchange,
	// so a peer that connects and says nothing cannot pin a goroutine.
	HandshakeTimeout = 10 * time.Second
)

// Errors returned by Accept, for logs and counters.
var (
	ErrBadPreface  = errors.New("malformed WAN preface")
	ErrWrongStream = errors.New("WAN preface names another stream or channel")
	ErrBadSecret   = errors.New("WAN preface does not prove the stream secret")
	ErrTruncated   = errors.New("WAN leg ended without TLS close_notify (truncated)")
	// ErrUnknownName: a connection to a shared WAN port named no stream
	// of this gateway (AcceptRouted). The dialer saw only a failed
	// handshake, as for a certificate that is not pinned.
	ErrUnknownName = errors.New("WAN connection names no stream served on this port")
)

// NewSecret returns a fresh random stream secret.
func NewSecret() []byte {
	b := make([]byte, SecretLen)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return b
}

// Preface is the decoded dialer preface.
type Preface struct {
	UID     string
	Channel int
	MAC     [macLen]byte
}

// ReadPreface decodes a preface from r. An error reading r is wrapped
// (with ErrBadPreface), so callers can tell a preface that never arrived
// from one that arrived wrong.
func ReadPreface(r io.Reader) (*Preface, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadPreface, &prefaceReadError{err})
	}
	if string(hdr[:4]) != magic {
		return nil, fmt.Errorf("%w: bad magic", ErrBadPreface)
	}
	n := int(hdr[4])
	if n == 0 || n > maxUID {
		return nil, fmt.Errorf("%w: uid length %d", ErrBadPreface, n)
	}
	rest := make([]byte, n+2+macLen)
	if _, err := io.ReadFull(r, rest); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadPreface, &prefaceReadError{err})
	}
	p := &Preface{UID: string(rest[:n]), Channel: int(binary.BigEndian.Uint16(rest[n:]))}
	copy(p.MAC[:], rest[n+2:])
	return p, nil
}

// PrefaceUnread reports whether err, from ReadPreface or CheckPreface,
// means that no whole preface arrived (the connection or stream ended,
// was reset, or its read deadline passed first), as opposed to a preface
// that arrived and was malformed or refused. It classifies; it admits
// nothing.
func PrefaceUnread(err error) bool {
	var re *prefaceReadError
	return errors.As(err, &re)
}

// prefaceReadError is a failure to read a preface (a reset, an end, a
// deadline before it arrived whole), as opposed to a preface that arrived
// and was wrong.
type prefaceReadError struct{ err error }

func (e *prefaceReadError) Error() string { return e.err.Error() }
func (e *prefaceReadError) Unwrap() error { return e.err }

// AppendPreface encodes a preface.
func AppendPreface(b []byte, p *Preface) []byte {
	b = append(b, magic...)
	b = append(b, byte(len(p.UID)))
	b = append(b, p.UID...)
	b = binary.BigEndian.AppendUint16(b, uint16(p.Channel))
	return append(b, p.MAC[:]...)
}

func computeMAC(secret, binding []byte, uid string, channel int) [macLen]byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(label))
	m.Write(binding)
	m.Write([]byte(uid))
	var ch [2]byte
	binary.BigEndian.PutUint16(ch[:], uint16(channel))
	m.Write(ch[:])
	var out [macLen]byte
	copy(out[:], m.Sum(nil))
	return out
}

// Leg describes one end of a WAN connection for one stream and channel.
type Leg struct {
	Transport string // api.WANTLS or api.WANTCP
	UID       string
	Channel   int
	Secret    []byte
	// Cert is this gateway's certificate (tls only).
	Cert *tls.Certificate
	// PeerSHA256 returns the pinned peer certificate fingerprint (tls
	// only). An empty pin refuses every peer.
	PeerSHA256 func() string
	// ServerName is the TLS server name the dialer sends (tls and quic
	// only): what a shared WAN port, and an SNI router in front of it,
	// route by. If empty, DefaultServerName (a stream's own ports need
	// none).
	ServerName string
	// Control, if not nil, checks the address of each dial of the leg
	// just before it connects, as net.Dialer.Control does (for QUIC: the
	// resolved UDP address, with a nil RawConn): an error fails the dial
	// before a packet leaves. The gateway gives its policy of what peers
	// it may dial (internal/egress). Unused by Accept.
	Control func(network, address string, c syscall.RawConn) error
	// Channels, on the acceptor's side of a shared WAN port, admits a
	// preface naming any channel below it (or the watch channel), in
	// place of Channel alone. Zero on every other leg.
	Channels int
	// PeerCA, if not nil, replaces the pin (tls only): the peer's
	// certificate must chain to one of these roots (peerca.go). nil:
	// the pin decides.
	PeerCA *x509.CertPool
	// ConnectTimeout, if not zero, bounds the TCP connect of Dial (the
	// SYN's answer) below HandshakeTimeout, which still bounds the
	// handshake. A parked connection's new leg gives a few round trips
	// of its path: a SYN lost while the path was down is then sent
	// again on a new socket within them, not after the kernel's backoff
	// (1, 3, 7 s), so the pause ends soon after the path's return.
	ConnectTimeout time.Duration
	// Unframed, on a TLS leg's dialer, offers ALPNAnswers alone: the
	// leg carries the application's bytes as they are, without
	// positioned frames, at the plain relay's cost, and cannot be
	// resumed (a stream whose connections do not wait for a new leg
	// needs no frames). The acceptor offers both, as ever. QUIC
	// connections, shared by a peer's streams, ignore it.
	Unframed bool
}

// DefaultServerName is the TLS server name of a leg that sets none.
const DefaultServerName = "scistream-wan"

// Validate reports whether the leg is complete and consistent: a UID, a
// channel and channel count in range, a secret of SecretLen bytes, a known
// transport and, on tls and quic, a certificate and a pin or peer CA. It
// checks and changes nothing else; Dial and Accept call it, and so must
// every other transport before it uses a leg.
func (l *Leg) Validate() error {
	if len(l.UID) == 0 || len(l.UID) > maxUID {
		return fmt.Errorf("uid length %d out of range", len(l.UID))
	}
	if l.Channel < 0 || l.Channel > 0xffff {
		return fmt.Errorf("channel %d out of range", l.Channel)
	}
	if l.Channels < 0 || l.Channels > WatchChannel {
		return fmt.Errorf("channels %d out of range", l.Channels)
	}
	if len(l.Secret) != SecretLen {
		return errors.New("stream secret missing")
	}
	switch l.Transport {
	case api.WANTCP:
	case api.WANTLS, api.WANQUIC:
		if l.Cert == nil || l.PeerSHA256 == nil && l.PeerCA == nil {
			return errors.New("tls leg without certificate or pin")
		}
	default:
		return fmt.Errorf("unknown WAN transport %q", l.Transport)
	}
	return nil
}

func (l *Leg) verifyPin(raw [][]byte, _ [][]*x509.Certificate) error {
	pin := l.PeerSHA256()
	if pin == "" {
		return errors.New("no peer certificate pinned for this stream yet")
	}
	return certs.VerifyPin(pin)(raw, nil)
}

func (l *Leg) tlsConfig() *tls.Config {
	name := l.ServerName
	if name == "" {
		name = DefaultServerName
	}
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{*l.Cert},
		// Pinning replaces CA verification: each side accepts exactly
		// the certificate that s2uc relayed for this stream.
		InsecureSkipVerify:    true,
		ClientAuth:            tls.RequireAnyClientCert,
		VerifyPeerCertificate: l.verifyPin,
		ServerName:            name,
		// No session tickets: nothing resumes a leg's session (a
		// resumption would skip the pin check), and an idle pooled leg
		// must have nothing to read (Pooled.Stale).
		SessionTicketsDisabled: true,
		// Both ends offer ALPNFramedPools, ALPNFramed, then
		// ALPNAnswers (answer.go, framed.go); a peer that offers
		// nothing gets no ALPN, no answers and no frames.
		NextProtos: []string{ALPNFramedPools, ALPNFramed, ALPNAnswers},
	}
	if l.PeerCA != nil {
		cfg.VerifyPeerCertificate = l.verifyCA
	}
	return cfg
}

// Dial opens a WAN leg to addr and sends the preface. The returned
// connection carries application bytes only.
func Dial(ctx context.Context, addr string, l *Leg) (net.Conn, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	if l.Transport == api.WANQUIC {
		return nil, ErrQUICOnTCP
	}
	connect := HandshakeTimeout
	if l.ConnectTimeout > 0 {
		connect = min(l.ConnectTimeout, HandshakeTimeout)
	}
	d := net.Dialer{Timeout: connect, KeepAliveConfig: legKeepAlive(), Control: l.Control}
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, unanswered(nil, err)
	}
	setNoDelay(raw)
	deadline := time.Now().Add(HandshakeTimeout)
	raw.SetDeadline(deadline)
	var conn net.Conn
	var binding []byte
	switch l.Transport {
	case api.WANTLS:
		tc, b, err := l.handshake(ctx, raw, func(c net.Conn, cfg *tls.Config) *tls.Conn {
			if l.Unframed {
				cfg.NextProtos = []string{ALPNAnswers}
			}
			return tls.Client(c, cfg)
		})
		if err != nil {
			return nil, err
		}
		conn, binding = tc, b
	case api.WANTCP:
		var nonce [nonceLen]byte
		// The read honours ctx, as the TLS handshake does.
		stop := context.AfterFunc(ctx, func() { raw.SetReadDeadline(time.Unix(1, 0)) })
		_, err := io.ReadFull(raw, nonce[:])
		if !stop() && err == nil {
			err = ctx.Err()
		}
		if err != nil {
			err = unanswered(raw, err)
			raw.Close()
			return nil, fmt.Errorf("read nonce: %w", err)
		}
		binding = nonce[:]
		conn = raw
	}
	if _, err := conn.Write(AppendPreface(nil, l.Preface(binding))); err != nil {
		raw.Close()
		return nil, fmt.Errorf("send preface: %w", err)
	}
	raw.SetDeadline(time.Time{})
	return conn, nil
}

// Accept completes the acceptor's side of a WAN leg on raw: the TLS
// handshake (if any) and the preface check. On error raw is closed.
func Accept(ctx context.Context, raw net.Conn, l *Leg) (net.Conn, error) {
	r, err := accept(ctx, raw, l, false)
	if err != nil {
		return nil, err
	}
	return r.Conn, nil
}

// AcceptLeg is Accept for a stream's own listener of channel l.Channel:
// it also takes pooled legs of that channel (internal/legpool) and, on channel
// 0, the stream's watch leg (watch.go), and says which it got.
func AcceptLeg(ctx context.Context, raw net.Conn, l *Leg) (*Routed, error) {
	return accept(ctx, raw, l, true)
}

func accept(ctx context.Context, raw net.Conn, l *Leg, more bool) (*Routed, error) {
	if err := l.Validate(); err != nil {
		raw.Close()
		return nil, err
	}
	if l.Transport == api.WANQUIC {
		raw.Close()
		return nil, ErrQUICOnTCP
	}
	setNoDelay(raw)
	raw.SetDeadline(time.Now().Add(HandshakeTimeout))
	var conn net.Conn
	var binding []byte
	switch l.Transport {
	case api.WANTLS:
		tc, b, err := l.handshake(ctx, raw, tls.Server)
		if err != nil {
			return nil, err
		}
		conn, binding = tc, b
	case api.WANTCP:
		binding = make([]byte, nonceLen)
		rand.Read(binding)
		if _, err := raw.Write(binding); err != nil {
			raw.Close()
			return nil, fmt.Errorf("send nonce: %w", err)
		}
		conn = raw
	}
	p, err := ReadPreface(conn)
	if err != nil {
		raw.Close()
		return nil, err
	}
	watchOK := more && l.Channel == 0
	pooledOK := more && l.Transport == api.WANTLS
	if err := l.admit(p, binding, watchOK, pooledOK); err != nil {
		raw.Close()
		return nil, err
	}
	raw.SetDeadline(time.Time{})
	return routed(conn, l, p), nil
}

// PooledFlag, set in a preface's channel, marks a pooled leg (the legs
// of internal/legpool: sessions one after another on one TLS leg).
const PooledFlag = 0x8000

// routed is the Routed of a leg whose preface p the leg l admitted.
func routed(c net.Conn, l *Leg, p *Preface) *Routed {
	r := &Routed{Conn: c, Leg: l, Channel: p.Channel}
	if p.Channel != WatchChannel && p.Channel&PooledFlag != 0 {
		r.Channel &^= PooledFlag
		r.Pooled = true
	}
	return r
}

// Preface returns the preface the dialer of leg l sends on a session
// whose binding is binding (ExportBinding): the leg's UID and channel and
// the MAC of its secret over them and the binding, valid on that session
// only. It does not check the leg (Validate).
func (l *Leg) Preface(binding []byte) *Preface {
	return &Preface{UID: l.UID, Channel: l.Channel, MAC: computeMAC(l.Secret, binding, l.UID, l.Channel)}
}

// CheckPreface reads a dialer's preface from r and admits it as Accept
// does for the leg's own listener (no watch or pooled leg): it must name
// the leg's stream and its channel (or, with Channels, one below it) and
// prove the stream secret over binding, the ExportBinding of the session
// r is carried on. It returns the preface only if it was admitted; the
// error wraps ErrBadPreface (PrefaceUnread tells a preface that never
// arrived whole), ErrWrongStream or ErrBadSecret.
func (l *Leg) CheckPreface(r io.Reader, binding []byte) (*Preface, error) {
	p, err := ReadPreface(r)
	if err != nil {
		return nil, err
	}
	return p, l.admit(p, binding, false, false)
}

// admit checks a preface p received on a session whose binding is
// binding: the leg's stream, one of its channels (Channel, or any below
// Channels; with PooledFlag if pooledOK) or, if watchOK, its watch
// channel, and the MAC.
func (l *Leg) admit(p *Preface, binding []byte, watchOK, pooledOK bool) error {
	ch := p.Channel
	if ch != WatchChannel && ch&PooledFlag != 0 && pooledOK {
		ch &^= PooledFlag
	}
	ok := ch == l.Channel
	if l.Channels > 0 {
		ok = ch < l.Channels
	}
	ok = ok || watchOK && ch == WatchChannel
	if p.UID != l.UID || !ok {
		return fmt.Errorf("%w: got %.64q channel %d", ErrWrongStream, p.UID, p.Channel)
	}
	want := computeMAC(l.Secret, binding, l.UID, p.Channel)
	if !hmac.Equal(want[:], p.MAC[:]) {
		return ErrBadSecret
	}
	return nil
}

// handshake runs the TLS handshake of a leg on raw, as the dialer
// (newTLS is tls.Client) or the acceptor (tls.Server), under ctx and
// raw's deadline. It returns the leg's connection and the binding the
// preface's MAC covers. On error raw is closed; a reset before the peer
// sent a byte is marked ErrUnanswered.
func (l *Leg) handshake(ctx context.Context, raw net.Conn, newTLS func(net.Conn, *tls.Config) *tls.Conn) (*Conn, []byte, error) {
	ec := newLegConn(raw)
	tc := newTLS(ec, l.tlsConfig())
	if err := tc.HandshakeContext(ctx); err != nil {
		err = unanswered(raw, err)
		raw.Close()
		return nil, nil, fmt.Errorf("tls handshake: %w", err)
	}
	binding, err := ExportBinding(tc.ConnectionState())
	if err != nil {
		raw.Close()
		return nil, nil, err
	}
	return newConn(tc, ec, binding), binding, nil
}

// ExportBinding is the binding of a TLS session, TCP or QUIC: keying
// material exported from it under wan's own label (RFC 8446 sec. 7.5),
// the same at both ends and different on every other session. A preface
// is valid only on the session whose binding its MAC covers. The binding
// is no secret from the peer and reveals nothing of the session's keys.
func ExportBinding(cs tls.ConnectionState) ([]byte, error) {
	return cs.ExportKeyingMaterial(exportLabel, nil, nonceLen)
}

// setNoDelay tunes the TCP socket of a leg: no Nagle delay, and a
// keepalive that finds a peer gone silent while the leg is idle within
// about 11 s (legKeepAlive()): a framed connection parks and resumes on
// that (a leg with bytes unacknowledged is judged by its connection's
// own liveness, internal/carry), and the gateway's default of 15 s and
// nine probes of 15 s took minutes.
func setNoDelay(c net.Conn) {
	if t, ok := c.(*net.TCPConn); ok {
		t.SetNoDelay(true)
		t.SetKeepAliveConfig(legKeepAlive())
	}
}

// legKeepAlive is the TCP keepalive of a data leg.
func legKeepAlive() net.KeepAliveConfig {
	return net.KeepAliveConfig{Enable: true, Idle: 5 * time.Second, Interval: 2 * time.Second, Count: 3}
}

// Conn is a TLS WAN leg. Its Read reports ErrTruncated, not io.EOF, when
// the TCP connection ended without a TLS close_notify: an attacker who
// injects a FIN must not be able to end a stream early and cleanly.
//
// Conn is tuned for bulk transfer on the relay's hot path:
//   - Write hands the TCP socket one write for many TLS records (crypto/tls
//     issues one write per record of at most 16 KiB; on a fast path the
//     per-segment and per-syscall costs of that dominate);
//   - the socket is read in large chunks into a buffer under crypto/tls,
//     and Read returns every complete record already buffered, so a large
//     read buffer is filled in one call instead of one record per call.
//
// Neither adds latency: nothing waits for more data to arrive.
type Conn struct {
	*tls.Conn
	raw     *legConn
	answers bool   // ALPNAnswers was negotiated
	framed  bool   // ALPNFramed or ALPNFramedPools was negotiated
	pools   bool   // ALPNFramedPools was negotiated
	binding []byte // ExportBinding of the session
	// wmu serialises Write and CloseWrite. crypto/tls locks each record
	// write on its own, but a batch spans a whole Write plus its flush:
	// without wmu a second Write's beginBatch would replace the batch of
	// one in flight (records lost, then a nil batch flushed: panic), and
	// CloseWrite would put close_notify into an unflushed batch and set
	// the write deadline that makes the flush fail, reporting success
	// for an alert never sent.
	wmu sync.Mutex
	// rmu serialises Read: the probe flag it sets for its follow-up
	// reads would otherwise make another goroutine's Read, queued on
	// crypto/tls's input lock, fail with errWouldBlock.
	rmu sync.Mutex
}

// newConn wraps the TLS connection tc, whose handshake is done and whose
// transport is raw.
func newConn(tc *tls.Conn, raw *legConn, binding []byte) *Conn {
	proto := tc.ConnectionState().NegotiatedProtocol
	return &Conn{Conn: tc, raw: raw, answers: proto == ALPNAnswers, framed: proto == ALPNFramed || proto == ALPNFramedPools,
		pools: proto == ALPNFramedPools, binding: binding}
}

// Answers reports whether the acceptor of the leg answers (answer.go).
func (c *Conn) Answers() bool { return c.answers }

// Framed reports whether the leg carries positioned frames (framed.go).
func (c *Conn) Framed() bool { return c.framed }

// FramedSessions reports whether the sessions of the leg, if it is a
// pooled one, carry positioned frames (ALPNFramedPools).
func (c *Conn) FramedSessions() bool { return c.pools }

// Binding returns the leg's binding (ExportBinding of its session).
func (c *Conn) Binding() []byte { return c.binding }

// Read implements net.Conn. It blocks until at least one byte is
// available, then adds the further records that are already buffered, up
// to len(b).
func (c *Conn) Read(b []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	c.raw.want = len(b)
	n, err := c.Conn.Read(b)
	for err == nil && n > 0 && len(b)-n >= minCoalesce {
		var m int
		c.raw.probe.Store(true)
		m, err = c.Conn.Read(b[n:])
		c.raw.probe.Store(false)
		n += m
		if errors.Is(err, errWouldBlock) {
			return n, nil
		}
		if m == 0 {
			break
		}
	}
	if (err == io.EOF || err == io.ErrUnexpectedEOF) && c.raw.eof.Load() {
		// The TCP connection ended without close_notify, between
		// records (EOF) or inside one (unexpected EOF).
		err = ErrTruncated
	}
	return n, err
}

// TryRead is Read without waiting: it returns what is available now
// (records buffered, or read from the socket without waiting), or
// sockio.ErrWouldBlock when no whole record is. With WaitReadable, the
// relay holds a copy buffer only while a leg has something to read.
func (c *Conn) TryRead(b []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	c.raw.want = len(b)
	c.raw.nowait.Store(true)
	n, err := c.Conn.Read(b)
	c.raw.nowait.Store(false)
	for err == nil && n > 0 && len(b)-n >= minCoalesce {
		var m int
		c.raw.probe.Store(true)
		m, err = c.Conn.Read(b[n:])
		c.raw.probe.Store(false)
		n += m
		if m == 0 {
			break
		}
	}
	if errors.Is(err, errWouldBlock) {
		if n > 0 {
			return n, nil
		}
		return 0, sockio.ErrWouldBlock
	}
	if (err == io.EOF || err == io.ErrUnexpectedEOF) && c.raw.eof.Load() {
		err = ErrTruncated
	}
	return n, err
}

// WaitReadable waits until the leg's socket has a byte to read (or an
// end or error), under its read deadline. Call it after TryRead found
// nothing: then every whole record buffered has been returned.
func (c *Conn) WaitReadable() error {
	if s, ok := c.raw.io.(*sockio.Conn); ok {
		c.rmu.Lock() // the socket's reads are one at a time (sockio)
		defer c.rmu.Unlock()
		return s.WaitReadable()
	}
	if t, ok := c.raw.Conn.(*net.TCPConn); ok {
		return sockio.WaitReadable(t)
	}
	return nil
}

// Write implements net.Conn. The records of one call reach the socket in
// as few writes as the batch buffer allows.
func (c *Conn) Write(b []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if len(b) <= smallWrite {
		return c.Conn.Write(b)
	}
	c.raw.beginBatch(len(b))
	n, err := c.Conn.Write(b)
	if ferr := c.raw.endBatch(); ferr != nil {
		// A flush failed, in this call or mid-Write: crypto/tls's n
		// then counts records that sat in the lost batch. What reached
		// the socket is unknown; the stream is broken.
		n = 0
		if err == nil {
			err = ferr
		}
	}
	return n, err
}

// Raw is the leg's TCP connection, beneath TLS: to peek at it without
// reading (a pooled leg's Stale) or to reset it.
func (c *Conn) Raw() net.Conn { return c.raw.Conn }

// WriteFrame writes hdr and then b (a pooled leg's frame) with both in
// the same socket write: hdr is its own small record, b's records follow
// in the batch.
func (c *Conn) WriteFrame(hdr, b []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.raw.beginBatch(len(hdr) + len(b))
	_, err := c.Conn.Write(hdr)
	n := 0
	if err == nil && len(b) > 0 {
		n, err = c.Conn.Write(b)
	}
	if ferr := c.raw.endBatch(); ferr != nil {
		n = 0 // as in Write: what reached the socket is unknown
		if err == nil {
			err = ferr
		}
	}
	return n, err
}

// CloseWrite sends close_notify once no Write is in flight, so it
// follows every byte already written.
//
// crypto/tls writes the alert under a write deadline of its own, 5 s,
// and then fails every later write: a receiver that stalls for longer
// just at the end of a stream, with the socket's send buffer full of the
// last bytes, would see the stream aborted. So CloseWrite first waits,
// as long as it takes (the caller's write deadline and Close still
// apply), until the socket has room, and the alert never blocks.
func (c *Conn) CloseWrite() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.raw.waitWritable(); err != nil {
		return err
	}
	return c.Conn.CloseWrite()
}

const (
	// minCoalesce is the least room left in a Read buffer for which Read
	// tries to add another record.
	minCoalesce = 1 << 10
	// smallWrite is the largest Write that goes out without batching:
	// one record, one write anyway.
	smallWrite = 16 << 10
	// readBufSize is the smallest read buffer under crypto/tls, and the
	// read size from which a read goes to the socket directly.
	readBufSize = 256 << 10
	// maxRecordOverhead bounds what TLS 1.3 adds to a record (RFC 8446
	// sec. 5.2: at most 256 bytes of expansion, plus the 5-byte header).
	maxRecordOverhead = 256 + 5
	// bulkAfter is how much a leg reads before it gets its read buffer:
	// until then crypto/tls reads the socket into its own small buffer,
	// so a stranger in its handshake, an idle leg and a watch leg cost
	// no 256 KiB each.
	bulkAfter = 1 << 20
)

// errWouldBlock is what legConn.Read reports in probe mode instead of
// waiting. It is a temporary net.Error, so crypto/tls keeps the partial
// record it has read and does not fail the connection.
var errWouldBlock = wouldBlock{}

type wouldBlock struct{}

func (wouldBlock) Error() string   { return "wan: no data available without waiting" }
func (wouldBlock) Timeout() bool   { return true }
func (wouldBlock) Temporary() bool { return true }

// bulkSizes are the sizes of the read buffers under crypto/tls and of
// the plaintext a write batch holds, smallest first. A leg reads and
// batches in the size its caller copies in: the relay's copy buffers are
// 512 KiB for up to 32 connections and 256 KiB for up to 64; beyond,
// they are 64 KiB or less, which take the 256 KiB read buffer and batch
// as before (and a Write of up to 16 KiB no batch at all). So a gateway
// with many connections holds no more than it did. 512 KiB
// halved the system calls and context switches per byte through a
// gateway pair; CPU per GB moved within the spread between runs
// (docs/performance.md, "TLS: CPU per byte").
var bulkSizes = [...]int{256 << 10, 512 << 10}

// bulkPools are pools of buffers of each of bulkSizes.
type bulkPools struct {
	extra int // bytes beyond the size: a batch's room for record framing
	pools [len(bulkSizes)]sync.Pool
}

func newBulkPools(extra int) *bulkPools {
	p := &bulkPools{extra: extra}
	for i, size := range bulkSizes {
		p.pools[i].New = func() any {
			b := make([]byte, size+extra)
			return &b
		}
	}
	return p
}

// class returns the index of the buffer for n bytes: the smallest that
// holds them, or the largest.
func (p *bulkPools) class(n int) int {
	for i, size := range bulkSizes {
		if n <= size {
			return i
		}
	}
	return len(bulkSizes) - 1
}

// get returns a buffer for n bytes (of full length).
func (p *bulkPools) get(n int) *[]byte { return p.pools[p.class(n)].Get().(*[]byte) }

// put gives back a buffer get returned.
func (p *bulkPools) put(b *[]byte) { p.pools[p.class(cap(*b)-p.extra)].Put(b) }

var (
	// readPools hold the read buffers under crypto/tls.
	readPools = newBulkPools(0)
	// batchPools hold the write batches. A batch holds the records of a
	// whole Write with their framing: 16 records of 16 KiB take 256 KiB
	// plus 16 x 22 bytes (a TLS 1.3 AES-GCM record's header, content
	// type and tag); a batch of exactly 256 KiB flushed 15 records and
	// then wrote the 16th alone, two system calls per Write where one
	// does.
	batchPools = newBulkPools(maxRecordOverhead * bulkSizes[len(bulkSizes)-1] / (16 << 10))
)

// legConn is the TCP connection under a TLS WAN leg. It records whether
// it reached EOF, reads the socket in large chunks into its own buffer
// (crypto/tls asks for little more than one record at a time), can be
// asked not to wait in Read (probe: then it serves only what it has
// buffered), and gathers the writes of one batch into one.
type legConn struct {
	net.Conn
	io    io.ReadWriter // the socket: raw system calls for TCP (package sockio)
	eof   atomic.Bool
	probe atomic.Bool
	// nowait makes a read of the socket return errWouldBlock instead of
	// waiting (TryRead).
	nowait atomic.Bool

	// Read side, used by one reader at a time (crypto/tls's input lock).
	rbuf       *[]byte // from readPools while it holds unread bytes; only after the leg read bulkAfter bytes
	rpos, rend int
	// want is the size of the read that the leg's caller asked for
	// (Conn.Read, Conn.TryRead): the read buffer taken is of its class.
	want     int
	rerr     error // sticky error of the socket once rbuf is drained
	read     int64 // bytes read from the socket so far
	bufReads int64 // socket reads into a pooled read buffer so far

	mu       sync.Mutex // guards the following; writes come from crypto/tls under its own lock
	batch    *[]byte    // non-nil between beginBatch and endBatch
	flushErr error      // first failed flush of the current batch
}

func newLegConn(c net.Conn) *legConn {
	l := &legConn{Conn: c, io: c}
	if t, ok := c.(*net.TCPConn); ok {
		if s, err := sockio.New(t); err == nil {
			l.io = s
		}
	}
	return l
}

func (c *legConn) Read(b []byte) (int, error) {
	if c.rpos == c.rend {
		if c.rerr != nil {
			return 0, c.rerr
		}
		if c.probe.Load() {
			return 0, errWouldBlock
		}
		if len(b) >= readBufSize || c.read < bulkAfter {
			n, err := c.readSocket(b)
			c.read += int64(n)
			c.noteErr(err)
			return n, err
		}
		// The read buffer is the pool's while it is empty: an idle or
		// waiting leg holds none (sized for bulk, it would cost 256 KiB
		// per leg: gigabytes at ten thousand connections).
		bp := readPools.get(c.want)
		c.bufReads++
		n, err := c.readSocket(*bp)
		c.read += int64(n)
		c.noteErr(err)
		if n == 0 {
			readPools.put(bp)
			return 0, err
		}
		c.rbuf, c.rpos, c.rend = bp, 0, n
	}
	n := copy(b, (*c.rbuf)[c.rpos:c.rend])
	c.rpos += n
	if c.rpos == c.rend {
		readPools.put(c.rbuf)
		c.rbuf, c.rpos, c.rend = nil, 0, 0
	}
	return n, nil
}

// readSocket reads the socket into b, without waiting when nowait is
// set (errWouldBlock then).
func (c *legConn) readSocket(b []byte) (int, error) {
	if c.nowait.Load() {
		if t, ok := c.io.(interface{ TryRead([]byte) (int, error) }); ok {
			n, err := t.TryRead(b)
			if err == sockio.ErrWouldBlock {
				return 0, errWouldBlock
			}
			return n, c.resetOrEOF(err)
		}
	}
	n, err := c.io.Read(b)
	return n, c.resetOrEOF(err)
}

// resetOrEOF returns err, unless it is the end of stream of a socket the
// kernel closed: a reset whose error a write took first (the kernel
// reports it to one call only). A TLS leg never shuts down its TCP writes
// while it is used, so its socket cannot have closed in order: that end is
// the reset it was (sockio.Reset).
func (c *legConn) resetOrEOF(err error) error {
	if err != io.EOF {
		return err // the hot path: one comparison per read
	}
	if t, ok := c.Conn.(*net.TCPConn); ok && sockio.Reset(t) {
		return &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	}
	return err
}

// noteErr keeps a socket error to report once the buffer is drained;
// a temporary one (a deadline) is reported once and not kept.
func (c *legConn) noteErr(err error) {
	if err == nil {
		return
	}
	if err == io.EOF {
		c.eof.Store(true)
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return
	}
	c.rerr = err
}

func (c *legConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.batch == nil {
		return c.io.Write(b)
	}
	buf := *c.batch
	if len(buf)+len(b) > cap(buf) {
		if err := c.flushLocked(); err != nil {
			if c.flushErr == nil {
				c.flushErr = err
			}
			return 0, err
		}
		buf = *c.batch
		if len(b) > cap(buf) {
			return c.io.Write(b)
		}
	}
	*c.batch = append(buf, b...)
	return len(b), nil
}

// waitWritable waits until the socket has room (see Conn.CloseWrite),
// under the write lock: crypto/tls may write from a Read (an alert, a key
// update) while CloseWrite waits.
func (c *legConn) waitWritable() error {
	w, ok := c.io.(interface{ WaitWritable() error })
	if !ok {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return w.WaitWritable()
}

func (c *legConn) flushLocked() error {
	buf := *c.batch
	*c.batch = buf[:0]
	if len(buf) == 0 {
		return nil
	}
	_, err := c.io.Write(buf)
	return err
}

// beginBatch starts a batch for the records of n bytes of plaintext.
func (c *legConn) beginBatch(n int) {
	c.mu.Lock()
	c.batch = batchPools.get(n)
	*c.batch = (*c.batch)[:0]
	c.mu.Unlock()
}

func (c *legConn) endBatch() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	err := c.flushLocked()
	if c.flushErr != nil {
		err = c.flushErr
	}
	batchPools.put(c.batch)
	c.batch, c.flushErr = nil, nil
	return err
}

// NetConn returns the underlying connection.
func (c *legConn) NetConn() net.Conn { return c.Conn }
