package bench

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"time"
)

// IntegrityError is a violation of the message stream: a message is
// corrupted, missing, duplicated, out of order, from another run, or the
// stream is truncated or too long.
type IntegrityError struct {
	// Seq is the sequence number expected when the violation was found.
	Seq uint64
	// Offset is the stream offset of the first byte of the message (or
	// of the excess data) found faulty.
	Offset int64
	// Problem says what is wrong.
	Problem string
}

func (e *IntegrityError) Error() string {
	return fmt.Sprintf("integrity error at message %d (stream offset %d): %s", e.Seq, e.Offset, e.Problem)
}

// IsIntegrity reports whether err is (or wraps) an IntegrityError.
func IsIntegrity(err error) bool {
	var ie *IntegrityError
	return errors.As(err, &ie)
}

// Verifier checks a message stream as it arrives, in chunks of any size,
// and records when each message completes. It is not safe for concurrent
// use. After the first violation every call returns the same error.
type Verifier struct {
	m     *model
	msgs  uint64 // messages of the run; MaxUint64 when open-ended
	open  bool   // run ends with an end marker
	ended bool   // the end marker arrived

	next   uint64 // sequence number expected next
	offset int64  // stream bytes consumed
	start  int64  // offset of the current message's first byte

	hdr [HeaderLen]byte
	hn  int // header bytes held

	inPayload bool
	remain    int    // payload bytes still to come
	plen      int    // current payload length
	crc       uint32 // running CRC of the current payload
	want      uint32 // CRC from the current header

	payload int64 // payload bytes of complete messages
	arr     Arrivals
	err     error
}

// NewVerifier returns a verifier for the run s.
func NewVerifier(s Spec) (*Verifier, error) {
	m, err := newModel(s)
	if err != nil {
		return nil, err
	}
	v := &Verifier{m: m, msgs: uint64(s.Messages()), open: s.Open()}
	if v.open {
		v.msgs = math.MaxUint64
	}
	return v, nil
}

func (v *Verifier) fail(format string, args ...any) error {
	v.err = &IntegrityError{Seq: v.next, Offset: v.start, Problem: fmt.Sprintf(format, args...)}
	return v.err
}

// Feed consumes the next chunk of the stream, received at time at (any
// monotonic clock, e.g. time since the connection was accepted). Messages
// completed by this chunk are recorded as arriving at at.
func (v *Verifier) Feed(p []byte, at time.Duration) error {
	for len(p) > 0 {
		if v.err != nil {
			return v.err
		}
		if !v.inPayload {
			if v.hn == 0 {
				v.start = v.offset
			}
			if v.ended {
				return v.fail("%d unexpected bytes after the end marker", len(p))
			}
			if v.next >= v.msgs {
				return v.fail("%d unexpected bytes after the last message (%d messages expected)", len(p), v.msgs)
			}
			n := copy(v.hdr[v.hn:], p)
			v.hn += n
			p = p[n:]
			if v.hn < HeaderLen {
				v.offset += int64(n)
				break
			}
			end, err := v.checkHeader()
			if err != nil {
				return err
			}
			v.offset += int64(n)
			v.hn = 0
			if end {
				v.ended = true
				continue
			}
			v.inPayload = true
			v.crc = 0
		}
		n := min(v.remain, len(p))
		v.crc = crc32.Update(v.crc, castagnoli, p[:n])
		v.remain -= n
		v.offset += int64(n)
		p = p[n:]
		if v.remain == 0 {
			if v.crc != v.want {
				return v.fail("payload corrupted: CRC-32C %08x, header says %08x", v.crc, v.want)
			}
			v.payload += int64(v.plen)
			v.arr.Add(at)
			v.next++
			v.inPayload = false
		}
	}
	return v.err
}

// checkHeader checks the header held in v.hdr; end reports an end marker.
func (v *Verifier) checkHeader() (end bool, err error) {
	h := v.hdr[:]
	if string(h[:4]) == endMagic && v.open {
		return true, v.checkEnd()
	}
	if string(h[:4]) != magic {
		return false, v.fail("bad magic %q: framing lost (corrupted, truncated or foreign data)", h[:4])
	}
	if run := binary.BigEndian.Uint32(h[4:]); run != v.m.spec.Run {
		return false, v.fail("message of another run (tag %08x, this run is %08x): stale data", run, v.m.spec.Run)
	}
	seq := binary.BigEndian.Uint64(h[8:])
	switch {
	case seq < v.next:
		return false, v.fail("duplicate or stale message: got seq %d again, expected %d", seq, v.next)
	case seq >= v.msgs:
		return false, v.fail("seq %d beyond the last message %d", seq, v.msgs-1)
	case seq > v.next:
		return false, v.fail("missing or reordered messages: got seq %d, expected %d (%d skipped)", seq, v.next, seq-v.next)
	}
	n := int(binary.BigEndian.Uint32(h[16:]))
	if want := v.m.spec.PayloadLen(seq); n != want {
		return false, v.fail("payload length %d, expected %d", n, want)
	}
	crc := binary.BigEndian.Uint32(h[20:])
	if want := v.m.expectedCRC(seq); crc != want {
		return false, v.fail("header checksum %08x is not that of message %d (%08x): wrong content or corrupted header", crc, seq, want)
	}
	v.plen, v.remain, v.want = n, n, crc
	return false, nil
}

// checkEnd checks the end marker of an open-ended run held in v.hdr.
func (v *Verifier) checkEnd() error {
	h := v.hdr[:]
	if run := binary.BigEndian.Uint32(h[4:]); run != v.m.spec.Run {
		return v.fail("end marker of another run (tag %08x, this run is %08x): stale data", run, v.m.spec.Run)
	}
	count := binary.BigEndian.Uint64(h[8:])
	switch {
	case binary.BigEndian.Uint32(h[16:]) != 0 || binary.BigEndian.Uint32(h[20:]) != v.m.endCRC(count):
		return v.fail("corrupted end marker")
	case count != v.next:
		return v.fail("end marker says %d messages were sent, %d arrived: messages lost or duplicated", count, v.next)
	}
	return nil
}

// Done reports whether the whole run has been verified (every message,
// and the end marker of an open-ended run).
func (v *Verifier) Done() bool {
	if v.err != nil || v.inPayload || v.hn > 0 {
		return false
	}
	if v.open {
		return v.ended
	}
	return v.next == v.msgs
}

// Finish reports whether the stream, now ended, was complete.
func (v *Verifier) Finish() error {
	if v.err != nil {
		return v.err
	}
	if v.inPayload || v.hn > 0 {
		got := v.hn
		if v.inPayload {
			got = HeaderLen + v.plen - v.remain
		}
		return v.fail("stream ended inside a message (%d bytes of it received)", got)
	}
	if v.open {
		if !v.ended {
			return v.fail("stream ended after %d messages without the end marker: truncated", v.next)
		}
		return nil
	}
	if v.next < v.msgs {
		return v.fail("stream ended after %d of %d messages", v.next, v.msgs)
	}
	return nil
}

// Messages is the number of complete, verified messages.
func (v *Verifier) Messages() int64 { return int64(v.next) }

// PayloadBytes is the payload of the complete, verified messages.
func (v *Verifier) PayloadBytes() int64 { return v.payload }

// Arrivals returns the completion times of the verified messages.
func (v *Verifier) Arrivals() *Arrivals { return &v.arr }

// Measure summarises the verified messages (see Summarize).
func (v *Verifier) Measure() Measure {
	return Summarize(&v.arr, v.payload, int64(v.m.spec.PayloadLen(0)))
}
