package framed

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"

	"scistream/internal/carry"
	"scistream/internal/relay"
)

// The hand-over of a gateway's framed connections to a new process:
// the old one freezes every connection it runs (Live.Freeze) and passes
// on each one's record (Handed) with its application's socket; the new
// one takes them back, the outbound side with OutHanded (it dials a
// leg and joins, as after a lost one), the inbound side with
// Table.Adopt (it holds the connection for the peer's join, and must do
// so before it takes the stream's legs). The peer gateway notices only
// a lost leg.

// Live is the set of a gateway's framed connections that a hand-over
// freezes: Out, Table.Open and the connections taken back add theirs
// while they run (Config.Live). Its zero value is empty; its methods
// may be called concurrently.
type Live struct {
	mu sync.Mutex // guards m
	m  map[*carry.Conn]liveConn
}

type liveConn struct {
	id  carry.ID
	key [32]byte
	tag uint32
}

// add keeps c (of id, resume key key and tag) until the returned func.
func (l *Live) add(c *carry.Conn, id carry.ID, key [32]byte, tag uint32) func() {
	if l == nil {
		return func() {}
	}
	l.mu.Lock()
	if l.m == nil {
		l.m = map[*carry.Conn]liveConn{}
	}
	l.m[c] = liveConn{id: id, key: key, tag: tag}
	l.mu.Unlock()
	return func() {
		l.mu.Lock()
		delete(l.m, c)
		l.mu.Unlock()
	}
}

// Len returns how many connections run.
func (l *Live) Len() int {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.m)
}

// Handed is one framed connection handed over: what the new process
// needs, besides its application's socket, to go on with it.
type Handed struct {
	ID    carry.ID
	Key   [32]byte // the resume key the connection's joins prove
	Tag   uint32   // Config.Tag of the connection
	State carry.State
}

// Freeze hands over every connection that runs: each one's Relay (in
// Out, Table.Open, OutHanded, Table.Adopt) returns carry.ErrHandedOver,
// and its record comes back with its application's socket (files[i]
// for handed[i], which the caller passes on, then closes). A
// connection that cannot be frozen (it ended meanwhile, its peer had
// not answered it yet) goes on here; err says why each did not.
func (l *Live) Freeze() (handed []Handed, files []*os.File, err error) {
	l.mu.Lock()
	conns := make(map[*carry.Conn]liveConn, len(l.m))
	for c, lc := range l.m {
		conns[c] = lc
	}
	l.mu.Unlock()
	var errs []error
	for c, lc := range conns {
		st, f, ferr := c.Freeze()
		if ferr != nil {
			errs = append(errs, fmt.Errorf("connection %s: %w", lc.id, ferr))
			continue
		}
		handed = append(handed, Handed{ID: lc.id, Key: lc.key, Tag: lc.tag, State: *st})
		files = append(files, f)
	}
	return handed, files, errors.Join(errs...)
}

// MarshalBinary encodes h: its ID, its key, its tag, then its state's
// encoding.
func (h *Handed) MarshalBinary() ([]byte, error) {
	st, err := h.State.MarshalBinary()
	if err != nil {
		return nil, err
	}
	b := make([]byte, 0, handedFixed+len(st))
	b = append(b, h.ID[:]...)
	b = append(b, h.Key[:]...)
	b = binary.BigEndian.AppendUint32(b, h.Tag)
	return append(b, st...), nil
}

// handedFixed is the length of a Handed's encoding before its state.
const handedFixed = len(carry.ID{}) + 32 + 4

// UnmarshalBinary decodes what MarshalBinary encoded, refusing anything
// else (carry.State.UnmarshalBinary).
func (h *Handed) UnmarshalBinary(b []byte) error {
	if len(b) < handedFixed {
		return fmt.Errorf("%w: a handed-over connection's record of %d bytes", carry.ErrFrame, len(b))
	}
	var d Handed
	copy(d.ID[:], b)
	copy(d.Key[:], b[len(d.ID):])
	d.Tag = binary.BigEndian.Uint32(b[len(d.ID)+len(d.Key):])
	if err := d.State.UnmarshalBinary(b[handedFixed:]); err != nil {
		return err
	}
	*h = d
	return nil
}

// OutHanded goes on with hd, a connection of an outbound stream that
// another process handed over, on app (its application's socket): it
// dials a leg (dial) and joins it, as Out does after a lost leg, and
// relays until the connection ends or ctx does. Its error is Out's.
func OutHanded(ctx context.Context, cfg Config, app net.Conn, hd Handed, dial func(ctx context.Context) (net.Conn, error), h Hooks) error {
	if !hd.State.Dialer {
		relay.Abort(app)
		return fmt.Errorf("connection %s was handed over by an inbound stream's gateway, not an outbound one", hd.ID)
	}
	cc := cfg.carry(true, h)
	var c *carry.Conn
	var stripes sync.WaitGroup
	defer stripes.Wait()
	cc.OnLost = func(err error) {
		if h.Lost != nil && !errors.Is(err, carry.ErrHandedOver) {
			h.Lost(err)
		}
		if rejoin(cfg, c, hd.ID, hd.Key, dial, h) {
			// A striped connection is striped again, as after a lost
			// leg (Out).
			stripes.Add(1)
			go func() {
				defer stripes.Done()
				bringStripes(cfg, c, hd.ID, hd.Key, dial)
			}()
		}
	}
	c, err := carry.Thaw(cc, &hd.State)
	if err != nil {
		relay.Abort(app)
		return fmt.Errorf("connection %s handed over: %w", hd.ID, err)
	}
	if h.Striped != nil {
		h.Striped(max(hd.State.Stripes, 1))
	}
	defer cfg.Live.add(c, hd.ID, hd.Key, hd.Tag)()
	defer context.AfterFunc(ctx, func() { c.Abort(&relay.Error{Conn: relay.B, Op: "read", Err: net.ErrClosed}, stopped) })()
	return c.RelayThawed(app, h.Counts)
}

// Adopt takes back hd, a connection of an inbound stream that another
// process handed over, whose application's socket is app: once it
// returns, a leg that joins the connection finds it (Join), so the
// caller adopts every connection of a stream before it takes the
// stream's legs. run (call it once: until then the table holds the
// connection, parked) relays until the connection ends or ctx does; its
// error is Open's. Adopt fails (and app is reset) if the record is an
// outbound stream's, or its ID is in use.
func (t *Table) Adopt(cfg Config, app net.Conn, hd Handed, h Hooks) (run func(ctx context.Context) error, err error) {
	if hd.State.Dialer {
		relay.Abort(app)
		return nil, fmt.Errorf("connection %s was handed over by an outbound stream's gateway, not an inbound one", hd.ID)
	}
	cc := cfg.carry(false, h)
	cc.OnLost = func(err error) {
		if h.Lost != nil && !errors.Is(err, carry.ErrHandedOver) {
			h.Lost(err) // (its legs were the process before's)
		}
	}
	c, err := carry.Thaw(cc, &hd.State)
	if err != nil {
		relay.Abort(app)
		return nil, fmt.Errorf("connection %s handed over: %w", hd.ID, err)
	}
	if h.Striped != nil {
		h.Striped(max(hd.State.Stripes, 1))
	}
	e := &entry{c: c, key: hd.Key, h: h}
	if !t.put(hd.ID, e) {
		relay.Abort(app)
		return nil, fmt.Errorf("connection %s handed over: an ID in use", hd.ID)
	}
	return func(ctx context.Context) (err error) {
		defer func() { t.drop(hd.ID, e, err) }()
		defer cfg.Live.add(c, hd.ID, hd.Key, hd.Tag)()
		defer context.AfterFunc(ctx, func() { c.Abort(&relay.Error{Conn: relay.B, Op: "read", Err: net.ErrClosed}, stopped) })()
		return c.RelayThawed(app, h.Counts)
	}, nil
}
