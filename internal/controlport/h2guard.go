package controlport

import (
	"crypto/tls"
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"time"
)

// The HTTP/2 connections of the control port (the gRPC service beside
// the API) are served by net/http over an h2Conn: the TLS connection
// whose handshake chose "h2", with the frames going each way watched
// from their 9-byte headers. net/http bounds a connection's concurrent
// streams, but a client that opens streams and resets them at once
// (HTTP/2 rapid reset, CVE-2023-44487), or makes the server reset or
// refuse them, costs the gateway a handler per stream while holding
// nothing: one connection took 1.5 of 2 cores. The guard keeps a bucket
// of resets per connection, client RST_STREAM and server RST_STREAM
// (a refused stream, a stream the client broke) alike: a connection that
// empties it is sent GOAWAY (ENHANCE_YOUR_CALM) and closed. A client
// that completes its calls never resets; one that cancels a call now and
// then never comes near the bucket's depth.
//
// The h2Conn has no ConnectionState: net/http serves it as HTTP/2 with
// prior knowledge (http.Protocols.SetUnencryptedHTTP2), the TLS under it
// being the guard's own; so the frames it reads and writes pass through
// the guard in the clear. Requests so carry no Request.TLS, which
// neither the API nor the gRPC service reads.

// Limits of the guard.
const (
	resetBurst = 200                   // resets a connection may make at once
	resetEvery = 50 * time.Millisecond // one more reset allowed per this (20/s)
)

// HTTP/2 frame types and flags the guard reads (RFC 9113 sec. 6).
const (
	frameHeaderLen   = 9
	frameHeaders     = 0x1
	frameRSTStream   = 0x3
	frameGoAway      = 0x7
	codeEnhanceCalm  = 0xb
	clientPrefaceLen = 24 // "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
)

// errCalm is what the guard's Read reports once it closed a connection.
var errCalm = errors.New("controlport: HTTP/2 connection closed: streams reset faster than they complete")

// frameHeader is the part of an HTTP/2 frame header the guard reads.
type frameHeader struct {
	length uint32
	typ    byte
	flags  byte
	stream uint32
}

// frameScan follows the frame boundaries of one direction of an HTTP/2
// connection from the bytes that pass, whatever their split.
type frameScan struct {
	skip int // bytes still to pass of a preface or a frame's payload
	hdr  [frameHeaderLen]byte
	hdrN int // bytes of hdr filled
}

// feed passes b, calling f with each frame header completed in it.
func (s *frameScan) feed(b []byte, f func(frameHeader)) {
	for len(b) > 0 {
		if s.skip > 0 {
			n := min(s.skip, len(b))
			s.skip -= n
			b = b[n:]
			continue
		}
		n := copy(s.hdr[s.hdrN:], b)
		s.hdrN += n
		b = b[n:]
		if s.hdrN < frameHeaderLen {
			return
		}
		s.hdrN = 0
		h := frameHeader{
			length: uint32(s.hdr[0])<<16 | uint32(s.hdr[1])<<8 | uint32(s.hdr[2]),
			typ:    s.hdr[3],
			flags:  s.hdr[4],
			stream: binary.BigEndian.Uint32(s.hdr[5:]) &^ (1 << 31),
		}
		s.skip = int(h.length)
		f(h)
	}
}

// atBoundary reports whether the next byte starts a frame.
func (s *frameScan) atBoundary() bool { return s.skip == 0 && s.hdrN == 0 }

// resetBucket allows resetBurst resets at once and one more per
// resetEvery.
type resetBucket struct {
	level float64
	last  time.Time
}

// take takes one reset at now, and reports false once the bucket is
// empty.
func (b *resetBucket) take(now time.Time) bool {
	if b.last.IsZero() {
		b.level, b.last = resetBurst, now
	}
	b.level = min(resetBurst, b.level+float64(now.Sub(b.last))/float64(resetEvery))
	b.last = now
	b.level--
	return b.level >= 0
}

// h2Conn is an HTTP/2 connection of the control port, its frames
// guarded.
type h2Conn struct {
	tc   *tls.Conn
	slot *slot

	in frameScan // client to server; read by one reader at a time

	wmu sync.Mutex // serialises Write and the guard's GOAWAY
	out frameScan  // server to client, under wmu

	mu         sync.Mutex // guards the following fields
	resets     resetBucket
	lastStream uint32 // the highest stream the client opened
	tripped    bool
}

func newH2Conn(tc *tls.Conn, sl *slot) *h2Conn {
	return &h2Conn{tc: tc, slot: sl, in: frameScan{skip: clientPrefaceLen}}
}

func (c *h2Conn) controlSlot() *slot { return c.slot }

// Read reads from the client and watches its frames; once the guard
// tripped it reports errCalm.
func (c *h2Conn) Read(b []byte) (int, error) {
	n, err := c.tc.Read(b)
	if n > 0 {
		now := time.Now()
		trip := false
		c.in.feed(b[:n], func(h frameHeader) {
			switch h.typ {
			case frameHeaders:
				c.mu.Lock()
				if h.stream > c.lastStream {
					c.lastStream = h.stream
				}
				c.mu.Unlock()
			case frameRSTStream:
				c.mu.Lock()
				if !c.resets.take(now) {
					trip = true
				}
				c.mu.Unlock()
			}
		})
		c.mu.Lock()
		trip = trip || c.resets.level < 0
		c.mu.Unlock()
		if trip {
			c.trip()
			return 0, errCalm
		}
	}
	return n, err
}

// Write writes to the client and watches the frames the server sends:
// each RST_STREAM it sends (a stream refused or broken) takes a reset
// from the bucket.
func (c *h2Conn) Write(b []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	now := time.Now()
	c.out.feed(b, func(h frameHeader) {
		if h.typ == frameRSTStream {
			c.mu.Lock()
			c.resets.take(now)
			c.mu.Unlock()
		}
	})
	return c.tc.Write(b)
}

// trip sends GOAWAY (ENHANCE_YOUR_CALM) if the server is not in the
// middle of a frame, counts the refusal and closes the connection.
func (c *h2Conn) trip() {
	c.mu.Lock()
	if c.tripped {
		c.mu.Unlock()
		return
	}
	c.tripped = true
	last := c.lastStream
	c.mu.Unlock()
	c.slot.g.refuse(ReasonResets, c.slot.src)
	if c.wmu.TryLock() {
		if c.out.atBoundary() {
			c.tc.SetWriteDeadline(time.Now().Add(time.Second))
			c.tc.Write(goAway(last, codeEnhanceCalm, "too many streams reset"))
		}
		c.wmu.Unlock()
	}
	abort(c.slot.raw)
}

// goAway is a GOAWAY frame.
func goAway(lastStream, code uint32, debug string) []byte {
	n := 8 + len(debug)
	b := []byte{byte(n >> 16), byte(n >> 8), byte(n), frameGoAway, 0, 0, 0, 0, 0}
	b = binary.BigEndian.AppendUint32(b, lastStream&^(1<<31))
	b = binary.BigEndian.AppendUint32(b, code)
	return append(b, debug...)
}

// Close closes the connection and gives its place back.
func (c *h2Conn) Close() error {
	c.slot.release()
	return c.tc.Close()
}

func (c *h2Conn) LocalAddr() net.Addr                { return c.tc.LocalAddr() }
func (c *h2Conn) RemoteAddr() net.Addr               { return c.tc.RemoteAddr() }
func (c *h2Conn) SetDeadline(t time.Time) error      { return c.tc.SetDeadline(t) }
func (c *h2Conn) SetReadDeadline(t time.Time) error  { return c.tc.SetReadDeadline(t) }
func (c *h2Conn) SetWriteDeadline(t time.Time) error { return c.tc.SetWriteDeadline(t) }
