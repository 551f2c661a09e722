package pace

import (
	"sync"
	"sync/atomic"
)

// A stream's grant and the best-effort share, as the data path keeps to
// them: every connection waits on its direction's bucket after each
// chunk it writes (internal/stream).

// Grant is a stream's grant and the buckets that keep to it, one per
// direction (0 and 1). Its zero value is best effort: no buckets.
//
// On a node of a facility (internal/facility) each node paces only the
// channels it serves, so the grant is split: a node serving k of a
// stream's n channels fills its buckets at k/n of the grant, and the
// nodes together never pass it (one node serving every channel, or a
// gateway of one node, paces at the whole grant). A stream that uses
// fewer channels than it has gets less than its grant there.
type Grant struct {
	grant   atomic.Int64              // Rate reserved, 0 for best effort
	buckets [2]atomic.Pointer[Bucket] // by direction; nil for best effort

	mu     sync.Mutex // serialises set and setShare
	served int        // channels served here, of total; total 0: the whole grant
	total  int
}

// Set changes the grant; connections running keep going, paced at the
// new rate from their next chunk.
func (p *Grant) Set(r Rate) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.grant.Store(int64(r))
	p.apply()
}

// SetShare says that this node serves served of the stream's total
// channels (internal/facility); the buckets take that part of the grant.
func (p *Grant) SetShare(served, total int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.served, p.total = served, total
	p.apply()
}

// here is the rate this node's buckets keep to: the grant, or its share.
// p.mu must be held.
func (p *Grant) here() Rate {
	r := Rate(p.grant.Load())
	if r == 0 || p.total == 0 || p.served == 0 || p.served >= p.total {
		return r
	}
	return max(Rate(float64(r)*float64(p.served)/float64(p.total)), 1)
}

// apply brings the buckets to the grant and share. p.mu must be held.
func (p *Grant) apply() {
	r := p.here()
	for d := range p.buckets {
		switch b := p.buckets[d].Load(); {
		case r == 0:
			p.buckets[d].Store(nil)
		case b != nil:
			b.SetRate(r)
		default:
			p.buckets[d].Store(NewBucket(r))
		}
	}
}

// Bucket returns the stream's own bucket of direction d, nil for best
// effort.
func (p *Grant) Bucket(d int) *Bucket { return p.buckets[d].Load() }

// Rate returns the grant.
func (p *Grant) Rate() Rate { return Rate(p.grant.Load()) }

// BestEffort is the pacing that best-effort streams share: two buckets
// (one per direction) filled with what reservations leave of the
// gateway's capacity (at least BestEffortFloor of it), but only while
// something is reserved: with nothing reserved, or no capacity declared,
// best effort runs unpaced (Bucket returns nil).
type BestEffort struct {
	capacity Rate         // Capacity.Rate; 0: never paced
	reserved atomic.Int64 // what live streams have reserved (Rate)
	active   atomic.Bool  // something is reserved: best effort is paced
	buckets  [2]*Bucket
}

// NewBestEffort returns the best-effort pacing of a gateway of capacity
// (0: undeclared, never paced).
func NewBestEffort(capacity Rate) *BestEffort {
	b := &BestEffort{capacity: capacity}
	if capacity > 0 {
		b.buckets = [2]*Bucket{NewBucket(capacity), NewBucket(capacity)}
	}
	return b
}

// Set takes the rate reserved now and gives best effort what is left.
func (b *BestEffort) Set(reserved Rate) {
	b.reserved.Store(int64(reserved))
	if b.capacity == 0 {
		return
	}
	left := max(b.capacity-reserved, Rate(float64(b.capacity)*BestEffortFloor), 1)
	for _, bk := range b.buckets {
		bk.SetRate(left)
	}
	b.active.Store(reserved > 0)
}

// BestEffortFloor is the share of Capacity.Rate that best-effort
// streams keep however much is reserved: they slow down, but a
// connection never stalls for good.
const BestEffortFloor = 0.01

// Reserved returns the rate the live streams have reserved, as Set was
// last told.
func (b *BestEffort) Reserved() Rate { return Rate(b.reserved.Load()) }

// Bucket returns best effort's bucket of direction d while something is
// reserved, else nil.
func (b *BestEffort) Bucket(d int) *Bucket {
	if !b.active.Load() {
		return nil
	}
	return b.buckets[d]
}
