package gateway

import (
	"context"
	"net"
	"testing"
	"time"

	"scistream/internal/api"
	"scistream/internal/store"
	"scistream/internal/waitfor"
)

// TestConnectedStored: a wired stream goes connected on both gateways at
// its first connection, at once in their answers, and in their stores
// through the janitor; a store that refuses the write is logged once and
// stops nothing (the next connection flows, the view says connected),
// and the janitor stores the change once the store takes writes again.
func TestConnectedStored(t *testing.T) {
	var fs *failingStore
	var logs logLines
	p := startPair(t, nil, func(c *Config) {
		fs = &failingStore{Store: c.Store}
		c.Store = fs
		c.Logger = logs.logger()
	})
	app, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	ctx := context.Background()
	inS, outS, err := p.wire(ctx, app.Addr().(*net.TCPAddr).Port, "127.0.0.0/8")
	if err != nil {
		t.Fatal(err)
	}
	if inS.State != api.StateWired || outS.State != api.StateWired {
		t.Fatalf("wired with no data yet: inbound %s, outbound %s; want both wired", inS.State, outS.State)
	}
	key := store.Key{Owner: "alice", UID: inS.UID}
	stored := func(g *testGW) api.State {
		rec, err := g.srv.cfg.Store.Get(key)
		if err != nil {
			t.Fatal(err)
		}
		return rec.State
	}
	if in, out := stored(p.cons), stored(p.prod); in != api.StateWired || out != api.StateWired {
		t.Fatalf("stored before any data: inbound %s, outbound %s; want both wired", in, out)
	}
	fs.fail.Store(true) // the producer's gateway cannot write its store
	transfer(t, app, outS.Listeners[0], 1000, 10)
	for _, c := range []struct {
		name string
		cl   interface {
			Get(context.Context, string) (*api.Stream, error)
		}
	}{{"inbound", p.in}, {"outbound", p.out}} {
		if s, err := c.cl.Get(ctx, inS.UID); err != nil || s.State != api.StateConnected {
			t.Fatalf("%s side after a connection: %+v, %v; want connected", c.name, s, err)
		}
	}
	waitfor.Must(t, 10*time.Second, "the consumer's gateway to store connected", func() bool { return stored(p.cons) == api.StateConnected })
	waitfor.Must(t, 10*time.Second, "the refused write to be logged", func() bool { return logs.has("could not store that a stream is connected") })
	transfer(t, app, outS.Listeners[0], 10, 1000) // the store's failure stops nothing
	if stored(p.prod) != api.StateWired {
		t.Fatal("the failing store took the change")
	}
	fs.fail.Store(false)
	waitfor.Must(t, 10*time.Second, "the producer's gateway to store connected once its store works", func() bool { return stored(p.prod) == api.StateConnected })
	waitfor.Must(t, 10*time.Second, "the late write to be logged", func() bool { return logs.has("stored the connected streams after all") })
	if k := logs.count("could not store that a stream is connected"); k != 1 {
		t.Errorf("the refused write was logged %d times, want once:\n%s", k, logs.String())
	}
}
