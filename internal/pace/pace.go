// Package pace keeps a stream to a rate: bit rates as people and requests
// give them ("10G", "800Mbit/s", "100MB/s"); Bucket, the token bucket
// that a gateway's copy loops wait on after each chunk they write; a
// stream's Grant (its buckets, split over the nodes of a facility that
// serve its channels); and the BestEffort share of what reservations
// leave of a gateway's capacity.
package pace

import (
	"context"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// Rate is a data rate in bits per second, as networks and reservations
// count it. Zero means no rate: best effort.
type Rate int64

// Max bounds a rate: 10 Tbit/s, far above any NIC, so that arithmetic on
// rates never overflows.
const Max Rate = 10_000_000_000_000

var prefixes = map[string]int64{"": 1, "k": 1e3, "K": 1e3, "m": 1e6, "M": 1e6, "g": 1e9, "G": 1e9, "t": 1e12, "T": 1e12}

// ParseRate parses a rate: a non-negative number, an optional decimal
// prefix k, M, G or T, and an optional unit: bit/s, b/s or bps for bits
// (the default), B/s for bytes. "10G" and "10Gbit/s" are ten gigabits per
// second, "100MB/s" is 800 Mbit/s, "0" is no rate. The error quotes s and
// says how to write one.
func ParseRate(s string) (Rate, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, rest := t[:i], strings.TrimSpace(t[i:])
	bad := func(why string) (Rate, error) {
		return 0, fmt.Errorf("%.40q: %s; write bits per second with an optional prefix k, M, G or T, e.g. 800M or 10Gbit/s (or bytes: 100MB/s)", s, why)
	}
	if num == "" {
		return bad("no number")
	}
	bits := int64(1)
	switch {
	case strings.HasSuffix(rest, "bit/s"):
		rest = strings.TrimSuffix(rest, "bit/s")
	case strings.HasSuffix(rest, "bps"):
		rest = strings.TrimSuffix(rest, "bps")
	case strings.HasSuffix(rest, "b/s"):
		rest = strings.TrimSuffix(rest, "b/s")
	case strings.HasSuffix(rest, "B/s"):
		rest, bits = strings.TrimSuffix(rest, "B/s"), 8
	}
	mult, ok := prefixes[rest]
	if !ok {
		return bad("unknown unit " + strconv.Quote(rest))
	}
	r, ok := new(big.Rat).SetString(num)
	if !ok || strings.Count(num, ".") > 1 {
		return bad("not a number")
	}
	r.Mul(r, new(big.Rat).SetInt64(mult*bits))
	if !r.IsInt() {
		return bad("not a whole number of bits per second")
	}
	if r.Cmp(new(big.Rat).SetInt64(int64(Max))) > 0 {
		return bad("more than 10 Tbit/s")
	}
	return Rate(r.Num().Int64()), nil
}

// String writes r for people, in the largest decimal unit that keeps it
// exact where one does ("10 Gbit/s", "800 Mbit/s", "1500 bit/s"), or
// "best effort" for zero.
func (r Rate) String() string {
	if r == 0 {
		return "best effort"
	}
	for _, u := range []struct {
		name string
		mult Rate
	}{{"Tbit/s", 1e12}, {"Gbit/s", 1e9}, {"Mbit/s", 1e6}, {"kbit/s", 1e3}} {
		if r >= u.mult && r%u.mult == 0 {
			return fmt.Sprintf("%d %s", r/u.mult, u.name)
		}
	}
	if r >= 1e6 {
		return fmt.Sprintf("%s Mbit/s", strconv.FormatFloat(float64(r)/1e6, 'f', -1, 64))
	}
	return fmt.Sprintf("%d bit/s", int64(r))
}

// BytesPerSecond is r in bytes per second.
func (r Rate) BytesPerSecond() float64 { return float64(r) / 8 }

// burstTime is how much of its rate a Bucket lets pass at once. The copy
// loops wait after each chunk (up to 1 MiB), and a waiter's timer fires
// late on a busy machine: the tokens of the lateness are kept up to the
// burst, so the long-run rate holds as long as a wake-up is less than
// this late.
const burstTime = 50 * time.Millisecond

// minBurst is the least burst: a 64 KiB chunk (the copy loops' usual)
// passes in one wait at any rate.
const minBurst = 64 << 10

// Bucket is a token bucket of bytes filled at a Rate, shared by every
// connection of what it paces (one direction of a stream, or of all
// best-effort streams); Wait blocks until the bytes just written fit.
// A Bucket is safe for concurrent use.
type Bucket struct {
	lim  *rate.Limiter
	rate atomic.Int64
}

// NewBucket returns a bucket filled at r, which must be positive. It
// starts empty: a stream's first bytes wait their turn as the rest do,
// so that no burst at the start adds to its rate.
func NewBucket(r Rate) *Bucket {
	b := &Bucket{lim: rate.NewLimiter(limitOf(r), burstOf(r))}
	b.lim.ReserveN(time.Now(), burstOf(r)) // empty it
	b.rate.Store(int64(r))
	return b
}

func limitOf(r Rate) rate.Limit { return rate.Limit(r.BytesPerSecond()) }

func burstOf(r Rate) int {
	return int(max(minBurst, math.Ceil(r.BytesPerSecond()*burstTime.Seconds())))
}

// SetRate changes the rate from now on. r must be positive. A waiter
// already asleep keeps the delay it was given (at most one chunk's time
// at the old rate); its next Wait runs at the new rate.
func (b *Bucket) SetRate(r Rate) {
	now := time.Now()
	b.lim.SetLimitAt(now, limitOf(r))
	b.lim.SetBurstAt(now, burstOf(r))
	b.rate.Store(int64(r))
}

// Rate returns the bucket's rate.
func (b *Bucket) Rate() Rate { return Rate(b.rate.Load()) }

// Wait takes n bytes from the bucket, blocking until they fit the rate
// (bytes beyond a burst wait their turn in burst-sized pieces). It
// returns early with ctx's error when ctx ends.
func (b *Bucket) Wait(ctx context.Context, n int64) error {
	for n > 0 {
		k := min(n, int64(b.lim.Burst()))
		if err := b.lim.WaitN(ctx, int(k)); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			continue // SetRate lowered the burst meanwhile: take a smaller piece
		}
		n -= k
	}
	return nil
}
