package client_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"scistream/internal/client"
)

// TestPruneReleased: the records of streams released before the bound
// go; live ones and those released since stay; UIDs lists what stays.
func TestPruneReleased(t *testing.T) {
	ss := client.Sessions{Dir: t.TempDir()}
	now := time.Now()
	const live, recent, old = "11111111-2222-4333-8444-555555555555", "21111111-2222-4333-8444-555555555555", "31111111-2222-4333-8444-555555555555"
	for _, s := range []*client.Session{
		{UID: live, Inbound: &client.Endpoint{S2CS: "a:1"}},
		{UID: recent, Released: &client.Released{At: now.Add(-time.Hour), By: "released by alice"}},
		{UID: old, Released: &client.Released{At: now.Add(-48 * time.Hour)}},
	} {
		if err := ss.Save(s); err != nil {
			t.Fatal(err)
		}
	}
	if err := ss.PruneReleased(now.Add(-24 * time.Hour)); err != nil {
		t.Fatal(err)
	}
	uids, err := ss.UIDs()
	slices.Sort(uids)
	if err != nil || !slices.Equal(uids, []string{live, recent}) {
		t.Errorf("after pruning: %v, %v", uids, err)
	}
	if uids, err := (client.Sessions{Dir: t.TempDir() + "/none"}).UIDs(); err != nil || len(uids) != 0 {
		t.Errorf("no directory: %v, %v", uids, err)
	}
}

// TestSessionsOthersCanWrite: a record others could have written, or
// put in place, is refused, naming the fix, and no record is written
// into a directory others can write (issue 35, finding 9).
func TestSessionsOthersCanWrite(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "streams")
	ss := client.Sessions{Dir: dir}
	const uid = "11111111-2222-4333-8444-555555555555"
	if err := ss.Save(&client.Session{UID: uid, Inbound: &client.Endpoint{S2CS: "a:1"}}); err != nil {
		t.Fatal(err)
	}
	record := filepath.Join(dir, uid+".json")
	os.Chmod(record, 0o644)
	if _, err := ss.Load(uid); err != nil {
		t.Errorf("a record others may read: %v", err)
	}
	os.Chmod(record, 0o646)
	if _, err := ss.Load(uid); err == nil || !strings.Contains(err.Error(), "stream record "+record+" can be written by other users (mode 0646): chmod go-w "+record) {
		t.Errorf("a record all may write: %v", err)
	}
	os.Chmod(record, 0o600)
	os.Chmod(dir, 0o730)
	if _, err := ss.Load(uid); err == nil || !strings.Contains(err.Error(), "directory "+dir+" can be written by other users (mode 0730)") {
		t.Errorf("a records directory its group may write: %v", err)
	}
	const other = "21111111-2222-4333-8444-555555555555"
	if err := ss.Save(&client.Session{UID: other}); err == nil || !strings.Contains(err.Error(), "records directory "+dir+" can be written by other users (mode 0730)") || !strings.HasSuffix(err.Error(), "chmod go-w "+dir) {
		t.Errorf("Save into a directory its group may write: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, other+".json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a record was written there anyway: %v", err)
	}
	os.Chmod(dir, 0o700)
	if _, err := ss.Load(uid); err != nil {
		t.Errorf("fixed: %v", err)
	}
}
