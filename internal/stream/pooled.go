package stream

import (
	"context"
	"log/slog"
	"net"

	"scistream/internal/legpool"
	"scistream/internal/peerdial"
	"scistream/internal/relay"
	"scistream/internal/wan"
)

// Pooled WAN legs (internal/legpool): an outbound stream with wan_pool
// takes its legs from the gateway's Manager, keeps its channels warm
// through it, and counts what it dialed and what was torn down.

// legOwner is st as the pool knows it: one owner per stream (a value, so
// the same stream is the same owner).
type legOwner struct{ st *Stream }

func (o legOwner) Context() context.Context { return o.st.ctx }

func (o legOwner) Serves(ch int) bool { return o.st.HasChannel(ch) }

func (o legOwner) DialLeg(ctx context.Context, target string, leg *wan.Leg) (*legpool.Pooled, error) {
	st := o.st
	return peerdial.Redial(ctx, peerdial.RedialWindow, func(ctx context.Context) (*legpool.Pooled, error) {
		return peerdial.Handshake(ctx, st.env.Handshakes, target, func(ctx context.Context) (*legpool.Pooled, error) { return legpool.DialPooled(ctx, target, leg) })
	}, st.redialed(target))
}

func (o legOwner) Counted(created, tornDown int64) {
	o.st.legsCreated.Add(created)
	o.st.legsTornDown.Add(tornDown)
}

// warmLegs keeps st's channels at want idle legs until st stops.
func (st *Stream) warmLegs(want int) {
	defer st.wg.Done()
	st.env.Legs.Warm(legOwner{st}, want, func() []legpool.Channel {
		rec := st.Record()
		out := make([]legpool.Channel, rec.NumConn)
		for ch := range out {
			out[ch] = legpool.Channel{Ch: ch, Served: st.HasChannel(ch), Target: rec.Targets[ch%len(rec.Targets)], Leg: st.leg(rec, ch)}
		}
		return out
	}, st.env.Log.With("uid", st.UID))
}

// relayPooled relays an application connection accepted on channel ch
// of an outbound stream with wan_pool over a pooled leg to target: an
// idle one of the flow if there is one (no handshake), else a new one.
func (st *Stream) relayPooled(log *slog.Logger, app net.Conn, ch int, target string, leg *wan.Leg) {
	legs := st.env.Legs
	var pl *legpool.Leg
	var s *legpool.Session
	for {
		var fresh bool
		var err error
		pl, fresh, err = legs.Acquire(st.ctx, legOwner{st}, ch, target, leg)
		if err != nil {
			st.dialFailed(log, true, target, err)
			relay.Abort(app)
			return
		}
		s, err = pl.Open()
		if err == nil {
			if !fresh {
				st.legsReused.Add(1)
			}
			break
		}
		legs.Release(pl, false)
		if fresh {
			st.dialFailed(log, true, target, err)
			relay.Abort(app)
			return
		}
	}
	st.wanUp(log)
	st.noteResume(s, true)
	st.startWatch(log)
	if !st.track(s) {
		relay.Abort(app)
		legs.Release(pl, false)
		return
	}
	if wan.Framed(s) {
		// Positioned frames in the session (wan.ALPNFramedPools): the
		// connection outlives the pooled leg, on a leg of its own. The
		// pooled leg is clean again only if the connection ended on it
		// in order; one it left was reset (legpool.Session.Close).
		st.relayFramedOut(log, app, s, ch, leg)
	} else {
		st.relay(log, app, s, st.answer(log, s))
	}
	st.untrack(s)
	legs.Release(pl, s.Clean())
}
