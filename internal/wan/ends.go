package wan

import (
	"errors"
	"net"
	"syscall"

	"github.com/quic-go/quic-go"

	"scistream/internal/sockio"
)

// How a WAN leg ended, for the gateway's counters and logs. A leg that
// fails does so in one of three ways, told apart here because each asks
// something different of an operator:
//
//   - reset by the peer gateway: a TCP reset, or a QUIC stream or
//     connection the peer ended on purpose (its application reset, its side
//     was released). Nothing is wrong between the gateways.
//   - lost: neither an orderly end nor a reset. A TLS leg whose TCP
//     connection ended without close_notify (ErrTruncated: the peer process
//     died, its kernel sent FIN), a QUIC connection that heard nothing for
//     its idle timeout or got a stateless reset (the peer restarted), a TCP
//     timeout or an unreachable network. The peer gateway or the path is
//     gone.
//   - anything else.
//
// A plaintext TCP leg has no close_notify: a gateway arms its socket to
// reset on close (relay.ResetOnClose), so the death of the peer process
// reads as a reset there, not as a loss.

// ResetByPeer reports whether err means the peer gateway reset the leg
// on purpose.
func ResetByPeer(err error) bool {
	var se *quic.StreamError
	var ae *quic.ApplicationError
	switch {
	case errors.As(err, &se):
		return se.Remote
	case errors.As(err, &ae):
		return ae.Remote
	}
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// Lost reports whether err means the leg ended with neither an orderly end
// nor a reset: the peer gateway died or restarted, or the path broke.
func Lost(err error) bool {
	var idle *quic.IdleTimeoutError
	var sr *quic.StatelessResetError
	return errors.Is(err, ErrTruncated) || errors.As(err, &idle) || errors.As(err, &sr) ||
		errors.Is(err, syscall.ETIMEDOUT) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, syscall.EHOSTDOWN)
}

// Ended reports, without reading it, whether the accepted leg c is over
// before this side read its end: nil while it is open, also after the
// peer's orderly end of its writes (a FIN, a close_notify, a QUIC FIN
// queued behind its bytes, which are still there to read); otherwise the
// error a read would have met (ResetByPeer and Lost classify it), or
// net.ErrClosed if this side closed c. Call it only while this side has
// not ended its writes on c.
//
// It is for a leg held unread on purpose (the inbound gateway holds the
// leg while its application cannot be reached): the peer's bytes wait in
// the socket, or in the QUIC stream's flow-control window, and a caller
// asks now and then whether the peer gave up. A leg that has an Ended
// method (a QUIC stream) answers with it, with the same meaning. A leg
// with no TCP socket or QUIC stream under its NetConn wrappers reads as
// open.
func Ended(c net.Conn) error {
	switch c := c.(type) {
	case *net.TCPConn: // a plaintext leg
		return sockio.Ended(c)
	case interface{ Ended() error }: // a QUIC stream (internal/wanquic) knows its own end
		return c.Ended()
	case interface{ NetConn() net.Conn }: // a TLS leg: its TCP socket decides
		return Ended(c.NetConn())
	}
	return nil
}
