package pool

import (
	"slices"
	"testing"
)

// TestPoolPatterns: a pattern's sequence is the same for the same seed
// (every policy replays the same one) and has the shape it claims.
func TestPoolPatterns(t *testing.T) {
	p := Params{Flows: 12, Accesses: 2000, Hot: 4, Churn: 50, Steal: 0.3, Seed: 7}
	for _, name := range []string{HotSet, Stealing} {
		a, b := p.Sequence(name), p.Sequence(name)
		if !slices.Equal(a, b) {
			t.Errorf("%s: two sequences of seed %d differ", name, p.Seed)
		}
		q := p
		q.Seed++
		if slices.Equal(a, q.Sequence(name)) {
			t.Errorf("%s: seeds %d and %d give the same sequence", name, p.Seed, q.Seed)
		}
		if len(a) != p.Accesses {
			t.Errorf("%s: %d accesses, want %d", name, len(a), p.Accesses)
		}
		for i, f := range a {
			if f < 0 || f >= p.Flows {
				t.Fatalf("%s: access %d goes to stream %d of %d", name, i, f, p.Flows)
			}
		}
	}
	// hotset: within each window between two changes, its hot streams
	// take most connections; and the hot set does change.
	seq := p.Sequence(HotSet)
	var tops [][]int
	for w := 0; w+p.Churn <= len(seq); w += p.Churn {
		count := make([]int, p.Flows)
		for _, f := range seq[w : w+p.Churn] {
			count[f]++
		}
		order := make([]int, p.Flows)
		for i := range order {
			order[i] = i
		}
		slices.SortStableFunc(order, func(x, y int) int { return count[y] - count[x] })
		in := 0
		for _, f := range order[:p.Hot] {
			in += count[f]
		}
		if in < p.Churn*8/10 {
			t.Errorf("hotset: window at %d: the %d busiest streams take %d of %d connections, want at least 80%%", w, p.Hot, in, p.Churn)
		}
		top := slices.Clone(order[:p.Hot])
		slices.Sort(top)
		tops = append(tops, top)
	}
	if slices.EqualFunc(tops[1:], tops[:len(tops)-1], slices.Equal[[]int]) {
		t.Errorf("hotset: the hot set never changed: %v", tops[0])
	}
	// stealing: 70% to the own streams plus the steals that land there.
	own := 0
	for _, f := range p.Sequence(Stealing) {
		if f < p.Hot {
			own++
		}
	}
	if want := (1 - p.Steal + p.Steal*float64(p.Hot)/float64(p.Flows)) * float64(p.Accesses); float64(own) < want*0.9 || float64(own) > want*1.1 {
		t.Errorf("stealing: %d of %d connections to the own streams, want about %.0f", own, p.Accesses, want)
	}
}
