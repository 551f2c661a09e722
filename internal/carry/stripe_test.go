package carry

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"scistream/internal/waitfor"
)

// legConn is a leg's end that counts the bytes written on it and, if
// slow is set, takes them at its rate: a leg that takes writes slowly, as
// a policed or lossy flow's full socket does.
type legConn struct {
	*net.TCPConn
	slow    *rate.Limiter
	written atomic.Int64
}

func (c *legConn) Write(b []byte) (int, error) {
	if c.slow != nil {
		if err := c.slow.WaitN(context.Background(), min(len(b), c.slow.Burst())); err != nil {
			return 0, err
		}
	}
	n, err := c.TCPConn.Write(b)
	c.written.Add(int64(n))
	return n, err
}

// addStripes gives the rig's connection, striped of n legs, its n-1
// further legs once the dialer's first leg was accepted, each end
// the first of them (dialer's end) taking slow bytes a second if slow >
// 0, and returns the dialer's ends.
func (r *rig) addStripes(n int, slow float64) []*legConn {
	r.t.Helper()
	waitfor.Must(r.t, 10*time.Second, "the dialer's striping to be granted", func() bool {
		g, now := r.dial.Stripes()
		return g == n && now == 1
	})
	gen := r.dial.Gen()
	var ends []*legConn
	for i := 1; i < n; i++ {
		d, a := r.newLeg()
		lc := &legConn{TCPConn: d}
		if i == 1 && slow > 0 {
			lc.slow = rate.NewLimiter(rate.Limit(slow), stripeFrame+HeaderLen)
		}
		if err := r.acc.AddStripe(a, -1, nil); err != nil {
			r.t.Fatalf("acceptor's stripe %d: %v", i, err)
		}
		if err := r.dial.AddStripe(lc, gen, nil); err != nil {
			r.t.Fatalf("dialer's stripe %d: %v", i, err)
		}
		ends = append(ends, lc)
	}
	if err := r.dial.AddStripe(&legConn{}, gen, nil); !errors.Is(err, ErrNoStripe) {
		r.t.Fatalf("a leg past the %d granted: %v, want ErrNoStripe", n, err)
	}
	return ends
}

type got struct {
	sum [32]byte
	n   int64
	err error
}

func recvTo(c net.Conn) chan got {
	ch := make(chan got, 1)
	go func() { s, n, err := recvAll(c); ch <- got{s, n, err} }()
	return ch
}

// TestStripedBothWays: a connection on 4 legs at once, one of which
// takes writes slowly, carries bytes both ways whole and in order, ends
// in order at both gateways, and the slow leg carries less than the
// others (each leg takes a frame when it takes a write).
func TestStripedBothWays(t *testing.T) {
	cfg := Config{Window: 4 << 20}
	r := newRigStriped(t, cfg, cfg, 4)
	ends := r.addStripes(4, 8e6) // one leg at 8 MB/s
	sent := make(chan error, 2)
	up := send(r.prodApp, 48<<20, sent)
	down := send(r.consApp, 12<<20, sent)
	gc, gp := recvTo(r.consApp), recvTo(r.prodApp)
	c, p := <-gc, <-gp
	if c.err != nil || c.n != 48<<20 || c.sum != up {
		t.Fatalf("consumer got %d bytes (%v), digest match %v", c.n, c.err, c.sum == up)
	}
	if p.err != nil || p.n != 12<<20 || p.sum != down {
		t.Fatalf("producer got %d bytes (%v), digest match %v", p.n, p.err, p.sum == down)
	}
	for range 2 {
		if err := <-sent; err != nil {
			t.Fatal(err)
		}
	}
	if err := <-r.dialErr; err != nil {
		t.Fatalf("dialer: %v", err)
	}
	if err := <-r.accErr; err != nil {
		t.Fatalf("acceptor: %v", err)
	}
	slow, fast := ends[0].written.Load(), max(ends[1].written.Load(), ends[2].written.Load())
	t.Logf("bytes written on the stripes: slow %d, fast %d and %d", slow, ends[1].written.Load(), ends[2].written.Load())
	if fast == 0 || slow >= fast {
		t.Fatalf("the slow leg carried %d bytes, the fast ones at most %d: want the fast ones to carry more", slow, fast)
	}
}

// TestStripeLostResumes: one leg of four is reset under a transfer,
// twice: every leg of the connection is lost with it, the connection
// parks, a new first leg resumes it and the others come back, and
// every byte arrives once, in order.
func TestStripeLostResumes(t *testing.T) {
	cfg := Config{Window: 2 << 20, ResumeWindow: 10 * time.Second}
	r := newRigStriped(t, cfg, cfg, 4)
	r.addStripes(4, 0)
	sent := make(chan error, 2)
	up := send(r.prodApp, 64<<20, sent)
	down := send(r.consApp, 8<<20, sent)
	var cmu sync.Mutex
	var cn int64
	gc := recvTo(&countingConn{Conn: r.consApp, n: &cn, mu: &cmu})
	gp := recvTo(r.prodApp)
	for i := range 2 {
		want := int64(i+1) * (64 << 20) / 3
		waitfor.Must(t, 30*time.Second, "the consumer to read more", func() bool {
			cmu.Lock()
			defer cmu.Unlock()
			return cn >= want
		})
		r.cut() // the last stripe
		waitParked(t, r.dial)
		waitParked(t, r.acc)
		if g, now := r.dial.Stripes(); g != 4 || now != 0 {
			t.Fatalf("parked with %d of %d legs, want none", now, g)
		}
		if err := r.resume(); err != nil {
			t.Fatalf("resume %d: %v", i, err)
		}
		gen := r.dial.Gen()
		for range 3 {
			d, a := r.newLeg()
			if err := r.acc.AddStripe(a, -1, nil); err != nil {
				t.Fatal(err)
			}
			if err := r.dial.AddStripe(d, gen, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	c, p := <-gc, <-gp
	if c.err != nil || c.n != 64<<20 || c.sum != up {
		t.Fatalf("consumer got %d bytes (%v), digest match %v", c.n, c.err, c.sum == up)
	}
	if p.err != nil || p.n != 8<<20 || p.sum != down {
		t.Fatalf("producer got %d bytes (%v), digest match %v", p.n, p.err, p.sum == down)
	}
	if err := <-r.dialErr; err != nil {
		t.Fatalf("dialer: %v", err)
	}
	if err := <-r.accErr; err != nil {
		t.Fatalf("acceptor: %v", err)
	}
	if s := r.dial.Stats(); s.Resumes != 2 {
		t.Fatalf("the dialer resumed %d times, want 2", s.Resumes)
	}
}

// TestStripeLostNoResume: without a resume window, one leg of four
// reset resets both applications: never silence.
func TestStripeLostNoResume(t *testing.T) {
	cfg := Config{Window: 2 << 20}
	r := newRigStriped(t, cfg, cfg, 4)
	r.addStripes(4, 0)
	sent := make(chan error, 1)
	send(r.prodApp, 256<<20, sent)
	var cmu sync.Mutex
	var cn int64
	gc := recvTo(&countingConn{Conn: r.consApp, n: &cn, mu: &cmu})
	waitfor.Must(t, 30*time.Second, "the consumer to read", func() bool {
		cmu.Lock()
		defer cmu.Unlock()
		return cn >= 4<<20
	})
	r.cut()
	if c := <-gc; !errors.Is(c.err, syscall.ECONNRESET) {
		t.Fatalf("the consumer's read ended with %v after %d bytes, want a reset", c.err, c.n)
	}
	if err := <-r.dialErr; err == nil {
		t.Fatal("the dialer ended in order")
	}
	if err := <-r.accErr; err == nil {
		t.Fatal("the acceptor ended in order")
	}
	// The producer, writing, meets the reset there (the kernel reports
	// it once, to the first call).
	if err := <-sent; !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("the producer's writes ended with %v, want a reset", err)
	}
}

// TestStripedFrameOutOfWindow: a striped receiver takes frames out of
// order but none past the window it granted.
func TestStripedFrameOutOfWindow(t *testing.T) {
	cfg := Config{Window: 1 << 20}
	r := newRigStriped(t, cfg, cfg, 2)
	r.addStripes(2, 0)
	r.mu.Lock()
	d := r.legs[len(r.legs)-1][0]
	r.mu.Unlock()
	// A frame from the dialer's side past what the acceptor granted.
	d.Write(AppendHeader(nil, Header{Type: TypeData, Pos: 8 << 20, Length: 4}))
	d.Write([]byte("evil"))
	err := <-r.accErr
	if !errors.Is(err, ErrFrame) {
		t.Fatalf("the acceptor ended with %v, want ErrFrame", err)
	}
}
