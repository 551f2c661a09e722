package stream

import (
	"context"
	"log/slog"
	"net"
	"scistream/internal/api"
	"scistream/internal/relay"
	"scistream/internal/store"
	"testing"
	"time"
)

// TestPinReread: on a node of a facility, a leg that comes before the
// node learnt of the attach another node stored finds the pin in the
// store: while nothing is pinned, the record is read again, at most once
// per pinReread, and not at all once the pin is known; a record of an
// earlier incarnation of the stream is not taken.
func TestPinReread(t *testing.T) {
	rec := &store.Record{UID: "0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b6c", Owner: "alice", Role: api.RoleInbound, State: api.StateListening,
		NumConn: 1, WAN: api.WANTLS, Targets: []string{"192.0.2.1:9"}, Created: time.Now()}
	reads := 0
	var stored *store.Record // what another node stored, as this node's reread sees it
	env := &Env{Log: slog.New(slog.DiscardHandler), Reread: func(k store.Key) (*store.Record, error) {
		reads++
		r := *stored
		return &r, nil
	}}
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	eng, err := relay.New(relay.Options{})
	if err != nil {
		t.Fatal(err)
	}
	splice, _ := eng.Get("splice")
	stream, err := New(context.Background(), env, rec, []*net.TCPListener{ln}, splice)
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
