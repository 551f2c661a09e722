package bench

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"strings"
)

// Mode is how the producer and the consumer exchange messages.
type Mode uint8

const (
	// Throughput: the producer sends every message as fast as allowed;
	// the consumer only reads.
	Throughput Mode = 0
	// RequestReply: the producer sends one message and waits for the
	// consumer's reply (which echoes the sequence number) before the
	// next; the producer measures the round-trip time of each.
	RequestReply Mode = 1
	// Echo: request-reply in which the consumer echoes every byte of the
	// message back as it arrives (a plain echo server), so both
	// directions carry the full message; the producer checks the echo
	// byte for byte. Message sizes up to MaxEchoSize.
	Echo Mode = 2
)

// MaxEchoSize bounds the message size of an Echo run: the producer
// writes a whole message before it reads the echo, so the message must
// fit in what the path buffers (socket buffers, a gateway's pipes).
const MaxEchoSize = 4 << 20

// RoundTrips reports whether m waits for an answer to each message
// (RequestReply or Echo): the producer then measures round-trip times.
func (m Mode) RoundTrips() bool { return m == RequestReply || m == Echo }

func (m Mode) String() string {
	switch m {
	case Throughput:
		return "throughput"
	case RequestReply:
		return "rr"
	case Echo:
		return "echo"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// ParseMode parses "throughput", "rr" (also "request-reply") or "echo".
func ParseMode(s string) (Mode, error) {
	switch strings.ToLower(s) {
	case "throughput", "tput":
		return Throughput, nil
	case "rr", "request-reply", "reqrep":
		return RequestReply, nil
	case "echo":
		return Echo, nil
	}
	return 0, fmt.Errorf("mode %q: use throughput, rr (request-reply) or echo (request-reply with the whole message echoed)", s)
}

// MaxPairs bounds the producer/consumer pairs of one run: the
// connections s2bench conns holds open at once (10,000 and more) fit.
const MaxPairs = 1 << 14

// Hello describes a run to the consumer. The producer sends it first on
// every connection, so the consumer needs no flags that could disagree
// with the producer's: the consumer's verifier is built from it.
//
// Layout (HelloLen bytes, big-endian):
//
//	magic  "S2BH"    4
//	version 1        1
//	mode             1
//	pairs  uint16    2   connections of the run (1..MaxPairs)
//	pair   uint16    2   this connection's index (0..pairs-1)
//	pathLen uint8    1
//	flags  uint8     1   bit 0: the consumer reads message by message (ReadEach)
//	size   uint32    4
//	bytes  uint64    8   0: open-ended
//	seed   uint64    8
//	run    uint32    4   this connection's run tag
//	group  uint32    4   identifies the run across its connections
//	rate   float64   8   messages/s the producer paces at (0: as fast as possible)
//	path   [16]byte 16   label of the path ("direct", "gateways", ...)
//	crc    uint32    4   CRC-32C of everything before
type Hello struct {
	Mode  Mode
	Spec  Spec
	Group uint32
	Pairs int
	Pair  int
	Rate  float64 // messages/s, 0 = as fast as possible
	Path  string  // at most MaxPathLen printable ASCII bytes
	// ReadEach makes the consumer read each message as an application
	// reading message by message does: its header, then its payload, one
	// read call each (in throughput mode; the payload in reads of up to
	// its buffer). Otherwise it reads whatever has arrived, up to 64 KiB
	// or a message, whichever is larger.
	ReadEach bool
}

// flagReadEach is Hello.ReadEach in the flags byte.
const flagReadEach = 1

// HelloLen is the encoded size of a Hello.
const HelloLen = 68

// MaxPathLen bounds Hello.Path.
const MaxPathLen = 16

const (
	helloMagic   = "S2BH"
	helloVersion = 1
)

// Validate reports whether h describes a run.
func (h Hello) Validate() error {
	if err := h.Spec.Validate(); err != nil {
		return err
	}
	switch {
	case h.Mode != Throughput && !h.Mode.RoundTrips():
		return fmt.Errorf("unknown mode %d", h.Mode)
	case h.ReadEach && h.Mode != Throughput:
		return fmt.Errorf("reading message by message is a throughput mode's choice: %s mode reads each message already", h.Mode)
	case h.Mode == Echo && h.Spec.Size > MaxEchoSize:
		return fmt.Errorf("message size %d too large for echo mode: at most %d", h.Spec.Size, MaxEchoSize)
	case h.Pairs < 1 || h.Pairs > MaxPairs:
		return fmt.Errorf("pairs %d out of range 1..%d", h.Pairs, MaxPairs)
	case h.Pair < 0 || h.Pair >= h.Pairs:
		return fmt.Errorf("pair %d out of range 0..%d", h.Pair, h.Pairs-1)
	case math.IsNaN(h.Rate) || math.IsInf(h.Rate, 0) || h.Rate < 0:
		return fmt.Errorf("rate %v is not a non-negative number", h.Rate)
	case len(h.Path) > MaxPathLen:
		return fmt.Errorf("path label %q longer than %d bytes", h.Path, MaxPathLen)
	}
	for _, c := range []byte(h.Path) {
		if c <= ' ' || c > '~' {
			return fmt.Errorf("path label %q: only printable ASCII without spaces", h.Path)
		}
	}
	return nil
}

// AppendHello appends the encoding of h to b.
func AppendHello(b []byte, h Hello) ([]byte, error) {
	if err := h.Validate(); err != nil {
		return b, err
	}
	var e [HelloLen]byte
	copy(e[:], helloMagic)
	e[4] = helloVersion
	e[5] = byte(h.Mode)
	binary.BigEndian.PutUint16(e[6:], uint16(h.Pairs))
	binary.BigEndian.PutUint16(e[8:], uint16(h.Pair))
	e[10] = byte(len(h.Path))
	if h.ReadEach {
		e[11] = flagReadEach
	}
	binary.BigEndian.PutUint32(e[12:], uint32(h.Spec.Size))
	binary.BigEndian.PutUint64(e[16:], uint64(h.Spec.Bytes))
	binary.BigEndian.PutUint64(e[24:], h.Spec.Seed)
	binary.BigEndian.PutUint32(e[32:], h.Spec.Run)
	binary.BigEndian.PutUint32(e[36:], h.Group)
	binary.BigEndian.PutUint64(e[40:], math.Float64bits(h.Rate))
	copy(e[48:64], h.Path)
	binary.BigEndian.PutUint32(e[64:], crc32.Checksum(e[:64], castagnoli))
	return append(b, e[:]...), nil
}

// ErrNotHello means the first bytes of a connection are not a Hello: the
// peer is not an s2bench producer of this version.
var ErrNotHello = errors.New("not an s2bench run header (is the producer an s2bench of the same version?)")

// ParseHello decodes and validates a Hello from the first HelloLen bytes of b.
func ParseHello(b []byte) (Hello, error) {
	if len(b) < HelloLen {
		return Hello{}, fmt.Errorf("run header: %d bytes, want %d", len(b), HelloLen)
	}
	e := b[:HelloLen]
	if string(e[:4]) != helloMagic {
		return Hello{}, ErrNotHello
	}
	if e[4] != helloVersion {
		return Hello{}, fmt.Errorf("run header version %d, this s2bench speaks %d: use the same s2bench on both ends", e[4], helloVersion)
	}
	if crc32.Checksum(e[:64], castagnoli) != binary.BigEndian.Uint32(e[64:]) {
		return Hello{}, errors.New("run header corrupted (checksum mismatch)")
	}
	pl := int(e[10])
	if pl > MaxPathLen {
		return Hello{}, fmt.Errorf("run header: path label length %d > %d", pl, MaxPathLen)
	}
	if e[11]&^flagReadEach != 0 {
		return Hello{}, fmt.Errorf("run header: unknown flags %#02x (is the producer a newer s2bench?)", e[11])
	}
	size := binary.BigEndian.Uint32(e[12:])
	bytes := binary.BigEndian.Uint64(e[16:])
	if size > MaxSize || bytes > math.MaxInt64 {
		return Hello{}, fmt.Errorf("run header: size %d or amount %d out of range", size, bytes)
	}
	h := Hello{
		Mode:  Mode(e[5]),
		Pairs: int(binary.BigEndian.Uint16(e[6:])),
		Pair:  int(binary.BigEndian.Uint16(e[8:])),
		Spec: Spec{
			Size:  int(size),
			Bytes: int64(bytes),
			Seed:  binary.BigEndian.Uint64(e[24:]),
			Run:   binary.BigEndian.Uint32(e[32:]),
		},
		Group:    binary.BigEndian.Uint32(e[36:]),
		Rate:     math.Float64frombits(binary.BigEndian.Uint64(e[40:])),
		Path:     string(e[48 : 48+pl]),
		ReadEach: e[11]&flagReadEach != 0,
	}
	if err := h.Validate(); err != nil {
		return Hello{}, fmt.Errorf("run header: %w", err)
	}
	return h, nil
}

// ReplyLen is the size of the consumer's reply in request-reply mode:
// magic "S2BR", the run tag (uint32) and the sequence number (uint64).
const ReplyLen = 16

const replyMagic = "S2BR"

func putReply(b []byte, run uint32, seq uint64) {
	copy(b, replyMagic)
	binary.BigEndian.PutUint32(b[4:], run)
	binary.BigEndian.PutUint64(b[8:], seq)
}

// checkReply checks that b is the reply to message seq of run.
func checkReply(b []byte, run uint32, seq uint64) error {
	switch {
	case string(b[:4]) != replyMagic:
		return &IntegrityError{Seq: seq, Problem: fmt.Sprintf("reply has bad magic %q", b[:4])}
	case binary.BigEndian.Uint32(b[4:]) != run:
		return &IntegrityError{Seq: seq, Problem: "reply of another run"}
	case binary.BigEndian.Uint64(b[8:]) != seq:
		return &IntegrityError{Seq: seq, Problem: fmt.Sprintf("reply for message %d, expected %d", binary.BigEndian.Uint64(b[8:]), seq)}
	}
	return nil
}
