package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"hash/crc32"
	"math"
	"net"
	"strings"
	"testing"
	"time"
)

func TestHelloRoundTrip(t *testing.T) {
	for _, h := range []Hello{
		{Mode: Throughput, Spec: Spec{Size: 512, Bytes: 1 << 20, Seed: 7, Run: 9}, Group: 3, Pairs: 1, Path: "direct"},
		{Mode: RequestReply, Spec: Spec{Size: 1 << 20, Bytes: 0, Seed: math.MaxUint64, Run: math.MaxUint32}, Group: 1, Pairs: 64, Pair: 63, Rate: 1234.5, Path: "gateways"},
		{Mode: Throughput, Spec: Spec{Size: 1, Bytes: 1}, Pairs: 2, Pair: 1, Path: "0123456789abcdef"},
		{Mode: Throughput, Spec: Spec{Size: 512, Bytes: 0, Seed: 1, Run: 2}, Pairs: 1, Path: "gateways", ReadEach: true},
	} {
		b, err := AppendHello(nil, h)
		if err != nil {
			t.Fatalf("%+v: %v", h, err)
		}
		if len(b) != HelloLen {
			t.Fatalf("encoded %d bytes", len(b))
		}
		got, err := ParseHello(b)
		if err != nil || got != h {
			t.Fatalf("round trip of %+v: got %+v, %v", h, got, err)
		}
		// Every single-bit flip is refused.
		for i := range b {
			for bit := range 8 {
				d := bytes.Clone(b)
				d[i] ^= 1 << bit
				if _, err := ParseHello(d); err == nil {
					t.Fatalf("flip of bit %d of byte %d accepted", bit, i)
				}
			}
		}
	}
	for _, bad := range []Hello{
		{Spec: Spec{Size: 10, Bytes: 5}, Pairs: 1},
		{Spec: Spec{Size: 10, Bytes: 10}, Pairs: 0},
		{Spec: Spec{Size: 10, Bytes: 10}, Pairs: MaxPairs + 1},
		{Spec: Spec{Size: 10, Bytes: 10}, Pairs: 2, Pair: 2},
		{Spec: Spec{Size: 10, Bytes: 10}, Pairs: 1, Rate: math.NaN()},
		{Spec: Spec{Size: 10, Bytes: 10}, Pairs: 1, Mode: 7},
		{Spec: Spec{Size: 10, Bytes: 10}, Pairs: 1, Path: "two words"},
		{Spec: Spec{Size: 10, Bytes: 10}, Pairs: 1, Path: strings.Repeat("x", 17)},
		{Spec: Spec{Size: 10, Bytes: 10}, Pairs: 1, Mode: Echo, ReadEach: true},
	} {
		if _, err := AppendHello(nil, bad); err == nil {
			t.Errorf("%+v: encoded", bad)
		}
	}
	// A flag this s2bench does not know, under a valid checksum.
	b, _ := AppendHello(nil, Hello{Spec: Spec{Size: 10, Bytes: 10}, Pairs: 1})
	b[11] = 0x80
	binary.BigEndian.PutUint32(b[64:], crc32.Checksum(b[:64], castagnoli))
	if _, err := ParseHello(b); err == nil || !strings.Contains(err.Error(), "unknown flags") {
		t.Errorf("unknown flags: got %v", err)
	}
	if _, err := ParseHello([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n" + strings.Repeat(" ", 60))); err != ErrNotHello {
		t.Errorf("HTTP request: got %v", err)
	}
}

func FuzzParseHello(f *testing.F) {
	b, _ := AppendHello(nil, Hello{Spec: Spec{Size: 16 << 10, Bytes: 1 << 30, Seed: 1, Run: 2}, Pairs: 4, Pair: 1, Path: "gateways"})
	f.Add(b)
	f.Add(make([]byte, HelloLen))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ParseHello(b)
		if err != nil {
			return
		}
		if h.Validate() != nil {
			t.Fatalf("accepted an invalid header %+v", h)
		}
		e, err := AppendHello(nil, h)
		if err != nil || !bytes.Equal(e, b[:HelloLen]) {
			t.Fatalf("re-encoding differs: %v", err)
		}
	})
}

// Open-ended runs: the end marker carries the count, so a stream cut at
// a message boundary, a lost or duplicated message before the marker, and
// a corrupted marker are all caught.
func TestVerifierOpenEnded(t *testing.T) {
	s := Spec{Size: 100, Seed: 4, Run: 5}
	g, err := NewGenerator(s)
	if err != nil {
		t.Fatal(err)
	}
	var ms [][]byte
	for seq := range uint64(6) {
		ms = append(ms, bytes.Clone(g.Message(seq)))
	}
	end := func(n uint64) []byte { return bytes.Clone(g.End(n)) }
	cases := []struct {
		name    string
		data    []byte
		problem string // "" = valid
	}{
		{"complete", join(append(ms[:6:6], end(6))), ""},
		{"empty run", end(0), ""},
		{"cut at a message boundary", join(ms[:4]), "without the end marker"},
		{"lost message before the marker", join(append(ms[:5:5], end(6))), "end marker says 6"},
		{"duplicated message", join(append(append(ms[:6:6], ms[5]), end(6))), "duplicate"},
		{"marker of another count", join(append(ms[:6:6], end(7))), "end marker says 7"},
		{"corrupted marker", join(append(ms[:6:6], func() []byte { e := end(6); e[23] ^= 1; return e }())), "corrupted end marker"},
		{"bytes after the marker", append(join(append(ms[:6:6], end(6))), 1), "after the end marker"},
	}
	for _, c := range cases {
		v, err := NewVerifier(s)
		if err != nil {
			t.Fatal(err)
		}
		err = v.Feed(c.data, 0)
		if err == nil {
			err = v.Finish()
		}
		switch {
		case c.problem == "" && (err != nil || !v.Done() || v.Messages() != int64(len(c.data)/124)):
			t.Errorf("%s: %v (done %v, %d messages)", c.name, err, v.Done(), v.Messages())
		case c.problem != "" && (!IsIntegrity(err) || !strings.Contains(err.Error(), c.problem)):
			t.Errorf("%s: got %v, want an integrity error about %q", c.name, err, c.problem)
		}
	}
	// The marker of an open-ended run is foreign data in a fixed run.
	fixed := Spec{Size: 100, Bytes: 600, Seed: 4, Run: 5}
	v, _ := NewVerifier(fixed)
	if err := v.Feed(join(append(ms[:5:5], end(5))), 0); !IsIntegrity(err) || !strings.Contains(err.Error(), "bad magic") {
		t.Errorf("marker in a fixed run: %v", err)
	}
}

func runOK(t *testing.T, h Hello, o RunOptions) *RunResult {
	t.Helper()
	ln := listen(t)
	if o.Timeout == 0 {
		o.Timeout = time.Minute
	}
	r, err := Run(context.Background(), ln, ln.Addr().String(), h, o)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Four pairs, each its own connection and run tag, aggregate into one
// summary whose totals are the pairs' sums.
func TestRunPairs(t *testing.T) {
	s := Spec{Size: 4 << 10, Bytes: 1 << 20, Seed: 3, Run: 100}
	r := runOK(t, Hello{Spec: s, Pairs: 4, Group: 42, Path: "direct"}, RunOptions{})
	var msgs int64
	for i, p := range r.Pairs {
		if p.Recv == nil || p.Send == nil || p.Recv.Hello.Pair != i || p.Recv.Hello.Spec.Run != 100+uint32(i) {
			t.Fatalf("pair %d: %+v", i, p)
		}
		if p.Recv.Measure.Bytes != s.Bytes || p.Send.Bytes != s.Bytes || p.Recv.Remote != p.Send.Local {
			t.Fatalf("pair %d: received %d, sent %d bytes", i, p.Recv.Measure.Bytes, p.Send.Bytes)
		}
		msgs += p.Recv.Measure.Messages
	}
	if m := r.Summary; m.Pairs != 4 || m.Bytes != 4*s.Bytes || m.Messages != msgs || m.GoodputBps <= 0 {
		t.Fatalf("summary %+v", m)
	}
}

// Request-reply: one RTT per message, consistent percentiles.
func TestRunRequestReply(t *testing.T) {
	s := Spec{Size: 1 << 10, Bytes: 200 << 10, Seed: 3, Run: 1}
	r := runOK(t, Hello{Mode: RequestReply, Spec: s, Pairs: 2}, RunOptions{})
	q := r.Summary.RTT
	if q.N != 400 || len(r.Pairs[0].Send.RTT) != 200 {
		t.Fatalf("%d RTT samples, want 400", q.N)
	}
	if !(q.P50 > 0 && q.P50 <= q.P90 && q.P90 <= q.P99 && q.P99 <= q.Max) {
		t.Fatalf("RTT %+v", q)
	}
	if r.Summary.Messages != 400 {
		t.Fatalf("%d messages verified", r.Summary.Messages)
	}
}

// A paced run keeps to its schedule: n messages at rate r cannot finish
// before (n-1)/r, and an open-ended run stops at its duration with an
// end marker the consumer accepts.
func TestRunPacedAndOpenEnded(t *testing.T) {
	s := Spec{Size: 1 << 10, Bytes: 100 << 10, Seed: 3, Run: 1}
	r := runOK(t, Hello{Spec: s, Pairs: 1, Rate: 1000}, RunOptions{})
	if e := r.Pairs[0].Send.Elapsed; e < 99*time.Millisecond {
		t.Fatalf("100 messages at 1000/s sent in %v", e)
	}
	if r.Summary.Messages != 100 {
		t.Fatalf("%d messages", r.Summary.Messages)
	}

	open := Spec{Size: 512, Seed: 3, Run: 2}
	r = runOK(t, Hello{Spec: open, Pairs: 2, Rate: 2000}, RunOptions{Duration: 150 * time.Millisecond})
	for i, p := range r.Pairs {
		if p.Send.Messages == 0 || p.Recv.Measure.Messages != p.Send.Messages || p.Send.Messages > 301 {
			t.Fatalf("pair %d: sent %d, verified %d messages in 150ms at 2000/s", i, p.Send.Messages, p.Recv.Measure.Messages)
		}
	}
}

// A connection whose header names another run, or a pair index already
// seen, is refused, and the run fails.
func TestRunRefusesForeignConnections(t *testing.T) {
	ln := listen(t)
	s := Spec{Size: 1 << 10, Bytes: 64 << 10, Seed: 1, Run: 1}
	// An intruder connects first with a header of another group.
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b, _ := AppendHello(nil, Hello{Spec: s, Pairs: 1, Group: 99})
	c.Write(b)
	_, err = Run(context.Background(), ln, ln.Addr().String(), Hello{Spec: s, Pairs: 1, Group: 1}, RunOptions{Timeout: 20 * time.Second, Idle: 2 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "another run") {
		t.Fatalf("got %v", err)
	}
}

// The consumer's result frame reaches the producer with what the
// consumer measured; RunRemote reports it as the pair's consumer side.
func TestRunRemoteUsesConsumerResults(t *testing.T) {
	ln := listen(t)
	s := Spec{Size: 2 << 10, Bytes: 1 << 20, Seed: 8, Run: 40}
	h := Hello{Spec: s, Pairs: 2, Group: 40}
	epoch := time.Now()
	done := make(chan []*ReceiveResult, 1)
	go func() { // a consumer "elsewhere": Receive on each connection
		var out []*ReceiveResult
		for range 2 {
			c, err := ln.AcceptTCP()
			if err != nil {
				break
			}
			r, err := Receive(context.Background(), c, ReceiveOptions{Epoch: epoch})
			if err != nil {
				t.Error(err)
			}
			out = append(out, r)
		}
		done <- out
	}()
	r, err := RunRemote(context.Background(), ln.Addr().String(), h, RunOptions{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	local := <-done
	for i, p := range r.Pairs {
		if p.Recv == nil || p.Recv.Measure.Bytes != s.Bytes || p.Recv.Remote != p.Send.Local || p.Recv.GoodputBps <= 0 {
			t.Fatalf("pair %d: consumer side %+v", i, p.Recv)
		}
	}
	var sum int64
	for _, l := range local {
		sum += l.Measure.Messages
	}
	if r.Summary.Messages != sum || r.Summary.Bytes != 2*s.Bytes || r.Summary.GoodputBps <= 0 {
		t.Fatalf("summary %+v, consumer verified %d messages", r.Summary, sum)
	}
}

func TestResultFrame(t *testing.T) {
	in := &ReceiveResult{Remote: "127.0.0.1:5", Measure: Measure{Messages: 3, Bytes: 300, GoodputBps: 1e6, LatencyUS: 2, JitterUS: 1},
		First: 10, Last: 30, FirstPayload: 100}
	f, err := appendResult(nil, in)
	if err != nil {
		t.Fatal(err)
	}
	got, err := parseResult(f)
	if err != nil || got.Remote != in.Remote || got.Measure.Messages != 3 || got.First != 10 || got.Last != 30 || got.Span != 20 || got.GoodputBps != 1e6 {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	for i := range f {
		d := bytes.Clone(f)
		d[i] ^= 0x08
		if _, err := parseResult(d); err == nil {
			t.Fatalf("flip in byte %d accepted", i)
		}
	}
}

func FuzzParseResult(f *testing.F) {
	b, _ := appendResult(nil, &ReceiveResult{Remote: "x", Measure: Measure{Messages: 1, Bytes: 1}, First: 1, Last: 2})
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := parseResult(b)
		if err == nil && (r.Last < r.First || r.Measure.Messages < 0) {
			t.Fatalf("accepted inconsistent %+v", r)
		}
	})
}
