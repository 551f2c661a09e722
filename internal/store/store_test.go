package store

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"scistream/internal/api"
)

func TestBoltRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	b, err := OpenBolt(path)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Round(time.Millisecond)
	r := &Record{UID: "0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b6c", Role: api.RoleInbound, State: api.StateListening,
		Owner: "alice", Created: now, Updated: now, Ports: []int{5100, 5101}, Targets: []string{"127.0.0.1:8080"},
		NumConn: 2, WAN: "tls", Engine: "splice", Secret: []byte("0123456789abcdef0123456789abcdef")}
	if err := b.Put(r); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Get(Key{"alice", "nope"}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get(unknown) = %v, want ErrNotFound", err)
	}
	// A second opener is refused while the first holds the file.
	if _, err := OpenBolt(path); err == nil || !strings.Contains(err.Error(), "--state_dir") {
		t.Fatalf("second open: %v, want a lock error naming --state_dir", err)
	}
	b.Close()
	st, _ := os.Stat(path)
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("database mode %v, want 0600 (it holds stream secrets)", st.Mode().Perm())
	}
	b, err = OpenBolt(path)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := b.Get(Key{"bob", r.UID}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("another owner's Get of the UID = %v, want ErrNotFound", err)
	}
	got, err := b.Get(r.Key())
	if err != nil || !reflect.DeepEqual(got, r) {
		t.Fatalf("after reopen: %+v, %v; want %+v", got, err, r)
	}
	list, _ := b.List()
	if len(list) != 1 {
		t.Fatalf("List: %d records, want 1", len(list))
	}
	if err := b.Delete(r.Key()); err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(r.Key()); err != nil {
		t.Fatalf("second Delete: %v", err)
	}
	if list, _ := b.List(); len(list) != 0 {
		t.Fatalf("after Delete: %d records", len(list))
	}
}

// TestOwnersShareUIDs: two identities hold records with the same UID,
// each reads back its own, and deleting one leaves the other.
func TestOwnersShareUIDs(t *testing.T) {
	b, err := OpenBolt(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	const uid = "0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b6c"
	for _, owner := range []string{"alice", "bob", "alice\x00x"} {
		if err := b.Put(&Record{UID: uid, Owner: owner, Reason: "of " + owner}); err != nil {
			t.Fatal(err)
		}
	}
	for _, owner := range []string{"alice", "bob"} {
		r, err := b.Get(Key{owner, uid})
		if err != nil || r.Owner != owner || r.Reason != "of "+owner {
			t.Fatalf("Get(%s) = %+v, %v", owner, r, err)
		}
	}
	if err := b.Delete(Key{"alice", uid}); err != nil {
		t.Fatal(err)
	}
	if r, err := b.Get(Key{"bob", uid}); err != nil || r.Owner != "bob" {
		t.Fatalf("bob's record after alice's was deleted: %+v, %v", r, err)
	}
}

// TestRekeysOldDatabase: a database whose records are keyed by UID alone
// (as versions before owner keys wrote it) opens with every record under
// its owner's key.
func TestRekeysOldDatabase(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	recs := []*Record{
		{UID: "0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b6c", Owner: "alice", State: api.StateConnected},
		{UID: "1f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b6c", Owner: "bob", State: api.StateReleased},
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket(bucket)
		if err != nil {
			return err
		}
		for _, r := range recs {
			v, _ := json.Marshal(r)
			if err := b.Put([]byte(r.UID), v); err != nil {
				return err
			}
		}
		return nil
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	b, err := OpenBolt(path)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, want := range recs {
		got, err := b.Get(want.Key())
		if err != nil || got.State != want.State {
			t.Fatalf("Get(%+v) after rekeying = %+v, %v", want.Key(), got, err)
		}
	}
	if list, _ := b.List(); len(list) != len(recs) {
		t.Fatalf("List has %d records after rekeying, want %d", len(list), len(recs))
	}
}
