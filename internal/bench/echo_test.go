package bench

import (
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// Echo mode: every message comes back whole, one RTT per message, at
// the sizes of the latency comparison (a 1-byte message, one TLS
// record, a large message the path carries in many segments).
func TestRunEcho(t *testing.T) {
	for _, size := range []int{1, 16 << 10, 1 << 20} {
		s := Spec{Size: size, Bytes: 8 * int64(size), Seed: 5, Run: 7}
		r := runOK(t, Hello{Mode: Echo, Spec: s, Pairs: 2}, RunOptions{})
		if q := r.Summary.RTT; q.N != 16 || !(q.P50 > 0 && q.P50 <= q.P99 && q.P99 <= q.Max) {
			t.Fatalf("size %d: RTT %+v, want 16 samples", size, q)
		}
		if r.Summary.Messages != 16 || r.Summary.Bytes != 16*int64(size) {
			t.Fatalf("size %d: verified %d messages, %d bytes", size, r.Summary.Messages, r.Summary.Bytes)
		}
	}
}

// An echo that differs from the message (a path that corrupts the
// return direction only) fails the run as an integrity error, and so
// does a 16-byte rr reply where the whole message was expected (an old
// consumer): the producer times out waiting for the rest, bounded by
// its idle time.
func TestEchoCorruptedOnTheWayBack(t *testing.T) {
	for _, c := range []struct {
		name  string
		reply func(msg []byte) []byte
		want  string
	}{
		{"one byte flipped", func(m []byte) []byte { m[len(m)-1] ^= 1; return m }, "echo differs"},
		{"a short reply", func(m []byte) []byte { return m[:ReplyLen] }, "no progress"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ln := listen(t)
			s := Spec{Size: 1000, Bytes: 4000, Seed: 1, Run: 1}
			done := make(chan struct{})
			go func() {
				defer close(done)
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				defer conn.Close()
				b := make([]byte, HelloLen+HeaderLen+s.Size)
				if _, err := io.ReadFull(conn, b); err != nil {
					return
				}
				conn.Write(c.reply(b[HelloLen:]))
				io.Copy(io.Discard, conn)
			}()
			c1, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
			if err != nil {
				t.Fatal(err)
			}
			defer c1.Close()
			_, err = Send(context.Background(), c1, Hello{Mode: Echo, Spec: s, Pairs: 1}, SendOptions{Idle: 300 * time.Millisecond})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want %q", err, c.want)
			}
			c1.Close()
			<-done
		})
	}
}

// A header that asks for an echo larger than the path can hold while
// the producer is still writing is refused before anything is sent.
func TestEchoSizeBound(t *testing.T) {
	h := Hello{Mode: Echo, Spec: Spec{Size: MaxEchoSize + 1, Bytes: 2 * (MaxEchoSize + 1)}, Pairs: 1}
	if _, err := AppendHello(nil, h); err == nil || !strings.Contains(err.Error(), "echo") {
		t.Fatalf("got %v", err)
	}
	h.Spec = Spec{Size: MaxEchoSize, Bytes: MaxEchoSize}
	b, err := AppendHello(nil, h)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := ParseHello(b); err != nil || got.Mode != Echo || got.Mode.String() != "echo" {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	if m, err := ParseMode("echo"); err != nil || m != Echo || !m.RoundTrips() || Throughput.RoundTrips() {
		t.Fatalf("ParseMode(echo) = %v, %v", m, err)
	}
}
