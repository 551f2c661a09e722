package relay

import (
	"errors"
	"fmt"
	"net"

	"scistream/internal/sockio"
)

// Side names one of the two connections Relay was given.
type Side int

const (
	// Unknown: the engine could not tell which connection failed.
	Unknown Side = iota
	// A is Relay's first connection.
	A
	// B is Relay's second connection.
	B
)

func (s Side) String() string {
	switch s {
	case A:
		return "a"
	case B:
		return "b"
	}
	return "?"
}

// Error is the failure that made Relay abort a connection pair: the first
// one, on which connection, reading from it or writing to it. Its text
// names the connections as Relay knows them, a and b; what users read
// (a stream's last errors, its log) names them as the stream sees them,
// the application and the WAN leg (ends.Describe).
type Error struct {
	// Conn is the connection that failed.
	Conn Side
	// Op is "read" or "write" (writing includes forwarding the end of
	// stream), or "copy" when the engine could not tell.
	Op string
	// Err is the cause.
	Err error
}

func (e *Error) Error() string { return fmt.Sprintf("%s %s: %v", e.Op, e.Conn, e.Err) }
func (e *Error) Unwrap() error { return e.Err }

// opError is how an engine says which side of its Copy failed: reading
// src or writing dst.
type opError struct {
	write bool
	err   error
}

func (e *opError) Error() string { return e.err.Error() }
func (e *opError) Unwrap() error { return e.err }

func readError(err error) error  { return &opError{write: false, err: err} }
func writeError(err error) error { return &opError{write: true, err: err} }

// attribute turns an engine's error for one direction (src to dst) into an
// *Error. Engines that cannot tell read from write failures (the kernel
// redirect) are read from the sockets themselves: a TCP socket that a
// reset closed is in state CLOSE while this process still holds it.
func attribute(err error, dst, src net.Conn, dstSide, srcSide Side) *Error {
	var oe *opError
	switch {
	case errors.As(err, &oe) && oe.write:
		return &Error{Conn: dstSide, Op: "write", Err: oe.err}
	case errors.As(err, &oe):
		return &Error{Conn: srcSide, Op: "read", Err: oe.err}
	case closedByReset(src):
		return &Error{Conn: srcSide, Op: "read", Err: err}
	case closedByReset(dst):
		return &Error{Conn: dstSide, Op: "write", Err: err}
	}
	return &Error{Conn: Unknown, Op: "copy", Err: err}
}

// closedByReset reports whether c's TCP socket is closed though this
// process has not closed it: a reset, or a timeout, ended it.
func closedByReset(c net.Conn) bool {
	t, ok := innermost(c).(*net.TCPConn)
	return ok && sockio.Reset(t)
}
