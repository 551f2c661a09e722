package pool

import (
	"fmt"
	"math/rand/v2"
	"slices"
)

// Access patterns of s2bench pool, in the manner of seed 002 (ACTS): the
// sequence of streams (flows) that new application connections go to,
// from one outbound gateway to one peer gateway. A sequence is a pure
// function of its parameters and seed, so every policy replays the same
// one.

// The experiments: Warm, and the patterns HotSet and Stealing.
const (
	Warm     = "warm"     // the first byte with a warm pool against without
	HotSet   = "hotset"   // a hot set of streams that changes
	Stealing = "stealing" // work stealing: a worker's own streams, and steals from any
)

// Params describe a pattern's sequence.
type Params struct {
	Flows    int     // streams to choose from, 0..Flows-1; 0: 12
	Accesses int     // length of the sequence; 0: 300
	Hot      int     // hotset: streams in the hot set; stealing: a worker's own streams; 0: 4
	Churn    int     // hotset: accesses between two changes of the hot set; 0: 50
	Steal    float64 // stealing: share of accesses that steal from a random stream; 0: none
	Seed     uint64
}

func (p Params) withDefaults() Params {
	if p.Flows == 0 {
		p.Flows = 12
	}
	if p.Accesses == 0 {
		p.Accesses = 300
	}
	if p.Hot == 0 {
		p.Hot = 4
	}
	if p.Churn == 0 {
		p.Churn = 50
	}
	return p
}

// hotShare is the share of a hot set pattern's accesses that go to the
// hot set; the rest go to any stream.
const hotShare = 0.9

// Describe says what the pattern name does, for the output.
func (p Params) Describe(name string) string {
	p = p.withDefaults()
	switch name {
	case HotSet:
		return fmt.Sprintf("a hot set of %d of the %d streams takes %.0f%% of the connections (the rest go to any stream); half of it is replaced every %d connections",
			p.Hot, p.Flows, 100*hotShare, p.Churn)
	case Stealing:
		return fmt.Sprintf("work stealing: a worker's connections go to its %d own (neighbouring) streams, and %.0f%% steal from any of the %d streams",
			p.Hot, 100*p.Steal, p.Flows)
	}
	return name
}

// Sequence returns the pattern's sequence of stream indexes, a pure
// function of p and name: every policy replays the same one.
func (p Params) Sequence(name string) []int {
	p = p.withDefaults()
	// The pattern's name seeds the stream too, so two patterns with one
	// seed are not the same draws.
	var salt uint64
	for _, c := range name {
		salt = salt*31 + uint64(c)
	}
	r := rand.New(rand.NewPCG(p.Seed, salt))
	seq := make([]int, 0, p.Accesses)
	switch name {
	case HotSet:
		hot := r.Perm(p.Flows)[:p.Hot]
		for i := range p.Accesses {
			if i > 0 && i%p.Churn == 0 {
				// Half of the hot set (at least one) gives way to
				// streams outside it.
				for range max(1, p.Hot/2) {
					out := r.IntN(len(hot))
					for {
						f := r.IntN(p.Flows)
						if !slices.Contains(hot, f) {
							hot[out] = f
							break
						}
					}
				}
			}
			if r.Float64() < hotShare {
				seq = append(seq, hot[r.IntN(len(hot))])
			} else {
				seq = append(seq, r.IntN(p.Flows))
			}
		}
	case Stealing:
		// The worker's own streams are its neighbours, 0..hot-1: the
		// regular part (seed 002: partners preferred by topology); a
		// steal goes to any stream, its own included.
		for range p.Accesses {
			if r.Float64() < p.Steal {
				seq = append(seq, r.IntN(p.Flows))
			} else {
				seq = append(seq, r.IntN(p.Hot))
			}
		}
	}
	return seq
}
