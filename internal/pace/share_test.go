package pace

import "testing"

// TestGrantShare: a node of a facility serving k of a stream's n
// channels paces at k/n of the grant; every other case paces at the
// whole grant, and best effort (no grant) stays unpaced whatever the
// share (a share of nothing once paced it at 1 bit/s).
func TestGrantShare(t *testing.T) {
	var p Grant
	rateNow := func() Rate {
		b := p.buckets[0].Load()
		if b == nil {
			return 0
		}
		if b2 := p.buckets[1].Load(); b2 == nil || b2.Rate() != b.Rate() {
			t.Fatalf("the two directions' buckets differ: %v and %v", b, b2)
		}
		return b.Rate()
	}
	for _, c := range []struct {
		grant         Rate
		served, total int
		want          Rate
	}{
		{0, 1, 3, 0},
		{300e6, 0, 0, 300e6}, // a gateway of one node
		{300e6, 1, 3, 100e6},
		{300e6, 2, 3, 200e6},
		{300e6, 3, 3, 300e6},
		{300e6, 0, 3, 300e6}, // serves none: nothing to pace here
		{2, 1, 3, 1},         // never below 1 bit/s
		{0, 3, 3, 0},
	} {
		p.SetShare(c.served, c.total)
		p.Set(c.grant)
		if got := rateNow(); got != c.want {
			t.Errorf("grant %v, %d of %d channels here: paced at %v, want %v", c.grant, c.served, c.total, got, c.want)
		}
		if p.Rate() != c.grant {
			t.Errorf("grant %v: rate() %v; admission counts the whole grant", c.grant, p.Rate())
		}
	}
	p.Set(90e6)
	p.SetShare(1, 3) // a channel moved away: the share changes the bucket in place
	if got := rateNow(); got != 30e6 {
		t.Errorf("after the share changed: paced at %v, want 30 Mbit/s", got)
	}
}
