package bench

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
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
	m    *model
	msgs uint64

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
	return &Verifier{m: m, msgs: uint64(s.Messages())}, nil
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
			if err := v.checkHeader(); err != nil {
				return err
			}
			v.offset += int64(n)
			v.hn = 0
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

func (v *Verifier) checkHeader() error {
	h := v.hdr[:]
	if string(h[:4]) != magic {
		return v.fail("bad magic %q: framing lost (corrupted, truncated or foreign data)", h[:4])
	}
	if run := binary.BigEndian.Uint32(h[4:]); run != v.m.spec.Run {
		return v.fail("message of another run (tag %08x, this run is %08x): stale data", run, v.m.spec.Run)
	}
	seq := binary.BigEndian.Uint64(h[8:])
	switch {
	case seq < v.next:
		return v.fail("duplicate or stale message: got seq %d again, expected %d", seq, v.next)
	case seq >= v.msgs:
		return v.fail("seq %d beyond the last message %d", seq, v.msgs-1)
	case seq > v.next:
		return v.fail("missing or reordered messages: got seq %d, expected %d (%d skipped)", seq, v.next, seq-v.next)
	}
	n := int(binary.BigEndian.Uint32(h[16:]))
	if want := v.m.spec.PayloadLen(seq); n != want {
		return v.fail("payload length %d, expected %d", n, want)
	}
	crc := binary.BigEndian.Uint32(h[20:])
	if want := v.m.expectedCRC(seq); crc != want {
		return v.fail("header checksum %08x is not that of message %d (%08x): wrong content or corrupted header", crc, seq, want)
	}
	v.plen, v.remain, v.want = n, n, crc
	return nil
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
