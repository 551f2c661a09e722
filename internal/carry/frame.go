package carry

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode"
)

// Every frame on a framed leg, either way, is a 16-byte header and a
// payload:
//
//	type    uint8
//	        two bytes reserved (zero)
//	stripes uint8: an accepted frame's, the legs the acceptor lets the
//	        connection use at once (striping, stripe.go); zero in every
//	        other frame, and in an answer to a join or an open of one leg
//	length  uint32 big-endian: the payload's length
//	pos     uint64 big-endian: a position in a direction's byte stream
//	payload [length]byte
//
// The types (the sender's view):
//
//	'D' data      pos: where payload[0] is in the sender's stream; 1 to MaxData bytes
//	'K' ack       pos: the sender received the peer's stream in order up to pos;
//	              length: the window, the bytes past pos it accepts (no payload)
//	'P' ping      pos: a nonce; the peer answers with an ack (liveness while waiting)
//	'F' fin       pos: the end of the sender's stream (its application's end of stream)
//	'X' reset     the sender's side aborted the connection; payload: the reason
//	'O' open      the first leg of a connection (dialer): payload Open
//	'J' join      a later leg of a connection (dialer): payload Join; pos: the dialer's
//	              received position of the acceptor's stream
//	'A' accepted  the acceptor's answer to open or join; pos: its received position of
//	              the dialer's stream (0 after open); length: its window (no payload)
//	'R' refused   the acceptor's answer: payload the reason; the leg then ends
//	'S' stripe    a further leg of a connection that carries it at once beside its
//	              first (dialer): payload Join, pos unused (zero); answered accepted
//	              (its pos and window unused) or refused
//
// A frame of an unknown type, or a length out of bounds for its type,
// is ErrFrame: the leg is not trusted further.

// Frame types.
const (
	TypeData     = 'D'
	TypeAck      = 'K'
	TypePing     = 'P'
	TypeFin      = 'F'
	TypeReset    = 'X'
	TypeOpen     = 'O'
	TypeJoin     = 'J'
	TypeAccepted = 'A'
	TypeRefused  = 'R'
	TypeStripe   = 'S'
)

// Limits of frames.
const (
	// HeaderLen is a frame header's length.
	HeaderLen = 16
	// MaxData is the largest payload of a data frame: the largest
	// chunk a receiver reads one into (chunkSizes).
	MaxData = maxChunk
	// MaxReason bounds a reset's or a refusal's reason.
	MaxReason = 1024
	// MaxWindow bounds the window an ack or an accept may give.
	MaxWindow = 1 << 30
	// MaxStripes bounds the legs one connection carries at once.
	MaxStripes = 16
)

// ErrFrame: the peer sent a frame where none of its kind may be, or a
// malformed one.
var ErrFrame = errors.New("malformed or unexpected frame on a framed WAN leg")

// Header is a decoded frame header.
type Header struct {
	Type   byte
	Length uint32
	Pos    uint64
	// Stripes is an accepted frame's (byte 3 of its header).
	Stripes uint8
}

// PutHeader encodes h into b[:HeaderLen].
func PutHeader(b []byte, h Header) {
	b[0] = h.Type
	b[1], b[2], b[3] = 0, 0, h.Stripes
	binary.BigEndian.PutUint32(b[4:], h.Length)
	binary.BigEndian.PutUint64(b[8:], h.Pos)
}

// AppendHeader appends h, encoded, to b.
func AppendHeader(b []byte, h Header) []byte {
	var hb [HeaderLen]byte
	PutHeader(hb[:], h)
	return append(b, hb[:]...)
}

// ParseHeader decodes and checks a frame header: a known type, zero
// reserved bytes, a length in bounds for the type.
func ParseHeader(b []byte) (Header, error) {
	h := Header{Type: b[0], Length: binary.BigEndian.Uint32(b[4:]), Pos: binary.BigEndian.Uint64(b[8:]), Stripes: b[3]}
	if b[1]|b[2] != 0 || b[3] != 0 && h.Type != TypeAccepted {
		return h, fmt.Errorf("%w: reserved bytes set", ErrFrame)
	}
	if h.Stripes > MaxStripes {
		return h, fmt.Errorf("%w: an answer of %d stripes, past %d", ErrFrame, h.Stripes, MaxStripes)
	}
	var ok bool
	switch h.Type {
	case TypeData:
		ok = h.Length >= 1 && h.Length <= MaxData && h.Pos+uint64(h.Length) >= h.Pos
	case TypeAck, TypeAccepted:
		ok = h.Length <= MaxWindow
	case TypePing, TypeFin:
		ok = h.Length == 0
	case TypeReset, TypeRefused:
		ok = h.Length <= MaxReason
	case TypeOpen:
		ok = h.Length == openLen
	case TypeJoin, TypeStripe:
		ok = h.Length == joinLen
	default:
		return h, fmt.Errorf("%w: type %#x", ErrFrame, h.Type)
	}
	if !ok {
		return h, fmt.Errorf("%w: %q frame of %d bytes at %d", ErrFrame, h.Type, h.Length, h.Pos)
	}
	return h, nil
}

// ReadHeader reads and checks one frame header from r into buf (at
// least HeaderLen bytes).
func ReadHeader(r io.Reader, buf []byte) (Header, error) {
	if _, err := io.ReadFull(r, buf[:HeaderLen]); err != nil {
		return Header{}, err
	}
	return ParseHeader(buf[:HeaderLen])
}

// ID names one application connection of a stream, chosen by the
// outbound side at random when it opens the connection.
type ID [16]byte

func (id ID) String() string { return fmt.Sprintf("%x", id[:]) }

// Open is the payload of an open frame: the connection's ID and the
// window the dialer accepts.
type Open struct {
	ID     ID
	Window uint32
	// Stripes is how many legs the dialer means to carry the
	// connection on at once (0 or 1: one; more, up to MaxStripes:
	// striping, which the acceptor's answer grants or not).
	Stripes uint8
}

const openLen = 16 + 4 + 1 + 3

// AppendOpen appends the open frame of o to b.
func AppendOpen(b []byte, o Open) []byte {
	b = AppendHeader(b, Header{Type: TypeOpen, Length: openLen})
	b = append(b, o.ID[:]...)
	b = binary.BigEndian.AppendUint32(b, o.Window)
	return append(b, o.Stripes, 0, 0, 0)
}

// ParseOpen decodes an open frame's payload.
func ParseOpen(p []byte) (Open, error) {
	var o Open
	if len(p) != openLen {
		return o, fmt.Errorf("%w: open of %d bytes", ErrFrame, len(p))
	}
	copy(o.ID[:], p)
	o.Window = binary.BigEndian.Uint32(p[16:])
	o.Stripes = p[20]
	if o.Window == 0 || o.Window > MaxWindow || o.Stripes > MaxStripes || p[21]|p[22]|p[23] != 0 {
		return o, fmt.Errorf("%w: open with window %d", ErrFrame, o.Window)
	}
	return o, nil
}

// Join is the payload of a join frame: the connection it joins, the
// proof that the dialer holds its resume key over this leg (wan's to
// compute and check), and the window the dialer grants from its
// received position.
type Join struct {
	ID     ID
	Proof  [32]byte
	Window uint32
}

const joinLen = 16 + 32 + 4

// AppendJoin appends the join frame of j, with the dialer's received
// position pos, to b.
func AppendJoin(b []byte, j Join, pos uint64) []byte {
	b = AppendHeader(b, Header{Type: TypeJoin, Length: joinLen, Pos: pos})
	b = append(b, j.ID[:]...)
	b = append(b, j.Proof[:]...)
	return binary.BigEndian.AppendUint32(b, j.Window)
}

// ParseJoin decodes a join frame's payload.
func ParseJoin(p []byte) (Join, error) {
	var j Join
	if len(p) != joinLen {
		return j, fmt.Errorf("%w: join of %d bytes", ErrFrame, len(p))
	}
	copy(j.ID[:], p)
	copy(j.Proof[:], p[16:])
	j.Window = binary.BigEndian.Uint32(p[48:])
	if j.Window > MaxWindow {
		return j, fmt.Errorf("%w: join with window %d", ErrFrame, j.Window)
	}
	return j, nil
}

// AppendReason appends a reset or refused frame (typ) with reason, cut
// to MaxReason, to b.
func AppendReason(b []byte, typ byte, reason string) []byte {
	if len(reason) > MaxReason {
		reason = reason[:MaxReason]
	}
	b = AppendHeader(b, Header{Type: typ, Length: uint32(len(reason))})
	return append(b, reason...)
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

// AppendStripe appends the stripe frame of j (a further leg of a
// striped connection) to b.
func AppendStripe(b []byte, j Join) []byte {
	b = AppendJoin(b, j, 0)
	b[len(b)-joinLen-HeaderLen] = TypeStripe
	return b
}
