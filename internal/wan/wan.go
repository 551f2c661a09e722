// Package wan opens and accepts the connections between two gateways (the
// WAN legs) and binds each one to its stream.
//
// Three transports exist. "tls" (the default) is mutual TLS 1.3 where each
// side accepts only the certificate pinned for the stream. "tcp" is
// plaintext for trusted circuits. "quic" (quic.go) carries each leg as a
// stream of a QUIC connection with the same pinned TLS 1.3. Either way the dialer's first bytes are a
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
	"sync/atomic"
	"time"

	"scistream/internal/api"
	"scistream/internal/certs"
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

// ReadPreface decodes a preface from r.
func ReadPreface(r io.Reader) (*Preface, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadPreface, err)
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
		return nil, fmt.Errorf("%w: %v", ErrBadPreface, err)
	}
	p := &Preface{UID: string(rest[:n]), Channel: int(binary.BigEndian.Uint16(rest[n:]))}
	copy(p.MAC[:], rest[n+2:])
	return p, nil
}

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
}

func (l *Leg) validate() error {
	if len(l.UID) == 0 || len(l.UID) > maxUID {
		return fmt.Errorf("uid length %d out of range", len(l.UID))
	}
	if l.Channel < 0 || l.Channel > 0xffff {
		return fmt.Errorf("channel %d out of range", l.Channel)
	}
	if len(l.Secret) != SecretLen {
		return errors.New("stream secret missing")
	}
	switch l.Transport {
	case api.WANTCP:
	case api.WANTLS, api.WANQUIC:
		if l.Cert == nil || l.PeerSHA256 == nil {
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
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{*l.Cert},
		// Pinning replaces CA verification: each side accepts exactly
		// the certificate that s2uc relayed for this stream.
		InsecureSkipVerify:    true,
		ClientAuth:            tls.RequireAnyClientCert,
		VerifyPeerCertificate: l.verifyPin,
		ServerName:            "scistream-wan",
	}
}

// Dial opens a WAN leg to addr and sends the preface. The returned
// connection carries application bytes only.
func Dial(ctx context.Context, addr string, l *Leg) (net.Conn, error) {
	if err := l.validate(); err != nil {
		return nil, err
	}
	if l.Transport == api.WANQUIC {
		return nil, ErrQUICOnTCP
	}
	d := net.Dialer{Timeout: HandshakeTimeout, KeepAlive: 15 * time.Second}
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	setNoDelay(raw)
	deadline := time.Now().Add(HandshakeTimeout)
	raw.SetDeadline(deadline)
	var conn net.Conn
	var binding []byte
	switch l.Transport {
	case api.WANTLS:
		ec := &eofConn{Conn: raw}
		tc := tls.Client(ec, l.tlsConfig())
		if err := tc.HandshakeContext(ctx); err != nil {
			raw.Close()
			return nil, fmt.Errorf("tls handshake: %w", err)
		}
		cs := tc.ConnectionState()
		binding, err = cs.ExportKeyingMaterial(exportLabel, nil, nonceLen)
		if err != nil {
			raw.Close()
			return nil, err
		}
		conn = &Conn{Conn: tc, raw: ec}
	case api.WANTCP:
		var nonce [nonceLen]byte
		if _, err := io.ReadFull(raw, nonce[:]); err != nil {
			raw.Close()
			return nil, fmt.Errorf("read nonce: %w", err)
		}
		binding = nonce[:]
		conn = raw
	}
	p := &Preface{UID: l.UID, Channel: l.Channel, MAC: computeMAC(l.Secret, binding, l.UID, l.Channel)}
	if _, err := conn.Write(AppendPreface(nil, p)); err != nil {
		raw.Close()
		return nil, fmt.Errorf("send preface: %w", err)
	}
	raw.SetDeadline(time.Time{})
	return conn, nil
}

// Accept completes the acceptor's side of a WAN leg on raw: the TLS
// handshake (if any) and the preface check. On error raw is closed.
func Accept(ctx context.Context, raw net.Conn, l *Leg) (net.Conn, error) {
	if err := l.validate(); err != nil {
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
		ec := &eofConn{Conn: raw}
		tc := tls.Server(ec, l.tlsConfig())
		if err := tc.HandshakeContext(ctx); err != nil {
			raw.Close()
			return nil, fmt.Errorf("tls handshake: %w", err)
		}
		cs := tc.ConnectionState()
		var err error
		binding, err = cs.ExportKeyingMaterial(exportLabel, nil, nonceLen)
		if err != nil {
			raw.Close()
			return nil, err
		}
		conn = &Conn{Conn: tc, raw: ec}
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
	if p.UID != l.UID || p.Channel != l.Channel {
		raw.Close()
		return nil, fmt.Errorf("%w: got %.64q channel %d", ErrWrongStream, p.UID, p.Channel)
	}
	want := computeMAC(l.Secret, binding, l.UID, l.Channel)
	if !hmac.Equal(want[:], p.MAC[:]) {
		raw.Close()
		return nil, ErrBadSecret
	}
	raw.SetDeadline(time.Time{})
	return conn, nil
}

func setNoDelay(c net.Conn) {
	if t, ok := c.(*net.TCPConn); ok {
		t.SetNoDelay(true)
	}
}

// Conn is a TLS WAN leg. Its Read reports ErrTruncated, not io.EOF, when
// the TCP connection ended without a TLS close_notify: an attacker who
// injects a FIN must not be able to end a stream early and cleanly.
type Conn struct {
	*tls.Conn
	raw *eofConn
}

// Read implements net.Conn.
func (c *Conn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if err == io.EOF && c.raw.eof.Load() {
		err = ErrTruncated
	}
	return n, err
}

// eofConn records whether the raw connection reached EOF.
type eofConn struct {
	net.Conn
	eof atomic.Bool
}

func (c *eofConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if err == io.EOF {
		c.eof.Store(true)
	}
	return n, err
}

// NetConn returns the underlying connection.
func (c *eofConn) NetConn() net.Conn { return c.Conn }
