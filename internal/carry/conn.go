package carry

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"time"

	"scistream/internal/relay"
	"scistream/internal/sockio"
)

// Config configures a connection. Zero fields are the defaults given.
type Config struct {
	// Window bounds what one direction holds at each end: the bytes a
	// side read from its application and the peer has not received
	// (sent or not), and the bytes a side received and its application
	// has not taken (the window it grants). Past it the application is
	// not read (backpressure). It limits one connection to about Window
	// per round trip, so it must exceed the path's bandwidth-delay
	// product. If zero, DefaultWindow.
	Window int
	// Budget bounds the bytes held by every connection of the gateway
	// (their chunks): a sender past it waits. nil: no bound but Window.
	Budget *Budget
	// ResumeWindow is how long the connection may be without a leg
	// (parked) before it is reset at its application, counted from the
	// leg's loss. Zero: the connection is never parked, a lost leg
	// resets it at once.
	ResumeWindow time.Duration
	// LegTimeout is how long the peer may be silent on a leg while an
	// answer is due (bytes sent and not acknowledged, a ping) before the
	// leg is taken for lost. If zero, DefaultLegTimeout.
	LegTimeout time.Duration
	// KeepAlive is how long a leg may carry nothing either way before
	// the dialer pings the peer: the answer tells both sides the leg
	// still carries. An acceptor that heard nothing for KeepAlive plus
	// LegTimeout takes the leg for lost (a side that only receives
	// would otherwise never notice a path that went silent). If zero,
	// DefaultKeepAlive.
	KeepAlive time.Duration
	// AckDelay is the longest a received byte waits for its
	// acknowledgement when nothing else goes the other way. If zero,
	// DefaultAckDelay.
	AckDelay time.Duration
	// OnAccepted, if not nil, is called once the acceptor accepted the
	// connection (the dialer's first leg; its answer).
	OnAccepted func()
	// OnLost, if not nil, is called when a leg is lost and the
	// connection parked (ResumeWindow > 0): the dialer's side then
	// brings a new leg (Resume). err is why the leg was lost.
	OnLost func(err error)
	// Log, if not nil, gets the connection's debug lines.
	Log *slog.Logger
}

// Defaults of Config.
const (
	DefaultWindow     = 16 << 20
	DefaultLegTimeout = 10 * time.Second
	DefaultKeepAlive  = 5 * time.Second
	DefaultAckDelay   = 10 * time.Millisecond
	// lingerFor bounds how long an orderly end waits for the peer to
	// end the leg too.
	lingerFor = 2 * time.Second
	// initialWindow is what a dialer may send before the acceptor's
	// answer says its window: the acceptor reads it only once it
	// reached its application, so it waits in the TCP buffers.
	initialWindow = 256 << 10
)

func (c Config) withDefaults() Config {
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.LegTimeout == 0 {
		c.LegTimeout = DefaultLegTimeout
	}
	if c.KeepAlive == 0 {
		c.KeepAlive = DefaultKeepAlive
	}
	if c.AckDelay == 0 {
		c.AckDelay = DefaultAckDelay
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	return c
}

// Counts are what the connection tells its stream of the bytes it moves.
type Counts struct {
	// ToWAN receives the bytes read from the application; FromWAN
	// those written to it. Either may wait (a rate paces the stream):
	// FromWAN is then called where no frame waits on it.
	ToWAN, FromWAN func(int64)
	// Paced reports whether FromWAN may wait now.
	Paced func() bool
}

// Errors of a connection's end, in the *relay.Error it returns.
var (
	// ErrResumeWindow: the connection was parked past its window.
	ErrResumeWindow = fmt.Errorf("no leg came back within the resume window: %w", syscall.ETIMEDOUT)
	// ErrLegSilent: the peer said nothing on a leg past LegTimeout
	// while an answer was due (or, at the acceptor, past KeepAlive plus
	// LegTimeout).
	ErrLegSilent = fmt.Errorf("the peer gateway was silent on the leg: %w", syscall.ETIMEDOUT)
	// ErrLegStalled: a striped connection's peer acknowledged nothing
	// past LegTimeout while bytes were out (one of its legs went
	// silent).
	ErrLegStalled = fmt.Errorf("the peer gateway acknowledged nothing on a striped connection: %w", syscall.ETIMEDOUT)
)

// pools are the chunk pools every connection of the process shares.
var pools = newChunkPools()

// leg is one carrier of the connection's frames.
type leg struct {
	c   net.Conn
	wmu sync.Mutex // serialises writes, held across a frame
	hdr [2 * HeaderLen]byte
	// lost is set (under Conn.mu) once the leg failed or was replaced.
	lost bool
	// pumping, reading (under Conn.mu): its pump (stripe.go) and, for
	// a stripe, its reader were started.
	pumping, reading bool
}

// writeFrame writes one frame, hdr then payload, in one write where the
// leg can (wan.Conn.WriteFrame). l.wmu must be held.
func (l *leg) writeFrame(hdr, payload []byte) error {
	if fw, ok := l.c.(interface {
		WriteFrame(hdr, b []byte) (int, error)
	}); ok {
		_, err := fw.WriteFrame(hdr, payload)
		return err
	}
	if _, err := l.c.Write(hdr); err != nil {
		return err
	}
	if len(payload) > 0 {
		_, err := l.c.Write(payload)
		return err
	}
	return nil
}

// Conn is one application connection's WAN side at one gateway: its
// bytes in both directions, carried as positioned frames over a leg
// that may be replaced (Resume) without its application noticing more
// than a pause. Make it with New and run it with Relay.
type Conn struct {
	cfg    Config
	dialer bool

	mu          sync.Mutex // guards the following
	cond        *sync.Cond // a leg came, room opened, the connection ended
	leg         *leg       // nil while parked
	gen         int        // counts the legs the connection had
	done        bool       // ended, in order or not
	err         error      // why it ended, if not in order
	app         net.Conn
	lostAt      time.Time // when the connection parked
	parkTimer   *time.Timer
	awaitAnswer bool // the dialer's first leg: its first frame must be the answer

	// Sending: the application's bytes to the peer.
	snd      sendBuf
	sent     uint64 // the next position to send on the leg
	limit    uint64 // the peer accepts bytes below this (its received + its window)
	appEOF   bool   // the application ended its stream: fin at snd.end
	finSent  bool   // on the current leg
	finAcked bool

	// Receiving: the peer's bytes to the application.
	recv     uint64 // received in order
	bl       backlog
	peerFin  bool   // the peer's fin came (at recv)
	finDone  bool   // its end of stream was forwarded to the application
	ackedPos uint64 // the position of the last ack sent
	ackedWin int    // its window
	ackDue   bool   // an ack is due now
	// ackFrom is when the oldest byte received and not acknowledged
	// came (zero: none waits): its ack is due AckDelay after. ackTimer
	// looks then; it is made once, armed (ackArmed) by the first byte
	// that waits and not stopped when an ack goes with other frames:
	// a request-reply exchange arms it about once per AckDelay, not
	// once per message (a timer armed and stopped for each message
	// doubled the round trip of 16 KiB requests).
	ackFrom   time.Time
	ackTimer  *time.Timer
	ackArmed  bool
	pingDue   bool
	pinging   bool // a ping is out, unanswered
	heard     time.Time
	liveTimer *time.Timer

	flushing  bool // a flusher goroutine runs
	sending   bool // the send loop runs, and flushes after its read
	appWriter bool // the application writer goroutine runs
	wg        sync.WaitGroup
	wake      chan struct{} // the leg reader waits on it for a leg
	ended     chan struct{} // closed when the connection ends
	// resetReason, once the connection failed, is what its reset frame
	// tells the peer (Relay sends it).
	resetReason string
	stats       Stats
	// handed, once Freeze handed the connection over, gets its state
	// from Relay's end.
	handed chan handedOut

	// Striping (stripe.go).
	striped     bool      // data goes on every leg (pumps), reassembled by position
	wantStripes int       // the dialer's ask (its open frame)
	maxStripes  int       // the legs the connection may have at once
	stripes     []*leg    // the legs beside leg
	ooo         []*chunk  // data received past recv, by position
	running     bool      // Relay runs: a leg's goroutines start at once
	counts      Counts    // Relay's
	progressAt  time.Time // the peer's acknowledgements last moved (or bytes went out to none)
}

// Stats are what a connection counts of its legs.
type Stats struct {
	// Resumes counts the legs that replaced a lost one.
	Resumes int64
	// Resent counts the bytes sent again on those legs.
	Resent int64
	// Parked is the time the connection spent without a leg.
	Parked time.Duration
}

// Stats returns the connection's counts.
func (c *Conn) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	if c.leg == nil && !c.lostAt.IsZero() {
		s.Parked += time.Since(c.lostAt)
	}
	return s
}

// Ended is closed once the connection ended.
func (c *Conn) Ended() <-chan struct{} { return c.ended }

// New returns a connection of cfg; dialer says whether this side opened
// it (the outbound side).
func New(cfg Config, dialer bool) *Conn {
	cfg = cfg.withDefaults()
	c := &Conn{cfg: cfg, dialer: dialer, limit: initialWindow, wake: make(chan struct{}, 1), ended: make(chan struct{})}
	c.cond = sync.NewCond(&c.mu)
	c.snd = sendBuf{pools: pools, budget: cfg.Budget, top: topClass(cfg.Window)}
	c.bl = backlog{pools: pools, budget: cfg.Budget}
	c.ackedWin = cfg.Window
	if !dialer {
		c.ackedWin = max(cfg.Window, initialWindow) // what a dialer sends before the answer
	}
	c.awaitAnswer = dialer
	return c
}

// Window is the window this side grants (Config.Window), for its open
// or accepted frame.
func (c *Conn) Window() uint32 { return uint32(c.cfg.Window) }

// Room is the window this side grants now: Window less the bytes
// received that its application has not taken. A join says it (a
// connection handed over, or whose application reads slowly, may hold
// a backlog when its leg comes back), and Resume counts from it.
func (c *Conn) Room() uint32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return uint32(max(c.cfg.Window-c.bl.n, 0))
}

// SetPeerWindow sets the window the peer granted, from its open frame
// (acceptor), before Relay.
func (c *Conn) SetPeerWindow(w uint32) {
	c.mu.Lock()
	c.limit = uint64(w)
	c.mu.Unlock()
}

// Received returns the position this side received the peer's stream to
// in order: what a join or an accepted frame says.
func (c *Conn) Received() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ackPosLocked()
}

// ackPosLocked is the position an ack says: the bytes received, and one
// more for the peer's fin once it came.
func (c *Conn) ackPosLocked() uint64 {
	if c.peerFin {
		return c.recv + 1
	}
	return c.recv
}

// Parked reports whether the connection waits for a leg, and since when.
func (c *Conn) Parked() (bool, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leg == nil && !c.done && c.gen > 0, c.lostAt
}

// Done reports whether the connection ended.
func (c *Conn) Done() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.done
}

// Relay carries the connection between app and its legs, starting on
// first, until it ends: nil once both directions ended in order (app is
// then closed in order), else the first failure as a *relay.Error (side
// relay.A the application, relay.B the WAN) with app aborted. The
// dialer wrote its open frame on first before; the acceptor read it,
// reached app and answered.
func (c *Conn) Relay(app net.Conn, first net.Conn, counts Counts) error {
	return c.relay(app, first, counts)
}

// relay is Relay, and RelayThawed with first nil.
func (c *Conn) relay(app net.Conn, first net.Conn, counts Counts) error {
	c.mu.Lock()
	c.app = app
	c.running, c.counts = true, counts
	for _, l := range c.stripes {
		c.startLegLocked(l, true) // (those that joined before Relay)
	}
	if first != nil {
		c.installLocked(first)
	} else {
		c.parkLocked(ErrHandedOver)
		if c.bl.n > 0 {
			c.startAppWriterLocked(app, endpointOf(app), counts)
		}
	}
	fin := first == nil && c.peerFin && !c.finDone && c.bl.n == 0
	c.mu.Unlock()
	if fin {
		c.forwardFin(app) // the fin came before the hand-over, its bytes written
	}
	c.wg.Add(1)
	go c.sendLoop(app, counts)
	c.recvLoop(app, counts)
	c.wg.Wait()
	c.mu.Lock()
	err := c.err
	c.stopTimersLocked()
	if c.handed != nil {
		// Handed over (Freeze): the application's connection goes on
		// elsewhere; the leg ends without a word.
		c.handOverLocked(app)
		l, stripes := c.leg, c.stripes
		c.mu.Unlock()
		if l != nil {
			l.c.Close()
		}
		for _, s := range stripes {
			s.c.Close()
		}
		app.Close() // the duplicate keeps the socket open
		return ErrHandedOver
	}
	c.snd.release()
	c.bl.release()
	c.releaseOOOLocked()
	l, stripes := c.leg, c.stripes
	c.mu.Unlock()
	if err == nil {
		relay.Orderly(app)
		if l != nil {
			// The last ack (of the peer's fin) goes before the leg's
			// orderly end, however the flusher and the end raced: the
			// peer is done only once it has it.
			c.mu.Lock()
			hdr := AppendHeader(nil, Header{Type: TypeAck, Pos: c.ackPosLocked()})
			c.mu.Unlock()
			l.wmu.Lock()
			l.c.SetWriteDeadline(time.Now().Add(c.cfg.LegTimeout))
			l.writeFrame(hdr, nil)
			l.wmu.Unlock()
			endStripes(stripes)
			// Then the leg's own orderly end, and what the peer still
			// sends is read until it ends its side too: a socket
			// closed with bytes unread is reset by the kernel, which
			// may discard that last ack before it leaves.
			closeWrite(l.c)
			l.c.SetReadDeadline(time.Now().Add(lingerFor)) // (done had set one in the past)
			io.Copy(io.Discard, l.c)
			l.c.Close()
		}
		app.Close()
		return nil
	}
	relay.Abort(app)
	if l != nil {
		c.mu.Lock()
		reason := c.resetReason
		c.mu.Unlock()
		if reason != "" && !l.lost {
			// The reset frame, then the leg's end in order and what the
			// peer still sends, read for a moment: a reset of the leg
			// at once could discard the frame at the peer (a QUIC
			// stream's reset does), which would then park the
			// connection instead of resetting its application.
			l.c.SetDeadline(time.Now().Add(time.Second))
			if l.writeFrame(AppendReason(nil, TypeReset, reason), nil) == nil && closeWrite(l.c) == nil {
				io.Copy(io.Discard, l.c)
			}
		}
		relay.Abort(l.c)
	}
	for _, s := range stripes {
		relay.Abort(s.c)
	}
	return err
}

// installLocked makes l the connection's leg. c.mu must be held.
func (c *Conn) installLocked(nc net.Conn) {
	if c.leg == nil && !c.lostAt.IsZero() {
		c.stats.Parked += time.Since(c.lostAt)
		c.lostAt = time.Time{}
	}
	c.leg = &leg{c: nc}
	c.gen++
	c.finSent = false
	c.heard = time.Now()
	c.progressAt = c.heard
	c.startLegLocked(c.leg, false)
	c.pinging = false
	if c.liveTimer != nil {
		c.liveTimer.Stop() // (of the leg before)
		c.liveTimer = nil
	}
	c.armLiveLocked()
	if c.parkTimer != nil {
		c.parkTimer.Stop()
		c.parkTimer = nil
	}
	c.cond.Broadcast()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// Resume gives the parked (or about to park) connection a new leg nc,
// on which the handshake said the peer received this side's stream up
// to peerRecv and grants window. It retransmits from there. A leg it
// still has is replaced (the newer one wins: the peer's view of the old
// one may lag). answer, if not nil (the acceptor's side of a join), is
// called once the old leg is gone and before the new one carries
// anything, with this side's received position and window, to write
// the handshake's answer on nc. It fails if the connection ended,
// peerRecv is not a position this side can resend from, or answer
// fails.
func (c *Conn) Resume(nc net.Conn, peerRecv uint64, window uint32, answer func(recv uint64, window uint32) error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return errors.New("the connection ended")
	}
	finPos := c.snd.end
	if peerRecv < c.snd.acked || peerRecv > finPos+1 || peerRecv == finPos+1 && !c.appEOF {
		return fmt.Errorf("%w: the peer says it received %d of a stream of which %d to %d are held", ErrFrame, peerRecv, c.snd.acked, finPos)
	}
	if c.leg != nil || len(c.stripes) > 0 {
		c.dropLegsLocked() // their readers and writers see it and step aside
		if c.lostAt.IsZero() {
			c.lostAt = time.Now()
		}
	}
	c.releaseOOOLocked() // resent from the position received in order
	if answer != nil {
		if err := answer(c.ackPosLocked(), uint32(max(c.cfg.Window-c.bl.n, 0))); err != nil {
			return err
		}
	}
	c.ackInLocked(peerRecv, window)
	c.stats.Resumes++
	c.stats.Resent += int64(c.sent - min(peerRecv, c.snd.end))
	c.sent = min(peerRecv, c.snd.end)
	c.installLocked(nc)
	// The handshake said this side's received position and window:
	// what the peer may send is counted from there.
	c.ackedPos, c.ackedWin = c.ackPosLocked(), c.cfg.Window-c.bl.n
	c.awaitAnswer = false
	c.ackDue = true // and say it again at once, with the fin's state
	c.kickLocked()
	return nil
}

// Abort ends the connection with err (a *relay.Error or not) unless it
// ended already: its application is reset, and, if reason is not empty
// and a leg is there, a reset frame with reason goes to the peer (which
// then resets its application at once, instead of waiting for a leg).
func (c *Conn) Abort(err error, reason string) {
	c.mu.Lock()
	c.failLocked(err, reason)
	c.mu.Unlock()
}

// failLocked ends the connection with err, telling the peer reason (if
// not empty and a leg is there). c.mu must be held.
func (c *Conn) failLocked(err error, reason string) {
	if c.done {
		return
	}
	c.done, c.err = true, err
	close(c.ended)
	if c.app != nil {
		relay.Abort(c.app) // unblocks the reads and writes of the application
	}
	for _, s := range c.stripes {
		relay.Abort(s.c) // the reset frame goes on the first leg
	}
	if l := c.leg; l != nil {
		if reason == "" || l.lost {
			relay.Abort(l.c)
		} else {
			// Relay sends the reset frame once the reads and writes
			// under way stopped (within their deadline), so that the
			// peer resets its application now rather than park.
			c.resetReason = reason
			l.c.SetDeadline(time.Now().Add(time.Second))
		}
	}
	c.stopTimersLocked()
	c.cond.Broadcast()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *Conn) stopTimersLocked() {
	for _, t := range []*time.Timer{c.parkTimer, c.ackTimer, c.liveTimer} {
		if t != nil {
			t.Stop()
		}
	}
}

// lostLocked handles the loss of leg l (err why): the connection parks
// for its resume window, or ends. c.mu must be held.
func (c *Conn) lostLocked(l *leg, err error) {
	if l.lost || c.done || c.leg != l && !c.hasStripeLocked(l) {
		return // replaced, or handled
	}
	// A striped connection loses every leg with one: what the lost one
	// carried unacknowledged is resent from the position received in
	// order, on the legs that come back.
	c.dropLegsLocked()
	c.parkLocked(err)
}

// parkLocked makes the connection, without a leg, wait for one for its
// resume window (err why it has none), or ends it. c.mu must be held.
func (c *Conn) parkLocked(err error) {
	if c.peerFin && c.finAcked {
		// Nothing more comes from the peer, and it has all of this
		// side's: what is left (the backlog to the application) needs
		// no leg. (The peer, done, ends its legs.)
		if c.finDone {
			c.doneLocked()
		}
		return
	}
	if c.awaitAnswer {
		// A connection the peer never accepted has nothing to resume:
		// its acceptor may not hold it (a leg to another stream's
		// listener ends so).
		c.failLocked(&relay.Error{Conn: relay.B, Op: "read", Err: &NoAnswerError{Err: err}}, "")
		return
	}
	if c.cfg.ResumeWindow <= 0 {
		c.failLocked(&relay.Error{Conn: relay.B, Op: "read", Err: err}, "")
		return
	}
	c.lostAt = time.Now()
	c.cfg.Log.Debug("leg lost: the connection waits for a new one", "err", err, "window", c.cfg.ResumeWindow)
	gen := c.gen
	c.parkTimer = time.AfterFunc(c.cfg.ResumeWindow, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.gen == gen && c.leg == nil && !c.done {
			c.failLocked(&relay.Error{Conn: relay.B, Op: "read", Err: fmt.Errorf("%w (%s, since the leg was lost: %v)", ErrResumeWindow, c.cfg.ResumeWindow, err)}, "")
		}
	})
	if f := c.cfg.OnLost; f != nil {
		// Relay waits for it: it must return once the connection
		// ended (Ended).
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			f(err)
		}()
	}
}

// doneLocked ends the connection in order.
func (c *Conn) doneLocked() {
	if c.done {
		return
	}
	c.done = true
	close(c.ended)
	if l := c.leg; l != nil {
		// The leg reader stops reading now (Relay then sends the last
		// ack and ends the leg), without waiting for the peer's end.
		l.c.SetReadDeadline(time.Unix(1, 0))
	}
	for _, s := range c.stripes {
		s.c.SetReadDeadline(time.Unix(1, 0))
	}
	c.stopTimersLocked()
	c.cond.Broadcast()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// sendLoop reads the application into the send buffer and sends it.
func (c *Conn) sendLoop(app net.Conn, counts Counts) {
	defer c.wg.Done()
	r := endpointOf(app)
	tr, _ := r.(tryReader)
	// wait: the last read found nothing, so wait for bytes before the
	// next, holding no chunk (an idle connection holds no buffer).
	// While bytes come, the next read follows at once: one system call
	// a read, as a blocking read makes.
	wait := true
	// While it runs between its waits, the loop flushes after each read
	// (c.sending): what the leg reader finds due goes with that flush,
	// not from a flusher of its own fighting it for the leg. A loop
	// that blocks in Read (no tryReader) never says so.
	defer c.sendWaits()
	for {
		if tr != nil && wait {
			c.sendWaits()
			err := tr.WaitReadable()
			c.sendRuns(tr)
			if err != nil && err != io.EOF {
				c.appFailed(err, "read")
				return
			}
		}
		c.mu.Lock()
		if !c.done && c.snd.held() >= c.cfg.Window {
			c.sendWaitsLocked()
			for !c.done && c.snd.held() >= c.cfg.Window {
				c.cond.Wait()
			}
			c.sending = tr != nil
		}
		if c.done {
			c.mu.Unlock()
			return
		}
		ch := c.snd.tail()
		c.mu.Unlock()
		if ch == nil {
			// The gateway's budget is spent: wait for room.
			c.sendWaits()
			ok := c.waitBudget()
			c.sendRuns(tr)
			if !ok {
				return
			}
			continue
		}
		room := ch.room()
		if lim := c.cfg.Window - c.heldNow(); lim < len(room) {
			room = room[:max(lim, 1)]
		}
		var n int
		var err error
		if tr != nil {
			n, err = tr.TryRead(room)
			wait = err == sockio.ErrWouldBlock
			if wait {
				n, err = 0, nil
			}
		} else {
			n, err = r.Read(room)
		}
		c.mu.Lock()
		c.snd.filled(ch, n)
		if err == io.EOF {
			c.appEOF = true
		}
		if c.striped {
			c.cond.Broadcast() // the pumps send it
		}
		c.mu.Unlock()
		if n > 0 && counts.ToWAN != nil {
			counts.ToWAN(int64(n))
		}
		if err != nil && err != io.EOF {
			c.appFailed(err, "read")
			return
		}
		if err == nil && tr != nil && n > 0 && n == len(room) && c.regrow(ch) {
			// The read filled a small chunk: the application's
			// message may go on in the socket (a 16 KiB message and
			// its header fill a first, 16 KiB chunk and spill over).
			// Its bytes are now in a larger chunk: read on into it
			// before sending, so that the message goes in one frame
			// and the peer writes it to its application at once, not
			// in two writes its reader wakes up for one after the
			// other. The next read that does not fill its chunk, or
			// finds nothing, flushes.
			continue
		}
		c.flush()
		if err == io.EOF {
			return
		}
	}
}

// regrow is sendBuf.regrow of ch under the lock, for a connection of one
// leg (a striped one's pumps take its chunks as they fill).
func (c *Conn) regrow(ch *chunk) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.striped && !c.done && c.snd.regrow(ch, c.sent)
}

// sendWaits says the send loop is about to wait (for its application,
// the window or the budget), or ends: what is due now goes from a
// flusher, as what comes due meanwhile will.
func (c *Conn) sendWaits() {
	c.mu.Lock()
	c.sendWaitsLocked()
	c.mu.Unlock()
}

func (c *Conn) sendWaitsLocked() {
	c.sending = false
	if c.dueLocked() {
		c.kickLocked()
	}
}

// sendRuns says the send loop runs again: it flushes after its read.
func (c *Conn) sendRuns(tr tryReader) {
	c.mu.Lock()
	c.sending = tr != nil
	c.mu.Unlock()
}

// heldNow is c.snd.held under the lock.
func (c *Conn) heldNow() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.snd.held()
}

// waitBudget waits until the gateway's budget gave back bytes, or the
// connection ended (false).
func (c *Conn) waitBudget() bool {
	c.mu.Lock()
	if c.leg != nil && c.sent > c.snd.acked && !c.pinging && !c.pingDue {
		// Ask for the acknowledgement of what is out now rather than
		// when the peer's delay or a quarter of the window brings it:
		// it gives this connection's bytes back to the budget (a
		// ping's answer is an ack).
		c.pingDue = true
		c.kickLocked()
	}
	c.mu.Unlock()
	b := c.cfg.Budget
	b.mu.Lock()
	w := b.wait
	b.mu.Unlock()
	t := time.NewTimer(100 * time.Millisecond) // and look again: the connection may end meanwhile
	defer t.Stop()
	select {
	case <-w:
	case <-t.C:
	}
	return !c.Done()
}

// appFailed ends the connection on a failed read or write (op) of the
// application: the peer is told with a reset.
func (c *Conn) appFailed(err error, op string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return
	}
	c.failLocked(&relay.Error{Conn: relay.A, Op: op, Err: err}, "the application's connection "+op+" failed: "+err.Error())
}

// kickLocked starts a flusher unless one runs: what the leg reader and
// the timers want sent goes out from there, never from the reader
// itself (a reader that waits on a write can deadlock two gateways that
// both write). c.mu must be held.
func (c *Conn) kickLocked() {
	if c.flushing || c.sending || c.done || c.leg == nil {
		return
	}
	c.flushing = true
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.flush()
		c.mu.Lock()
		c.flushing = false
		again := c.dueLocked()
		c.mu.Unlock()
		if again {
			c.mu.Lock()
			c.kickLocked()
			c.mu.Unlock()
		}
	}()
}

// dueLocked reports whether something waits to be sent on the leg.
func (c *Conn) dueLocked() bool {
	if c.done || c.leg == nil {
		return false
	}
	return c.ackDue || c.pingDue || !c.striped && c.sent < c.snd.end && c.sent < c.limit || c.finDueLocked()
}

// finDueLocked reports whether the fin waits to be sent on the leg.
func (c *Conn) finDueLocked() bool {
	// A striped connection's fin waits for the acknowledgement of every
	// byte: the peer takes it at its received position, and bytes on
	// another leg may still be on their way.
	return c.appEOF && !c.finSent && !c.finAcked && c.sent == c.snd.end && (!c.striped || c.snd.acked == c.snd.end)
}

// flush sends what is due on the current leg: an ack, a ping, the data
// the peer's window takes, the fin. It returns when nothing more is due
// or the leg failed.
func (c *Conn) flush() {
	c.mu.Lock()
	l := c.leg
	c.mu.Unlock()
	if l == nil {
		return
	}
	l.wmu.Lock()
	defer l.wmu.Unlock()
	for {
		c.mu.Lock()
		if c.leg != l || l.lost || c.done {
			c.mu.Unlock()
			return
		}
		hdr := l.hdr[:0]
		data := !c.striped && c.sent < c.snd.end && c.sent < c.limit
		rides := c.pingDue || data || c.finDueLocked()
		if c.ackDue || rides && !c.ackFrom.IsZero() && c.recv != c.ackedPos {
			// An ack rides with whatever goes now. Alone it waits for
			// its time (ackLook): a flusher still looping after its
			// last frame must not send it early.
			win := c.cfg.Window - c.bl.n
			hdr = AppendHeader(hdr, Header{Type: TypeAck, Pos: c.ackPosLocked(), Length: uint32(max(win, 0))})
			c.ackedPos, c.ackedWin, c.ackDue = c.ackPosLocked(), win, false
			c.ackFrom = time.Time{}
		}
		if c.pingDue {
			hdr = AppendHeader(hdr, Header{Type: TypePing})
			c.pingDue, c.pinging = false, true
		}
		var payload []byte
		var pinned *chunk
		if data {
			payload, pinned = c.snd.slice(c.sent, int(min(uint64(MaxData), c.limit-c.sent)))
			hdr = AppendHeader(hdr, Header{Type: TypeData, Pos: c.sent, Length: uint32(len(payload))})
			c.sent += uint64(len(payload))
		} else if c.finDueLocked() {
			hdr = AppendHeader(hdr, Header{Type: TypeFin, Pos: c.snd.end})
			c.finSent = true
		}
		c.mu.Unlock()
		if len(hdr) == 0 {
			return
		}
		// The payload is a slice of the send buffer, pinned while it
		// is written without the lock.
		err := l.writeFrame(hdr, payload)
		if pinned != nil {
			c.mu.Lock()
			c.snd.unpin(pinned)
			c.mu.Unlock()
		}
		if err != nil {
			// The leg is gone, but what the peer sent before it went
			// may still wait to be read (its reset frame, say): the
			// reader reads it, then meets the end itself and loses the
			// leg, within a moment.
			c.mu.Lock()
			if c.leg == l && !l.lost {
				l.c.SetReadDeadline(time.Now().Add(time.Second))
			}
			c.mu.Unlock()
			return
		}
	}
}

// armLiveLocked makes sure the liveness check runs while the
// connection has a leg. c.mu must be held.
func (c *Conn) armLiveLocked() {
	if c.liveTimer != nil {
		return
	}
	gen := c.gen
	c.liveTimer = time.AfterFunc(c.livePeriod(), func() { c.checkLive(gen) })
}

// livePeriod is how often checkLive runs.
func (c *Conn) livePeriod() time.Duration {
	return min(c.cfg.LegTimeout/4, c.cfg.KeepAlive/2)
}

// checkLive takes the leg for lost if the peer was silent past
// LegTimeout while an answer was due (or, at the acceptor, past
// KeepAlive plus LegTimeout at all), pings a peer whose window is shut
// or (the dialer) a leg that carried nothing for KeepAlive, and runs
// again while the leg is there.
func (c *Conn) checkLive(gen int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen != gen {
		return // the timer of a leg before: installLocked armed another
	}
	c.liveTimer = nil
	l := c.leg
	if c.done || l == nil {
		return
	}
	silent := time.Since(c.heard)
	waiting := c.sent > c.snd.acked || c.pinging || c.finSent && !c.finAcked
	blocked := c.sent < c.snd.end && c.sent >= c.limit
	switch {
	case waiting && silent > c.cfg.LegTimeout:
		c.lostLocked(l, ErrLegSilent)
		return
	case c.striped && c.sent > c.snd.acked && time.Since(c.progressAt) > c.cfg.LegTimeout:
		// The peer is heard, on some leg, but acknowledges nothing: a
		// leg that went silent holds the bytes after it.
		c.lostLocked(l, ErrLegStalled)
		return
	case !c.dialer && silent > c.cfg.KeepAlive+c.cfg.LegTimeout:
		// The dialer pings an idle leg: this much silence means the
		// path is gone (an acceptor that only receives sends nothing
		// its TCP could find dead).
		c.lostLocked(l, ErrLegSilent)
		return
	case c.pinging:
	case blocked && silent > c.cfg.LegTimeout/4:
		c.pingDue = true // a shut window: ask whether the peer is there
		c.kickLocked()
	case c.dialer && silent > c.cfg.KeepAlive:
		c.pingDue = true // an idle leg: say it still carries
		c.kickLocked()
	}
	c.armLiveLocked()
}

// recvLoop reads frames from the connection's legs, one after the other
// as they come (Resume), until the connection ends.
func (c *Conn) recvLoop(app net.Conn, counts Counts) {
	buf := make([]byte, HeaderLen)
	for {
		c.mu.Lock()
		for !c.done && (c.leg == nil || c.leg.lost) {
			c.mu.Unlock()
			<-c.wake
			c.mu.Lock()
		}
		if c.done {
			c.mu.Unlock()
			return
		}
		l := c.leg
		c.mu.Unlock()
		err := c.readLeg(l, app, counts, buf)
		c.mu.Lock()
		if c.done {
			c.mu.Unlock()
			return
		}
		if errors.Is(err, ErrFrame) && c.leg == l && !l.lost {
			// The peer broke the protocol: nothing it sends is
			// trusted further, on this leg or another.
			c.failLocked(&relay.Error{Conn: relay.B, Op: "read", Err: err}, err.Error())
			c.mu.Unlock()
			return
		}
		c.lostLocked(l, err)
		c.mu.Unlock()
	}
}

// readLeg reads frames from leg l until it fails or the connection ends.
func (c *Conn) readLeg(l *leg, app net.Conn, counts Counts, buf []byte) error {
	w := endpointOf(app)
	tw, _ := w.(tryWriter)
	for {
		h, err := ReadHeader(l.c, buf)
		if err != nil {
			return err
		}
		c.mu.Lock()
		c.heard = time.Now()
		if c.awaitAnswer && h.Type != TypeAccepted && h.Type != TypeRefused {
			c.mu.Unlock()
			return fmt.Errorf("%w: %q before the answer", ErrFrame, h.Type)
		}
		c.mu.Unlock()
		switch h.Type {
		case TypeData:
			if err := c.data(l, h, app, w, tw, counts); err != nil {
				return err
			}
		case TypeAck:
			if err := c.ack(h); err != nil {
				return err
			}
		case TypePing:
			c.mu.Lock()
			c.ackDue = true
			c.kickLocked()
			c.mu.Unlock()
		case TypeFin:
			if err := c.fin(h, app); err != nil {
				return err
			}
		case TypeReset, TypeRefused:
			reason := make([]byte, h.Length)
			if _, err := io.ReadFull(l.c, reason); err != nil {
				return err
			}
			c.mu.Lock()
			var e error
			if h.Type == TypeRefused {
				e = &relay.Error{Conn: relay.B, Op: "read", Err: &RefusedError{Reason: printable(string(reason))}}
			} else {
				e = &relay.Error{Conn: relay.B, Op: "read", Err: fmt.Errorf("the peer gateway reset the connection: %s: %w", printable(string(reason)), syscall.ECONNRESET)}
			}
			c.failLocked(e, "")
			c.mu.Unlock()
			return e
		case TypeAccepted:
			c.mu.Lock()
			if !c.awaitAnswer {
				c.mu.Unlock()
				return fmt.Errorf("%w: an answer where none was asked for", ErrFrame)
			}
			c.awaitAnswer = false
			c.ackInLocked(h.Pos, h.Length)
			if h.Stripes > 1 && c.wantStripes > 1 {
				c.stripeLocked(min(int(h.Stripes), c.wantStripes))
			}
			c.kickLocked()
			c.mu.Unlock()
			if f := c.cfg.OnAccepted; f != nil {
				f()
			}
		default:
			return fmt.Errorf("%w: %q on a leg in use", ErrFrame, h.Type)
		}
		if c.Done() {
			return nil
		}
	}
}

// A RefusedError is the acceptor's refusal of the connection: Reason is
// what it said (made printable).
type RefusedError struct{ Reason string }

func (e *RefusedError) Error() string { return "the peer gateway refused the connection: " + e.Reason }

// A NoAnswerError is a dialer's first leg that ended before the
// acceptor answered its open: the acceptor did not take the connection
// (a leg to another stream's listener, a peer that refused the preface).
type NoAnswerError struct{ Err error }

func (e *NoAnswerError) Error() string { return "no answer from the peer gateway: " + e.Err.Error() }
func (e *NoAnswerError) Unwrap() error { return e.Err }

// data takes one data frame of header h from leg l.
func (c *Conn) data(l *leg, h Header, app net.Conn, w endpoint, tw tryWriter, counts Counts) error {
	c.mu.Lock()
	if c.striped {
		c.mu.Unlock()
		return c.stripedData(l, h, app, w, counts)
	}
	recv, granted := c.recv, c.ackedPos+uint64(max(c.ackedWin, 0))
	if c.peerFin {
		c.mu.Unlock()
		return fmt.Errorf("%w: data after the fin", ErrFrame)
	}
	c.mu.Unlock()
	end := h.Pos + uint64(h.Length)
	if h.Pos > recv || end > granted {
		// A single leg carries the stream in order; nothing may pass
		// the window this side granted.
		return fmt.Errorf("%w: data %d to %d where %d was expected (window to %d)", ErrFrame, h.Pos, end, recv, granted)
	}
	ch := c.bl.take(int(h.Length))
	if _, err := io.ReadFull(l.c, ch.buf()[:h.Length]); err != nil {
		c.mu.Lock()
		c.bl.put(ch)
		c.mu.Unlock()
		return err
	}
	ch.n = int(h.Length)
	if skip := recv - h.Pos; skip > 0 { // a resent front, already here
		if skip >= uint64(h.Length) {
			c.mu.Lock()
			c.bl.put(ch)
			c.mu.Unlock()
			return nil
		}
		ch.off = int(skip)
	}
	ch.pos = recv
	n := ch.n - ch.off
	c.mu.Lock()
	c.recv += uint64(n)
	direct := c.bl.n == 0 && !c.appWriter && tw != nil && (counts.Paced == nil || !counts.Paced())
	c.mu.Unlock()
	if direct {
		// The application's socket usually takes it all at once:
		// no hand-over, no copy.
		k, err := tw.TryWrite(ch.bytes())
		if err != nil && err != sockio.ErrWouldBlock {
			c.mu.Lock()
			if c.handed != nil {
				// Handed over under the write (Freeze's deadline):
				// these bytes are acknowledged, and go with the state.
				c.bl.push(ch)
				c.mu.Unlock()
				return ErrHandedOver
			}
			c.bl.put(ch)
			c.mu.Unlock()
			c.appFailed(err, "write")
			return c.errNow()
		}
		if k > 0 && counts.FromWAN != nil {
			counts.FromWAN(int64(k))
		}
		ch.off += k
	}
	c.mu.Lock()
	if ch.off == ch.n {
		c.bl.put(ch)
	} else {
		c.bl.push(ch)
		c.startAppWriterLocked(app, w, counts)
	}
	c.ackAfterLocked()
	c.mu.Unlock()
	return nil
}

// errNow returns the connection's error.
func (c *Conn) errNow() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// ackAfterLocked decides when the bytes received are acknowledged: at
// once past a quarter of the window, else within AckDelay (or sooner,
// with data going the other way). c.mu must be held.
func (c *Conn) ackAfterLocked() {
	if c.recv-c.ackedPos >= uint64(c.cfg.Window/4) || c.ackedWin < c.cfg.Window/2 && c.cfg.Window-c.bl.n >= c.cfg.Window/2 {
		c.ackDue = true
		c.kickLocked()
		return
	}
	if c.recv == c.ackedPos {
		return
	}
	if c.ackFrom.IsZero() {
		c.ackFrom = time.Now()
	}
	c.armAckLocked(c.cfg.AckDelay)
}

// armAckLocked arms the ack timer to look in d, unless it is armed.
// c.mu must be held.
func (c *Conn) armAckLocked(d time.Duration) {
	switch {
	case c.ackArmed || c.done:
	case c.ackTimer == nil:
		c.ackTimer = time.AfterFunc(d, c.ackLook)
		c.ackArmed = true
	default:
		c.ackTimer.Reset(d)
		c.ackArmed = true
	}
}

// ackLook is the ack timer: the ack of the oldest byte waiting is due
// now, or later (the timer looks again then), or went with other frames.
func (c *Conn) ackLook() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ackArmed = false
	if c.done || c.ackFrom.IsZero() {
		return
	}
	if c.recv == c.ackedPos {
		c.ackFrom = time.Time{}
		return
	}
	if left := c.cfg.AckDelay - time.Since(c.ackFrom); left > time.Millisecond {
		c.armAckLocked(left)
		return
	}
	c.ackDue = true
	c.kickLocked()
}

// startAppWriterLocked starts the goroutine that writes the backlog to
// the application, unless it runs. c.mu must be held.
func (c *Conn) startAppWriterLocked(app net.Conn, w endpoint, counts Counts) {
	if c.appWriter || c.done {
		return
	}
	c.appWriter = true
	c.wg.Add(1)
	go c.writeApp(app, w, counts)
}

// writeApp writes the backlog to the application until it is empty.
func (c *Conn) writeApp(app net.Conn, w endpoint, counts Counts) {
	defer c.wg.Done()
	for {
		c.mu.Lock()
		b := c.bl.front()
		if b == nil || c.done {
			c.appWriter = false
			fin := b == nil && c.peerFin && !c.finDone && !c.done
			c.mu.Unlock()
			if fin {
				c.forwardFin(app)
			}
			return
		}
		c.mu.Unlock()
		n, err := w.Write(b)
		if n > 0 && counts.FromWAN != nil {
			counts.FromWAN(int64(n))
		}
		c.mu.Lock()
		c.bl.consume(n)
		c.ackAfterLocked()
		c.mu.Unlock()
		if err != nil {
			c.appFailed(err, "write")
			return
		}
	}
}

// ack takes an ack frame.
func (c *Conn) ack(h Header) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	finPos := c.snd.end
	max := c.sent
	if c.finSent || c.finAcked {
		max = finPos + 1
	}
	if h.Pos > max {
		return fmt.Errorf("%w: ack of %d, past the %d sent", ErrFrame, h.Pos, max)
	}
	c.ackInLocked(h.Pos, h.Length)
	c.pinging = false
	if c.finAcked && c.finDone {
		c.doneLocked()
		return nil
	}
	if c.dueLocked() {
		c.kickLocked()
	}
	return nil
}

// ackInLocked takes the peer's received position pos and window: the
// send buffer drops what it received, the window moves. c.mu must be
// held.
func (c *Conn) ackInLocked(pos uint64, window uint32) {
	if c.appEOF && pos == c.snd.end+1 {
		c.finAcked = true
		pos--
	}
	if pos > c.snd.acked {
		c.snd.ack(pos)
		if c.striped {
			c.progressAt = time.Now()
		}
	}
	c.limit = pos + uint64(window)
	c.cond.Broadcast()
}

// fin takes the peer's fin frame.
func (c *Conn) fin(h Header, app net.Conn) error {
	c.mu.Lock()
	if h.Pos != c.recv {
		c.mu.Unlock()
		return fmt.Errorf("%w: fin at %d, received to %d", ErrFrame, h.Pos, c.recv)
	}
	if c.peerFin { // resent on a new leg before the ack of the first came
		c.ackDue = true
		c.kickLocked()
		c.mu.Unlock()
		return nil
	}
	c.peerFin = true
	c.ackDue = true
	c.kickLocked()
	forward := c.bl.n == 0 && !c.appWriter
	c.mu.Unlock()
	if forward {
		c.forwardFin(app)
	}
	return nil
}

// forwardFin forwards the peer's end of stream to the application (the
// backlog is written).
func (c *Conn) forwardFin(app net.Conn) {
	// The connection is done (if the peer has all of this side's), and
	// the ack of the peer's fin is sent, before the application sees its
	// end: what it does next (its gateway's stream released at once,
	// which resets the leg) finds the connection ended in order at both
	// gateways.
	c.mu.Lock()
	c.finDone = true
	done := c.finAcked
	if done {
		c.ackDue = true
	}
	c.mu.Unlock()
	if done {
		c.flush()
		c.mu.Lock()
		c.doneLocked()
		c.mu.Unlock()
	}
	// Every byte reached the application; one that reset its
	// connection meanwhile misses only the end it no longer reads.
	closeWrite(app)
}

// closeWrite shuts down the write half of nc.
func closeWrite(nc net.Conn) error {
	if cw, ok := nc.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// endpoint reads or writes one side: the raw socket for plain TCP, the
// net.Conn otherwise.
type endpoint interface {
	Read([]byte) (int, error)
	Write([]byte) (int, error)
}

type tryReader interface {
	TryRead([]byte) (int, error)
	WaitReadable() error
}

type tryWriter interface {
	TryWrite([]byte) (int, error)
}

func endpointOf(nc net.Conn) endpoint {
	if t, ok := nc.(*net.TCPConn); ok {
		if s, err := sockio.New(t); err == nil {
			return s
		}
	}
	return nc
}
