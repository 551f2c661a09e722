package gateway

import (
	"fmt"

	"scistream/internal/admission"
	"scistream/internal/pace"
	"scistream/internal/store"
)

// Admission and rates: what a request may hold is internal/admission's
// to decide, from the Usage summed here over live streams and those
// being created, under Server.mu, so two requests can never both take
// the last of something.
//
// A grant is kept to on the data path: each direction of a stream with a
// rate has a token bucket (pace.Bucket) that every one of its
// connections waits on after each chunk it writes. Best-effort streams
// share two buckets filled with what reservations leave of
// Capacity.Rate (at least pace.BestEffortFloor of it), but only while
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

// usageLocked sums what the live and pending streams hold, and the
// places the 1.2 sessions hold (HoldPending), but those of key skip:
// every identity's and owner's. s.mu must be held.
func (s *Server) usageLocked(owner string, skip store.Key) admission.Usage {
	var u admission.Usage
	add := func(k store.Key, r pace.Rate, numConn, ports int, waiting bool) {
		if k != skip {
			u.Add(admission.Holding{Owner: k.Owner, Rate: r, NumConn: numConn, Ports: ports, Waiting: waiting}, owner)
		}
	}
	for k, st := range s.streams {
		add(k, st.Pace.Rate(), st.NumConn, st.PortsHeld, st.Waiting())
	}
	for k, r := range s.pending {
		// A stream in both is counted once: create adds it to the
		// table just before it unreserves its key.
		if s.streams[k] == nil {
			add(k, pace.Rate(r.Rate), r.NumConn, r.PortsHeld(), waitsForPeer(r))
		}
	}
	for k, n := range s.held {
		// A 1.2 session waiting for its partner call (legacy12.go);
		// once its stream is being created, the stream counts instead.
		if k != skip && s.streams[k] == nil && s.pending[k] == nil {
			for range n {
				u.AddSession(k.Owner, owner)
			}
		}
	}
	return u
}

// admitLocked checks rec against the owner's Quota and the gateway's
// Capacity (internal/admission) and sets the rate granted to it
// (rec.Rate). s.mu must be held.
func (s *Server) admitLocked(rec *store.Record) error {
	g, err := s.admit.Admit(s.usageLocked(rec.Owner, rec.Key()), admission.Ask{
		Owner: rec.Owner, NumConn: rec.NumConn, Ports: rec.PortsHeld(), Waiting: waitsForPeer(rec),
		Want: pace.Rate(rec.RateRequested), Least: pace.Rate(rec.MinRate),
	})
	if err != nil {
		return err
	}
	rec.Rate = int64(g)
	return nil
}

// grantLocked returns the rate to reserve for a stream of owner (key
// skip, whose own reservation does not count) that wants want and takes
// no less than least (admission.Policy.Grant). s.mu must be held.
func (s *Server) grantLocked(owner string, skip store.Key, want, least pace.Rate) (pace.Rate, error) {
	if want == 0 {
		return 0, nil
	}
	return s.admit.Grant(s.usageLocked(owner, skip), owner, want, least)
}

// rateText is a rate for a log line or a message.
func rateText(r int64) string { return fmt.Sprint(pace.Rate(r)) }
