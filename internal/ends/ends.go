// Package ends says how a stream's connections end, and counts it.
// Every connection the gateway accepted or dialed for a stream ends in
// order (both directions finished) or is aborted: both applications then
// see a reset. An abort is counted by its kind (api.End*: OfRelay, OfDial),
// from this gateway's point of view, with the last reason of each kind
// for status (Counts), so that an application that closes with a reset
// (as AMQP brokers do) is not reported as a gateway error.
//
// The loss of the peer gateway, and failing to reach it or the
// application, are said at warn once per outage per stream, not once per
// connection (a dead peer fails every connection at once), and the
// recovery at info: Outage tells when. A failure within recoverAfter of
// the answer that ended an outage is the same outage: under contention
// answers and failures alternate, and each turn would else be an outage
// of its own, said twice (issue 27 saw 116 warnings and 116 recoveries in
// a minute); those turns are counted as flaps instead
// (api.Stats.PeerFlaps).
//
// Its types' methods may be called concurrently.
package ends

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"scistream/internal/api"
	"scistream/internal/appwait"
	"scistream/internal/carry"
	"scistream/internal/framed"
	"scistream/internal/relay"
	"scistream/internal/wan"
)

// Counts counts a stream's aborted connections by kind, with the last
// reason of each kind. Its zero value counts nothing yet.
type Counts struct {
	byKind [numKinds]atomic.Int64

	mu   sync.Mutex // guards last
	last map[string]api.LastError
}

// recoverAfter is how long a side must keep answering after an outage
// before a failure is a new outage, not a flap of the same one.
const recoverAfter = 5 * time.Second

// Outage is one side's trouble (the peer gateway, or the application),
// said once: it starts at a failure, its end is said at the first answer
// after it, and a failure within recoverAfter of that answer is the same
// outage again (a flap, counted), said neither as a new outage nor as a
// new recovery. Its methods may be called concurrently.
type Outage struct {
	mu       sync.Mutex // guards the following fields
	down     bool
	upSince  time.Time // when it last answered after a failure
	inOutage bool      // an outage was said
	saidBack bool      // its end was said
	flaps    int64     // failures within recoverAfter of a recovery
}

// Fail notes a failure at now; first says an outage starts (say it).
func (o *Outage) Fail(now time.Time) (first bool) {
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

// OK notes an answer at now; back says the outage ended (say it once).
func (o *Outage) OK(now time.Time) (back bool) {
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

// Flapped returns the flaps counted.
func (o *Outage) Flapped() int64 {
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

// Count records an abort of kind with its reason at time now.
// The reason is kept before the count grows, so that whoever reads a
// count (Fill) also reads the reason behind it.
func (e *Counts) Count(kind string, reason error, now time.Time) {
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
	e.byKind[kindIndex(kind)].Add(1)
}

// Fill adds the counters to s.
func (e *Counts) Fill(s *api.Stats) {
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

// OfRelay says what kind of abort a Relay error is: the application's
// connection was relay.A, the WAN leg relay.B.
func OfRelay(err error) string {
	var re *relay.Error
	if !errors.As(err, &re) {
		return api.EndGatewayFault
	}
	var ae *wan.AnswerError
	var cr *carry.RefusedError
	var na *carry.NoAnswerError
	switch {
	case re.Conn == relay.B && errors.Is(re.Err, framed.ErrForgotten):
		// A lost leg that could not be replaced: the peer restarted
		// or gave the connection up.
		return api.EndWANLost
	case re.Conn == relay.B && (errors.As(re.Err, &ae) || errors.As(re.Err, &cr) || errors.As(re.Err, &na)):
		// The peer did not accept the leg: it refused it (its
		// application cannot be reached), or ended it before any
		// answer (it is not this stream's listener).
		return api.EndDialFailed
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

// Describe returns err as users read it, in a status's last errors and
// in the logs: the connections of a *relay.Error named as OfRelay takes
// them, relay.A the application's and relay.B the peer gateway's WAN
// leg, not "a" and "b" ("read from the application: ...: connection
// reset by peer" for "read a: ..."), wherever it is wrapped. errors.As
// still finds the *relay.Error, its fields (Conn, Op, Err) kept. Any
// other error (nil too) is returned as it is.
func Describe(err error) error {
	var re *relay.Error
	if !errors.As(err, &re) {
		return err
	}
	return &described{err: err, re: re}
}

// described is an error holding a *relay.Error, said in words.
type described struct {
	err error        // as it came
	re  *relay.Error // in it
}

func (d *described) Unwrap() error { return d.err }

func (d *described) Error() string {
	conn := "the application or the peer gateway's WAN leg"
	switch d.re.Conn {
	case relay.A:
		conn = "the application"
	case relay.B:
		conn = "the peer gateway's WAN leg"
	}
	var words string
	switch d.re.Op {
	case "read":
		words = "read from " + conn
	case "write":
		words = "write to " + conn
	default:
		words = "relay between the application and the peer gateway's WAN leg"
	}
	words += ": " + Describe(d.re.Err).Error()
	// The relay error's own text, wherever the wrapping put it.
	return strings.Replace(d.err.Error(), d.re.Error(), words, 1)
}

// OfDial says what kind of abort a failed dial (of the application or of
// the peer gateway, handshake included) is: a refused connection, an
// unreachable host and a refused handshake alike fail the dial.
func OfDial(err error) string {
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
