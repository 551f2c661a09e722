package carry

import (
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"time"

	"scistream/internal/relay"
)

// Striping: a connection carried on several legs at once, so that one
// application connection is not held to what one TCP flow gets on the
// WAN (a firewall that balances or polices by flow, a lossy long path,
// one core's cipher). The frames are the same as on one leg: a data
// frame says where its bytes are, so the legs need not keep an order
// between them.
//
//   - The dialer asks for N legs in its open frame (Open.Stripes); the
//     acceptor's accepted frame grants up to N (Header.Stripes), or says
//     nothing (a release without striping: the connection keeps one
//     leg). The dialer then brings each further leg with a stripe frame,
//     proved as a join is (wan), and the acceptor adds it (AddStripe).
//   - Sending: each leg has a pump that takes the next frame of the
//     send buffer when its leg takes a write: a leg whose socket is full
//     (its unsent bytes past the low-water mark the caller sets) takes
//     no more until it drains, so a slow or lossy leg gets less. The
//     window still bounds the bytes out, whatever leg they took; acks,
//     pings and the fin go on the first leg, and the fin only once every
//     byte is acknowledged (it is taken at the received position).
//   - Receiving: each leg has a reader; a frame past the position
//     received in order waits in the reorder buffer (ooo) until the
//     bytes before it came. The window bounds it: nothing is sent past
//     the window the receiver granted, so the backlog and the reorder
//     buffer together hold at most Window, and a slow leg stops the
//     sender (backpressure) rather than growing either.
//   - A leg lost is every leg lost: the connection parks, a new first
//     leg joins it and resends from the position received in order,
//     and the dialer brings the other legs again. A leg the peer ended
//     in order (its side of the connection is done with it) is only
//     dropped; if it held bytes after all, nothing is acknowledged past
//     them, and ErrLegStalled takes the connection's legs for lost.

// stripeFrame is the largest data frame of a striped connection: small
// enough that the legs share the bytes finely, large enough for few
// system calls.
const stripeFrame = 256 << 10

// SetStripes says, before Relay, how many legs the connection may have
// at once: the dialer's ask (its open frame's Stripes), or what the
// acceptor granted (its accepted frame's). One or less: one leg.
func (c *Conn) SetStripes(n int) {
	n = min(max(n, 1), MaxStripes)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dialer {
		c.wantStripes = n
		return
	}
	if n > 1 {
		c.stripeLocked(n)
	}
}

// stripeLocked makes the connection striped, of n legs at most. c.mu
// must be held.
func (c *Conn) stripeLocked(n int) {
	c.striped, c.maxStripes = true, n
	if c.leg != nil {
		c.startLegLocked(c.leg, false)
	}
}

// Stripes returns the legs the connection may have at once (1 unless
// striped) and those it has now.
func (c *Conn) Stripes() (granted, now int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	granted = 1
	if c.striped {
		granted = c.maxStripes
	}
	if c.leg != nil {
		now = 1 + len(c.stripes)
	}
	return granted, now
}

// Gen counts the first legs the connection had: AddStripe of a leg
// brought for one refuses it once another replaced it.
func (c *Conn) Gen() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// ErrNoStripe refuses a leg AddStripe cannot take now.
var ErrNoStripe = errors.New("the connection takes no further leg now")

// AddStripe gives the striped connection the further leg nc, beside its
// first: for the dialer, brought while gen (Gen) was its first leg's
// (gen < 0: any); answer, if not nil (the acceptor's), is called under
// the connection's lock before the leg carries anything, to write the
// handshake's answer. It fails (ErrNoStripe) if the connection ended,
// is not striped, waits for a first leg, has its legs, or (gen) changed
// its first leg; the caller then ends nc.
func (c *Conn) AddStripe(nc net.Conn, gen int, answer func() error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var why string
	switch {
	case c.done:
		why = "it ended"
	case !c.striped:
		why = "it is not striped"
	case c.leg == nil:
		why = "it waits for its first leg"
	case gen >= 0 && gen != c.gen:
		why = "its first leg was replaced"
	case 1+len(c.stripes) >= c.maxStripes:
		why = fmt.Sprintf("it has its %d legs", c.maxStripes)
	}
	if why != "" {
		return fmt.Errorf("%w: %s", ErrNoStripe, why)
	}
	if answer != nil {
		if err := answer(); err != nil {
			return err
		}
	}
	l := &leg{c: nc}
	c.stripes = append(c.stripes, l)
	c.startLegLocked(l, true)
	return nil
}

// hasStripeLocked reports whether l is one of the legs beside the
// first. c.mu must be held.
func (c *Conn) hasStripeLocked(l *leg) bool { return slices.Contains(c.stripes, l) }

// startLegLocked starts what leg l needs once Relay runs: its pump, if
// the connection is striped, and, for a stripe, its reader (the first
// leg's is recvLoop). c.mu must be held.
func (c *Conn) startLegLocked(l *leg, stripe bool) {
	if !c.running || l.lost || c.done {
		return
	}
	if c.striped && !l.pumping {
		l.pumping = true
		c.wg.Add(1)
		go c.pump(l)
	}
	if stripe && !l.reading {
		l.reading = true
		c.wg.Add(1)
		go c.readStripe(l)
	}
}

// dropLegsLocked ends every leg of the connection: a striped one loses
// them together. Each ends with a reset, never in order: a stripe's
// orderly end tells the peer that this side is done with it, and the
// peer would then wait on the legs it has left (a first leg that a
// firewall blackholes: until the liveness timeout) instead of parking,
// or resetting its application, at once. c.mu must be held.
func (c *Conn) dropLegsLocked() {
	for _, l := range c.stripes {
		if !l.lost {
			l.lost = true
			relay.Abort(l.c)
		}
	}
	if l := c.leg; l != nil && !l.lost {
		l.lost = true
		relay.Abort(l.c)
	}
	c.leg, c.stripes = nil, nil
	c.cond.Broadcast() // the pumps see it
}

// pump sends data frames on leg l while the connection is striped and
// l carries: the next bytes the peer's window takes, whenever l takes a
// write.
func (c *Conn) pump(l *leg) {
	defer c.wg.Done()
	hdr := make([]byte, HeaderLen)
	for {
		c.mu.Lock()
		for !c.done && !l.lost && (c.sent >= c.snd.end || c.sent >= c.limit) {
			c.cond.Wait()
		}
		if c.done || l.lost {
			c.mu.Unlock()
			return
		}
		if c.sent == c.snd.acked {
			c.progressAt = time.Now() // nothing was out: count from now
		}
		payload, pinned := c.snd.slice(c.sent, int(min(uint64(stripeFrame), c.limit-c.sent)))
		PutHeader(hdr, Header{Type: TypeData, Pos: c.sent, Length: uint32(len(payload))})
		c.sent += uint64(len(payload))
		c.mu.Unlock()
		l.wmu.Lock()
		err := l.writeFrame(hdr, payload)
		l.wmu.Unlock()
		c.mu.Lock()
		c.snd.unpin(pinned)
		if err != nil && !l.lost && !c.done {
			// As flush: the reader meets the leg's end within a moment,
			// after what the peer sent before it.
			l.c.SetReadDeadline(time.Now().Add(time.Second))
		}
		c.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// readStripe reads leg l, a stripe, until it fails or the connection
// ends.
func (c *Conn) readStripe(l *leg) {
	defer c.wg.Done()
	buf := make([]byte, HeaderLen)
	err := c.readLeg(l, c.app, c.counts, buf)
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.done || l.lost:
	case errors.Is(err, ErrFrame):
		c.failLocked(&relay.Error{Conn: relay.B, Op: "read", Err: err}, err.Error())
	case err == io.EOF:
		// The peer ended it in order: its side is done with it.
		l.lost = true
		l.c.Close()
		c.stripes = slices.DeleteFunc(c.stripes, func(s *leg) bool { return s == l })
		c.cond.Broadcast()
	default:
		c.lostLocked(l, err)
	}
}

// stripedData takes one data frame of header h from leg l of a striped
// connection: in order, it goes to the backlog with what waited behind
// it; past the position received, it waits in the reorder buffer.
func (c *Conn) stripedData(l *leg, h Header, app net.Conn, w endpoint, counts Counts) error {
	c.mu.Lock()
	granted := c.ackedPos + uint64(max(c.ackedWin, 0))
	fin := c.peerFin
	c.mu.Unlock()
	end := h.Pos + uint64(h.Length)
	if fin {
		return fmt.Errorf("%w: data after the fin", ErrFrame)
	}
	if end > granted {
		return fmt.Errorf("%w: data %d to %d past the window granted (to %d)", ErrFrame, h.Pos, end, granted)
	}
	ch := c.bl.take(int(h.Length))
	if _, err := io.ReadFull(l.c, ch.buf()[:h.Length]); err != nil {
		c.mu.Lock()
		c.bl.put(ch)
		c.mu.Unlock()
		return err
	}
	ch.n, ch.pos = int(h.Length), h.Pos
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case end <= c.recv: // resent, here already
		c.bl.put(ch)
		return nil
	case ch.pos > c.recv:
		i, _ := slices.BinarySearchFunc(c.ooo, ch.pos, func(o *chunk, pos uint64) int { return cmpPos(o.pos, pos) })
		c.ooo = slices.Insert(c.ooo, i, ch)
		return nil
	}
	c.deliverLocked(ch)
	for len(c.ooo) > 0 && c.ooo[0].pos <= c.recv {
		o := c.ooo[0]
		c.ooo = c.ooo[1:]
		if o.end() <= c.recv {
			c.bl.put(o)
			continue
		}
		c.deliverLocked(o)
	}
	if c.bl.n > 0 {
		c.startAppWriterLocked(app, w, counts)
	}
	c.ackAfterLocked()
	return nil
}

func cmpPos(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// deliverLocked moves ch, whose bytes start at or before the position
// received, to the backlog, past what is here already. c.mu must be
// held.
func (c *Conn) deliverLocked(ch *chunk) {
	skip := int(c.recv - ch.pos)
	ch.off += skip
	ch.pos = c.recv
	c.recv += uint64(ch.n - ch.off)
	c.bl.push(ch)
}

// releaseOOOLocked gives back the reorder buffer. c.mu must be held.
func (c *Conn) releaseOOOLocked() {
	for _, o := range c.ooo {
		c.bl.put(o)
	}
	c.ooo = nil
}

// endStripes ends the stripes of a connection that ended in order: each
// in order, and what the peer still sends read until it ends its side
// too (lingerFor at most), all at once.
func endStripes(stripes []*leg) {
	var wg sync.WaitGroup
	for _, s := range stripes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.wmu.Lock() // (a pump's write under way ends first)
			closeWrite(s.c)
			s.wmu.Unlock()
			s.c.SetReadDeadline(time.Now().Add(lingerFor))
			io.Copy(io.Discard, s.c)
			s.c.Close()
		}()
	}
	wg.Wait()
}
