package wan

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"unicode"
)

// The acceptor's answer. On a leg whose two gateways negotiated
// ALPNAnswers (TLS and QUIC legs between gateways of this release or
// later), the first bytes the acceptor sends on a leg of an application
// connection are its answer, once it has judged the preface and reached
// its application (the wait for a late one included):
//
//	'A'                          accepted: the application's bytes follow
//	'R' len uint16 reason [len]  refused: the reason (UTF-8, at most
//	                             MaxReason bytes); the leg then ends
//
// The dialer knows from it, and not from its own handshake, that the leg
// works: in TLS 1.3 the client's handshake completes before the server
// has judged its certificate, let alone the preface, so a leg to the
// wrong stream's listener, or to a peer whose application is down, looks
// up at the dialer until a byte comes back. A stream is connected on the
// outbound side only once an answer accepted a leg. The dialer sends
// while it waits (relay.Hooks.BeforeBA reads the answer), so the answer
// costs the first byte no round trip. The watch leg and pooled legs
// between sessions carry no answer; each session of a pooled leg does.
// A peer without ALPNAnswers (an older s2cs) sends none, and plaintext
// TCP legs (--wan tcp, kept raw for splice) carry none either.

// ALPNAnswers is the application protocol of TLS legs whose acceptor
// answers (and, before ALPN, of QUIC connections whose streams do).
const ALPNAnswers = "scistream-wan/2"

// MaxReason bounds a refusal's reason.
const MaxReason = 1024

const (
	answerAccepted = 'A'
	answerRefused  = 'R'
)

// An AnswerError is a leg the peer gateway did not accept: it refused
// it (Reason, what it said, made printable and bounded), or the leg
// ended or failed before any answer came (Err: a leg to another
// stream's listener ends so).
type AnswerError struct {
	Reason string // the peer's reason, if it refused
	Err    error  // else what ended the wait
}

func (e *AnswerError) Error() string {
	if e.Err == nil {
		return "the peer gateway refused the connection: " + e.Reason
	}
	return "no answer from the peer gateway: " + e.Err.Error()
}

func (e *AnswerError) Unwrap() error { return e.Err }

// ErrBadAnswer: the peer's first bytes are no answer.
var ErrBadAnswer = errors.New("malformed answer")

// Answers reports whether the acceptor on c answers (ALPNAnswers was
// negotiated): c is a leg of an application connection from Dial, the
// acceptors, a QUIC stream or a pooled session.
func Answers(c net.Conn) bool {
	a, ok := c.(interface{ Answers() bool })
	return ok && a.Answers()
}

// WriteAnswer writes the acceptor's answer on w: accepted if refusal is
// empty, else refused with refusal as the reason (cut to MaxReason).
func WriteAnswer(w io.Writer, refusal string) error {
	if refusal == "" {
		_, err := w.Write([]byte{answerAccepted})
		return err
	}
	if len(refusal) > MaxReason {
		refusal = refusal[:MaxReason]
	}
	b := make([]byte, 0, 3+len(refusal))
	b = append(b, answerRefused)
	b = binary.BigEndian.AppendUint16(b, uint16(len(refusal)))
	_, err := w.Write(append(b, refusal...))
	return err
}

// ReadAnswer reads the acceptor's answer from r: nil if it accepted,
// else an *AnswerError (a refusal, or the error that ended the wait). It
// reads nothing past the answer.
func ReadAnswer(r io.Reader) error {
	var t [1]byte
	if _, err := io.ReadFull(r, t[:]); err != nil {
		return &AnswerError{Err: err}
	}
	switch t[0] {
	case answerAccepted:
		return nil
	case answerRefused:
	default:
		return &AnswerError{Err: fmt.Errorf("%w: first byte %#x", ErrBadAnswer, t[0])}
	}
	var n [2]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return &AnswerError{Err: fmt.Errorf("%w: %w", ErrBadAnswer, err)}
	}
	l := int(binary.BigEndian.Uint16(n[:]))
	if l > MaxReason {
		return &AnswerError{Err: fmt.Errorf("%w: a reason of %d bytes", ErrBadAnswer, l)}
	}
	reason := make([]byte, l)
	if _, err := io.ReadFull(r, reason); err != nil {
		return &AnswerError{Err: fmt.Errorf("%w: %w", ErrBadAnswer, err)}
	}
	return &AnswerError{Reason: printable(string(reason))}
}

// printable replaces what is not a printable character in s (controls,
// escapes, bidi overrides, invalid UTF-8) with U+FFFD: a peer's reason
// ends up in logs and in the stream's status.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if r == unicode.ReplacementChar || !unicode.IsPrint(r) || unicode.Is(unicode.Bidi_Control, r) {
			return unicode.ReplacementChar
		}
		return r
	}, s)
}
