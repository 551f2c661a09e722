package legpool

import (
	"context"
	"errors"
	"scistream/internal/wan"
	"testing"
)

// TestPoolVictims: at the cap, LRU tears down the least recently used
// idle leg; LRU-M first spares the flows whose legs were torn down
// before.
func TestPoolVictims(t *testing.T) {
	a, b := testOwner{1}, testOwner{2}
	fa, fb := flow{a, 0}, flow{b, 0}
	for _, c := range []struct {
		policy string
		want   flow
	}{{PolicyLRU, fa}, {PolicyLRUM, fb}} {
		m := New(Config{Policy: c.policy}, nil)
		// fa's leg idles first (least recent); fa was torn down once.
		m.idleLocked(&Leg{flow: fa, peer: "p"})
		m.idleLocked(&Leg{flow: fb, peer: "p"})
		m.teardowns[fa] = 1
		v := m.victimLocked("p")
		if v == nil || v.flow != c.want {
			t.Errorf("%s: victim %+v, want the leg of %v", c.policy, v, c.want)
		}
		if m.victimLocked("q") != nil {
			t.Errorf("%s: a victim for a peer with no idle leg", c.policy)
		}
	}
}

// testOwner is an Owner of nothing, told apart by its id.
type testOwner struct{ id int }

func (testOwner) Context() context.Context { return context.Background() }
func (testOwner) Serves(int) bool          { return true }
func (testOwner) DialLeg(context.Context, string, *wan.Leg) (*Pooled, error) {
	return nil, errors.New("no dial in this test")
}
func (testOwner) Counted(int64, int64) {}
