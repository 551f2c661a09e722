package stream

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"scistream/internal/api"
	"scistream/internal/appwait"
	"scistream/internal/relay"
	"scistream/internal/wan"
)

// How a stream's connections end. Every connection the gateway accepted
// or dialed for a stream ends in order (both directions finished) or is
// aborted: both applications then see a reset. An abort is counted by its
// kind (api.End*), from this gateway's point of view, with the last
// reason of each kind for status, so that an application that closes with
// a reset (as AMQP brokers do) is not reported as a gateway error.
//
// Logs: an application's or the peer's reset is routine (debug). The loss
// of the peer gateway, and failing to reach it or the application, are
// said at warn once per outage per stream, not once per connection (a
// dead peer fails every connection at once), and the recovery at info.
// A failure within recoverAfter of the answer that ended an outage is
// the same outage (outage): under contention answers and failures
// alternate, and each turn would else be an outage of its own, said
// twice (issue 27 saw 116 warnings and 116 recoveries in a minute);
// those turns are counted as flaps instead (api.Stats.PeerFlaps).

// ends counts a stream's aborted connections.
type ends struct {
	byKind [numKinds]atomic.Int64

	mu   sync.Mutex // guards last
	last map[string]api.LastError

	peer outage // the WAN side: the peer gateway
	app  outage // the application (inbound)

	faultMu      sync.Mutex // guards lastFaultLog
	lastFaultLog time.Time
}

// recoverAfter is how long a side must keep answering after an outage
// before a failure is a new outage, not a flap of the same one.
const recoverAfter = 5 * time.Second

// outage is one side's trouble (the peer gateway, or the application),
// said once: it starts at a failure, its end is said at the first answer
// after it, and a failure within recoverAfter of that answer is the same
// outage again (a flap, counted), said neither as a new outage nor as a
// new recovery. Its methods may be called concurrently.
type outage struct {
	mu       sync.Mutex // guards the following fields
	down     bool
	upSince  time.Time // when it last answered after a failure
	inOutage bool      // an outage was said
	saidBack bool      // its end was said
	flaps    int64     // failures within recoverAfter of a recovery
}

// fail notes a failure at now; first says an outage starts (say it).
func (o *outage) fail(now time.Time) (first bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.down {
		return false
	}
	o.down = true
	if o.inOutage && now.Sub(o.upSince) < recoverAfter {
		o.flaps++ // it answered a moment ago: the same outage
		return false
	}
	o.inOutage, o.saidBack = true, false
	return true
}

// ok notes an answer at now; back says the outage ended (say it once).
func (o *outage) ok(now time.Time) (back bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.down {
		return false
	}
	o.down, o.upSince = false, now
	if o.saidBack {
		return false
	}
	o.saidBack = true
	return true
}

// flapped returns the flaps counted.
func (o *outage) flapped() int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.flaps
}

// numKinds is len(api.EndKinds()).
const numKinds = 6

// kindIndex is the index of kind in api.EndKinds.
func kindIndex(kind string) int {
	for i, k := range api.EndKinds() {
		if k == kind {
			return i
		}
	}
	return kindIndex(api.EndGatewayFault)
}

// count records an abort of kind with its reason at time now.
func (e *ends) count(kind string, reason error, now time.Time) {
	e.byKind[kindIndex(kind)].Add(1)
	msg := reason.Error()
	if len(msg) > 300 {
		msg = msg[:300] + "..."
	}
	e.mu.Lock()
	if e.last == nil {
		e.last = map[string]api.LastError{}
	}
	e.last[kind] = api.LastError{Reason: msg, Time: now}
	e.mu.Unlock()
}

// fill adds the counters to s.
func (e *ends) fill(s *api.Stats) {
	for i, k := range api.EndKinds() {
		n := e.byKind[i].Load()
		if n == 0 {
			continue
		}
		if s.AbortedByKind == nil {
			s.AbortedByKind = map[string]int64{}
		}
		s.AbortedByKind[k] = n
		s.AbortedConns += n
		if api.IsErrorKind(k) {
			s.Errors += n
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.last) > 0 {
		s.LastErrors = make(map[string]api.LastError, len(e.last))
		for k, v := range e.last {
			s.LastErrors[k] = v
		}
	}
}

// relayEnd says what kind of abort a Relay error is: the application's
// connection was relay.A, the WAN leg relay.B.
func relayEnd(err error) string {
	var re *relay.Error
	if !errors.As(err, &re) {
		return api.EndGatewayFault
	}
	switch {
	case isTimeout(re.Err):
		return api.EndTimeout
	case re.Conn == relay.A && (isBroken(re.Err) || wan.Lost(re.Err) || gone(re.Err)):
		return api.EndAppReset
	case re.Conn == relay.B && wan.ResetByPeer(re.Err):
		return api.EndPeerReset
	case re.Conn == relay.B && (wan.Lost(re.Err) || gone(re.Err)):
		return api.EndWANLost
	}
	return api.EndGatewayFault
}

// dialEnd says what kind of abort a failed dial (of the application or of
// the peer gateway, handshake included) is: a refused connection, an
// unreachable host and a refused handshake alike fail the dial.
func dialEnd(err error) string {
	var we *appwait.Error
	if errors.As(err, &we) {
		// However its last dial failed, the application did not
		// answer for as long as the stream waits for it.
		return api.EndDialFailed
	}
	if isTimeout(err) {
		return api.EndTimeout
	}
	return api.EndDialFailed
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) ||
		errors.As(err, &ne) && ne.Timeout() && !wan.Lost(err)
}

// gone reports a socket no longer connected (ENOTCONN: forwarding the
// end of stream to it found it closed by a reset or a timeout whose error
// another call took): the application's end is broken, or the WAN leg is
// lost, as that call will say if it says first; never a gateway fault.
func gone(err error) bool { return errors.Is(err, syscall.ENOTCONN) }

// isBroken reports a connection the other end reset or abandoned.
func isBroken(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
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
	kind := relayEnd(err)
	if st.watchSt.lost.Load() && errors.Is(err, net.ErrClosed) {
		kind = api.EndWANLost // aborted because the watch leg was lost
	}
	st.ends.count(kind, err, time.Now())
	switch kind {
	case api.EndAppReset, api.EndPeerReset:
		log.Debug("connection aborted", "kind", kind, "err", err)
	case api.EndWANLost:
		st.wanDown(log, "lost the peer gateway: the WAN leg ended with neither an orderly end nor a reset (the peer died or restarted, or the path broke); every application connection on it was reset", err)
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
	kind := dialEnd(err)
	st.ends.count(kind, err, time.Now())
	if toPeer {
		st.wanDown(log.With("target", target), "cannot reach the peer gateway: application connections are reset until it answers", err)
		return
	}
	if st.ends.app.fail(time.Now()) {
		log.Warn("cannot reach the application: WAN connections are reset until it answers (said once per outage)", "target", target, "kind", kind, "err", err)
	} else {
		log.Debug("dial application", "target", target, "kind", kind, "err", err)
	}
}

// appAway notes that a connection waits for the application to answer
// (appwait.go): said at warn once until it answers, as dialFailed does.
func (st *Stream) appAway(log *slog.Logger, target string, wait time.Duration, err error) {
	if st.ends.app.fail(time.Now()) {
		log.Warn("cannot reach the application: WAN connections wait for it, unread, then are reset (said once per outage)", "target", target, "wait", wait, "err", err)
	} else {
		log.Debug("the application does not answer: the connection waits", "target", target, "wait", wait, "err", err)
	}
}

// appUp notes that the application answered a dial again.
func (st *Stream) appUp(log *slog.Logger) {
	if st.ends.app.ok(time.Now()) {
		log.Info("the application answers again")
	}
}

// wanDown notes a failure of the WAN side: said at warn when an outage
// starts, then at debug.
func (st *Stream) wanDown(log *slog.Logger, msg string, err error) {
	if st.ends.peer.fail(time.Now()) {
		log.Warn(msg+" (said once per outage)", "err", err)
	} else {
		log.Debug(msg, "err", err)
	}
}

// wanUp notes that a WAN leg works (it was dialed or accepted, or a
// relayed connection ended in order).
func (st *Stream) wanUp(log *slog.Logger) {
	if st.ends.peer.ok(time.Now()) {
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
