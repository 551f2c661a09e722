package store

import (
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"

	"scistream/internal/api"
)

// refusing is a Bolt store whose writes fail while down is set: a full
// disk, as the gateway meets it.
type refusing struct {
	*Bolt
	down atomic.Bool
}

func (r *refusing) Put(rec *Record) error {
	if r.down.Load() {
		return errors.New("no space left on device")
	}
	return r.Bolt.Put(rec)
}

// TestUnsaved: a final record the store refuses is kept, answered for,
// stored by a later Retry, and then no longer kept; one that Put
// replaced meanwhile is the one stored.
func TestUnsaved(t *testing.T) {
	b, err := OpenBolt(filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	st := &refusing{Bolt: b}
	u := NewUnsaved(st)
	rec := &Record{UID: "u1", Owner: "alice", Role: api.RoleInbound, State: api.StateReleased, Reason: "first"}
	if err := u.Put(rec); err != nil {
		t.Fatal(err)
	}
	if u.Get(rec.Key()) != nil || len(u.List()) != 0 {
		t.Fatal("a stored record is kept")
	}
	st.down.Store(true)
	rec2 := &Record{UID: "u2", Owner: "alice", Role: api.RoleInbound, State: api.StateExpired, Reason: "first"}
	if err := u.Put(rec2); err == nil {
		t.Fatal("a refused write reported no error")
	}
	got := u.Get(rec2.Key())
	if got == nil || got.State != api.StateExpired || len(u.List()) != 1 {
		t.Fatalf("kept %+v, list %d", got, len(u.List()))
	}
	got.Reason = "changed by the caller"
	if u.Get(rec2.Key()).Reason != "first" {
		t.Fatal("Get returned the kept record itself, not a copy")
	}
	if stored := u.Retry(); len(stored) != 0 {
		t.Fatalf("stored %d while the store refuses", len(stored))
	}
	rec2b := &Record{UID: "u2", Owner: "alice", Role: api.RoleInbound, State: api.StateExpired, Reason: "second"}
	u.Put(rec2b) // refused too: replaces the one kept
	st.down.Store(false)
	stored := u.Retry()
	if len(stored) != 1 || stored[0] != rec2b || u.Get(rec2.Key()) != nil {
		t.Fatalf("Retry stored %v; want the replacing record, and nothing kept after", stored)
	}
	if r, err := b.Get(rec2.Key()); err != nil || r.Reason != "second" {
		t.Fatalf("store holds %+v, %v; want the second record", r, err)
	}
}
