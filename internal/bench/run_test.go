package bench

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

func listen(t *testing.T) *net.TCPListener {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

func TestRunDirect(t *testing.T) {
	ln := listen(t)
	// Two runs on the same listener, as s2bench does.
	for run := uint32(1); run <= 2; run++ {
		s := Spec{Size: 64 << 10, Bytes: 8<<20 + 5, Seed: 1, Run: run}
		r, err := Run(context.Background(), ln, ln.Addr().String(), Hello{Spec: s, Group: run}, RunOptions{Timeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		m := r.Summary
		if m.Messages != s.Messages() || m.Bytes != s.Bytes || m.GoodputBps <= 0 || m.LatencyUS <= 0 || m.Pairs != 1 {
			t.Fatalf("%+v", m)
		}
		if p := r.Pairs[0]; p.Recv.Remote != p.Send.Local || p.Send.Messages != s.Messages() {
			t.Fatalf("consumer saw %s, producer was %s", p.Recv.Remote, p.Send.Local)
		}
		if m.GoodputBps != p0(r).GoodputBps || m.JitterUS != p0(r).JitterUS {
			t.Fatalf("one pair: summary %+v differs from the pair's %+v", m, p0(r))
		}
	}
}

// One write per message (an application that sends message by message)
// carries the same verified stream.
func TestRunEachMessage(t *testing.T) {
	ln := listen(t)
	s := Spec{Size: 512, Bytes: 1<<20 + 7, Seed: 4, Run: 9}
	r, err := Run(context.Background(), ln, ln.Addr().String(), Hello{Spec: s, Group: 9}, RunOptions{Timeout: time.Minute, EachMessage: true})
	if err != nil {
		t.Fatal(err)
	}
	if m := r.Summary; m.Messages != s.Messages() || m.Bytes != s.Bytes || r.Pairs[0].Send.Messages != s.Messages() {
		t.Fatalf("%+v", m)
	}
}

// A consumer reading message by message (header, then payload; payloads
// larger than its buffer in several reads), of a fixed amount and of an
// open-ended run, verifies the same stream.
func TestRunReadEach(t *testing.T) {
	for _, c := range []struct {
		name string
		spec Spec
		o    RunOptions
	}{
		{"512B", Spec{Size: 512, Bytes: 1<<20 + 7, Seed: 4, Run: 9}, RunOptions{EachMessage: true}},
		{"4MiB", Spec{Size: 4 << 20, Bytes: 9<<20 + 3, Seed: 5, Run: 10}, RunOptions{}},
		{"open", Spec{Size: 1000, Seed: 6, Run: 11}, RunOptions{Duration: 50 * time.Millisecond, EachMessage: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ln := listen(t)
			c.o.Timeout = time.Minute
			r, err := Run(context.Background(), ln, ln.Addr().String(), Hello{Spec: c.spec, Group: c.spec.Run, ReadEach: true}, c.o)
			if err != nil {
				t.Fatal(err)
			}
			m := r.Summary
			if m.Messages == 0 || m.Messages != r.Pairs[0].Send.Messages || !c.spec.Open() && (m.Messages != c.spec.Messages() || m.Bytes != c.spec.Bytes) {
				t.Fatalf("read message by message: %+v, sent %d messages", m, r.Pairs[0].Send.Messages)
			}
		})
	}
}

// messageReads asks for each message's header, then its payload (in
// buffers), as the wire carries them: two reads per message that fits
// the buffer, one more per further buffer, one for an end marker.
func TestMessageReads(t *testing.T) {
	g, err := NewGenerator(Spec{Size: 100, Seed: 1, Run: 2})
	if err != nil {
		t.Fatal(err)
	}
	var wire []byte
	for seq := range uint64(5) {
		wire = append(wire, g.Message(seq)...)
	}
	wire = append(wire, g.End(5)...)
	for _, c := range []struct{ buf, reads int }{{4096, 5*2 + 1}, {64, 5*3 + 1}} {
		var m messageReads
		var parts []int
		for off := 0; off < len(wire); {
			n := m.want(c.buf)
			if n <= 0 || off+n > len(wire) {
				t.Fatalf("buffer %d: read of %d at offset %d of %d", c.buf, n, off, len(wire))
			}
			m.got(wire[off : off+n])
			parts = append(parts, n)
			off += n
		}
		if len(parts) != c.reads {
			t.Errorf("buffer %d: reads %v; want %d of them", c.buf, parts, c.reads)
		}
	}
}

func p0(r *RunResult) Measure { return r.Pairs[0].Recv.Measure }

// proxy relays one connection to target, passing its bytes through f.
func proxy(t *testing.T, target string, f func(off int64, b []byte)) (addr string, wait func()) {
	t.Helper()
	ln := listen(t)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		a, err := ln.Accept()
		if err != nil {
			return
		}
		defer a.Close()
		b, err := net.Dial("tcp", target)
		if err != nil {
			return
		}
		defer b.Close()
		// The reply direction: forward the consumer's end as a gateway
		// does (a reset as a reset), and close nothing before it ends,
		// or the producer would see its connection end early.
		back := make(chan struct{})
		go func() {
			defer close(back)
			if _, err := io.Copy(a, b); err != nil {
				a.(*net.TCPConn).SetLinger(0)
				a.Close()
				return
			}
			a.(*net.TCPConn).CloseWrite()
		}()
		defer func() { <-back }()
		buf := make([]byte, 32<<10)
		var off int64
		for {
			n, err := a.Read(buf)
			if n > 0 {
				f(off, buf[:n])
				off += int64(n)
				if _, werr := b.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				b.(*net.TCPConn).CloseWrite()
				io.Copy(io.Discard, a)
				return
			}
		}
	}()
	return ln.Addr().String(), wg.Wait
}

func TestRunCatchesCorruptionInTransit(t *testing.T) {
	ln := listen(t)
	s := Spec{Size: 4096, Bytes: 4 << 20, Seed: 2, Run: 3}
	const at = 1 << 20 // a payload byte in the middle of the stream
	addr, wait := proxy(t, ln.Addr().String(), func(off int64, b []byte) {
		if at >= off && at < off+int64(len(b)) {
			b[at-off] ^= 0x20
		}
	})
	r, err := Run(context.Background(), ln, addr, Hello{Spec: s}, RunOptions{Timeout: time.Minute})
	wait()
	if !IsIntegrity(err) {
		t.Fatalf("got %v, want an integrity error", err)
	}
	want := uint64((at - HelloLen) / (HeaderLen + 4096))
	var ie *IntegrityError
	errors.As(err, &ie)
	if ie.Seq != want || !strings.Contains(ie.Problem, "corrupted") {
		t.Fatalf("got %v, want corruption of message %d", err, want)
	}
	if r.Summary.Messages != int64(want) {
		t.Fatalf("verified %d messages before the fault, want %d", r.Summary.Messages, want)
	}
}

func TestRunCatchesLoss(t *testing.T) {
	ln := listen(t)
	s := Spec{Size: 1000, Bytes: 1 << 20, Seed: 2, Run: 3}
	// Drop the data after 100000 bytes: the stream ends early.
	addr, wait := proxy(t, ln.Addr().String(), func(off int64, b []byte) {
		for i := range b {
			if off+int64(i) >= 100000 {
				b[i] = 0
			}
		}
	})
	_, err := Run(context.Background(), ln, addr, Hello{Spec: s}, RunOptions{Timeout: time.Minute})
	wait()
	if !IsIntegrity(err) {
		t.Fatalf("got %v, want an integrity error", err)
	}
}

// A path that accepts the producer but never delivers fails within the
// idle bound, and so does a cancelled context.
func TestRunBounded(t *testing.T) {
	ln := listen(t)
	black := listen(t)
	go func() {
		for {
			c, err := black.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	s := Spec{Size: 1 << 10, Bytes: 1 << 20, Seed: 1, Run: 1}
	start := time.Now()
	_, err := Run(context.Background(), ln, black.Addr().String(), Hello{Spec: s}, RunOptions{Idle: 300 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "no progress") && !strings.Contains(err.Error(), "no connection for") {
		t.Fatalf("got %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("took %v", d)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Run(ctx, ln, black.Addr().String(), Hello{Spec: s}, RunOptions{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: got %v", err)
	}
}

// Cancelling the context while data flows ends the run at once.
func TestRunCancelledMidStream(t *testing.T) {
	ln := listen(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := Spec{Size: 64 << 10, Bytes: 1 << 40, Seed: 1, Run: 1} // far more than will flow
	addr, wait := proxy(t, ln.Addr().String(), func(off int64, b []byte) {
		if off >= 8<<20 {
			cancel()
		}
	})
	r, err := Run(ctx, ln, addr, Hello{Spec: s}, RunOptions{})
	wait()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	if m := r.Summary.Messages; m == 0 || m >= s.Messages() {
		t.Fatalf("verified %d messages", m)
	}
}

// TestRunDial: RunOptions.Dial connects every producer (the testbed dials
// from another network namespace); here it binds a source address, which
// the consumer must see on every pair.
func TestRunDial(t *testing.T) {
	ln := listen(t)
	src := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}
	var (
		mu    sync.Mutex
		calls int
	)
	dial := func(ctx context.Context, addr string) (*net.TCPConn, error) {
		mu.Lock()
		calls++
		mu.Unlock()
		d := net.Dialer{LocalAddr: src}
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return c.(*net.TCPConn), nil
	}
	s := Spec{Size: 4 << 10, Bytes: 1 << 20, Seed: 3, Run: 7}
	r, err := Run(context.Background(), ln, ln.Addr().String(), Hello{Spec: s, Group: 7, Pairs: 3}, RunOptions{Timeout: time.Minute, Dial: dial})
	if err != nil {
		t.Fatal(err)
	}
	if calls != 3 {
		t.Errorf("Dial called %d times, want 3 (one per pair)", calls)
	}
	for i, p := range r.Pairs {
		host, _, _ := net.SplitHostPort(p.Recv.Remote)
		if host != src.IP.String() || p.Recv.Measure.Bytes != s.Bytes {
			t.Errorf("pair %d: consumer saw %s and %d bytes, want %s and %d", i, p.Recv.Remote, p.Recv.Measure.Bytes, src.IP, s.Bytes)
		}
	}
}
