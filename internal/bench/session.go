package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"sync/atomic"
	"time"
)

// MaxRTTSamples bounds the round-trip times one connection keeps; beyond
// it, Send keeps a uniform random sample of that many (reservoir
// sampling), so percentiles stay unbiased and memory bounded.
const MaxRTTSamples = 1 << 20

// SendOptions shape and bound one producer connection.
type SendOptions struct {
	// Idle bounds every write and every wait for the consumer. If zero,
	// 30 seconds.
	Idle time.Duration
	// End is the deadline of the whole run. If zero, none beyond ctx.
	End time.Time
	// Duration is how long an open-ended run sends; required (positive)
	// when the Hello's Spec is open-ended, ignored otherwise.
	Duration time.Duration
	// Sent, if not nil, counts payload bytes as they are written (for a
	// progress display).
	Sent *atomic.Int64
	// EachMessage writes every message with its own write call, as an
	// application that sends one message at a time does. If false, a
	// throughput run as fast as possible coalesces small messages into
	// writes of up to 256 KiB.
	EachMessage bool
}

// SendResult is what the producer side of one connection measured.
type SendResult struct {
	// Local is the connection's local address.
	Local string
	// Messages and Bytes (payload) sent.
	Messages, Bytes int64
	// Elapsed is the time from the first message written to the last
	// one written (throughput) or to its reply (request-reply).
	Elapsed time.Duration
	// RTT holds the round-trip time of each message in request-reply
	// mode (a uniform sample of MaxRTTSamples beyond that many).
	RTT []time.Duration
	// Peer is what the consumer reported it measured on this
	// connection (its result frame), when the run succeeded.
	Peer *ReceiveResult
}

// deadline returns the earlier of now+idle and end (if set).
func deadline(idle time.Duration, end time.Time) time.Time {
	t := time.Now().Add(idle)
	if !end.IsZero() && end.Before(t) {
		return end
	}
	return t
}

// Send runs the producer side of one connection: it writes h, then the
// run's messages (paced at h.Rate messages/s on a fixed schedule when it
// is positive, so a late message is sent at once and the rate does not
// drift), then the end marker of an open-ended run, half-closes and
// waits for the consumer's result frame (kept in Peer) and end of
// stream. In request-reply mode it waits for each reply before the next
// message. Cancelling ctx closes c at
// once. Send does not close c.
func Send(ctx context.Context, c *net.TCPConn, h Hello, o SendOptions) (*SendResult, error) {
	if o.Idle <= 0 {
		o.Idle = 30 * time.Second
	}
	r := &SendResult{Local: c.LocalAddr().String()}
	if h.Spec.Open() && o.Duration <= 0 {
		return r, errors.New("bench: an open-ended run needs a positive Duration")
	}
	gen, err := NewGenerator(h.Spec)
	if err != nil {
		return r, err
	}
	hello, err := AppendHello(nil, h)
	if err != nil {
		return r, err
	}
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	fail := func(what string, err error) (*SendResult, error) {
		if ctx.Err() != nil {
			return r, fmt.Errorf("producer: %s: %w", what, context.Cause(ctx))
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			if !o.End.IsZero() && !time.Now().Before(o.End) {
				return r, fmt.Errorf("producer: %s: run did not finish in time", what)
			}
			return r, fmt.Errorf("producer: %s: no progress for %s", what, o.Idle)
		}
		return r, fmt.Errorf("producer: %s: %w", what, err)
	}
	write := func(b []byte) error {
		c.SetWriteDeadline(deadline(o.Idle, o.End))
		_, err := c.Write(b)
		return err
	}
	if err := write(hello); err != nil {
		return fail("send the run header", err)
	}

	var (
		msgs   = uint64(h.Spec.Messages())
		open   = h.Spec.Open()
		rr     = h.Mode.RoundTrips()
		echo   = h.Mode == Echo
		paced  = h.Rate > 0
		batch  []byte
		reply  = make([]byte, ReplyLen)
		timer  *time.Timer
		rng    = rand.New(rand.NewPCG(h.Spec.Seed, uint64(h.Spec.Run)))
		seen   int64 // RTT samples offered to the reservoir
		start  = time.Now()
		stopAt = start.Add(o.Duration)
	)
	if !rr && !paced && !o.EachMessage {
		batch = make([]byte, 0, batchSize)
	}
	if echo {
		reply = make([]byte, HeaderLen+h.Spec.Size)
	}
	if paced {
		timer = time.NewTimer(time.Hour)
		timer.Stop()
		defer timer.Stop()
	}
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := write(batch)
		batch = batch[:0]
		return err
	}
	var seq uint64
	// The loop ends after msgs messages, or at stopAt for an open-ended
	// run; every iteration is bounded by o.Idle.
	for ; open || seq < msgs; seq++ {
		if paced {
			due := start.Add(time.Duration(float64(seq) * 1e9 / h.Rate))
			if d := time.Until(due); d > 0 {
				timer.Reset(d)
				select {
				case <-timer.C:
				case <-ctx.Done():
					return fail("pacing", ctx.Err())
				}
			}
		}
		if open && !time.Now().Before(stopAt) {
			break
		}
		m := gen.Message(seq)
		n := int64(len(m) - HeaderLen)
		switch {
		case batch == nil:
			sent := time.Now()
			if err := write(m); err != nil {
				return fail(fmt.Sprintf("write message %d", seq), err)
			}
			if rr {
				c.SetReadDeadline(deadline(o.Idle, o.End))
				if echo {
					if _, err := io.ReadFull(c, reply[:len(m)]); err != nil {
						return fail(fmt.Sprintf("wait for the echo of message %d", seq), err)
					}
					if !bytes.Equal(reply[:len(m)], m) {
						return r, &IntegrityError{Seq: seq, Problem: "the echo differs from the message"}
					}
				} else {
					if _, err := io.ReadFull(c, reply); err != nil {
						return fail(fmt.Sprintf("wait for the reply to message %d", seq), err)
					}
					if err := checkReply(reply, h.Spec.Run, seq); err != nil {
						return r, err
					}
				}
				rtt := time.Since(sent)
				seen++
				if len(r.RTT) < MaxRTTSamples {
					r.RTT = append(r.RTT, rtt)
				} else if k := rng.Int64N(seen); k < MaxRTTSamples {
					r.RTT[k] = rtt
				}
			}
		case len(m) >= directWrite:
			if err := flush(); err != nil {
				return fail("write", err)
			}
			if err := write(m); err != nil {
				return fail(fmt.Sprintf("write message %d", seq), err)
			}
		default:
			if len(batch)+len(m) > batchSize {
				if err := flush(); err != nil {
					return fail("write", err)
				}
			}
			batch = append(batch, m...)
		}
		r.Messages++
		r.Bytes += n
		if o.Sent != nil {
			o.Sent.Add(n)
		}
	}
	if err := flush(); err != nil {
		return fail("write", err)
	}
	r.Elapsed = time.Since(start)
	if open {
		if err := write(gen.End(seq)); err != nil {
			return fail("write the end marker", err)
		}
	}
	if err := c.CloseWrite(); err != nil {
		return fail("half-close", err)
	}
	// Once it has verified the whole run the consumer sends its result
	// frame and closes: read both, expecting nothing else.
	c.SetReadDeadline(deadline(o.Idle, o.End))
	peer, err := readResult(c)
	if err != nil {
		return fail("wait for the consumer's result", err)
	}
	r.Peer = peer
	var b [1]byte
	n, err := c.Read(b[:])
	switch {
	case n > 0:
		return r, errors.New("producer: the consumer sent data after its result; expected only end of stream")
	case errors.Is(err, io.EOF):
		return r, nil
	}
	return fail("wait for the consumer's end of stream", err)
}

// ReceiveOptions bound one consumer connection.
type ReceiveOptions struct {
	// Idle bounds the wait for the run header and every read and write.
	// If zero, 30 seconds.
	Idle time.Duration
	// End is the deadline of the whole run. If zero, none beyond ctx.
	End time.Time
	// Epoch is the origin of the arrival times (shared by the
	// connections of a run, so their times compare). If zero, the time
	// the run header arrived.
	Epoch time.Time
	// Received, if not nil, counts verified payload bytes as they arrive.
	Received *atomic.Int64
	// Check, if not nil, vets the run header before any data is read
	// (for example that it belongs to the run the caller expects).
	Check func(Hello) error
}

// ReceiveResult is what the consumer side of one connection measured.
type ReceiveResult struct {
	// Hello is the run header the producer sent (zero if none arrived).
	Hello Hello
	// Remote is the connection's remote address: the producer itself, or
	// the gateway in front of it.
	Remote string
	// Measure summarises the verified messages, also of a failed run.
	Measure
	// First and Last are the arrival times of the first and last
	// verified message, since Epoch.
	First, Last time.Duration
	// FirstPayload is the payload length of the first message.
	FirstPayload int64
}

// Receive runs the consumer side of one connection: it reads the run
// header, verifies every message as it arrives (count, order, content,
// and the end marker of an open-ended run), answers each message in
// request-reply mode, and at the producer's end of stream sends its
// result frame and returns. At the
// first integrity error it aborts c with a TCP reset and returns the
// IntegrityError. Cancelling ctx closes c at once. Receive closes c.
func Receive(ctx context.Context, c *net.TCPConn, o ReceiveOptions) (*ReceiveResult, error) {
	defer c.Close()
	if o.Idle <= 0 {
		o.Idle = 30 * time.Second
	}
	r := &ReceiveResult{Remote: c.RemoteAddr().String()}
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	fail := func(what string, err error) (*ReceiveResult, error) {
		if ctx.Err() != nil {
			return r, fmt.Errorf("consumer: %s: %w", what, context.Cause(ctx))
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			if !o.End.IsZero() && !time.Now().Before(o.End) {
				return r, fmt.Errorf("consumer: %s: run did not finish in time", what)
			}
			return r, fmt.Errorf("consumer: %s: no progress for %s", what, o.Idle)
		}
		return r, fmt.Errorf("consumer: %s: %w", what, err)
	}
	var hb [HelloLen]byte
	c.SetReadDeadline(deadline(o.Idle, o.End))
	if _, err := io.ReadFull(c, hb[:]); err != nil {
		return fail("read the run header", err)
	}
	h, err := ParseHello(hb[:])
	if err == nil && o.Check != nil {
		err = o.Check(h)
	}
	if err != nil {
		abort(c)
		return r, fmt.Errorf("consumer: from %s: %w", r.Remote, err)
	}
	r.Hello = h
	if o.Epoch.IsZero() {
		o.Epoch = time.Now()
	}
	ver, err := NewVerifier(h.Spec)
	if err != nil {
		return r, err
	}
	r.FirstPayload = int64(h.Spec.PayloadLen(0))
	defer func() {
		r.Measure = ver.Measure()
		r.First, r.Last = ver.arr.first, ver.arr.last
	}()

	rr, echo := h.Mode == RequestReply, h.Mode == Echo
	buf := make([]byte, min(max(HeaderLen+h.Spec.Size, 64<<10), 1<<20))
	var reply [ReplyLen]byte
	// Every read but the last brings at least one byte and the verifier
	// refuses bytes beyond the run: the loop ends within that count for a
	// run of a fixed amount, and by o.End or ctx for an open-ended one.
	limit := int64(math.MaxInt64)
	if !h.Spec.Open() {
		limit = h.Spec.WireBytes() + 1
	}
	var each *messageReads // ReadEach
	if h.ReadEach && h.Mode == Throughput {
		each = new(messageReads)
	}
	for ; limit >= 0; limit-- {
		want := len(buf)
		if each != nil {
			want = each.want(len(buf))
		}
		c.SetReadDeadline(deadline(o.Idle, o.End))
		n, err := c.Read(buf[:want])
		at := time.Since(o.Epoch)
		if each != nil {
			each.got(buf[:n])
		}
		if n > 0 {
			prev, pb := ver.next, ver.payload
			if ferr := ver.Feed(buf[:n], at); ferr != nil {
				abort(c)
				return r, ferr
			}
			if o.Received != nil {
				o.Received.Add(ver.payload - pb)
			}
			if echo {
				// As a plain echo server: every byte back as it came.
				c.SetWriteDeadline(deadline(o.Idle, o.End))
				if _, err := c.Write(buf[:n]); err != nil {
					return fail(fmt.Sprintf("echo after %d messages", ver.Messages()), err)
				}
			}
			for seq := prev; rr && seq < ver.next; seq++ {
				putReply(reply[:], h.Spec.Run, seq)
				c.SetWriteDeadline(deadline(o.Idle, o.End))
				if _, err := c.Write(reply[:]); err != nil {
					return fail(fmt.Sprintf("reply to message %d", seq), err)
				}
			}
		}
		if errors.Is(err, io.EOF) {
			if ferr := ver.Finish(); ferr != nil {
				abort(c)
				return r, ferr
			}
			// Tell the producer what was measured, then close.
			r.Measure, r.First, r.Last = ver.Measure(), ver.arr.first, ver.arr.last
			frame, err := appendResult(nil, r)
			if err != nil {
				return r, err
			}
			c.SetWriteDeadline(deadline(o.Idle, o.End))
			if _, err := c.Write(frame); err != nil {
				return fail("send the result", err)
			}
			return r, nil
		}
		if err != nil {
			return fail(fmt.Sprintf("read after %d messages", ver.Messages()), err)
		}
	}
	return r, errors.New("consumer: read loop exceeded its bound")
}

// messageReads sizes a consumer's reads as an application reading
// message by message does (Hello.ReadEach): one read for a message's
// header, then one per buffer of its payload. It only sizes the reads:
// the verifier checks what they bring.
type messageReads struct {
	hdr      [HeaderLen]byte
	have     int // header bytes read so far
	bodyLeft int // payload bytes of the current message still to read
}

// want returns how many bytes the next read asks for, with a buffer of
// size buf.
func (m *messageReads) want(buf int) int {
	if m.bodyLeft > 0 {
		return min(m.bodyLeft, buf)
	}
	return HeaderLen - m.have
}

// got takes what a read brought.
func (m *messageReads) got(b []byte) {
	if m.bodyLeft > 0 {
		m.bodyLeft -= len(b)
		return
	}
	if m.have += copy(m.hdr[m.have:], b); m.have == HeaderLen {
		m.bodyLeft, m.have = int(min(binary.BigEndian.Uint32(m.hdr[16:]), MaxSize)), 0
	}
}

// abort closes c with a TCP reset, so the far side sees an error rather
// than a clean end of stream.
func abort(c *net.TCPConn) {
	c.SetLinger(0)
	c.Close()
}
