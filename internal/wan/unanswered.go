package wan

import (
	"errors"
	"net"
)

// ErrUnanswered marks a dial the peer reset before it sent a byte, as a
// gateway resets a connection over its cap of connections in their
// handshake, before any TLS state exists (internal/strangers): dialling
// again a moment later may succeed. A reset after the peer answered (a
// certificate it refused, a preface it did not accept) is not one.
var ErrUnanswered = errors.New("reset by the peer before it answered")

// unanswered returns err marked ErrUnanswered if it is a reset and raw
// received no byte (raw nil: the connect itself was reset). Call it
// before raw is closed.
func unanswered(raw net.Conn, err error) error {
	if !ResetByPeer(err) {
		return err
	}
	if raw != nil {
		if n, ok := bytesReceived(raw); !ok || n != 0 {
			return err
		}
	}
	return &unansweredError{err}
}

type unansweredError struct{ err error }

func (e *unansweredError) Error() string   { return e.err.Error() }
func (e *unansweredError) Unwrap() []error { return []error{ErrUnanswered, e.err} }
