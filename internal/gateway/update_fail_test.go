package gateway

import (
	"sync/atomic"
	"testing"
	"time"

	"scistream/internal/api"
	"scistream/internal/store"
	"scistream/internal/stream"
	"scistream/internal/waitfor"
)

// TestUpdateStoreRefused: a PATCH the store refuses answers unavailable
// and changes nothing: the lease is not renewed (the stream still
// expires when it would have), and the stream's view keeps the rate it
// is paced at and the reservation the gateway counts.
func TestUpdateStoreRefused(t *testing.T) {
	var fs *failingStore
	clk := &clock{t: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)}
	s := newTestServer(t, func(c *Config) {
		fs = &failingStore{Store: c.Store}
		c.Store = fs
		c.Now = clk.Now
		c.Capacity.Rate = 1e9
		c.PendingTimeout = time.Hour
	})
	var st api.Stream
	callOK(t, s, "POST", "/v1/streams/inbound", aliceToken, rateBody(100e6, 0, 60), 201, &st)
	path := "/v1/streams/" + st.UID
	fs.fail.Store(true)
	callErr(t, s, "PATCH", path, aliceToken, `{"rate":300000000,"lease_s":3600}`, 503, api.CodeUnavailable, "retry later")
	fs.fail.Store(false)
	var got api.Stream
	callOK(t, s, "GET", path, aliceToken, "", 200, &got)
	if got.Rate != 100e6 || got.LeaseS != 60 || !got.Expires.Equal(st.Expires) {
		t.Fatalf("after a refused PATCH the stream shows rate %d, lease %d s to %s; want the unchanged 100 Mbit/s, 60 s to %s",
			got.Rate, got.LeaseS, got.Expires, st.Expires)
	}
	if r := liveStream(t, s, st.UID).Bucket(stream.DirToWAN).Rate(); r != 100e6 || info(t, s).ReservedRate != 100e6 {
		t.Fatalf("after a refused PATCH paced at %d, %d reserved", r, info(t, s).ReservedRate)
	}
	s.sweep(clk.Add(61*time.Second), time.Time{})
	callOK(t, s, "GET", path, aliceToken, "", 200, &got)
	if got.State != api.StateExpired {
		t.Fatalf("a lease renewal the store refused kept the stream alive past its lease: %s", got.State)
	}
}

// holdStore is a store that holds the first write of a live (not
// terminal) record, once armed, until hold is closed, and notes when a
// terminal record was stored.
type holdStore struct {
	store.Store
	armed    atomic.Bool
	held     chan struct{} // closed when the armed write arrives
	hold     chan struct{} // closed to let it through
	terminal atomic.Bool
}

func (h *holdStore) Put(r *store.Record) error {
	if r.State.Terminal() {
		err := h.Store.Put(r)
		h.terminal.Store(true)
		return err
	}
	if h.armed.CompareAndSwap(true, false) {
		close(h.held)
		<-h.hold
	}
	return h.Store.Put(r)
}

// TestUpdateWhileEnding: a lease renewal racing the stream's end (a
// release, or the janitor at the lease's last second) never stores the
// live record over the terminal one; else the store says the stream
// runs and a restart brings it back, holding its ports and reservation.
func TestUpdateWhileEnding(t *testing.T) {
	hs := &holdStore{held: make(chan struct{}), hold: make(chan struct{})}
	s := newTestServer(t, func(c *Config) {
		hs.Store = c.Store
		c.Store = hs
	})
	var got api.Stream
	callOK(t, s, "POST", "/v1/streams/inbound", aliceToken, rateBody(100e6, 0, 60), 201, &got)
	st := liveStream(t, s, got.UID)
	hs.armed.Store(true)
	lease := 3600
	updated := make(chan error, 1)
	go func() {
		_, err := s.update(st, &api.UpdateRequest{LeaseS: &lease})
		updated <- err
	}()
	<-hs.held // the renewal is on its way to the store
	ended := make(chan struct{})
	go func() {
		s.end(st, api.StateReleased, "released by the test")
		close(ended)
	}()
	// The end stores its record now, or waits for the renewal to land
	// first; either way the renewal goes on after.
	waitfor.Cond(time.Second, hs.terminal.Load)
	close(hs.hold)
	<-updated
	<-ended
	rec, err := hs.Get(store.Key{Owner: "alice", UID: got.UID})
	if err != nil || !rec.State.Terminal() || rec.Secret != nil {
		t.Fatalf("stored after a renewal racing the release: %v (state %s, secret kept %t); want the released record", err, rec.State, rec.Secret != nil)
	}
}
