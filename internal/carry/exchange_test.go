package carry

import (
	"bytes"
	"crypto/rand"
	"io"
	"net"
	"testing"
	"time"

	"scistream/internal/leakcheck"
	"scistream/internal/relay"
)

// peerRig is a dialer's Conn whose peer is the test itself, speaking
// frames on the leg's other end: what the dialer sends is read frame by
// frame, as a peer gateway would see it.
type peerRig struct {
	t       *testing.T
	prodApp *net.TCPConn // the producer's end of the application connection
	leg     *net.TCPConn // the peer's end of the leg
	errc    chan error
	buf     []byte
}

func newPeerRig(t *testing.T, cfg Config) *peerRig {
	t.Helper()
	d := New(cfg, true)
	prodApp, prodGW := tcpPair(t)
	relay.ResetOnClose(prodGW)
	ld, la := tcpPair(t)
	r := &peerRig{t: t, prodApp: prodApp, leg: la, errc: make(chan error, 1), buf: make([]byte, HeaderLen)}
	go func() {
		if _, err := ld.Write(AppendOpen(nil, Open{ID: ID{2}, Window: d.Window(), Stripes: 1})); err != nil {
			r.errc <- err
			return
		}
		r.errc <- d.Relay(prodGW, ld, Counts{})
	}()
	la.SetDeadline(time.Now().Add(30 * time.Second)) // a bound on a stuck test, not a timing
	h := r.frame()
	if h.Type != TypeOpen {
		t.Fatalf("first frame %q, want open", h.Type)
	}
	if _, err := io.ReadFull(la, make([]byte, h.Length)); err != nil {
		t.Fatal(err)
	}
	if _, err := la.Write(AppendHeader(nil, Header{Type: TypeAccepted, Length: DefaultWindow})); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		prodApp.Close()
		la.Close()
		<-r.errc
	})
	return r
}

// frame reads the next frame's header from the dialer.
func (r *peerRig) frame() Header {
	r.t.Helper()
	h, err := ReadHeader(r.leg, r.buf)
	if err != nil {
		r.t.Fatalf("read a frame: %v", err)
	}
	return h
}

// ack tells the dialer the peer received its stream up to pos.
func (r *peerRig) ack(pos uint64) {
	r.t.Helper()
	if _, err := r.leg.Write(AppendHeader(nil, Header{Type: TypeAck, Pos: pos, Length: DefaultWindow})); err != nil {
		r.t.Fatal(err)
	}
}

// A request-reply exchange's message that fills the first, small chunk
// of the send buffer and spills over (16 KiB and a 24-byte header, in
// one write) is not cut at the chunk's end: that made two data frames of
// every message (16 KiB, then 24 bytes), which the peer wrote to its
// application in two writes its reader woke up for one after the other.
// (TCP may still hand the send loop a message in parts: the frames then
// follow the reads.)
func TestMessageNotCutAtChunk(t *testing.T) {
	leakcheck.Check(t)
	r := newPeerRig(t, Config{})
	msg := make([]byte, 16<<10+24)
	pos := uint64(0)
	whole := 0
	const messages = 20
	for i := range messages {
		rand.Read(msg)
		if _, err := r.prodApp.Write(msg); err != nil {
			t.Fatal(err)
		}
		var got []byte
		frames := 0
		for len(got) < len(msg) {
			h := r.frame()
			if h.Type == TypeAck || h.Type == TypePing {
				continue
			}
			if h.Type != TypeData || h.Pos != pos+uint64(len(got)) {
				t.Fatalf("message %d: frame %q at %d, want data at %d", i, h.Type, h.Pos, pos+uint64(len(got)))
			}
			if int(h.Length) == chunkSizes[0] {
				t.Fatalf("message %d: a data frame of %d bytes, cut at the end of the first chunk", i, h.Length)
			}
			b := make([]byte, h.Length)
			if _, err := io.ReadFull(r.leg, b); err != nil {
				t.Fatal(err)
			}
			got = append(got, b...)
			frames++
		}
		if !bytes.Equal(got, msg) {
			t.Fatalf("message %d: the frames carry other bytes than the application wrote", i)
		}
		if frames == 1 {
			whole++
		}
		pos += uint64(len(msg))
		r.ack(pos) // the reply's ack: the sender's buffer empties, as between requests
	}
	if whole == 0 {
		t.Fatalf("none of %d messages went in one data frame", messages)
	}
}

// Bytes the peer sends while nothing goes back are acknowledged within
// the ack delay, every time: the ack timer, which is not stopped when an
// ack goes with other frames, is armed again for bytes that come after
// it looked and found none waiting.
func TestAckDelayEachTime(t *testing.T) {
	leakcheck.Check(t)
	const delay = 20 * time.Millisecond
	r := newPeerRig(t, Config{AckDelay: delay})
	consumer := make(chan []byte, 1)
	go func() {
		b := make([]byte, 64)
		for {
			n, err := r.prodApp.Read(b)
			if err != nil {
				close(consumer)
				return
			}
			consumer <- append([]byte(nil), b[:n]...)
		}
	}()
	pos := uint64(0)
	for i := range 4 {
		payload := []byte{'a' + byte(i), 'b', 'c'}
		if _, err := r.leg.Write(append(AppendHeader(nil, Header{Type: TypeData, Pos: pos, Length: uint32(len(payload))}), payload...)); err != nil {
			t.Fatal(err)
		}
		sent := time.Now()
		if got := <-consumer; !bytes.Equal(got, payload) {
			t.Fatalf("round %d: the application read %q, want %q", i, got, payload)
		}
		pos += uint64(len(payload))
		h := r.frame()
		for h.Type == TypePing {
			h = r.frame()
		}
		if h.Type != TypeAck || h.Pos != pos {
			t.Fatalf("round %d: frame %q at %d, want an ack of %d", i, h.Type, h.Pos, pos)
		}
		// Not sooner than the delay (it waits for data going the
		// other way to ride with); the upper bound is the rig's
		// deadline, not a timing: a starved machine may be late.
		// (The first bytes are acknowledged at once: that ack opens
		// the window from the initial one to the whole.)
		if waited := time.Since(sent); i > 0 && waited < delay-time.Millisecond {
			t.Fatalf("round %d: acknowledged after %v, before the ack delay %v", i, waited, delay)
		}
	}
}
