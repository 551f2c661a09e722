package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"scistream/internal/api"
	"scistream/internal/store"
)

// TestPendingExpiry drives the janitor's round with an injected clock: an
// inbound stream whose peer never attaches expires exactly after
// Config.PendingTimeout and frees its ports; an attached one lives until
// its lease runs out (TestLease).
func TestPendingExpiry(t *testing.T) {
	clk := &clock{t: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)}
	s := newTestServer(t, func(c *Config) {
		c.Now = clk.Now
		c.PendingTimeout = 10 * time.Minute
	})
	var waiting, attached api.Stream
	callOK(t, s, "POST", "/v1/streams/inbound", aliceToken, inboundBody(9), 201, &waiting)
	callOK(t, s, "POST", "/v1/streams/inbound", aliceToken, inboundBody(9), 201, &attached)
	b, _ := json.Marshal(api.AttachRequest{PeerCert: string(s.cfg.Identity.PEM)})
	callOK(t, s, "POST", "/v1/streams/"+attached.UID+"/attach", aliceToken, string(b), 200, nil)

	var last time.Time
	last = s.sweep(clk.Add(10*time.Minute), last) // exactly the timeout: not yet
	if n := len(s.live()); n != 2 {
		t.Fatalf("%d live streams at the timeout, want 2", n)
	}
	s.sweep(clk.Add(time.Second), last)
	var got api.Stream
	callOK(t, s, "GET", "/v1/streams/"+waiting.UID, aliceToken, "", 200, &got)
	if got.State != api.StateExpired || !strings.Contains(got.Reason, "10m0s") || !got.Updated.Equal(clk.Now()) {
		t.Fatalf("after the timeout: %s %q updated %s; want expired naming the timeout at %s", got.State, got.Reason, got.Updated, clk.Now())
	}
	callOK(t, s, "GET", "/v1/streams/"+attached.UID, aliceToken, "", 200, &got)
	if got.State != api.StateWired {
		t.Fatalf("the attached stream is %s after the timeout", got.State)
	}
	if n := s.alloc.InUse(); n != 1 {
		t.Fatalf("%d ports in use, want only the attached stream's", n)
	}
	s.sweep(clk.Add(24*time.Hour-10*time.Minute-2*time.Second), time.Time{}) // its lease (a day) has a second left
	callOK(t, s, "GET", "/v1/streams/"+attached.UID, aliceToken, "", 200, &got)
	if got.State != api.StateWired {
		t.Fatalf("the attached stream is %s before its lease ran out", got.State)
	}
}

// TestPrune: ended streams' records stay for Config.Retention, then the
// janitor deletes them, at most one round a minute.
func TestPrune(t *testing.T) {
	clk := &clock{t: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)}
	s := newTestServer(t, func(c *Config) {
		c.Now = clk.Now
		c.Retention = time.Hour
	})
	var st api.Stream
	callOK(t, s, "POST", "/v1/streams/inbound", aliceToken, inboundBody(9), 201, &st)
	callOK(t, s, "DELETE", "/v1/streams/"+st.UID, aliceToken, "", 200, nil)
	released := clk.Now()

	last := s.sweep(clk.Add(time.Hour), time.Time{}) // exactly the retention: kept
	if !last.Equal(clk.Now()) {
		t.Fatalf("sweep returned last prune %s, want now %s", last, clk.Now())
	}
	callOK(t, s, "GET", "/v1/streams/"+st.UID, aliceToken, "", 200, nil)
	if got := s.sweep(clk.Add(30*time.Second), last); !got.Equal(last) {
		t.Fatalf("pruned again %s after the last prune", got.Sub(last))
	}
	callOK(t, s, "GET", "/v1/streams/"+st.UID, aliceToken, "", 200, nil) // too soon for another round
	s.sweep(clk.Add(31*time.Second), last)
	callErr(t, s, "GET", "/v1/streams/"+st.UID, aliceToken, "", 404, api.CodeNotFound, st.UID)
	if clk.Now().Sub(released) <= time.Hour {
		t.Fatal("test clock arithmetic is off")
	}
}

// failingStore is a store whose writes fail while fail is set, as a full
// disk makes them.
type failingStore struct {
	store.Store
	fail atomic.Bool
}

var errDiskFull = errors.New("write state.db: no space left on device")

func (f *failingStore) Put(r *store.Record) error {
	if f.fail.Load() {
		return errDiskFull
	}
	return f.Store.Put(r)
}

// TestEndWhileStoreFails: while the store refuses writes, creating a
// stream is unavailable, and a release still ends the stream and reports
// it ended everywhere (status, list); the janitor stores the end once the
// store takes writes again.
func TestEndWhileStoreFails(t *testing.T) {
	var fs *failingStore
	var logs logLines
	clk := &clock{t: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)}
	s := newTestServer(t, func(c *Config) {
		fs = &failingStore{Store: c.Store}
		c.Store = fs
		c.Now = clk.Now
		c.Logger = logs.logger()
	})
	var st api.Stream
	callOK(t, s, "POST", "/v1/streams/inbound", aliceToken, inboundBody(9), 201, &st)
	fs.fail.Store(true)
	callErr(t, s, "POST", "/v1/streams/inbound", aliceToken, inboundBody(9), 503, api.CodeUnavailable, "retry later")
	if n := s.alloc.InUse(); n != 1 {
		t.Fatalf("%d ports in use after a create the store refused, want the first stream's 1", n)
	}
	var rel api.Stream
	callOK(t, s, "DELETE", "/v1/streams/"+st.UID, aliceToken, "", 200, &rel)
	if rel.State != api.StateReleased || s.alloc.InUse() != 0 {
		t.Fatalf("release while the store fails: %s, %d ports in use", rel.State, s.alloc.InUse())
	}
	var got api.Stream
	callOK(t, s, "GET", "/v1/streams/"+st.UID, aliceToken, "", 200, &got)
	if got.State != api.StateReleased {
		t.Fatalf("status after the release is %s: the stale stored record shows through", got.State)
	}
	var list api.StreamList
	callOK(t, s, "GET", "/v1/streams?all=true", aliceToken, "", 200, &list)
	if len(list.Streams) != 1 || list.Streams[0].State != api.StateReleased {
		t.Fatalf("list --all after the release: %+v", list.Streams)
	}
	if rec, _ := fs.Get(store.Key{Owner: "alice", UID: st.UID}); rec.State.Terminal() {
		t.Fatal("the failing store took the release")
	}
	if !logs.has("could not store the end of a stream") {
		t.Fatalf("no error logged for the end the store refused:\n%s", logs.String())
	}
	s.sweep(clk.Add(time.Second), clk.Now()) // still failing: kept
	fs.fail.Store(false)
	s.sweep(clk.Add(time.Second), clk.Now())
	if rec, err := fs.Get(store.Key{Owner: "alice", UID: st.UID}); err != nil || rec.State != api.StateReleased || rec.Secret != nil {
		t.Fatalf("stored record once the store works again: %+v, %v", rec, err)
	}
	if !logs.has("stored the end of a stream after all") {
		t.Fatalf("the late store is not logged:\n%s", logs.String())
	}
}

// landedStore is a store whose armed write lands but answers as a timed
// out etcd write does: unavailable.
type landedStore struct {
	store.Store
	armed atomic.Bool
}

func (l *landedStore) Put(r *store.Record) error {
	err := l.Store.Put(r)
	if err == nil && l.armed.CompareAndSwap(true, false) {
		return fmt.Errorf("etcd put: %w: no answer within 3s", store.ErrUnavailable)
	}
	return err
}

// TestCreateLandedUnavailable: a create whose record reached the store
// although the store answered unavailable is answered unavailable, and
// its record is ended at once (failed, saying why), so that no restart
// or other node serves a stream its caller was told had failed.
func TestCreateLandedUnavailable(t *testing.T) {
	var ls *landedStore
	s := newTestServer(t, func(c *Config) {
		ls = &landedStore{Store: c.Store}
		c.Store = ls
	})
	const uid = "7f0c3a52-9a53-4f5e-9d1c-2b9c2a6c1e01"
	ls.armed.Store(true)
	callErr(t, s, "POST", "/v1/streams/inbound", aliceToken,
		`{"uid":"`+uid+`","remote_ip":"127.0.0.1","receiver_ports":[9000],"num_conn":1}`, 503, api.CodeUnavailable, "retry later")
	rec, err := ls.Store.Get(store.Key{Owner: "alice", UID: uid})
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != api.StateFailed || !strings.Contains(rec.Reason, "answered unavailable") || rec.Secret != nil {
		t.Fatalf("the landed record of a create answered unavailable: state %s, reason %q, secret kept %v", rec.State, rec.Reason, rec.Secret != nil)
	}
	if n := len(s.live()); n != 0 {
		t.Fatalf("%d live streams after a failed create", n)
	}
	// The caller may create it again.
	callOK(t, s, "POST", "/v1/streams/inbound", aliceToken,
		`{"uid":"`+uid+`","remote_ip":"127.0.0.1","receiver_ports":[9000],"num_conn":1}`, 201, nil)
}
