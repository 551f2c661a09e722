// Package bench is the workload behind s2bench: a framed message stream
// whose every message carries an integrity header, a generator that sends
// it as fast as possible, a verifier that checks count, order and content
// as bytes arrive, and the statistics (goodput, inter-arrival mean and
// jitter, medians) computed from the arrival times.
//
// Wire format of one message (big-endian):
//
//	magic   "S2BM"     4 bytes
//	run     uint32     identifies the run (stale data from another run is caught)
//	seq     uint64     0, 1, 2, ... in order
//	length  uint32     payload length
//	crc     uint32     CRC-32C (Castagnoli) of the payload
//	payload [length]byte
//
// A run of a fixed amount is exactly its messages. An open-ended run (a
// duration instead of an amount) ends with an end marker: a header with
// magic "S2BE", the run tag, seq = the number of messages sent, length 0
// and a checksum derived from (seed, run, count), so a stream cut at a
// message boundary is still caught.
//
// The payload of message seq is a pseudo-random block filled once per
// seed, whose last min(8, length) bytes are replaced by a stamp derived
// from (seed, run, seq). A duplicated, stale or misplaced payload thus has
// another checksum than the one expected for its position, and generating
// a message costs a checksum of 8 bytes, not of the whole payload.
package bench

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
)

// HeaderLen is the size of a message header.
const HeaderLen = 24

// MaxSize bounds the payload of one message.
const MaxSize = 256 << 20

const (
	magic    = "S2BM"
	endMagic = "S2BE"
	stampLen = 8
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Spec describes one run's workload.
type Spec struct {
	// Size is the payload length of every message but possibly the last,
	// 1..MaxSize.
	Size int
	// Bytes is the total payload; the last message carries the remainder
	// when Bytes is not a multiple of Size. At least Size, or zero for an
	// open-ended run: messages of Size until the producer sends the end
	// marker.
	Bytes int64
	// Seed selects the payload content.
	Seed uint64
	// Run tags every header of the run.
	Run uint32
}

// Validate reports whether s describes a workload.
func (s Spec) Validate() error {
	if s.Size < 1 || s.Size > MaxSize {
		return fmt.Errorf("message size %d out of range 1..%d", s.Size, MaxSize)
	}
	if s.Bytes < 0 || s.Bytes > 0 && s.Bytes < int64(s.Size) {
		return fmt.Errorf("total bytes %d smaller than the message size %d", s.Bytes, s.Size)
	}
	return nil
}

// Open reports whether the run is open-ended (ended by an end marker).
func (s Spec) Open() bool { return s.Bytes == 0 }

// Messages is the number of messages of the run (0 when open-ended).
func (s Spec) Messages() int64 { return (s.Bytes + int64(s.Size) - 1) / int64(s.Size) }

// PayloadLen is the payload length of message seq.
func (s Spec) PayloadLen(seq uint64) int {
	n := s.Messages()
	if n > 0 && seq+1 == uint64(n) {
		return int(s.Bytes - (n-1)*int64(s.Size))
	}
	return s.Size
}

// WireBytes is the number of bytes the messages of the run put on the
// connection (0 when open-ended: the amount is known only at the end).
func (s Spec) WireBytes() int64 { return s.Bytes + s.Messages()*HeaderLen }

// model is what both ends know about a run: the payload block and the
// checksum every message must have.
type model struct {
	spec    Spec
	key     uint64
	base    []byte // pristine payload block, spec.Size bytes
	lastLen int
	crcFull uint32 // CRC of base[:Size-stamp(Size)]
	crcLast uint32 // CRC of base[:lastLen-stamp(lastLen)]
}

func newModel(s Spec) (*model, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	m := &model{spec: s, key: mix64(s.Seed ^ uint64(s.Run)*0x9e3779b97f4a7c15), base: make([]byte, s.Size)}
	var seed [32]byte
	binary.LittleEndian.PutUint64(seed[:], s.Seed)
	binary.LittleEndian.PutUint64(seed[8:], 0x5332424d)
	rand.NewChaCha8(seed).Read(m.base)
	m.lastLen = s.Size
	if !s.Open() {
		m.lastLen = s.PayloadLen(uint64(s.Messages() - 1))
	}
	m.crcFull = crc32.Checksum(m.base[:s.Size-stampSize(s.Size)], castagnoli)
	m.crcLast = crc32.Checksum(m.base[:m.lastLen-stampSize(m.lastLen)], castagnoli)
	return m, nil
}

func stampSize(payloadLen int) int { return min(stampLen, payloadLen) }

// stamp is the per-message part of the payload.
func (m *model) stamp(seq uint64) [stampLen]byte {
	var b [stampLen]byte
	binary.LittleEndian.PutUint64(b[:], mix64(seq^m.key))
	return b
}

// expectedCRC is the checksum message seq must carry.
func (m *model) expectedCRC(seq uint64) uint32 {
	n := m.spec.PayloadLen(seq)
	prefix := m.crcFull
	if n != m.spec.Size {
		prefix = m.crcLast
	}
	st := m.stamp(seq)
	return crc32.Update(prefix, castagnoli, st[:stampSize(n)])
}

// endCRC is the checksum of the end marker of an open-ended run of count
// messages.
func (m *model) endCRC(count uint64) uint32 {
	return uint32(mix64(^count ^ m.key))
}

// mix64 is SplitMix64's finaliser: a cheap bijective scrambler.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// Generator produces the messages of one run.
type Generator struct {
	m   *model
	buf []byte // header + payload, rewritten in place per message
	// dirty is the payload range of buf stamped by a short message, to
	// restore from base before the next message.
	dirtyLo, dirtyHi int
}

// NewGenerator returns the generator of s.
func NewGenerator(s Spec) (*Generator, error) {
	m, err := newModel(s)
	if err != nil {
		return nil, err
	}
	g := &Generator{m: m, buf: make([]byte, HeaderLen+s.Size)}
	copy(g.buf[HeaderLen:], m.base)
	return g, nil
}

// Spec returns the generator's workload.
func (g *Generator) Spec() Spec { return g.m.spec }

// Message returns message seq (header and payload). The slice is reused:
// it is valid until the next call.
func (g *Generator) Message(seq uint64) []byte {
	s := g.m.spec
	n := s.PayloadLen(seq)
	p := g.buf[HeaderLen:]
	if g.dirtyHi > g.dirtyLo {
		copy(p[g.dirtyLo:g.dirtyHi], g.m.base[g.dirtyLo:g.dirtyHi])
		g.dirtyLo, g.dirtyHi = 0, 0
	}
	k := stampSize(n)
	st := g.m.stamp(seq)
	copy(p[n-k:n], st[:k])
	if n != s.Size {
		g.dirtyLo, g.dirtyHi = n-k, n
	}
	h := g.buf[:HeaderLen]
	copy(h, magic)
	binary.BigEndian.PutUint32(h[4:], s.Run)
	binary.BigEndian.PutUint64(h[8:], seq)
	binary.BigEndian.PutUint32(h[16:], uint32(n))
	binary.BigEndian.PutUint32(h[20:], g.m.expectedCRC(seq))
	return g.buf[:HeaderLen+n]
}

// End returns the end marker of an open-ended run after count messages.
// The slice is reused like Message's.
func (g *Generator) End(count uint64) []byte {
	h := g.buf[:HeaderLen]
	copy(h, endMagic)
	binary.BigEndian.PutUint32(h[4:], g.m.spec.Run)
	binary.BigEndian.PutUint64(h[8:], count)
	binary.BigEndian.PutUint32(h[16:], 0)
	binary.BigEndian.PutUint32(h[20:], g.m.endCRC(count))
	return h
}

// batchSize is the largest write Produce assembles from small messages;
// messages of directWrite bytes or more are written as they are (a copy
// would cost more than the extra system call).
const (
	batchSize   = 256 << 10
	directWrite = 32 << 10
)

// Produce writes every message of g's run (of a fixed amount) to w, in
// order, as fast as w takes them. Small messages are coalesced into writes of up to 256 KiB;
// large ones are written directly. It returns the bytes written.
func Produce(w io.Writer, g *Generator) (int64, error) {
	if g.m.spec.Open() {
		return 0, errors.New("bench: Produce needs a run of a fixed amount")
	}
	var (
		total int64
		batch = make([]byte, 0, batchSize)
	)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		n, err := w.Write(batch)
		total += int64(n)
		batch = batch[:0]
		return err
	}
	msgs := uint64(g.m.spec.Messages())
	for seq := uint64(0); seq < msgs; seq++ {
		m := g.Message(seq)
		if len(m) >= directWrite {
			if err := flush(); err != nil {
				return total, err
			}
			n, err := w.Write(m)
			total += int64(n)
			if err != nil {
				return total, err
			}
			continue
		}
		if len(batch)+len(m) > batchSize {
			if err := flush(); err != nil {
				return total, err
			}
		}
		batch = append(batch, m...)
	}
	if err := flush(); err != nil {
		return total, err
	}
	if total != g.m.spec.WireBytes() {
		return total, errors.New("bench: produced byte count does not match the spec")
	}
	return total, nil
}
