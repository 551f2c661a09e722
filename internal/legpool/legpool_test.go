package stream

import (
	"testing"
)

// TestPoolVictims: at the cap, LRU tears down the least recently used
// idle leg; LRU-M first spares the flows whose legs were torn down
// before.
func TestPoolVictims(t *testing.T) {
	a, b := &Stream{}, &Stream{}
	fa, fb := flow{a, 0}, flow{b, 0}
	for _, c := range []struct {
		policy string
		want   flow
	}{{PolicyLRU, fa}, {PolicyLRUM, fb}} {
		m := NewLegManager(PoolConfig{Policy: c.policy}, nil)
		// fa's leg idles first (least recent); fa was torn down once.
		m.idleLocked(&pooledLeg{flow: fa, peer: "p"})
		m.idleLocked(&pooledLeg{flow: fb, peer: "p"})
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
