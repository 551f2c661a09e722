package carry

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"time"
)

// A connection handed over to another process (a new s2cs taking over
// from the old one, kill -USR2): Freeze stops it where it stands, with
// its application's socket open, and returns everything it is apart
// from its legs (State) and that socket (a duplicate, to pass over a
// Unix socket); the new process makes a connection of them (Thaw),
// parked, and resumes it on a new leg exactly as after a lost one. TLS
// sessions cannot be handed over, and need not be: the peer sees its
// leg end, parks, and the new leg's join tells each side where the
// other stands. Neither application sees more than a pause: the bytes
// this side read from its application and the peer has not
// acknowledged, and those it received and acknowledged but did not yet
// write to its application, travel in the State; what sits in the
// application socket's kernel buffers stays there, in the socket.

// ErrHandedOver ends the Relay of a connection that Freeze handed over:
// it is not an end of the application's connection, which goes on in
// the process that thaws it.
var ErrHandedOver = errors.New("the connection was handed over to another process")

// State is a frozen connection: what Thaw needs, besides its
// application's socket, to go on with it. Its encoding (MarshalBinary)
// is what crosses from the old process to the new.
type State struct {
	// Dialer says whether this side opened the connection.
	Dialer bool
	// Acked is the position the peer acknowledged of this side's
	// stream; Unacked the bytes from there that this side read from its
	// application (sent or not).
	Acked   uint64
	Unacked []byte
	// Sent is the position to which this side sent its stream, between
	// Acked and the end of Unacked.
	Sent uint64
	// AppEOF: the application ended its stream (the fin is at
	// Acked+len(Unacked)); FinAcked: the peer acknowledged that fin.
	AppEOF, FinAcked bool
	// Limit is the position below which the peer accepts bytes (its
	// received position plus its window).
	Limit uint64
	// Recv is the position received in order of the peer's stream;
	// Backlog the bytes below it not yet written to the application.
	Recv    uint64
	Backlog []byte
	// PeerFin: the peer's fin came (at Recv); FinDone: it was forwarded
	// to the application.
	PeerFin, FinDone bool
	// Stats are the connection's counts so far.
	Stats Stats
	// Stripes is the legs the connection may have at once: what the
	// acceptor granted (SetStripes); 0 or 1, one leg. A thawed striped
	// connection is striped again: its dialer brings the further legs
	// once a first one joined, and its acceptor takes them.
	Stripes int
}

// handedOut is what Relay's end gives Freeze.
type handedOut struct {
	st   *State
	file *os.File
	err  error
}

// Freeze stops the running connection (Relay) and hands it over: its
// Relay returns ErrHandedOver, leaving its application's connection
// open (its file is returned, a duplicate of the socket, which the
// caller must close once it passed it on), and its legs end without a
// reset frame (the peer parks). It fails, and the connection goes on,
// if the connection ended, is not yet accepted by the peer (nothing
// would know it on the other side), or its application's connection
// is not a TCP socket; and, the connection lost, if its socket cannot
// be duplicated.
func (c *Conn) Freeze() (*State, *os.File, error) {
	c.mu.Lock()
	switch {
	case c.done:
		c.mu.Unlock()
		return nil, nil, errors.New("the connection ended")
	case c.app == nil:
		c.mu.Unlock()
		return nil, nil, errors.New("the connection does not run (Relay)")
	case c.awaitAnswer:
		c.mu.Unlock()
		return nil, nil, errors.New("the peer gateway has not accepted the connection yet")
	}
	if _, ok := c.app.(*net.TCPConn); !ok {
		c.mu.Unlock()
		return nil, nil, fmt.Errorf("the application's connection is a %T, not a TCP socket", c.app)
	}
	c.handed = make(chan handedOut, 1)
	c.done, c.err = true, ErrHandedOver
	close(c.ended)
	// The reads and writes under way return (a deadline, not a reset:
	// the socket goes on elsewhere), and so do the leg's.
	c.app.SetDeadline(time.Unix(1, 0))
	for _, l := range append([]*leg{c.leg}, c.stripes...) {
		if l != nil {
			l.lost = true
			l.c.Close()
		}
	}
	c.stopTimersLocked()
	c.cond.Broadcast()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	h := c.handed
	c.mu.Unlock()
	out := <-h
	return out.st, out.file, out.err
}

// handOverLocked is Relay's end of a frozen connection, once nothing
// of it runs any more: it gives Freeze the state and the socket's
// duplicate, and releases the rest. c.mu must be held.
func (c *Conn) handOverLocked(app net.Conn) {
	st := &State{
		Dialer: c.dialer, Acked: c.snd.acked, Sent: c.sent, AppEOF: c.appEOF, FinAcked: c.finAcked, Limit: c.limit,
		Recv: c.recv, PeerFin: c.peerFin, FinDone: c.finDone, Stats: c.stats,
	}
	if c.striped {
		st.Stripes = c.maxStripes
	}
	if c.leg == nil && !c.lostAt.IsZero() {
		st.Stats.Parked += time.Since(c.lostAt)
	}
	st.Unacked = make([]byte, 0, c.snd.held())
	for _, ch := range c.snd.chunks {
		st.Unacked = append(st.Unacked, ch.bytes()...)
	}
	st.Backlog = make([]byte, 0, c.bl.n)
	for _, ch := range c.bl.chunks {
		st.Backlog = append(st.Backlog, ch.bytes()...)
	}
	c.snd.release()
	c.bl.release()
	c.releaseOOOLocked() // (the peer resends it from Recv)
	out := handedOut{st: st}
	if len(st.Unacked) != c.snd.held() {
		out.err = fmt.Errorf("the send buffer holds %d bytes where %d were counted", len(st.Unacked), c.snd.held())
	}
	if out.err == nil {
		out.file, out.err = app.(*net.TCPConn).File()
	}
	if out.err != nil {
		out.st = nil
	}
	c.handed <- out
}

// Thaw returns a connection of cfg made of st, which Freeze gave in
// another process (or this one): run it with RelayThawed on the
// application's connection of the same socket. It waits for a leg
// (Resume), as a connection that lost its own does.
func Thaw(cfg Config, st *State) (*Conn, error) {
	if err := st.check(); err != nil {
		return nil, err
	}
	c := New(cfg, st.Dialer)
	c.awaitAnswer = false
	c.gen = 1 // its legs were in the process before
	c.stats = st.Stats
	c.snd.acked, c.snd.end = st.Acked, st.Acked
	for b := st.Unacked; len(b) > 0; {
		ch := c.snd.tail()
		n := copy(ch.room(), b)
		c.snd.filled(ch, n)
		b = b[n:]
	}
	c.sent = st.Sent // and resent from where the peer's join says
	c.appEOF, c.finAcked, c.limit = st.AppEOF, st.FinAcked, st.Limit
	c.recv, c.peerFin, c.finDone = st.Recv, st.PeerFin, st.FinDone
	for b := st.Backlog; len(b) > 0; {
		n := min(len(b), maxChunk)
		ch := c.bl.take(n)
		ch.n = copy(ch.buf(), b[:n])
		ch.pos = st.Recv - uint64(len(b))
		c.bl.push(ch)
		b = b[n:]
	}
	c.ackedPos, c.ackedWin = c.ackPosLocked(), c.cfg.Window-c.bl.n
	if st.Stripes > 1 {
		c.wantStripes = st.Stripes
		c.striped, c.maxStripes = true, st.Stripes
	}
	return c, nil
}

// RelayThawed is Relay for a connection Thaw made: it starts parked
// (the dialer's side then brings a leg, Config.OnLost), writes the
// backlog to app, and goes on as Relay does.
func (c *Conn) RelayThawed(app net.Conn, counts Counts) error {
	return c.relay(app, nil, counts)
}

// check refuses a state no connection could have been in.
func (st *State) check() error {
	switch {
	case len(st.Unacked) > MaxWindow || len(st.Backlog) > MaxWindow:
		return fmt.Errorf("%w: a handed-over connection holds %d and %d bytes, past %d", ErrFrame, len(st.Unacked), len(st.Backlog), MaxWindow)
	case st.Acked > ^uint64(0)-uint64(len(st.Unacked)) || st.Recv < uint64(len(st.Backlog)):
		return fmt.Errorf("%w: a handed-over connection's positions overflow", ErrFrame)
	case st.Sent < st.Acked || st.Sent > st.Acked+uint64(len(st.Unacked)):
		return fmt.Errorf("%w: a handed-over connection sent to %d, outside the %d to %d it holds", ErrFrame, st.Sent, st.Acked, st.Acked+uint64(len(st.Unacked)))
	case st.FinAcked && (!st.AppEOF || len(st.Unacked) > 0):
		return fmt.Errorf("%w: a handed-over connection's fin is acknowledged with bytes before it unacknowledged", ErrFrame)
	case st.FinDone && (!st.PeerFin || len(st.Backlog) > 0):
		return fmt.Errorf("%w: a handed-over connection forwarded a fin before its bytes", ErrFrame)
	case st.Limit < st.Acked:
		return fmt.Errorf("%w: a handed-over connection's peer window ends before its acknowledged position", ErrFrame)
	case st.Stripes < 0 || st.Stripes > MaxStripes:
		return fmt.Errorf("%w: a handed-over connection of %d legs at once, outside 0 to %d", ErrFrame, st.Stripes, MaxStripes)
	}
	return nil
}

// stateMagic starts a State's encoding; its last byte is the version
// of the encoding. Version 2 is version 1 with the stripes (State.Stripes,
// one byte, at least 2) after the flags; a state of one leg is encoded as
// version 1, so that a release that reads only version 1 (the one before
// striped states) still takes it, and a process reads both. Any other
// version is refused.
var stateMagic = [4]byte{'S', 'C', 'H', 1}

// stripedVersion is the version byte of a striped state's encoding.
const stripedVersion = 2

// State flags, in their encoding.
const (
	flagDialer = 1 << iota
	flagAppEOF
	flagFinAcked
	flagPeerFin
	flagFinDone
)

// MarshalBinary encodes st: the magic, the flags, the positions and
// counts, then the unacknowledged bytes and the backlog, each after
// its length.
func (st *State) MarshalBinary() ([]byte, error) {
	var flags byte
	for i, on := range []bool{st.Dialer, st.AppEOF, st.FinAcked, st.PeerFin, st.FinDone} {
		if on {
			flags |= 1 << i
		}
	}
	b := make([]byte, 0, stateFixed+1+len(st.Unacked)+len(st.Backlog))
	b = append(b, stateMagic[:]...)
	b = append(b, flags)
	if st.Stripes > 1 {
		b[3] = stripedVersion
		b = append(b, byte(st.Stripes))
	}
	for _, v := range []uint64{st.Acked, st.Sent, st.Limit, st.Recv, uint64(st.Stats.Resumes), uint64(st.Stats.Resent), uint64(st.Stats.Parked)} {
		b = binary.BigEndian.AppendUint64(b, v)
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(st.Unacked)))
	b = append(b, st.Unacked...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(st.Backlog)))
	b = append(b, st.Backlog...)
	return b, nil
}

// stateFixed is the length of a State's encoding without its bytes.
const stateFixed = 4 + 1 + 7*8 + 4 + 4

// UnmarshalBinary decodes what MarshalBinary encoded, refusing anything
// else: another version's encoding, a length past the bytes given,
// bytes left over, a state no connection could have been in.
func (st *State) UnmarshalBinary(b []byte) error {
	if len(b) < stateFixed {
		return fmt.Errorf("%w: a handed-over connection's state of %d bytes, shorter than %d", ErrFrame, len(b), stateFixed)
	}
	if [3]byte(b[:3]) != [3]byte(stateMagic[:3]) {
		return fmt.Errorf("%w: not a handed-over connection's state", ErrFrame)
	}
	if b[3] != stateMagic[3] && b[3] != stripedVersion {
		return fmt.Errorf("%w: a handed-over connection's state of version %d, where this s2cs reads versions %d and %d: hand over to a release of the same state version, or restart", ErrFrame, b[3], stateMagic[3], stripedVersion)
	}
	flags := b[4]
	if flags>>5 != 0 {
		return fmt.Errorf("%w: a handed-over connection's state has unknown flags %#x", ErrFrame, flags)
	}
	fixed := b[5:]
	stripes := 0
	if b[3] == stripedVersion {
		if len(b) < stateFixed+1 {
			return fmt.Errorf("%w: a handed-over connection's state of %d bytes, shorter than %d", ErrFrame, len(b), stateFixed+1)
		}
		stripes, fixed = int(b[5]), b[6:]
		if stripes < 2 {
			return fmt.Errorf("%w: a striped handed-over connection's state of %d legs at once (at least 2)", ErrFrame, stripes)
		}
	}
	var v [7]uint64
	for i := range v {
		v[i] = binary.BigEndian.Uint64(fixed[8*i:])
	}
	rest := fixed[8*len(v):]
	bytesOf := func() ([]byte, error) {
		if len(rest) < 4 {
			return nil, fmt.Errorf("%w: a handed-over connection's state ends early", ErrFrame)
		}
		n := binary.BigEndian.Uint32(rest)
		rest = rest[4:]
		if uint64(n) > uint64(len(rest)) {
			return nil, fmt.Errorf("%w: a handed-over connection's state says %d bytes where %d are left", ErrFrame, n, len(rest))
		}
		p := append([]byte(nil), rest[:n]...)
		rest = rest[n:]
		return p, nil
	}
	unacked, err := bytesOf()
	if err != nil {
		return err
	}
	backlog, err := bytesOf()
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return fmt.Errorf("%w: %d bytes after a handed-over connection's state", ErrFrame, len(rest))
	}
	if int64(v[4]) < 0 || int64(v[5]) < 0 || int64(v[6]) < 0 {
		return fmt.Errorf("%w: a handed-over connection's counts are negative", ErrFrame)
	}
	s := State{
		Dialer: flags&flagDialer != 0, AppEOF: flags&flagAppEOF != 0, FinAcked: flags&flagFinAcked != 0,
		PeerFin: flags&flagPeerFin != 0, FinDone: flags&flagFinDone != 0,
		Acked: v[0], Sent: v[1], Limit: v[2], Recv: v[3], Unacked: unacked, Backlog: backlog,
		Stats:   Stats{Resumes: int64(v[4]), Resent: int64(v[5]), Parked: time.Duration(v[6])},
		Stripes: stripes,
	}
	if err := s.check(); err != nil {
		return err
	}
	*st = s
	return nil
}
