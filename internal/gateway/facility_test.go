package gateway

import (
	"testing"

	"scistream/internal/store"
)

// TestStewardOf: a stream on the shared WAN port is stewarded by the
// node it was placed on while that node lives; when it dies, every node
// names the same live one (whatever order it lists them in), and when
// that one dies too, the last.
func TestStewardOf(t *testing.T) {
	rec := &store.Record{UID: "0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b6c", Nodes: []string{"b"}}
	if got := stewardOf(rec, []string{"a", "b", "c"}); got != "b" {
		t.Fatalf("placed on b, which lives: steward %q", got)
	}
	next := stewardOf(rec, []string{"a", "c"})
	if next != "a" && next != "c" {
		t.Fatalf("b dead: steward %q, want a live node", next)
	}
	if got := stewardOf(rec, []string{"c", "a"}); got != next {
		t.Errorf("b dead, nodes listed in another order: steward %q, want %q as before", got, next)
	}
	other := map[string]string{"a": "c", "c": "a"}[next]
	if got := stewardOf(rec, []string{other}); got != other {
		t.Errorf("b and %s dead: steward %q, want %s", next, got, other)
	}
	if got := stewardOf(rec, nil); got != "" {
		t.Errorf("no live node: steward %q, want none", got)
	}
	if got := stewardOf(&store.Record{UID: rec.UID}, []string{"a"}); got != "a" {
		t.Errorf("a record placed nowhere: steward %q, want the one live node", got)
	}
}

// TestSharedWANAlike: the shared WAN port's settings that the nodes of a
// facility compare are those given, not the defaults each node fills in
// from its own address, so nodes without a router (each advertising
// itself) join one facility; a differing domain or router does not.
func TestSharedWANAlike(t *testing.T) {
	a := Config{ListenerIP: "10.0.0.11", WANPort: 8443}
	b := Config{ListenerIP: "10.0.0.12", WANPort: 8443}
	if a.sharedWAN() != b.sharedWAN() {
		t.Errorf("two nodes on their own addresses: %q and %q; want the same", a.sharedWAN(), b.sharedWAN())
	}
	if d := (Config{ListenerIP: "10.0.0.11", WANPort: 8443, WANDomain: DefaultWANDomain}).sharedWAN(); d != a.sharedWAN() {
		t.Errorf("the default domain given: %q, not given: %q; want the same", d, a.sharedWAN())
	}
	for _, other := range []Config{
		{ListenerIP: "10.0.0.12", WANPort: 8443, WANDomain: "f.example.org"},
		{ListenerIP: "10.0.0.12", WANPort: 8443, WANAdvertise: "wan.example.org:443"},
		{ListenerIP: "10.0.0.12", WANPort: 9443},
		{ListenerIP: "10.0.0.12", WANPort: 8443, WANProxyProtocol: true},
		{ListenerIP: "10.0.0.12"},
	} {
		if other.sharedWAN() == a.sharedWAN() {
			t.Errorf("%+v: %q, the same as a node without it", other, other.sharedWAN())
		}
	}
	if s := (Config{}).sharedWAN(); s != "" {
		t.Errorf("no shared port: %q, want empty", s)
	}
}
