package facility

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
