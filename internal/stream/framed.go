package stream

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"scistream/internal/api"
	"scistream/internal/carry"
	"scistream/internal/framed"
	"scistream/internal/legpool"
	"scistream/internal/relay"
	"scistream/internal/store"
	"scistream/internal/wan"
)

// Framed legs (internal/framed, internal/carry): where both gateways
// negotiated them, each application connection's bytes go in
// positioned frames, and a lost leg parks the connection for the
// stream's resume window while the outbound side dials a new one and
// joins it; the applications see a pause. The counts below say how
// often, and the status says "resuming" while a connection waits.

// resumeStats are a stream's counts of its framed connections' legs.
type resumeStats struct {
	parked    atomic.Int64 // connections waiting for a leg now
	resumed   atomic.Int64 // legs that replaced a lost one
	resent    atomic.Int64 // bytes sent again on them
	parkedFor atomic.Int64 // nanoseconds connections spent waiting
	expired   atomic.Int64 // connections reset after the window
	// stripes is the legs at once the latest connection was granted.
	stripes atomic.Int64
	// mode is what the last leg said of resuming (api.Resume*).
	mode atomic.Pointer[string]
}

// noteResume notes what a leg w of st says of resuming.
func (st *Stream) noteResume(w net.Conn, pooled bool) {
	m := api.ResumeOn
	switch {
	case st.wanT == api.WANTCP:
		m = api.ResumePlain
	case st.env.ResumeWindowFor(st.Record()) == 0:
		m = api.ResumeOff // (its legs are dialed unframed: wan.Leg.Unframed)
	case pooled && !wan.Framed(w):
		m = api.ResumePeer // a peer without frames at all
		if s, ok := w.(*legpool.Session); ok && s.LegFramed() {
			m = api.ResumePooled // frames on its legs, not in pooled sessions (wan.ALPNFramed alone)
		}
	case !wan.Framed(w):
		m = api.ResumePeer
	}
	if cur := st.resume.mode.Load(); cur == nil || *cur != m {
		st.resume.mode.Store(&m)
	}
}

// fillResume puts st's resume counts in s.
func (st *Stream) fillResume(s *api.Stats) {
	if m := st.resume.mode.Load(); m != nil {
		s.Resume = *m
	}
	s.ParkedConns = st.resume.parked.Load()
	s.ResumedLegs = st.resume.resumed.Load()
	s.ResentBytes = st.resume.resent.Load()
	s.ParkedSeconds = time.Duration(st.resume.parkedFor.Load()).Seconds()
	s.ResumeExpired = st.resume.expired.Load()
	s.StripeLegs = int(st.resume.stripes.Load())
}

// ResumeWindowFor returns how long a framed connection of rec waits for
// a new leg: the record's (the request's resume_window_s), capped by the
// gateway's maximum, or the gateway's default.
func (e *Env) ResumeWindowFor(rec *store.Record) time.Duration {
	if rec.ResumeWindowS == nil {
		return e.Resume.ResumeWindow
	}
	return min(time.Duration(*rec.ResumeWindowS)*time.Second, e.ResumeMax)
}

// framedConfig is the configuration of rec's framed connections.
func (st *Stream) framedConfig(rec *store.Record, log *slog.Logger) framed.Config {
	cfg := st.env.Resume
	cfg.ResumeWindow = st.env.ResumeWindowFor(rec)
	cfg.Log = log
	cfg.Live = &st.live
	if rec.WAN != api.WANQUIC { // (a QUIC stream's streams share one flow)
		cfg.Stripes = rec.Stripe
	} else {
		cfg.MaxStripes = 0
	}
	return cfg
}

// framedHooks are the hooks of one framed connection of st: its counts,
// paced as the stream is, and what its legs' losses and returns tell the
// stream.
func (st *Stream) framedHooks(ctx context.Context, log *slog.Logger, parked *atomic.Bool) framed.Hooks {
	return framed.Hooks{
		Counts: carry.Counts{
			ToWAN:   st.counter(ctx, DirToWAN, &st.ToWAN),
			FromWAN: st.counter(ctx, DirFromWAN, &st.FromWAN),
			Paced:   func() bool { return st.Bucket(DirFromWAN) != nil },
		},
		Accepted: st.legWorked,
		Striped:  func(n int) { st.resume.stripes.Store(int64(n)) },
		Lost: func(err error) {
			if st.ctx.Err() != nil {
				// The stream stops: it closed the leg itself (Stop),
				// and the connection ends with it; no outage to say.
				return
			}
			if parked.CompareAndSwap(false, true) {
				st.resume.parked.Add(1)
			}
			st.wanDown(log, "lost the peer gateway's WAN leg: its connections wait, parked, for a new one (up to the stream's resume window)", err)
		},
		Resumed: func(p time.Duration, resent int64) {
			if parked.CompareAndSwap(true, false) {
				st.resume.parked.Add(-1)
			}
			st.resume.resumed.Add(1)
			st.resume.resent.Add(resent)
			st.resume.parkedFor.Add(int64(p))
			st.wanUp(log)
		},
	}
}

// framedEnded counts how a framed connection ended, as a relayed one
// does, and a parked connection's end.
func (st *Stream) framedEnded(log *slog.Logger, err error, parked *atomic.Bool) {
	if parked.CompareAndSwap(true, false) {
		st.resume.parked.Add(-1)
	}
	if errors.Is(err, carry.ErrHandedOver) {
		return // it goes on in the process that took it (handover.go)
	}
	if errors.Is(err, carry.ErrResumeWindow) {
		st.resume.expired.Add(1)
	}
	st.ended(log, err)
}

// relayFramedOut relays app, an application connection of an outbound
// stream, over w, a framed leg to the peer's listener of channel ch
// (leg), until the connection ends; a lost leg is replaced by a new dial
// of the same kind.
func (st *Stream) relayFramedOut(log *slog.Logger, app, w net.Conn, ch int, leg *wan.Leg) {
	rec := st.Record()
	st.Active.Add(1)
	st.Total.Add(1)
	defer st.Active.Add(-1)
	ctx, cancel := context.WithCancel(st.ctx)
	defer cancel()
	cfg := st.framedConfig(rec, log)
	cfg.Tag = uint32(ch)
	if cfg.ResumeWindow > 0 {
		st.spareOnLoss(app, w)
	}
	var parked atomic.Bool
	// A new leg's connect is given a few of the first leg's round trips
	// (wan.Leg.ConnectTimeout), so that a SYN lost while the path was
	// down does not wait out the kernel's backoff once it is back.
	again := *leg
	if rtt, ok := wan.RTTOf(w); ok {
		again.ConnectTimeout = connectTimeout(rtt)
	}
	err := framed.Out(ctx, cfg, app, w, rec.Secret, st.rejoinDial(rec, ch, &again), st.framedHooks(ctx, log, &parked))
	st.framedEnded(log, err, &parked)
}

// rejoinDial returns the dial of a new leg of channel ch for a parked
// connection: to the peer's listener of ch (or the address it answered
// from), as leg.
func (st *Stream) rejoinDial(rec *store.Record, ch int, leg *wan.Leg) func(ctx context.Context) (net.Conn, error) {
	return func(ctx context.Context) (net.Conn, error) {
		target := rec.Targets[ch%len(rec.Targets)]
		if p := st.peerAt[ch].Load(); p != nil {
			target = *p
		}
		return st.dialWANOnce(ctx, target, leg)
	}
}

// serveFramedIn serves w, a framed leg of channel ch of an inbound stream
// from the peer address from: a join of one of the stream's connections
// (handed to it), or the open of a new one, relayed to the application
// once it is reached. admit says whether the connection is yet to take
// its slot of the caps (AdmitConn): a QUIC stream's took it on arrival.
// A session of a pooled leg (legpool.Session) only opens: a join takes
// its leg for as long as the connection lives, which a session, whose
// leg serves the next one after it, cannot give.
func (st *Stream) serveFramedIn(log *slog.Logger, from net.Addr, ch int, w net.Conn, admit bool) {
	h, o, j, err := framed.First(w)
	if err == nil && (h.Type == carry.TypeJoin || h.Type == carry.TypeStripe) {
		if _, pooled := w.(*legpool.Session); pooled {
			err = errors.New("a join or a stripe in a pooled leg's session: a connection joins on a leg of its own")
		}
	}
	if err != nil {
		relay.Abort(w)
		st.RefuseWAN(ch, from, err)
		return
	}
	if h.Type == carry.TypeJoin {
		// The connection counts its return in its own hooks.
		if err := st.framed.Join(w, h, j); err != nil {
			st.RefuseWAN(ch, from, err)
		}
		return
	}
	if h.Type == carry.TypeStripe {
		// A further leg of a striped connection: it holds the leg
		// until the connection ends, counted as its connection's.
		if err := st.framed.Stripe(w, h, j); err != nil {
			st.RefuseWAN(ch, from, err)
		}
		return
	}
	if admit {
		if !st.AdmitConn(ch, from) {
			framed.Refuse(w, "over the cap of connections at once of the stream or the gateway")
			return
		}
		defer st.ReleaseConn()
	}
	rec := st.Record()
	target := rec.Targets[ch%len(rec.Targets)]
	app, err := st.dialApp(log, w, target, st.env.AppWaitFor(rec))
	if err != nil {
		var re *relay.Error
		if errors.As(err, &re) {
			st.ended(log, err) // the leg ended while it waited
			relay.Abort(w)
			return
		}
		st.dialFailed(log, false, target, err)
		framed.Refuse(w, appRefusal(err))
		return
	}
	relay.ResetOnClose(app)
	st.appUp(log)
	st.legWorked()
	if !st.track(app) {
		relay.Abort(w)
		return
	}
	defer st.untrack(app)
	st.Active.Add(1)
	st.Total.Add(1)
	defer st.Active.Add(-1)
	ctx, cancel := context.WithCancel(st.ctx)
	defer cancel()
	cfg := st.framedConfig(rec, log)
	cfg.Tag = uint32(ch)
	if cfg.ResumeWindow > 0 {
		st.spareOnLoss(app, w)
	}
	var parked atomic.Bool
	hooks := st.framedHooks(ctx, log, &parked)
	hooks.Accepted = nil // this side accepts
	err = st.framed.Open(ctx, cfg, w, app, o, rec.Secret, hooks)
	st.framedEnded(log, err, &parked)
}

// connectTimeout is how long a new leg's connect may take on a path
// whose round trip is rtt: four of them and a TCP retransmission's
// least timeout (200 ms), at least 250 ms. A path whose delay grew past
// it meanwhile is dialled again, as the kernel would resend the SYN.
func connectTimeout(rtt time.Duration) time.Duration {
	return max(4*rtt+200*time.Millisecond, 250*time.Millisecond)
}
