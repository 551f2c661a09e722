package gateway

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"scistream/internal/api"
	"scistream/internal/pace"
	"scistream/internal/relay"
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

// The directions of a stream's bytes, as its buckets are indexed.
const (
	dirToWAN   = 0
	dirFromWAN = 1
)

// streamPace is a stream's grant and the buckets that keep to it.
//
// On a node of a facility (facility.go) each node paces only the
// channels it serves, so the grant is split: a node serving k of a
// stream's n channels fills its buckets at k/n of the grant, and the
// nodes together never pass it (one node serving every channel, or a
// gateway of one node, paces at the whole grant). A stream that uses
// fewer channels than it has gets less than its grant there.
type streamPace struct {
	grant   atomic.Int64                   // pace.Rate reserved, 0 for best effort
	buckets [2]atomic.Pointer[pace.Bucket] // by direction; nil for best effort

	mu     sync.Mutex // serialises set and setShare
	served int        // channels served here, of total; total 0: the whole grant
	total  int
}

// set changes the grant; connections running keep going, paced at the
// new rate from their next chunk.
func (p *streamPace) set(r pace.Rate) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.grant.Store(int64(r))
	p.apply()
}

// setShare says that this node serves served of the stream's total
// channels (facility.go); the buckets take that part of the grant.
func (p *streamPace) setShare(served, total int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.served, p.total = served, total
	p.apply()
}

// here is the rate this node's buckets keep to: the grant, or its share.
// p.mu must be held.
func (p *streamPace) here() pace.Rate {
	r := pace.Rate(p.grant.Load())
	if r == 0 || p.total == 0 || p.served == 0 || p.served >= p.total {
		return r
	}
	return max(pace.Rate(float64(r)*float64(p.served)/float64(p.total)), 1)
}

// apply brings the buckets to the grant and share. p.mu must be held.
func (p *streamPace) apply() {
	r := p.here()
	for d := range p.buckets {
		switch b := p.buckets[d].Load(); {
		case r == 0:
			p.buckets[d].Store(nil)
		case b != nil:
			b.SetRate(r)
		default:
			p.buckets[d].Store(pace.NewBucket(r))
		}
	}
}

func (p *streamPace) rate() pace.Rate { return pace.Rate(p.grant.Load()) }

// bestEffort is the pacing that best-effort streams share.
type bestEffort struct {
	capacity pace.Rate    // Capacity.Rate; 0: never paced
	reserved atomic.Int64 // what live streams have reserved (pace.Rate)
	active   atomic.Bool  // something is reserved: best effort is paced
	buckets  [2]*pace.Bucket
}

func newBestEffort(capacity pace.Rate) *bestEffort {
	b := &bestEffort{capacity: capacity}
	if capacity > 0 {
		b.buckets = [2]*pace.Bucket{pace.NewBucket(capacity), pace.NewBucket(capacity)}
	}
	return b
}

// set takes the rate reserved now and gives best effort what is left.
func (b *bestEffort) set(reserved pace.Rate) {
	b.reserved.Store(int64(reserved))
	if b.capacity == 0 {
		return
	}
	left := max(b.capacity-reserved, pace.Rate(float64(b.capacity)*BestEffortFloor), 1)
	for _, bk := range b.buckets {
		bk.SetRate(left)
	}
	b.active.Store(reserved > 0)
}

// bucket returns the bucket that paces direction d of st now, or nil.
func (st *stream) bucket(d int) *pace.Bucket {
	if b := st.pace.buckets[d].Load(); b != nil {
		return b
	}
	if be := st.env.be; be.active.Load() {
		return be.buckets[d]
	}
	return nil
}

// paced reports whether st's connections are paced now.
func (st *stream) paced() bool { return st.bucket(dirToWAN) != nil }

// counter returns the count function of direction d of one connection
// for relay.Relay: it counts the bytes written and waits until they fit
// the stream's pace, or until ctx (the connection's) ends.
func (st *stream) counter(ctx context.Context, d int, n *atomic.Int64) func(int64) {
	return func(k int64) {
		n.Add(k)
		if b := st.bucket(d); b != nil {
			b.Wait(ctx, k)
		}
	}
}

// engineFor returns the engine a new connection of st runs on: the
// stream's, unless it is sockmap and the connection must be paced.
func (st *stream) engineFor() relay.Engine {
	if st.engine.Name() == "sockmap" && st.paced() {
		return st.env.paceable
	}
	return st.engine
}

// engineNote says why st's new connections run on another engine than
// the one it asked for, or "".
func (st *stream) engineNote() string {
	if st.engine.Name() == "sockmap" && st.paced() {
		return "sockmap cannot pace a rate (the kernel moves the bytes): this stream's connections run on splice while it is paced"
	}
	return ""
}

// rebalance gives best effort what the live streams' reservations leave.
// It is called after every change of a grant. The sum is set under
// s.mu too: else two calls at once could set theirs in the other order,
// and best effort would keep a stale share until the next change.
func (s *Server) rebalance() {
	s.mu.Lock()
	defer s.mu.Unlock()
	var sum pace.Rate
	for _, st := range s.streams {
		sum += st.pace.rate()
	}
	s.env.be.set(sum)
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
		add(k, st.pace.rate(), st.numConn)
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
