package main

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

// Pattern names.
const (
	patternHotSet   = "hotset"
	patternStealing = "stealing"
)

// patternParams describe a pattern's sequence.
type patternParams struct {
	flows    int     // streams to choose from, 0..flows-1
	accesses int     // length of the sequence
	hot      int     // hotset: streams in the hot set; stealing: a worker's own streams
	churn    int     // hotset: accesses between two changes of the hot set
	steal    float64 // stealing: share of accesses that steal from a random stream
	seed     uint64
}

// hotShare is the share of a hot set pattern's accesses that go to the
// hot set; the rest go to any stream.
const hotShare = 0.9

// describe says what the pattern does, for the output.
func (p patternParams) describe(name string) string {
	switch name {
	case patternHotSet:
		return fmt.Sprintf("a hot set of %d of the %d streams takes %.0f%% of the connections (the rest go to any stream); half of it is replaced every %d connections",
			p.hot, p.flows, 100*hotShare, p.churn)
	case patternStealing:
		return fmt.Sprintf("work stealing: a worker's connections go to its %d own (neighbouring) streams, and %.0f%% steal from any of the %d streams",
			p.hot, 100*p.steal, p.flows)
	}
	return name
}

// sequence returns the pattern's sequence of stream indexes.
func (p patternParams) sequence(name string) []int {
	// The pattern's name seeds the stream too, so two patterns with one
	// seed are not the same draws.
	var salt uint64
	for _, c := range name {
		salt = salt*31 + uint64(c)
	}
	r := rand.New(rand.NewPCG(p.seed, salt))
	seq := make([]int, 0, p.accesses)
	switch name {
	case patternHotSet:
		hot := r.Perm(p.flows)[:p.hot]
		for i := range p.accesses {
			if i > 0 && i%p.churn == 0 {
				// Half of the hot set (at least one) gives way to
				// streams outside it.
				for range max(1, p.hot/2) {
					out := r.IntN(len(hot))
					for {
						f := r.IntN(p.flows)
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
				seq = append(seq, r.IntN(p.flows))
			}
		}
	case patternStealing:
		// The worker's own streams are its neighbours, 0..hot-1: the
		// regular part (seed 002: partners preferred by topology); a
		// steal goes to any stream, its own included.
		for range p.accesses {
			if r.Float64() < p.steal {
				seq = append(seq, r.IntN(p.flows))
			} else {
				seq = append(seq, r.IntN(p.hot))
			}
		}
	}
	return seq
}
