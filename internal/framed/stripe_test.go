package framed

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"scistream/internal/carry"
	"scistream/internal/relay"
	"scistream/internal/waitfor"
	"scistream/internal/wan"
)

// TestStripedOverTLS: a connection that asks for 4 legs over pinned TLS
// legs gets its 3 further legs, each a stripe frame the table adds; one
// of them reset mid-transfer loses the connection's legs, a join brings
// it back and 3 stripes again, and every byte arrives once, in order.
func TestStripedOverTLS(t *testing.T) {
	l := newLegs(t)
	var granted atomic.Int64
	c := openWith(t, l, Config{ResumeWindow: 10 * time.Second, Window: 4 << 20, Stripes: 4},
		Config{ResumeWindow: 10 * time.Second, Window: 4 << 20, MaxStripes: 8}, Hooks{Striped: func(n int) { granted.Store(int64(n)) }})
	legs := c.serveJoins(t, l, 3+1+3)
	var stripes []joined
	for i := range 3 {
		j := <-legs
		if j.err != nil {
			t.Fatalf("stripe %d: %v", i, j.err)
		}
		stripes = append(stripes, j)
	}
	if g := granted.Load(); g != 4 {
		t.Fatalf("granted %d legs, want 4 (asked 4, the acceptor's maximum 8)", g)
	}
	data := make([]byte, 64<<20)
	rand.Read(data)
	go func() {
		c.prodApp.Write(data)
		c.prodApp.CloseWrite()
	}()
	var read atomic.Int64
	got := make(chan []byte, 1)
	go func() {
		var b bytes.Buffer
		buf := make([]byte, 256<<10)
		for {
			n, err := c.consApp.Read(buf)
			b.Write(buf[:n])
			read.Add(int64(n))
			if err != nil {
				got <- b.Bytes()
				return
			}
		}
	}()
	waitfor.Must(t, 30*time.Second, "a third of the bytes to arrive", func() bool { return read.Load() >= int64(len(data)/3) })
	relay.Abort(stripes[1].leg) // a reset both ways
	for i := range 4 {
		j := <-legs
		if j.err != nil {
			t.Fatalf("leg %d after the reset: %v", i, j.err)
		}
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
}

// TestStripesRefused: an acceptor that grants no striping (a release
// without it, or an operator's maximum of 1) keeps the connection on one
// leg, and the dialer is told so; a stripe frame for a connection that
// is not striped, or with a made-up proof, is refused, and the
// connection carries on.
func TestStripesRefused(t *testing.T) {
	l := newLegs(t)
	granted := make(chan int, 1)
	c := openWith(t, l, Config{ResumeWindow: 10 * time.Second, Stripes: 4}, Config{ResumeWindow: 10 * time.Second},
		Hooks{Striped: func(n int) { granted <- n }})
	if g := <-granted; g != 1 {
		t.Fatalf("granted %d legs by an acceptor without striping, want 1", g)
	}
	c.prodApp.Write([]byte("before"))
	buf := make([]byte, 6)
	if _, err := io.ReadFull(c.consApp, buf); err != nil {
		t.Fatal(err)
	}
	var id carry.ID
	c.table.mu.Lock()
	for k := range c.table.m {
		id = k
	}
	key := c.table.m[id].key
	c.table.mu.Unlock()
	for _, tc := range []struct {
		name, want string
		proof      func(binding []byte) [32]byte
	}{
		{"the true proof, to a connection not striped", "takes no further leg", func(b []byte) [32]byte { return wan.JoinProof(key, b, id) }},
		{"a made-up proof", "no such connection", func([]byte) [32]byte { return [32]byte{1} }},
	} {
		nl, err := l.dialLeg(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		res := make(chan error, 1)
		go func() {
			a := l.next(t)
			h, _, j, err := First(a.Conn)
			if err == nil {
				err = c.table.Stripe(a.Conn, h, j)
			}
			res <- err
		}()
		_, _, jerr := join(nl, carry.AppendStripe(nil, carry.Join{ID: id, Proof: tc.proof(wan.BindingOf(nl))}))
		nl.Close()
		if err := <-res; err == nil {
			t.Fatalf("%s: the table took the stripe", tc.name)
		}
		if jerr == nil || !strings.Contains(jerr.Error(), tc.want) {
			t.Fatalf("%s: the dialer was told %v, want %q", tc.name, jerr, tc.want)
		}
	}
	c.prodApp.Write([]byte("after"))
	c.prodApp.CloseWrite()
	rest, err := io.ReadAll(c.consApp)
	if err != nil || string(rest) != "after" {
		t.Fatalf("the connection after the refused stripes: %q, %v", rest, err)
	}
	c.consApp.CloseWrite()
	if err := <-c.outErr; err != nil {
		t.Fatalf("outbound: %v", err)
	}
	if err := <-c.inErr; err != nil {
		t.Fatalf("inbound: %v", err)
	}
}
