package client_test

import (
	"slices"
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
