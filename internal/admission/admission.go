// Package admission decides what a stream may hold of a gateway: a
// request is admitted against the gateway's Capacity (streams, channels,
// reserved rate) and its owner's Quota (streams, ports, things waiting for
// their peer, reserved rate). A rate is granted whole, or,
// down to the request's minimum, what is left.
//
// The package counts nothing itself: the gateway sums what its live
// streams and those being created hold (a Usage), under the lock that
// guards its table, and asks the Policy, so two requests can never both
// take the last of something. The grant goes in the stream's record, so
// a restart holds it again without admitting it anew.
//
// A grant is kept to on the data path (internal/stream, internal/pace):
// each direction of a stream with a rate has a token bucket; best-effort
// streams share what reservations leave of Capacity.Rate.
package admission

import (
	"fmt"
	"scistream/internal/api"
	"scistream/internal/pace"
)

// Quota limits what one identity may hold on the gateway at once; a
// request beyond a limit is refused with no_resources naming it. Zero
// fields take the defaults given (WithDefaults); a facility sets them so
// that one identity cannot take every port of the range.
type Quota struct {
	// Streams is how many live streams (listening or connected) one
	// identity may have. If zero, 64.
	Streams int
	// Ports is how many data ports the live streams of one identity may
	// hold together. If zero, 256 (api.MaxChannels: one stream of the
	// largest size).
	Ports int
	// Pending is how many things one identity may have waiting for
	// their peer at once, counted together: inbound streams not yet
	// attached, streams of SciStream 1.2 clients whose partner is not
	// known yet, and 1.2 reqs and hellos waiting for their partner call
	// (internal/legacy12). If zero, 16.
	Pending int
	// Rate is the most rate the live streams of one identity may have
	// reserved together, in bits per second. If zero, no bound but
	// Capacity.Rate.
	Rate pace.Rate
}

// WithDefaults returns q with its zero fields defaulted.
func (q Quota) WithDefaults() Quota {
	if q.Streams == 0 {
		q.Streams = 64
	}
	if q.Ports == 0 {
		q.Ports = api.MaxChannels
	}
	if q.Pending == 0 {
		q.Pending = 16
	}
	return q
}

// Capacity is what a gateway declares it can carry, and admits requests
// against: a request beyond it is refused with no_resources naming the
// limit, or granted less rate down to its minimum.
type Capacity struct {
	// Rate is the rate the gateway reserves for streams in all, per
	// direction, in bits per second: its WAN link's, or the share of it
	// SciStream may use. Best-effort streams share what reservations
	// leave (never less than pace.BestEffortFloor of it, so that they
	// slow down but never stop). If zero, undeclared: every rate asked is
	// granted and kept to as a ceiling, and best effort is not paced.
	Rate pace.Rate
	// Streams bounds the live streams (listening or connected), every
	// identity's together. If zero, no bound but the ports.
	Streams int
	// Conns bounds the channels (num_conn) of the live streams
	// together. If zero, no bound but the ports.
	Conns int
}

// A FieldError names the Quota or Capacity field that Validate refused;
// Problem completes a sentence that starts with the field's name.
type FieldError struct{ Field, Problem string }

func (e *FieldError) Error() string { return e.Field + " " + e.Problem }

func fieldError(field, format string, args ...any) error {
	return &FieldError{Field: field, Problem: fmt.Sprintf(format, args...)}
}

// Validate reports the first field of q out of range, as a *FieldError.
func (q Quota) Validate() error {
	switch {
	case q.Streams < 0:
		return fieldError("Streams", "%d is negative: give the most live streams one identity may hold", q.Streams)
	case q.Ports < 0:
		return fieldError("Ports", "%d is negative: give the most data ports one identity may hold", q.Ports)
	case q.Rate < 0 || q.Rate > pace.Max:
		return fieldError("Rate", "%d bit/s is out of range: give a rate up to 10 Tbit/s, or 0 for no bound per identity", q.Rate)
	case q.Pending < 0:
		return fieldError("Pending", "%d is negative: give the most streams (and SciStream 1.2 sessions) one identity may have waiting for their peer", q.Pending)
	}
	return nil
}

// Validate reports the first field of c out of range, as a *FieldError.
func (c Capacity) Validate() error {
	switch {
	case c.Rate < 0 || c.Rate > pace.Max:
		return fieldError("Rate", "%d bit/s is out of range: give the rate of the gateway's WAN link (e.g. 10G), or 0 to declare none", c.Rate)
	case c.Streams < 0:
		return fieldError("Streams", "%d is negative: give the most live streams the gateway holds, or 0 for no bound", c.Streams)
	case c.Conns < 0:
		return fieldError("Conns", "%d is negative: give the most channels (num_conn) of live streams together, or 0 for no bound", c.Conns)
	}
	return nil
}

// Policy is a gateway's Capacity and the Quota of each identity, its
// zero fields meaning what theirs do (the Quota defaulted).
type Policy struct {
	Capacity Capacity
	Quota    Quota
}

// Usage is what the streams of a gateway hold, every identity's and the
// asking owner's, leaving out the stream asked about.
type Usage struct {
	// Streams, Conns and Rate: the live and pending streams, their
	// channels and the rate they reserve, every identity's together.
	Streams, Conns int
	Rate           pace.Rate
	// The owner's: its streams, the data ports they hold, what it has
	// waiting for its peer (Quota.Pending: its streams waiting, Holding.Waiting,
	// and its 1.2 sessions, AddSession), the rate they reserve.
	OwnerStreams, OwnerPorts, OwnerWaiting int
	OwnerRate                              pace.Rate
}

// Holding is what a live or pending stream holds.
type Holding struct {
	Owner   string
	Rate    pace.Rate // reserved
	NumConn int       // channels
	Ports   int       // data ports bound
	Waiting bool      // a stream waiting for its peer (listening)
}

// Add counts h in u, in the owner's share too if h is owner's.
func (u *Usage) Add(h Holding, owner string) {
	u.Rate += h.Rate
	u.Streams++
	u.Conns += h.NumConn
	if h.Owner != owner {
		return
	}
	u.OwnerRate += h.Rate
	u.OwnerStreams++
	u.OwnerPorts += h.Ports
	if h.Waiting {
		u.OwnerWaiting++
	}
}

// AddSession counts in u a SciStream 1.2 session (a req or hello
// waiting for its partner call) of sessionOwner: a thing of its owner's
// waiting for its peer, which holds nothing else.
func (u *Usage) AddSession(sessionOwner, owner string) {
	if sessionOwner == owner {
		u.OwnerWaiting++
	}
}

// Ask is what a new stream asks to hold.
type Ask struct {
	Owner   string
	NumConn int  // channels
	Ports   int  // data ports it binds
	Waiting bool // it waits for its peer (listening)
	// Want is the rate asked (bits per second; 0 for best effort), Least
	// the least it takes.
	Want, Least pace.Rate
}

// Admit checks a against the owner's quota and the gateway's capacity,
// given u, and returns the rate granted to it, or the no_resources
// refusal naming the limit and the fix.
func (p Policy) Admit(u Usage, a Ask) (pace.Rate, error) {
	q := p.Quota.WithDefaults()
	const fix = "release streams first, or ask the operator to raise it"
	switch {
	case u.OwnerStreams+1 > q.Streams:
		return 0, api.Errorf(api.CodeNoResources, "%s already holds %d live streams on this gateway, the limit per identity (s2cs --quota_streams); %s", a.Owner, u.OwnerStreams, fix)
	case u.OwnerPorts+a.Ports > q.Ports:
		return 0, api.Errorf(api.CodeNoResources, "%s holds %d data ports on this gateway and asks for %d more; the limit per identity is %d (s2cs --quota_ports); %s", a.Owner, u.OwnerPorts, a.Ports, q.Ports, fix)
	case a.Waiting:
		if err := p.AdmitWaiting(u, a.Owner); err != nil {
			return 0, err
		}
	}
	c := p.Capacity
	const later = "retry when streams have ended, or ask the operator to raise it"
	switch {
	case c.Streams > 0 && u.Streams+1 > c.Streams:
		return 0, api.Errorf(api.CodeNoResources, "this gateway holds %d live streams, its capacity (s2cs --capacity_streams); %s", u.Streams, later)
	case c.Conns > 0 && u.Conns+a.NumConn > c.Conns:
		return 0, api.Errorf(api.CodeNoResources, "this gateway's live streams hold %d channels and its capacity is %d (s2cs --capacity_conns): %d left, num_conn %d asked; ask for fewer or %s", u.Conns, c.Conns, c.Conns-u.Conns, a.NumConn, later)
	}
	return p.Grant(u, a.Owner, a.Want, a.Least)
}

// AdmitWaiting checks one more thing of owner's waiting for its peer (a
// stream, or a SciStream 1.2 session) against Quota.Pending, given u, and
// returns the no_resources refusal naming the limit and the fix.
func (p Policy) AdmitWaiting(u Usage, owner string) error {
	q := p.Quota.WithDefaults()
	if u.OwnerWaiting+1 > q.Pending {
		return api.Errorf(api.CodeNoResources, "%s already has %d streams and SciStream 1.2 sessions waiting for their peer on this gateway (inbound streams not attached, 1.2 streams whose partner has not come, 1.2 reqs and hellos waiting for their partner call), the limit per identity (s2cs --quota_pending); attach or release those streams, or send the calls those reqs and hellos wait for (unanswered, they lapse on their own), then ask again", owner, u.OwnerWaiting)
	}
	return nil
}

// Grant returns the rate to reserve for a stream of owner that wants
// want and takes no less than least, given u: want if it fits the
// capacity and the owner's quota, else what is left of the tighter, if
// it is least or more.
func (p Policy) Grant(u Usage, owner string, want, least pace.Rate) (pace.Rate, error) {
	if want == 0 {
		return 0, nil
	}
	all, mine := u.Rate, u.OwnerRate
	grant := want
	var why error
	if c := p.Capacity.Rate; c > 0 && c-all < grant {
		grant = max(c-all, 0)
		why = api.Errorf(api.CodeNoResources, "this gateway reserves at most %s for streams (s2cs --capacity_rate) and %s of it is taken: %s left, short of the %s asked at least; ask for less (--rate, or --min_rate to take what is left), or retry when streams end",
			c, all, max(c-all, 0), least)
	}
	if q := p.Quota.Rate; q > 0 && q-mine < grant {
		grant = max(q-mine, 0)
		why = api.Errorf(api.CodeNoResources, "%s has %s reserved on this gateway and may hold %s (s2cs --quota_rate): %s left, short of the %s asked at least; release or slow down streams (s2uc update --rate), or ask the operator to raise it",
			owner, mine, q, max(q-mine, 0), least)
	}
	if grant < least || grant == 0 {
		return 0, why
	}
	return grant, nil
}

// CheckRate checks a requested rate and its minimum (bits per second)
// and returns them as rates, the minimum defaulted to the rate.
func CheckRate(rate, least int64) (pace.Rate, pace.Rate, error) {
	switch {
	case rate < 0 || rate > int64(pace.Max):
		return 0, 0, api.Errorf(api.CodeInvalidArgument, "rate %d: give bits per second, 1 to %d (10 Tbit/s), or omit it for best effort", rate, pace.Max)
	case least < 0 || least > rate:
		return 0, 0, api.Errorf(api.CodeInvalidArgument, "min_rate %d: give bits per second no more than rate (%d), or omit it to take the rate whole or not at all", least, rate)
	case rate > 0 && rate < MinRate:
		return 0, 0, api.Errorf(api.CodeInvalidArgument, "rate %d bit/s is below the least a gateway paces (%d bit/s): ask for more, or omit it for best effort", rate, MinRate)
	}
	if least == 0 {
		least = rate
	}
	return pace.Rate(rate), pace.Rate(least), nil
}

// MinRate is the least rate a stream may reserve: below 1 Mbit/s a
// single 64 KiB chunk waits half a second.
const MinRate = 1_000_000
