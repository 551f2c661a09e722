// Package relay forwards bytes between the two legs of a proxied
// connection. An Engine moves one direction; Relay runs both directions of
// a connection pair with these semantics:
//
//   - half-close is forwarded: when one side finishes sending (EOF), the
//     other side's write half is shut down (TCP FIN or TLS close_notify) and
//     the opposite direction keeps flowing until it finishes too;
//   - an error on either side (reset, broken pipe, a release) aborts both
//     sides with a TCP reset, so an application never mistakes a broken
//     stream for a complete one; Relay returns an *Error that says which
//     connection failed and how;
//   - a connection armed with ResetOnClose ends with a reset however it
//     ends (closed early, or the process dies: the kernel closes its
//     sockets), unless Relay finished both directions in order;
//   - bytes are counted as they move, for live rates.
package relay

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
)

// Engine copies one direction of a connection.
type Engine interface {
	// Name is the engine's name as given to s2cs --type.
	Name() string
	// Copy copies from src to dst until src reports EOF (returning nil) or
	// an error occurs. It calls count with every chunk written, from the
	// calling goroutine, holding no pooled buffer: count may block to pace
	// the copy.
	Copy(dst, src net.Conn, count func(int64)) error
}

// Relay forwards a<->b until both directions finish, then closes both. It
// copies b->a itself and a->b in a goroutine, and returns once both have
// finished. countAB and countBA
// receive the bytes moved a->b and b->a. It returns nil when both
// directions ended in order (and then disarms ResetOnClose on both, so
// their last bytes and FIN are delivered), or the first failure as an
// *Error, having aborted both.
func Relay(e Engine, a, b net.Conn, countAB, countBA func(int64)) error {
	return RelayAborting(e, a, b, countAB, countBA, nil)
}

// RelayAborting is Relay that also calls onAbort, if not nil, once it
// aborted both connections on a failure: a count function that waits (a
// rate paces the copy) must return then, so that the direction that did
// not fail sees the abort at once.
func RelayAborting(e Engine, a, b net.Conn, countAB, countBA func(int64), onAbort func()) error {
	return RelayWith(e, a, b, Hooks{CountAB: countAB, CountBA: countBA, OnAbort: onAbort})
}

// Hooks are what RelayWith calls besides copying.
type Hooks struct {
	// CountAB and CountBA receive the bytes moved a->b and b->a.
	CountAB, CountBA func(int64)
	// OnAbort, if not nil, is called once both connections were aborted
	// on a failure (see RelayAborting).
	OnAbort func()
	// BeforeBA, if not nil, runs before the first byte is copied b->a
	// (a->b starts at once): it may read what b sends first and is not
	// the application's (a WAN leg's answer: wan.ReadAnswer). An error
	// fails the relay as a read of b would.
	BeforeBA func() error
}

// RelayWith is Relay with hooks.
func RelayWith(e Engine, a, b net.Conn, h Hooks) error {
	countAB, countBA, onAbort := h.CountAB, h.CountBA, h.OnAbort
	var (
		wg       sync.WaitGroup
		once     sync.Once
		firstErr error
	)
	fail := func(err error) {
		once.Do(func() {
			firstErr = err
			// Abort both sides so the other direction stops at once
			// and neither application sees a clean end of stream.
			Abort(a)
			Abort(b)
			if onAbort != nil {
				onAbort()
			}
		})
	}
	// ended[s] is set once Relay shut down the write half of side s:
	// only then may s's socket be closed (TCP state CLOSE) in order.
	var ended [3]atomic.Bool
	dir := func(dst, src net.Conn, dstSide, srcSide Side, count func(int64)) {
		defer wg.Done()
		err := e.Copy(dst, src, count)
		// The state first, then ended: ended is set before the FIN
		// that an orderly close needs, so a socket seen closed in order
		// always finds ended set; the other order races with that close.
		if err == nil && closedByReset(src) && !ended[srcSide].Load() {
			// The end of stream read from src was a reset whose
			// error the other direction's write took first (the
			// kernel reports it to one call only): forwarding it as
			// an orderly end would make a broken stream look whole.
			err = readError(fmt.Errorf("end of stream after a reset: %w", syscall.ECONNRESET))
		}
		if err != nil {
			fail(attribute(err, dst, src, dstSide, srcSide))
			return
		}
		ended[dstSide].Store(true)
		if err := closeWrite(dst); err != nil {
			fail(&Error{Conn: dstSide, Op: "write", Err: fmt.Errorf("forward end of stream: %w", err)})
		}
	}
	wg.Add(2)
	go dir(b, a, B, A, countAB)
	if h.BeforeBA != nil {
		if err := h.BeforeBA(); err != nil {
			fail(&Error{Conn: B, Op: "read", Err: err})
			wg.Done()
			wg.Wait()
			a.Close()
			b.Close()
			return firstErr
		}
	}
	dir(a, b, A, B, countBA) // here: one goroutine (its stack) fewer per connection
	wg.Wait()
	if firstErr == nil {
		Orderly(a)
		Orderly(b)
	}
	a.Close()
	b.Close()
	return firstErr
}

// closeWrite shuts down the write half of c.
func closeWrite(c net.Conn) error {
	switch c := c.(type) {
	case interface{ CloseWrite() error }: // *net.TCPConn, *tls.Conn
		return c.CloseWrite()
	}
	return c.Close()
}

// Abort closes c with a TCP reset where possible (SO_LINGER 0), so the
// peer sees an error rather than an orderly end of stream.
func Abort(c net.Conn) {
	raw := innermost(c)
	if t, ok := raw.(*net.TCPConn); ok {
		t.SetLinger(0)
	}
	// Close the raw socket first: closing a TLS conn would otherwise try
	// to send close_notify, which an orderly-looking end must not do here.
	raw.Close()
	if raw != c {
		c.Close()
	}
}

// ResetOnClose arms c so that it ends with a TCP reset, not an orderly
// FIN, however it is closed, and also when this process dies (the kernel
// closes its sockets then, with FIN unless armed): a peer must never read
// a broken stream as a complete one. Relay disarms it once both
// directions have ended in order. Arm a connection as soon as it exists,
// before anything can fail. A no-op where c has no TCP socket under its
// NetConn wrappers (a QUIC stream ends with a reset on its own).
func ResetOnClose(c net.Conn) {
	if t, ok := innermost(c).(*net.TCPConn); ok {
		t.SetLinger(0)
	}
}

// ResetOnCloseListener arms ln so that every connection it accepts is
// armed as ResetOnClose arms one, from the moment the kernel completes
// its handshake (the socket inherits the option): a process that dies
// between the handshake and its own ResetOnClose call then resets the
// connection too, instead of ending it with FIN. Only for listeners
// whose connections never carry a last message before a deliberate
// close (a TLS alert, a refusal): a reset may discard it.
func ResetOnCloseListener(ln *net.TCPListener) error {
	raw, err := ln.SyscallConn()
	if err != nil {
		return err
	}
	return ResetOnCloseRaw(raw)
}

// ResetOnCloseRaw arms a socket as ResetOnClose does, given its raw
// connection: a net.Dialer's Control uses it to arm the socket before it
// connects.
func ResetOnCloseRaw(raw syscall.RawConn) error {
	var serr error
	err := raw.Control(func(fd uintptr) {
		serr = syscall.SetsockoptLinger(int(fd), syscall.SOL_SOCKET, syscall.SO_LINGER, &syscall.Linger{Onoff: 1, Linger: 0})
	})
	if err != nil {
		return err
	}
	return serr
}

// Orderly disarms ResetOnClose: closing c sends FIN after every byte
// still queued, instead of a reset that discards them. A relay of its
// own (internal/carry) calls it once both directions ended in order.
func Orderly(c net.Conn) {
	if t, ok := innermost(c).(*net.TCPConn); ok {
		t.SetLinger(-1)
	}
}

// innermost returns the connection under c's NetConn wrappers (a TLS
// leg's TCP socket).
func innermost(c net.Conn) net.Conn {
	for {
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return c
		}
		c = u.NetConn()
	}
}

// IsRoutine reports whether err is the ordinary end of a connection
// (closed by us, reset or broken pipe by the peer) rather than a fault.
func IsRoutine(err error) bool {
	return err == nil || errors.Is(err, net.ErrClosed) || errors.Is(err, io.EOF) ||
		isReset(err)
}
