package store

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

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
	if _, err := b.Get("nope"); !errors.Is(err, ErrNotFound) {
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
	got, err := b.Get(r.UID)
	if err != nil || !reflect.DeepEqual(got, r) {
		t.Fatalf("after reopen: %+v, %v; want %+v", got, err, r)
	}
	list, _ := b.List()
	if len(list) != 1 {
		t.Fatalf("List: %d records, want 1", len(list))
	}
	if err := b.Delete(r.UID); err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(r.UID); err != nil {
		t.Fatalf("second Delete: %v", err)
	}
	if list, _ := b.List(); len(list) != 0 {
		t.Fatalf("after Delete: %d records", len(list))
	}
}
