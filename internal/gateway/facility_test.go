package gateway

import (
	"testing"
	"time"

	"scistream/internal/api"
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

// TestPinReread: on a node of a facility, a leg that comes before the
// node learnt of the attach another node stored finds the pin in the
// store: while nothing is pinned, the record is read again, at most once
// per pinReread, and not at all once the pin is known; a record of an
// earlier incarnation of the stream is not taken.
func TestPinReread(t *testing.T) {
	s := newTestServer(t, nil)
	var st api.Stream
	callOK(t, s, "POST", "/v1/streams/inbound", aliceToken, inboundBody(9), 201, &st)
	key := store.Key{Owner: "alice", UID: st.UID}
	stream := s.local(key)
	reads := 0
	var stored *store.Record // what another node stored, as this node's reread sees it
	s.env.Reread = func(k store.Key) (*store.Record, error) {
		reads++
		r := *stored
		return &r, nil
	}
	rec, err := s.cfg.Store.Get(key)
	if err != nil {
		t.Fatal(err)
	}
	stored = rec
	if p := stream.pin(); p != "" || reads != 1 {
		t.Fatalf("not attached anywhere: pin %q after %d reads; want none after 1", p, reads)
	}
	if p := stream.pin(); p != "" || reads != 1 {
		t.Fatalf("a second leg at once: pin %q after %d reads; want no read within %s", p, reads, pinReread)
	}
	// Another node attaches a new incarnation's record: not this one's.
	older := *rec
	older.Created = rec.Created.Add(-time.Hour)
	older.PeerCertSHA256 = "aa"
	stored = &older
	stream.pinRead.Store(0) // the window is over
	if p := stream.pin(); p != "" || reads != 2 {
		t.Fatalf("another incarnation's pin: %q after %d reads; want none", p, reads)
	}
	// Another node attached this stream.
	attached := *rec
	attached.PeerCertSHA256 = "bb"
	stored = &attached
	stream.pinRead.Store(0)
	if p := stream.pin(); p != "bb" || reads != 3 {
		t.Fatalf("attached on another node: pin %q after %d reads; want bb after 3", p, reads)
	}
	stream.pinRead.Store(0)
	if p := stream.pin(); p != "bb" || reads != 3 {
		t.Fatalf("once pinned: pin %q after %d reads; want bb and no more reads", p, reads)
	}
}
