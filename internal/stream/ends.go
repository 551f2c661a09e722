package stream

import (
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"

	"scistream/internal/api"
	"scistream/internal/carry"
	"scistream/internal/ends"
	"scistream/internal/wan"
)

// How a stream's connections end (internal/ends): each abort counted by
// its kind with its reason, and logged at the level its kind deserves.
// An application's or the peer's reset is routine (debug). The loss of
// the peer gateway, and failing to reach it or the application, are said
// at warn once per outage per stream (ends.Outage), and the recovery at
// info.

// endsState is what a stream keeps of its connections' ends.
type endsState struct {
	ends.Counts // aborted connections, by kind

	peer    ends.Outage // the WAN side: the peer gateway
	app     ends.Outage // the application (inbound)
	refused ends.Outage // the peer's answers refusing legs (outbound: answer.go)

	faultMu      sync.Mutex // guards lastFaultLog
	lastFaultLog time.Time
}

// ended records how a relayed connection of st ended (err nil: in order)
// and logs it at the level its kind deserves.
func (st *Stream) ended(log *slog.Logger, err error) {
	if err == nil {
		st.wanUp(log)
		return
	}
	if st.ctx.Err() != nil {
		return // released or shut down: not the connection's doing
	}
	err = ends.Describe(err) // its last error and log lines name the application and the WAN leg
	kind := ends.OfRelay(err)
	if st.watch.Lost() && errors.Is(err, net.ErrClosed) {
		kind = api.EndWANLost // aborted because the watch leg was lost
	}
	reason := err
	var ae *wan.AnswerError
	var cr *carry.RefusedError
	var na *carry.NoAnswerError
	switch {
	case errors.As(err, &ae): // what the peer said, not which leg of the relay read it
		reason = ae
	case errors.As(err, &cr):
		reason = cr
	case errors.As(err, &na):
		reason = na
	}
	st.ends.Count(kind, reason, time.Now())
	switch kind {
	case api.EndAppReset, api.EndPeerReset:
		log.Debug("connection aborted", "kind", kind, "err", err)
	case api.EndWANLost:
		st.wanDown(log, "lost the peer gateway: the WAN leg ended with neither an orderly end nor a reset (the peer died or restarted, or the path broke); every application connection on it was reset", err)
	case api.EndDialFailed:
		// The peer did not accept the leg (internal/wan, answer.go).
		if st.ends.refused.Fail(time.Now()) {
			log.Warn("the peer gateway did not accept this stream's connection: application connections are reset until it does (said once per outage)", "err", err)
		} else {
			log.Debug("the peer gateway did not accept the connection", "err", err)
		}
	default:
		st.fault(log, kind, err)
	}
}

// dialFailed records an application connection aborted because the
// other leg could not be dialed: the peer gateway (toPeer) or the
// application.
func (st *Stream) dialFailed(log *slog.Logger, toPeer bool, target string, err error) {
	if st.ctx.Err() != nil {
		return
	}
	kind := ends.OfDial(err)
	st.ends.Count(kind, err, time.Now())
	if toPeer {
		st.wanDown(log.With("target", target), "cannot reach the peer gateway: application connections are reset until it answers", err)
		return
	}
	if st.ends.app.Fail(time.Now()) {
		log.Warn("cannot reach the application: WAN connections are reset until it answers (said once per outage)", "target", target, "kind", kind, "err", err)
	} else {
		log.Debug("dial application", "target", target, "kind", kind, "err", err)
	}
}

// appAway notes that a connection waits for the application to answer
// (appwait.go): said at warn once until it answers, as dialFailed does.
func (st *Stream) appAway(log *slog.Logger, target string, wait time.Duration, err error) {
	if st.ends.app.Fail(time.Now()) {
		log.Warn("cannot reach the application: WAN connections wait for it, unread, then are reset (said once per outage)", "target", target, "wait", wait, "err", err)
	} else {
		log.Debug("the application does not answer: the connection waits", "target", target, "wait", wait, "err", err)
	}
}

// appUp notes that the application answered a dial again.
func (st *Stream) appUp(log *slog.Logger) {
	if st.ends.app.OK(time.Now()) {
		log.Info("the application answers again")
	}
}

// wanDown notes a failure of the WAN side: said at warn when an outage
// starts, then at debug.
func (st *Stream) wanDown(log *slog.Logger, msg string, err error) {
	if st.ends.peer.Fail(time.Now()) {
		log.Warn(msg+" (said once per outage)", "err", err)
	} else {
		log.Debug(msg, "err", err)
	}
}

// wanUp notes that a WAN leg works (it was dialed or accepted, or a
// relayed connection ended in order).
func (st *Stream) wanUp(log *slog.Logger) {
	if st.ends.peer.OK(time.Now()) {
		log.Info("the peer gateway answers again")
	}
}

// fault logs a gateway fault or a timeout at warn, at most once a second
// per stream (a failing resource fails many connections at once).
func (st *Stream) fault(log *slog.Logger, kind string, err error) {
	st.ends.faultMu.Lock()
	now := time.Now()
	quiet := now.Sub(st.ends.lastFaultLog) < time.Second
	if !quiet {
		st.ends.lastFaultLog = now
	}
	st.ends.faultMu.Unlock()
	if quiet {
		log.Debug("connection aborted", "kind", kind, "err", err)
		return
	}
	log.Warn("connection aborted", "kind", kind, "err", err)
}
