package gateway

import (
	"fmt"

	"scistream/internal/api"
	"scistream/internal/pace"
	"scistream/internal/store"
)

// Admission and rates. A request is admitted against the gateway's
// Capacity (streams, channels, reserved rate) and its owner's Quota, all
// counted over live streams and those being created, under Server.mu, so
// two requests can never both take the last of something. A rate is
// granted whole, or, down to the request's min_rate, what is left; the
// grant is in the record, so a restart holds it again without admitting
// it anew.
//
// A grant is kept to on the data path: each direction of a stream with a
// rate has a token bucket (pace.Bucket) that every one of its
// connections waits on after each chunk it writes. Best-effort streams
// share two buckets filled with what reservations leave of
// Capacity.Rate (at least BestEffortFloor of it), but only while
// something is reserved: with nothing reserved, or no capacity declared,
// they run unpaced. The sockmap engine moves bytes in the kernel, where
// nothing can wait: a connection that must be paced runs on splice
// instead, and the stream's view says so (api.Stream.EngineNote).

// rebalance gives best effort what the live streams' reservations leave.
// It is called after every change of a grant. The sum is set under
// s.mu too: else two calls at once could set theirs in the other order,
// and best effort would keep a stale share until the next change.
func (s *Server) rebalance() {
	s.mu.Lock()
	defer s.mu.Unlock()
	var sum pace.Rate
	for _, st := range s.streams {
		sum += st.Pace.Rate()
	}
	s.env.BestEffort.Set(sum)
}

// held sums what the live and pending streams hold, but the one of key
// skip: rate reserved in all and by owner, streams, channels. s.mu must
// be held.
func (s *Server) heldLocked(owner string, skip store.Key) (all, mine pace.Rate, streams, conns int) {
	add := func(k store.Key, r pace.Rate, numConn int) {
		if k == skip {
			return
		}
		all += r
		if k.Owner == owner {
			mine += r
		}
		streams++
		conns += numConn
	}
	for k, st := range s.streams {
		add(k, st.Pace.Rate(), st.NumConn)
	}
	for k, r := range s.pending {
		if s.streams[k] == nil { // else counted above: create adds it before it unreserves
			add(k, pace.Rate(r.Rate), r.NumConn)
		}
	}
	return all, mine, streams, conns
}

// admitLocked checks rec against Capacity and sets the rate granted to
// it (rec.Rate). s.mu must be held.
func (s *Server) admitLocked(rec *store.Record) error {
	all, mine, streams, conns := s.heldLocked(rec.Owner, rec.Key())
	c := s.cfg.Capacity
	const later = "retry when streams have ended, or ask the operator to raise it"
	switch {
	case c.Streams > 0 && streams+1 > c.Streams:
		return api.Errorf(api.CodeNoResources, "this gateway holds %d live streams, its capacity (s2cs --capacity_streams); %s", streams, later)
	case c.Conns > 0 && conns+rec.NumConn > c.Conns:
		return api.Errorf(api.CodeNoResources, "this gateway's live streams hold %d channels and its capacity is %d (s2cs --capacity_conns): %d left, num_conn %d asked; ask for fewer or %s", conns, c.Conns, c.Conns-conns, rec.NumConn, later)
	}
	g, err := s.grant(rec.Owner, all, mine, pace.Rate(rec.RateRequested), pace.Rate(rec.MinRate))
	if err != nil {
		return err
	}
	rec.Rate = int64(g)
	return nil
}

// grantLocked returns the rate to reserve for a stream of owner (key
// skip, whose own reservation does not count) that wants want and takes
// no less than least: want if it fits the capacity and the owner's
// quota, else what is left of the tighter, if it is least or more. s.mu
// must be held.
func (s *Server) grantLocked(owner string, skip store.Key, want, least pace.Rate) (pace.Rate, error) {
	if want == 0 {
		return 0, nil
	}
	all, mine, _, _ := s.heldLocked(owner, skip)
	return s.grant(owner, all, mine, want, least)
}

// grant is grantLocked once the rates reserved in all and by owner are
// known.
func (s *Server) grant(owner string, all, mine, want, least pace.Rate) (pace.Rate, error) {
	if want == 0 {
		return 0, nil
	}
	grant := want
	var why error
	if c := s.cfg.Capacity.Rate; c > 0 && c-all < grant {
		grant = max(c-all, 0)
		why = api.Errorf(api.CodeNoResources, "this gateway reserves at most %s for streams (s2cs --capacity_rate) and %s of it is taken: %s left, short of the %s asked at least; ask for less (--rate, or --min_rate to take what is left), or retry when streams end",
			c, all, max(c-all, 0), least)
	}
	if q := s.cfg.Quota.Rate; q > 0 && q-mine < grant {
		grant = max(q-mine, 0)
		why = api.Errorf(api.CodeNoResources, "%s has %s reserved on this gateway and may hold %s (s2cs --quota_rate): %s left, short of the %s asked at least; release or slow down streams (s2uc update --rate), or ask the operator to raise it",
			owner, mine, q, max(q-mine, 0), least)
	}
	if grant < least || grant == 0 {
		return 0, why
	}
	return grant, nil
}

// checkRate checks a requested rate and its minimum (bits per second)
// and returns them as rates, the minimum defaulted to the rate.
func checkRate(rate, least int64) (pace.Rate, pace.Rate, error) {
	switch {
	case rate < 0 || rate > int64(pace.Max):
		return 0, 0, api.Errorf(api.CodeInvalidArgument, "rate %d: give bits per second, 1 to %d (10 Tbit/s), or omit it for best effort", rate, pace.Max)
	case least < 0 || least > rate:
		return 0, 0, api.Errorf(api.CodeInvalidArgument, "min_rate %d: give bits per second no more than rate (%d), or omit it to take the rate whole or not at all", least, rate)
	case rate > 0 && rate < minRate:
		return 0, 0, api.Errorf(api.CodeInvalidArgument, "rate %d bit/s is below the least a gateway paces (%d bit/s): ask for more, or omit it for best effort", rate, minRate)
	}
	if least == 0 {
		least = rate
	}
	return pace.Rate(rate), pace.Rate(least), nil
}

// minRate is the least rate a stream may reserve: below 1 Mbit/s a
// single 64 KiB chunk waits half a second.
const minRate = 1_000_000

// leaseOf checks a request's lease_s and returns it, defaulted.
func (s *Server) leaseOf(leaseS int) (int, error) {
	most := int(s.cfg.LeaseMax.Seconds())
	switch {
	case leaseS == 0:
		return int(s.cfg.LeaseDefault.Seconds()), nil
	case leaseS < 0 || leaseS > most:
		return 0, api.Errorf(api.CodeInvalidArgument, "lease_s %d: give 1 to %d seconds (this gateway's longest lease, s2cs --lease_max), or omit it for the default (%d)", leaseS, most, int(s.cfg.LeaseDefault.Seconds()))
	}
	return leaseS, nil
}

// rateText is a rate for a log line or a message.
func rateText(r int64) string { return fmt.Sprint(pace.Rate(r)) }
