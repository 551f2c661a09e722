// Package framed runs a stream's application connections over framed
// WAN legs (internal/carry, negotiated as wan.ALPNFramed): the outbound
// side opens each connection on its first leg and, when a leg is lost,
// dials another and joins it to the connection (Out); the inbound side
// answers the open once it reached its application and keeps its
// connections by ID, so that a leg that joins one finds it and proves
// its resume key (Table). A connection whose legs are all gone waits,
// parked, for the resume window; its application notices nothing but a
// pause.
//
// What a join trusts is wan's (framed.go there): the leg's own pinned
// TLS and preface, and a proof of the connection's resume key over the
// new leg's session, which only the two ends of the connection's first
// leg can make. A refused join is told "no such connection" whatever the
// reason, so a caller learns nothing of which connections exist.
package framed

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"time"

	"scistream/internal/carry"
	"scistream/internal/relay"
	"scistream/internal/wan"
)

// Config is how a stream's framed connections run. Zero fields are the
// defaults of carry.Config.
type Config struct {
	// Window and Budget bound the bytes one connection and every
	// connection of the gateway hold (carry.Config).
	Window int
	Budget *carry.Budget
	// ResumeWindow is how long a connection waits without a leg before
	// it is reset at both applications; zero: it does not wait (a lost
	// leg resets it, as an unframed leg does).
	ResumeWindow time.Duration
	// LegTimeout is carry.Config.LegTimeout.
	LegTimeout time.Duration
	// Log gets the connections' lines (the stream's logger).
	Log *slog.Logger
	// Live, if not nil, holds the connections while they run, for a
	// hand-over to freeze them (handover.go), each with Tag (what its
	// stream needs to take it back: its channel).
	Live *Live
	Tag  uint32
	// Stripes is how many legs at once an outbound connection asks to
	// be carried on (stripe.go); 0 or 1: one.
	Stripes int
	// MaxStripes is the most legs at once an inbound connection is
	// granted; 0 or 1: one (striping refused).
	MaxStripes int
}

// Hooks are what a connection tells its stream.
type Hooks struct {
	// Counts are the bytes moved (carry.Counts).
	Counts carry.Counts
	// Accepted is called once the peer accepted the connection
	// (outbound), or it was accepted (inbound).
	Accepted func()
	// Lost is called when the connection lost its leg and parked.
	Lost func(err error)
	// Resumed is called when a leg came back to it: parked is how
	// long it was without one, resent the bytes it sent again.
	Resumed func(parked time.Duration, resent int64)
	// Striped, if not nil, is told the legs at once the connection was
	// granted (1: the peer does not stripe it) once it was accepted.
	Striped func(granted int)
}

func (c Config) carry(dialer bool, h Hooks) carry.Config {
	return carry.Config{Window: c.Window, Budget: c.Budget, ResumeWindow: c.ResumeWindow, LegTimeout: c.LegTimeout,
		OnAccepted: h.Accepted, Log: c.Log}
}

// Out relays app, an application connection of an outbound stream of
// secret, over w, a framed leg just dialed (its preface sent), until
// the connection ends or ctx does (the stream stops: both ends are
// reset): it opens the connection on w, and each time a
// leg is lost it dials another (dial, honouring ctx) and joins it, until
// one joins or the resume window runs out. Its error is carry's
// (*relay.Error), nil for an orderly end.
func Out(ctx context.Context, cfg Config, app, w net.Conn, secret []byte, dial func(ctx context.Context) (net.Conn, error), h Hooks) error {
	var id carry.ID
	crand.Read(id[:])
	key := wan.ResumeKey(secret, wan.BindingOf(w), id)
	cc := cfg.carry(true, h)
	var c *carry.Conn
	var stripes sync.WaitGroup
	defer stripes.Wait()
	addStripes := func() {
		stripes.Add(1)
		go func() {
			defer stripes.Done()
			bringStripes(cfg, c, id, key, dial)
		}()
	}
	cc.OnAccepted = func() {
		granted, _ := c.Stripes()
		if granted > 1 {
			lowat(w)
			addStripes()
		}
		if h.Striped != nil {
			h.Striped(granted)
		}
		if h.Accepted != nil {
			h.Accepted()
		}
	}
	cc.OnLost = func(err error) {
		if h.Lost != nil {
			h.Lost(err)
		}
		if rejoin(cfg, c, id, key, dial, h) {
			addStripes()
		}
	}
	c = carry.New(cc, true)
	c.SetStripes(cfg.Stripes)
	defer cfg.Live.add(c, id, key, cfg.Tag)()
	defer context.AfterFunc(ctx, func() { c.Abort(&relay.Error{Conn: relay.B, Op: "read", Err: net.ErrClosed}, stopped) })()
	if _, err := w.Write(carry.AppendOpen(nil, carry.Open{ID: id, Window: c.Window(), Stripes: uint8(min(max(cfg.Stripes, 1), carry.MaxStripes))})); err != nil {
		relay.Abort(app)
		relay.Abort(w)
		return &relay.Error{Conn: relay.B, Op: "write", Err: fmt.Errorf("open the connection: %w", err)}
	}
	return c.Relay(app, w, h.Counts)
}

// stopped is the reason a connection's reset frame gives when its
// stream stops (released, or the gateway stops).
const stopped = "the stream was released or its gateway stopped"

// Backoff between the dials of a parked connection's new leg: short at
// first, for a path that refuses at once (a reset, a down link) and is
// back in a moment, so that the application's pause ends within tens of
// milliseconds of the path's return; longer as the outage lasts (a
// tenth of it, up to a second), so that many parked connections do not
// flood a peer that stays away. Each wait is jittered by up to half. A
// dial that gets no answer takes its own time.
const (
	firstBackoff = 10 * time.Millisecond
	shortBackoff = 25 * time.Millisecond
	maxBackoff   = time.Second
)

// backoffAfter is the longest wait between dials once a connection has
// been parked for parked.
func backoffAfter(parked time.Duration) time.Duration {
	return min(max(shortBackoff, parked/10), maxBackoff)
}

// untilEnded returns a context that is done once c ended (or cancel is
// called, which the caller must).
func untilEnded(c *carry.Conn) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-c.Ended():
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// rejoin dials new legs for the parked connection c and joins it, until
// one joins (true), the peer refuses, or c ends.
func rejoin(cfg Config, c *carry.Conn, id carry.ID, key [32]byte, dial func(ctx context.Context) (net.Conn, error), h Hooks) bool {
	ctx, cancel := untilEnded(c)
	defer cancel()
	backoff := firstBackoff
	start := time.Now()
	for attempt := 1; ; attempt++ {
		if ctx.Err() != nil {
			return false
		}
		err := joinOnce(ctx, c, id, key, dial, h)
		var re *carry.RefusedError
		switch {
		case err == nil:
			return true
		case errors.As(err, &re), errors.Is(err, errUnframed):
			// The peer holds the connection no more (it restarted,
			// or its window ran out), or cannot resume: waiting
			// longer changes nothing.
			c.Abort(&relay.Error{Conn: relay.B, Op: "read", Err: fmt.Errorf("%w: %w", ErrForgotten, err)}, "")
			return false
		}
		if cfg.Log != nil && attempt == 1 {
			cfg.Log.Debug("a new leg for a parked connection failed: trying again", "err", err)
		}
		t := time.NewTimer(backoff/2 + rand.N(backoff/2+1))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return false
		}
		backoff = min(2*backoff, backoffAfter(time.Since(start)))
	}
}

// ErrForgotten wraps the end of a connection whose peer refused its
// new leg: the peer holds the connection no more (it restarted, or its
// resume window ran out before this side's), so the connection is lost.
var ErrForgotten = errors.New("the peer gateway no longer holds the connection (it restarted, or its resume window ran out)")

// errUnframed: the new leg carries no frames (the peer gateway was
// replaced by a release that does not resume).
var errUnframed = errors.New("the peer gateway's new leg carries no positioned frames (a release that does not resume): the connection cannot go on")

// joinOnce dials one leg and joins c on it.
func joinOnce(ctx context.Context, c *carry.Conn, id carry.ID, key [32]byte, dial func(ctx context.Context) (net.Conn, error), h Hooks) error {
	nl, err := dial(ctx)
	if err != nil {
		return err
	}
	if !wan.Framed(nl) {
		relay.Abort(nl)
		return errUnframed
	}
	pos, window, err := join(nl, carry.AppendJoin(nil, carry.Join{ID: id, Proof: wan.JoinProof(key, wan.BindingOf(nl), id), Window: c.Room()}, c.Received()))
	if err != nil {
		relay.Abort(nl)
		return err
	}
	if err := resume(c, nl, pos, window, nil, h); err != nil {
		relay.Abort(nl)
		return err
	}
	return nil
}

// resume gives c the leg nl (carry.Conn.Resume) and tells h.Resumed.
func resume(c *carry.Conn, nl net.Conn, pos uint64, window uint32, answer func(uint64, uint32) error, h Hooks) error {
	_, since := c.Parked()
	before := c.Stats()
	if granted, _ := c.Stripes(); granted > 1 {
		lowat(nl)
	}
	if err := c.Resume(nl, pos, window, answer); err != nil {
		return err
	}
	if h.Resumed != nil {
		var parked time.Duration
		if !since.IsZero() {
			parked = time.Since(since)
		}
		h.Resumed(parked, c.Stats().Resent-before.Resent)
	}
	return nil
}

// join sends frame, a join or a stripe, on leg nl, and reads the
// acceptor's answer: its received position and window, or its refusal.
func join(nl net.Conn, frame []byte) (uint64, uint32, error) {
	nl.SetDeadline(time.Now().Add(wan.HandshakeTimeout))
	defer nl.SetDeadline(time.Time{})
	if _, err := nl.Write(frame); err != nil {
		return 0, 0, fmt.Errorf("send the join: %w", err)
	}
	buf := make([]byte, carry.HeaderLen)
	h, err := carry.ReadHeader(nl, buf)
	if err != nil {
		return 0, 0, fmt.Errorf("read the join's answer: %w", err)
	}
	switch h.Type {
	case carry.TypeAccepted:
		return h.Pos, h.Length, nil
	case carry.TypeRefused:
		reason := make([]byte, h.Length)
		if _, err := io.ReadFull(nl, reason); err != nil {
			return 0, 0, err
		}
		return 0, 0, &carry.RefusedError{Reason: string(reason)}
	}
	return 0, 0, fmt.Errorf("%w: %q answering a join", carry.ErrFrame, h.Type)
}

// First reads the first frame of w, a framed leg of an inbound stream
// whose preface was admitted: an open (its Open) or a join (its Join,
// and the dialer's received position), under wan.HandshakeTimeout.
func First(w net.Conn) (h carry.Header, o carry.Open, j carry.Join, err error) {
	w.SetReadDeadline(time.Now().Add(wan.HandshakeTimeout))
	defer w.SetReadDeadline(time.Time{})
	buf := make([]byte, carry.HeaderLen+48)
	if h, err = carry.ReadHeader(w, buf); err != nil {
		return h, o, j, err
	}
	if h.Type != carry.TypeOpen && h.Type != carry.TypeJoin && h.Type != carry.TypeStripe {
		return h, o, j, fmt.Errorf("%w: %q first on a leg", carry.ErrFrame, h.Type)
	}
	p := buf[:h.Length]
	if _, err = io.ReadFull(w, p); err != nil {
		return h, o, j, err
	}
	if h.Type == carry.TypeOpen {
		o, err = carry.ParseOpen(p)
	} else {
		j, err = carry.ParseJoin(p)
	}
	return h, o, j, err
}

// Refuse answers the first frame of leg w with a refusal of reason and
// ends the leg: in order after the answer, so that the reason arrives,
// then, once what the dialer still sends was read for a moment, with a
// reset.
func Refuse(w net.Conn, reason string) {
	w.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := w.Write(carry.AppendReason(nil, carry.TypeRefused, reason)); err == nil {
		if cw, ok := w.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
			io.Copy(io.Discard, w)
		}
	}
	relay.Abort(w)
}

// Table holds an inbound stream's framed connections by ID. Its zero
// value is ready; its methods may be called concurrently.
type Table struct {
	mu sync.Mutex // guards m
	m  map[carry.ID]*entry
}

type entry struct {
	c   *carry.Conn
	key [32]byte
	h   Hooks // the connection's, for its joins
	// handed (under Table.mu): the connection was handed over to
	// another process (Live.Freeze); a join that still comes here is
	// dropped without an answer, so that the dialer tries again and
	// finds the new process.
	handed bool
}

// Open runs the connection that leg w opened with o, whose application
// connection is app (reached): it answers the open, keeps the
// connection for the legs that join it, and relays until it ends or
// ctx does (the stream stops).
// secret is the stream's. Its error is carry's (*relay.Error).
func (t *Table) Open(ctx context.Context, cfg Config, w, app net.Conn, o carry.Open, secret []byte, h Hooks) (err error) {
	cc := cfg.carry(false, h)
	cc.OnLost = h.Lost
	c := carry.New(cc, false)
	defer context.AfterFunc(ctx, func() { c.Abort(&relay.Error{Conn: relay.B, Op: "read", Err: net.ErrClosed}, stopped) })()
	c.SetPeerWindow(o.Window)
	var granted uint8
	if o.Stripes > 1 && cfg.MaxStripes > 1 {
		granted = uint8(min(int(o.Stripes), cfg.MaxStripes, carry.MaxStripes))
		c.SetStripes(int(granted))
		lowat(w)
	}
	e := &entry{c: c, key: wan.ResumeKey(secret, wan.BindingOf(w), o.ID), h: h}
	if !t.put(o.ID, e) {
		// An ID the dialer chose at random twice, or a replay: the
		// connection it names is another's.
		relay.Abort(app)
		Refuse(w, "a connection of this ID exists already")
		return &relay.Error{Conn: relay.B, Op: "read", Err: fmt.Errorf("%w: an open of an ID in use", carry.ErrFrame)}
	}
	defer func() { t.drop(o.ID, e, err) }()
	defer cfg.Live.add(c, o.ID, e.key, cfg.Tag)()
	if _, err := w.Write(carry.AppendHeader(nil, carry.Header{Type: carry.TypeAccepted, Length: c.Window(), Stripes: granted})); err != nil {
		relay.Abort(app)
		relay.Abort(w)
		return &relay.Error{Conn: relay.B, Op: "write", Err: fmt.Errorf("answer the open: %w", err)}
	}
	if h.Accepted != nil {
		h.Accepted()
	}
	if h.Striped != nil {
		h.Striped(max(int(granted), 1))
	}
	return c.Relay(app, w, h.Counts)
}

// put keeps e as the connection of id, unless the table has one.
func (t *Table) put(id carry.ID, e *entry) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[carry.ID]*entry{}
	}
	if t.m[id] != nil {
		return false
	}
	t.m[id] = e
	return true
}

// drop forgets e, the connection of id, which ended with err; one
// handed over to another process is kept, marked, for the joins that
// still come here (entry.handed).
func (t *Table) drop(id carry.ID, e *entry, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m[id] != e {
		return
	}
	if errors.Is(err, carry.ErrHandedOver) {
		e.handed = true
		return
	}
	delete(t.m, id)
}

// Join gives the connection j names leg w (its first frame, of header
// h, was the join), once the proof holds: it answers with this side's
// received position and the connection resends from the dialer's. A
// refused join is answered "no such connection" whatever the reason,
// and reported as an error for the log.
func (t *Table) Join(w net.Conn, h carry.Header, j carry.Join) error {
	e, err := t.proved(w, j, "join")
	if err != nil {
		return err
	}
	err = resume(e.c, w, h.Pos, j.Window, func(recv uint64, window uint32) error {
		w.SetWriteDeadline(time.Now().Add(wan.HandshakeTimeout))
		defer w.SetWriteDeadline(time.Time{})
		_, err := w.Write(carry.AppendHeader(nil, carry.Header{Type: carry.TypeAccepted, Pos: recv, Length: window}))
		return err
	}, e.h)
	if err != nil {
		relay.Abort(w)
		return fmt.Errorf("join of connection %s: %w", j.ID, err)
	}
	return nil
}

// proved returns the entry of the connection j names, once j's proof
// holds over leg w; else it answers w (a refusal, or nothing: the
// connection was handed over) and says why, of a what (join, stripe).
func (t *Table) proved(w net.Conn, j carry.Join, what string) (*entry, error) {
	t.mu.Lock()
	e := t.m[j.ID]
	handed := e != nil && e.handed
	t.mu.Unlock()
	if handed && wan.CheckJoin(e.key, wan.BindingOf(w), j.ID, j.Proof) {
		// This process handed the connection over: no answer, so that
		// the dialer tries again, and finds the process that has it.
		relay.Abort(w)
		return nil, fmt.Errorf("%s of connection %s: handed over to the new process", what, j.ID)
	}
	if e == nil || handed || !wan.CheckJoin(e.key, wan.BindingOf(w), j.ID, j.Proof) {
		Refuse(w, "no such connection on this stream (it ended, or never was)")
		if e == nil {
			return nil, fmt.Errorf("%s of connection %s: none such", what, j.ID)
		}
		return nil, fmt.Errorf("%s of connection %s: the proof does not hold", what, j.ID)
	}
	return e, nil
}

// Parked returns how many of the table's connections wait for a leg.
func (t *Table) Parked() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, e := range t.m {
		if p, _ := e.c.Parked(); p {
			n++
		}
	}
	return n
}
