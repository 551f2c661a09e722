package legpool

// Pooled legs. A plain leg carries one application connection and ends
// with it, so every application connection pays a TCP and TLS handshake
// (two round trips on a long WAN) before its first byte. A pooled leg is
// dialed ahead of need and carries application connections one after
// another, each a session; between sessions it is idle and can wait in
// the outbound gateway's pool (seed 002's connection reuse). Its preface
// names the channel with wan.PooledFlag set; then both directions carry
// frames:
//
//	type   1 byte   'O' open a session (dialer only, idle leg)
//	                'D' data of the session's direction
//	                'F' this direction of the session ended (the half-close)
//	                'Q' quit: the idle leg ends in order (dialer only)
//	length 3 bytes  big-endian; the payload's length ('D' only, else 0)
//
// A session ends cleanly when each side sent its 'F' and read the
// other's: then, and only then, both sides agree the leg is clean and
// it returns to idle. Any other end (an application's reset, an error, a
// release) resets the whole leg's TCP connection, so the peer's session
// fails too and the leg is never reused with bytes of a broken session
// in flight. Only TLS legs are pooled: the frames are cut in user space,
// where a TLS leg's bytes pass anyway (a plaintext leg would lose its
// splice), and a QUIC leg's streams already share one connection.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"scistream/internal/api"
	"scistream/internal/wan"
)

// Frame types of a pooled leg.
const (
	frameOpen = 'O'
	frameData = 'D'
	frameFin  = 'F'
	frameQuit = 'Q'
)

// maxFrame is the largest payload of one 'D' frame.
const maxFrame = 1<<24 - 1

// ErrFrame: a pooled leg's peer sent a frame where none of its kind may
// be. The leg cannot be trusted further and is reset.
var ErrFrame = errors.New("unexpected frame on a pooled WAN leg")

// Pooled is one end of a pooled leg. Its sessions come one at a time:
// Open (dialer) or Next (acceptor) starts one, and the leg serves the
// next only once that session's Close found it clean.
type Pooled struct {
	c      *wan.Conn
	dialer bool

	mu      sync.Mutex // guards the following fields
	session *Session   // the session in progress, or nil when idle
	broken  bool       // reset, or ended: no more sessions
}

// DialPooled opens a pooled leg to addr for the stream and channel l
// names (TLS legs only) and leaves it idle.
func DialPooled(ctx context.Context, addr string, l *wan.Leg) (*Pooled, error) {
	if l.Transport != api.WANTLS {
		return nil, fmt.Errorf("pooled legs are TLS only, not %q", l.Transport)
	}
	if l.Channel >= wan.PooledFlag {
		return nil, fmt.Errorf("channel %d cannot be pooled", l.Channel)
	}
	pl := *l
	pl.Channel |= wan.PooledFlag
	c, err := wan.Dial(ctx, addr, &pl)
	if err != nil {
		return nil, err
	}
	return &Pooled{c: c.(*wan.Conn), dialer: true}, nil
}

// NewPooledAcceptor returns the acceptor's end of a pooled leg that
// AcceptLeg (or AcceptRouted) returned with pooled true.
func NewPooledAcceptor(c net.Conn) (*Pooled, error) {
	tc, ok := c.(*wan.Conn)
	if !ok {
		return nil, fmt.Errorf("pooled leg over %T: TLS legs only", c)
	}
	return &Pooled{c: tc}, nil
}

// Open starts a session on an idle leg (dialer). It fails if the leg is
// not idle or broke while it waited: take another leg.
func (p *Pooled) Open() (*Session, error) {
	if !p.dialer {
		return nil, errors.New("Open on the acceptor's end of a pooled leg")
	}
	s, err := p.begin()
	if err != nil {
		return nil, err
	}
	if err := p.writeFrame(frameOpen, nil); err != nil {
		p.Abort()
		return nil, fmt.Errorf("open a session on a pooled leg: %w", err)
	}
	return s, nil
}

// Next waits for the dialer to open the next session (acceptor). It
// returns io.EOF when the dialer ended the idle leg in order (Quit), and
// any other error when the leg broke; the leg is then closed.
func (p *Pooled) Next() (*Session, error) {
	if p.dialer {
		return nil, errors.New("Next on the dialer's end of a pooled leg")
	}
	typ, n, err := readHeader(p.c)
	switch {
	case err != nil:
		p.Abort()
		return nil, err
	case typ == frameQuit && n == 0:
		p.close()
		return nil, io.EOF
	case typ != frameOpen || n != 0:
		p.Abort()
		return nil, fmt.Errorf("%w: %q (%d bytes) on an idle leg", ErrFrame, typ, n)
	}
	return p.begin()
}

func (p *Pooled) begin() (*Session, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.broken:
		return nil, net.ErrClosed
	case p.session != nil:
		return nil, errors.New("pooled leg busy")
	}
	p.session = &Session{p: p}
	return p.session, nil
}

// Quit ends an idle leg in order (dialer): a 'Q' frame and the TLS
// close_notify, so the acceptor sees a deliberate end, never an error.
// An idle leg carries no bytes, so nothing is lost. It reports false if
// the leg was busy or already broken (nothing is done then).
func (p *Pooled) Quit() bool {
	p.mu.Lock()
	if p.broken || p.session != nil {
		p.mu.Unlock()
		return false
	}
	p.broken = true
	p.mu.Unlock()
	p.c.SetWriteDeadline(time.Now().Add(wan.HandshakeTimeout))
	p.writeFrame(frameQuit, nil)
	p.c.CloseWrite()
	p.c.Close()
	return true
}

// Abort resets the leg, ending any session on it. Idempotent.
func (p *Pooled) Abort() {
	p.mu.Lock()
	p.broken = true
	p.mu.Unlock()
	abortConn(p.c)
}

// Idle reports whether the leg waits for a session and has not broken.
func (p *Pooled) Idle() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.broken && p.session == nil
}

// Stale reports whether an idle leg (dialer) has anything to read: its
// peer never sends on an idle leg, so bytes, an end or an error there
// mean the peer closed or reset it (its stream ended, it restarted) and
// a session on it would fail. It does not read.
func (p *Pooled) Stale() bool {
	t, ok := p.c.Raw().(*net.TCPConn)
	if !ok {
		return false
	}
	rc, err := t.SyscallConn()
	if err != nil {
		return true
	}
	stale := false
	err = rc.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		_ = n
		stale = err != syscall.EAGAIN // bytes (n > 0), an end (n == 0) or an error
		return true
	})
	return stale || err != nil
}

// Conn is the leg's TLS connection.
func (p *Pooled) Conn() net.Conn { return p.c }

func (p *Pooled) close() {
	p.mu.Lock()
	p.broken = true
	p.mu.Unlock()
	p.c.Close()
}

func (p *Pooled) writeFrame(typ byte, payload []byte) error {
	var hdr [4]byte
	hdr[0] = typ
	hdr[1], hdr[2], hdr[3] = byte(len(payload)>>16), byte(len(payload)>>8), byte(len(payload))
	_, err := p.c.WriteFrame(hdr[:], payload)
	return err
}

func readHeader(r io.Reader) (byte, int, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF // a pooled leg ends with 'Q' only
		}
		return 0, 0, err
	}
	return hdr[0], int(binary.BigEndian.Uint32(hdr[:]) & 0xffffff), nil
}

// abortConn resets c's TCP connection (SO_LINGER 0).
func abortConn(c *wan.Conn) {
	if t, ok := c.Raw().(*net.TCPConn); ok {
		t.SetLinger(0)
	}
	c.Raw().Close()
}

// Session is one application connection's passage over a pooled leg, a
// net.Conn as relay.Relay expects: Read returns io.EOF at the peer's
// 'F', CloseWrite sends this side's 'F', and Close gives the leg back
// (Clean) if both ended so, else resets it. Its NetConn is the leg's TCP
// connection, so relay.Abort resets the leg.
type Session struct {
	p *Pooled

	rmu    sync.Mutex // guards the read state
	remain int        // bytes left of the current 'D' frame
	rfin   bool

	wmu  sync.Mutex // guards the write state
	wfin bool
	whdr [64]byte // WriteFrame's headers: a data frame's fits, a reset's reason may not

	endOnce sync.Once
	clean   atomic.Bool // set by Close: the leg is idle again
}

// Read implements net.Conn.
func (s *Session) Read(b []byte) (int, error) {
	s.rmu.Lock()
	defer s.rmu.Unlock()
	for {
		if s.rfin {
			return 0, io.EOF
		}
		if s.remain > 0 {
			n, err := s.p.c.Read(b[:min(len(b), s.remain)])
			s.remain -= n
			if err == io.EOF {
				err = io.ErrUnexpectedEOF // the leg ended inside a frame
			}
			return n, err
		}
		if len(b) == 0 {
			return 0, nil
		}
		typ, n, err := readHeader(s.p.c)
		if err != nil {
			return 0, err
		}
		switch {
		case typ == frameData && n > 0:
			s.remain = n
		case typ == frameFin && n == 0:
			s.rfin = true
		default:
			return 0, fmt.Errorf("%w: %q (%d bytes) in a session", ErrFrame, typ, n)
		}
	}
}

// Write implements net.Conn: b goes out as 'D' frames, each with its
// header in the same socket write.
func (s *Session) Write(b []byte) (int, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.wfin {
		return 0, fmt.Errorf("write after CloseWrite: %w", net.ErrClosed)
	}
	n := 0
	for n < len(b) {
		chunk := b[n:min(len(b), n+maxFrame)]
		if err := s.p.writeFrame(frameData, chunk); err != nil {
			return n, err
		}
		n += len(chunk)
	}
	return n, nil
}

// CloseWrite ends this direction of the session ('F').
func (s *Session) CloseWrite() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.wfin {
		return nil
	}
	if err := s.p.writeFrame(frameFin, nil); err != nil {
		return err
	}
	s.wfin = true
	return nil
}

// Close ends the session: if both directions ended with 'F' the leg is
// idle again (Clean reports true); otherwise the leg is reset. A read
// or a write under way makes it unclean, and the reset ends it: Close
// never waits for one (a framed connection closes the session it left
// while its reader still waits on it). Idempotent.
func (s *Session) Close() error {
	s.endOnce.Do(func() {
		var rfin, wfin bool
		remain := 0
		idle := s.rmu.TryLock()
		if idle {
			rfin, remain = s.rfin, s.remain
			s.rmu.Unlock()
		}
		if idle = idle && s.wmu.TryLock(); idle {
			wfin = s.wfin
			s.wmu.Unlock()
		}
		p := s.p
		p.mu.Lock()
		clean := idle && rfin && wfin && remain == 0 && !p.broken && p.session == s
		if clean {
			p.session = nil
		}
		p.mu.Unlock()
		s.clean.Store(clean)
		if !clean {
			p.Abort()
			return
		}
		p.c.SetDeadline(time.Time{})
	})
	return nil
}

// Clean reports whether Close gave the leg back for another session.
func (s *Session) Clean() bool { return s.clean.Load() }

// Answers reports whether the session's acceptor answers (wan.Answers):
// the leg negotiated wan.ALPNAnswers or wan.ALPNFramed (whose pooled
// sessions carry no positioned frames: they begin with the acceptor's
// answer, as a leg of ALPNAnswers does). A framed session (Framed)
// answers in its own frames.
func (s *Session) Answers() bool { return s.p.c.Answers() || s.p.c.Framed() && !s.Framed() }

// Framed reports whether the session carries positioned frames
// (wan.Framed): the leg negotiated wan.ALPNFramedPools. Such a session
// is the first leg of its connection, which then outlives the pooled
// leg (a new leg of its own joins it).
func (s *Session) Framed() bool { return s.p.c.FramedSessions() }

// LegFramed reports whether the pooled leg itself negotiated positioned
// frames (wan.ALPNFramed or ALPNFramedPools), whether or not its
// sessions carry them.
func (s *Session) LegFramed() bool { return s.p.c.Framed() }

// Binding is the leg's binding (wan.BindingOf): a framed session's
// resume key is derived from it, as a leg's of its own is.
func (s *Session) Binding() []byte { return s.p.c.Binding() }

// WriteFrame writes hdr and b as one 'D' frame, in one write of the
// leg (carry's frames: header and payload together).
func (s *Session) WriteFrame(hdr, b []byte) (int, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	n := len(hdr) + len(b)
	switch {
	case s.wfin:
		return 0, fmt.Errorf("write after CloseWrite: %w", net.ErrClosed)
	case n > maxFrame:
		return 0, fmt.Errorf("a frame of %d bytes on a pooled leg: at most %d", n, maxFrame)
	}
	h := append(s.whdr[:0], frameData, byte(n>>16), byte(n>>8), byte(n))
	h = append(h, hdr...)
	if _, err := s.p.c.WriteFrame(h, b); err != nil {
		return 0, err
	}
	return n, nil
}

// NetConn is the leg's TCP connection: relay.Abort resets it.
func (s *Session) NetConn() net.Conn { return s.p.c.Raw() }

// LocalAddr implements net.Conn.
func (s *Session) LocalAddr() net.Addr { return s.p.c.LocalAddr() }

// RemoteAddr implements net.Conn.
func (s *Session) RemoteAddr() net.Addr { return s.p.c.RemoteAddr() }

// SetDeadline implements net.Conn (the leg's; Close clears it).
func (s *Session) SetDeadline(t time.Time) error { return s.p.c.SetDeadline(t) }

// SetReadDeadline implements net.Conn.
func (s *Session) SetReadDeadline(t time.Time) error { return s.p.c.SetReadDeadline(t) }

// SetWriteDeadline implements net.Conn.
func (s *Session) SetWriteDeadline(t time.Time) error { return s.p.c.SetWriteDeadline(t) }
