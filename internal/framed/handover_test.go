package framed

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"scistream/internal/carry"
	"scistream/internal/waitfor"
)

// handOne freezes the one connection of live, checks that its Relay
// (errc) ended with carry.ErrHandedOver, and returns its record, carried
// through its encoding, with its application's socket reopened from the
// file, as a new process takes them.
func handOne(t *testing.T, live *Live, errc <-chan error) (Handed, net.Conn) {
	t.Helper()
	handed, files, err := live.Freeze()
	if err != nil || len(handed) != 1 {
		t.Fatalf("freeze: %d handed over, %v", len(handed), err)
	}
	if err := <-errc; !errors.Is(err, carry.ErrHandedOver) {
		t.Fatalf("the frozen connection ended with %v, not ErrHandedOver", err)
	}
	b, err := handed[0].MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var hd Handed
	if err := hd.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	app, err := net.FileConn(files[0])
	files[0].Close()
	if err != nil {
		t.Fatal(err)
	}
	return hd, app
}

// TestHandOverBothSides (issue 37): a connection over pinned TLS legs
// is handed over by its outbound side, then by its inbound side, each
// to a new relay (a new Live and, inbound, a new Table) under a
// transfer; the dialer joins a new leg each time, and every byte
// arrives once, in order, with neither application reset.
func TestHandOverBothSides(t *testing.T) {
	l := newLegs(t)
	outLive, inLive := &Live{}, &Live{}
	cfg := Config{ResumeWindow: 10 * time.Second, Window: 1 << 20}
	ocfg, icfg := cfg, cfg
	ocfg.Live, icfg.Live = outLive, inLive
	c := openLive(t, l, ocfg, icfg)
	data := make([]byte, 32<<20)
	rand.Read(data)
	var wmu sync.Mutex
	written := 0
	go func() {
		for off := 0; off < len(data); off += 64 << 10 {
			c.prodApp.Write(data[off : off+64<<10])
			wmu.Lock()
			written = off + 64<<10
			wmu.Unlock()
		}
		c.prodApp.CloseWrite()
	}()
	got := make(chan []byte, 1)
	go func() { b, _ := io.ReadAll(c.consApp); got <- b }()
	moreWritten := func(n int) {
		waitfor.Must(t, 20*time.Second, "the producer to write more", func() bool {
			wmu.Lock()
			defer wmu.Unlock()
			return written >= n
		})
	}
	// The outbound side first: the new one dials and joins.
	moreWritten(len(data) / 4)
	hd, app := handOne(t, outLive, c.outErr)
	joins := c.serveJoins(t, l, 1)
	go func() { c.outErr <- OutHanded(context.Background(), ocfg, app, hd, l.dialLeg, Hooks{}) }()
	if j := <-joins; j.err != nil {
		t.Fatalf("the join after the outbound hand-over: %v", j.err)
	}
	// Then the inbound side: a new table adopts the connection before
	// the dialer's next leg comes.
	moreWritten(len(data) / 2)
	hd, app = handOne(t, inLive, c.inErr)
	// The dialer's first new leg still reaches the old process, whose
	// table drops the join without an answer: the dialer tries again
	// rather than take the connection for forgotten.
	a := l.next(t)
	if a.Err != nil {
		t.Fatal(a.Err)
	}
	if h, _, j, err := First(a.Conn); err != nil {
		t.Fatal(err)
	} else if err := c.table.Join(a.Conn, h, j); err == nil || !strings.Contains(err.Error(), "handed over") {
		t.Fatalf("a join at the process that handed the connection over: %v", err)
	}
	c.table = &Table{}
	run, err := c.table.Adopt(icfg, app, hd, Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	joins = c.serveJoins(t, l, 1)
	go func() { c.inErr <- run(context.Background()) }()
	if j := <-joins; j.err != nil {
		t.Fatalf("the join after the inbound hand-over: %v", j.err)
	}
	b := <-got
	if !bytes.Equal(b, data) {
		t.Fatalf("the consumer got %d bytes, equal %v; want the %d sent", len(b), bytes.Equal(b, data), len(data))
	}
	c.consApp.CloseWrite()
	if err := <-c.outErr; err != nil {
		t.Fatalf("outbound: %v", err)
	}
	if err := <-c.inErr; err != nil {
		t.Fatalf("inbound: %v", err)
	}
	if outLive.Len() != 0 || inLive.Len() != 0 {
		t.Fatalf("ended connections still live: %d out, %d in", outLive.Len(), inLive.Len())
	}
}

// TestAdoptRefuses: a record handed over by the other kind of side, or
// of an ID the table holds, is refused, and its application is reset
// rather than left hanging.
func TestAdoptRefuses(t *testing.T) {
	app, peer := tcpPair(t)
	var tb Table
	if _, err := tb.Adopt(Config{}, app, Handed{State: carry.State{Dialer: true}}, Hooks{}); err == nil {
		t.Fatal("an outbound side's record adopted by an inbound table")
	}
	peer.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := peer.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the refused connection's application read %v, not its end", err)
	}
	app2, _ := tcpPair(t)
	if err := OutHanded(context.Background(), Config{}, app2, Handed{}, nil, Hooks{}); err == nil {
		t.Fatal("an inbound side's record taken back by an outbound stream")
	}
	a1, _ := tcpPair(t)
	a2, _ := tcpPair(t)
	if _, err := tb.Adopt(Config{}, a1, Handed{ID: carry.ID{9}}, Hooks{}); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Adopt(Config{}, a2, Handed{ID: carry.ID{9}}, Hooks{}); err == nil {
		t.Fatal("two connections of one ID adopted")
	}
}
