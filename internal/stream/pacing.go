package stream

import (
	"context"
	"sync"
	"sync/atomic"

	"scistream/internal/pace"
	"scistream/internal/relay"
)

// Pacing on the data path: each direction of a stream with a rate has a
// token bucket (pace.Bucket) that every one of its connections waits on
// after each chunk it writes. Best-effort streams share two buckets
// filled with what reservations leave of the gateway's capacity (at
// least BestEffortFloor of it), but only while something is reserved:
// with nothing reserved, or no capacity declared, they run unpaced. The
// sockmap engine moves bytes in the kernel, where nothing can wait: a
// connection that must be paced runs on splice instead, and the stream's
// view says so (api.Stream.EngineNote).

// The directions of a stream's bytes, as its buckets are indexed.
const (
	DirToWAN   = 0
	DirFromWAN = 1
)

// Pacing is a stream's grant and the buckets that keep to it.
//
// On a node of a facility (facility.go) each node paces only the
// channels it serves, so the grant is split: a node serving k of a
// stream's n channels fills its buckets at k/n of the grant, and the
// nodes together never pass it (one node serving every channel, or a
// gateway of one node, paces at the whole grant). A stream that uses
// fewer channels than it has gets less than its grant there.
type Pacing struct {
	grant   atomic.Int64                   // pace.Rate reserved, 0 for best effort
	buckets [2]atomic.Pointer[pace.Bucket] // by direction; nil for best effort

	mu     sync.Mutex // serialises set and setShare
	served int        // channels served here, of total; total 0: the whole grant
	total  int
}

// Set changes the grant; connections running keep going, paced at the
// new rate from their next chunk.
func (p *Pacing) Set(r pace.Rate) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.grant.Store(int64(r))
	p.apply()
}

// SetShare says that this node serves served of the stream's total
// channels (facility.go); the buckets take that part of the grant.
func (p *Pacing) SetShare(served, total int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.served, p.total = served, total
	p.apply()
}

// here is the rate this node's buckets keep to: the grant, or its share.
// p.mu must be held.
func (p *Pacing) here() pace.Rate {
	r := pace.Rate(p.grant.Load())
	if r == 0 || p.total == 0 || p.served == 0 || p.served >= p.total {
		return r
	}
	return max(pace.Rate(float64(r)*float64(p.served)/float64(p.total)), 1)
}

// apply brings the buckets to the grant and share. p.mu must be held.
func (p *Pacing) apply() {
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

// Bucket returns the stream's own bucket of direction d, nil for best
// effort.
func (p *Pacing) Bucket(d int) *pace.Bucket { return p.buckets[d].Load() }

// Rate returns the grant.
func (p *Pacing) Rate() pace.Rate { return pace.Rate(p.grant.Load()) }

// BestEffort is the pacing that best-effort streams share.
type BestEffort struct {
	capacity pace.Rate    // Capacity.Rate; 0: never paced
	reserved atomic.Int64 // what live streams have reserved (pace.Rate)
	active   atomic.Bool  // something is reserved: best effort is paced
	buckets  [2]*pace.Bucket
}

func NewBestEffort(capacity pace.Rate) *BestEffort {
	b := &BestEffort{capacity: capacity}
	if capacity > 0 {
		b.buckets = [2]*pace.Bucket{pace.NewBucket(capacity), pace.NewBucket(capacity)}
	}
	return b
}

// Set takes the rate reserved now and gives best effort what is left.
func (b *BestEffort) Set(reserved pace.Rate) {
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

// Bucket returns the bucket that paces direction d (DirToWAN,
// DirFromWAN) of st now: its own, best effort's, or nil.
func (st *Stream) Bucket(d int) *pace.Bucket {
	if b := st.Pace.buckets[d].Load(); b != nil {
		return b
	}
	if be := st.env.BestEffort; be.active.Load() {
		return be.buckets[d]
	}
	return nil
}

// paced reports whether st's connections are paced now.
func (st *Stream) paced() bool { return st.Bucket(DirToWAN) != nil }

// counter returns the count function of direction d of one connection
// for relay.Relay: it counts the bytes written and waits until they fit
// the stream's pace, or until ctx (the connection's) ends.
func (st *Stream) counter(ctx context.Context, d int, n *atomic.Int64) func(int64) {
	return func(k int64) {
		n.Add(k)
		if b := st.Bucket(d); b != nil {
			b.Wait(ctx, k)
		}
	}
}

// EngineFor returns the engine a new connection of st runs on: the
// stream's, unless it is sockmap and the connection must be paced.
func (st *Stream) EngineFor() relay.Engine {
	if st.engine.Name() == "sockmap" && st.paced() {
		return st.env.Paceable
	}
	return st.engine
}

// EngineNote says why st's new connections run on another engine than
// the one it asked for, or "".
func (st *Stream) EngineNote() string {
	if st.engine.Name() == "sockmap" && st.paced() {
		return "sockmap cannot pace a rate (the kernel moves the bytes): this stream's connections run on splice while it is paced"
	}
	return ""
}

// Refusals counts a stream's refused connections by the reasons the
// metrics tell apart (over_cap is stream.overCap).
type Refusals struct {
	Allow        atomic.Int64 // sources outside the allow-list
	HandshakeCap atomic.Int64 // over a cap of WAN connections in their handshake
	WANAuth      atomic.Int64 // WAN connections that failed authentication
}

// BestEffortFloor is the share of Capacity.Rate that best-effort
// streams keep however much is reserved: they slow down, but a
// connection never stalls for good.
const BestEffortFloor = 0.01

// Reserved returns the rate the live streams have reserved, as Set was
// last told.
func (b *BestEffort) Reserved() pace.Rate { return pace.Rate(b.reserved.Load()) }
