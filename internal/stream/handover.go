package stream

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync/atomic"

	"scistream/internal/api"
	"scistream/internal/framed"
	"scistream/internal/relay"
)

// A live upgrade (kill -USR2, internal/handoff): the old process
// freezes the stream's framed connections (FreezeConns) before it
// stops, and the new one, having restored the stream, takes each back
// (AdoptConn) before it starts the stream's accept loops (Start), so
// that the peer's join of an inbound connection finds it. Connections
// over unframed legs (plain TCP, pooled, a peer that does not resume)
// cannot be handed over: they end with the old process, with a reset,
// as at a restart.

// CloseListeners stops accepting on the stream's TCP listeners, for a
// hand-over: the sockets themselves stay open where a duplicate is
// held (handoff.Sockets), and what arrives waits in their queues for
// the new process. Stop releases their ports as ever.
func (st *Stream) CloseListeners() {
	st.mu.Lock()
	lns := st.listeners
	st.mu.Unlock()
	for _, ln := range lns {
		if ln != nil {
			ln.Close()
		}
	}
}

// FreezeConns hands over the stream's framed connections: each one's
// record and a duplicate of its application's socket (close it once
// passed on). Their relays end without a word to either application;
// the peer sees their legs end, and parks them. err says which could
// not be frozen (they go on here, and end when the stream stops).
func (st *Stream) FreezeConns() ([]framed.Handed, []*os.File, error) {
	return st.live.Freeze()
}

// AdoptConn takes back hd, a connection of this stream that the process
// before handed over, whose application's socket is f (AdoptConn
// closes f): an outbound stream's dials a new leg and joins it, an
// inbound stream's waits for the peer's join. Call it before Start. It
// fails, and the application's connection is reset, if the record is
// not one of this stream's, or the stream's caps are full.
func (st *Stream) AdoptConn(hd framed.Handed, f *os.File) error {
	nc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("connection %s: its socket: %w", hd.ID, err)
	}
	app, ok := nc.(*net.TCPConn)
	if !ok {
		nc.Close()
		return fmt.Errorf("connection %s: its socket is a %T, not TCP", hd.ID, nc)
	}
	relay.ResetOnClose(app)
	rec := st.Record()
	ch := int(hd.Tag)
	if ch >= len(st.listeners) || hd.State.Dialer != (st.Role == api.RoleOutbound) {
		relay.Abort(app)
		return fmt.Errorf("connection %s: of channel %d, dialer %v: not one of this %s stream of %d channels", hd.ID, ch, hd.State.Dialer, st.Role, len(st.listeners))
	}
	if !st.AdmitConn(ch, app.RemoteAddr()) {
		relay.Abort(app)
		return fmt.Errorf("connection %s: over the stream's or the gateway's cap of connections", hd.ID)
	}
	if !st.trackOn(app, ch) {
		st.ReleaseConn()
		return errors.New("the stream stopped")
	}
	log := st.env.Log.With("uid", st.UID, "channel", ch, "app", app.RemoteAddr().String())
	cfg := st.framedConfig(rec, log)
	cfg.Tag = hd.Tag
	st.spareOnLoss(app)
	ctx, cancel := context.WithCancel(st.ctx)
	parked := new(atomic.Bool)
	hooks := st.framedHooks(ctx, log, parked)
	var run func(ctx context.Context) error
	if st.Role == api.RoleOutbound {
		run = func(ctx context.Context) error {
			return framed.OutHanded(ctx, cfg, app, hd, st.rejoinDial(rec, ch, st.leg(rec, ch)), hooks)
		}
	} else {
		hooks.Accepted = nil
		run, err = st.framed.Adopt(cfg, app, hd, hooks)
		if err != nil {
			cancel()
			st.untrack(app)
			st.ReleaseConn()
			return err
		}
	}
	st.Active.Add(1)
	st.wg.Add(1)
	go func() {
		defer st.wg.Done()
		defer st.ReleaseConn()
		defer st.untrack(app)
		defer st.Active.Add(-1)
		defer cancel()
		st.framedEnded(log, run(ctx), parked)
	}()
	return nil
}
