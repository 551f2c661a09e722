package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"scistream/internal/api"
	"scistream/internal/localgw"
)

// A late consumer loses nothing (issue 13, item 4): the inbound gateway
// holds a producer's connection, unread, while the consumer application
// does not listen yet, and delivers everything once it does; when the
// stream's wait runs out, the producer reads a reset.

// lateAddr reserves an address for a consumer that will listen later: a
// fresh loopback address and a port the kernel gave, free again.
func lateAddr(t *testing.T) (host, port string) {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(localgw.RandomLoopback(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	host, port, _ = net.SplitHostPort(ln.Addr().String())
	return host, port
}

// status returns the stream's view on gateway g, through s2uc status.
func (p *pair) status(g *localgw.Gateway, uid string) api.Stream {
	p.t.Helper()
	out := p.mustS2UC("alice", "status", uid, "--s2cs", g.Addr, "--server_cert", g.CertFile, "--output", "json")
	var st api.Stream
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.Stats == nil {
		p.t.Fatalf("s2uc status output: %v\n%s", err, out)
	}
	return st
}

// statsOn returns a function that reads the stream's counters on g
// through the control API: cheap enough to poll.
func (p *pair) statsOn(g *localgw.Gateway, uid string) func() api.Stats {
	p.t.Helper()
	c, err := g.Client(p.tokens["alice"])
	if err != nil {
		p.t.Fatal(err)
	}
	p.t.Cleanup(c.Close)
	return func() api.Stats {
		p.t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s, err := c.Get(ctx, uid)
		if err != nil || s.Stats == nil {
			p.t.Fatalf("status of %s on %s: %v", uid, g.Addr, err)
		}
		return *s.Stats
	}
}

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n atomic.Int64
}

func (c *countingWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n.Add(int64(n))
	return n, err
}

// TestLateConsumer: the producer connects and sends 64 MiB and its end
// while the consumer application does not listen; the consumer starts
// listening 5 s later and reads every byte, in order, then a clean end,
// and the producer reads the consumer's clean end. Meanwhile the inbound
// gateway read nothing from the WAN and the producer was held back (64
// MiB is more than every socket buffer on the way holds): backpressure,
// not gateway memory. The gateways' default wait (30 s) applies.
func TestLateConsumer(t *testing.T) {
	const total = 64 << 20
	for _, wan := range []string{api.WANTLS, api.WANQUIC} {
		t.Run(wan, func(t *testing.T) {
			p := newPair(t, pairOpts{})
			host, port := lateAddr(t)
			so := p.wire("alice", host, port, 1, "--wan", wan)
			stats := p.statsOn(p.cons, so.UID)
			c, err := dialFrom("", so.Listeners[0])
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(2 * time.Minute))
			type sent struct {
				sum [32]byte
				err error
			}
			done := make(chan sent, 1)
			cw := &countingWriter{w: c}
			go func() {
				h := sha256.New()
				err := writeRandom(io.MultiWriter(h, cw), total, 13)
				if err == nil {
					err = c.CloseWrite()
				}
				var s sent
				copy(s.sum[:], h.Sum(nil))
				s.err = err
				done <- s
			}()
			eventually(t, 20*time.Second, "the inbound gateway to hold the connection for the consumer", func() bool {
				return stats().WaitingConns == 1
			})
			// The consumer starts 5 s after the producer connected and
			// began to send.
			select {
			case s := <-done:
				t.Fatalf("the producer finished sending %d bytes (%v) before any consumer: a gateway buffered them", cw.n.Load(), s.err)
			case <-time.After(5 * time.Second):
			}
			held := cw.n.Load()
			if st := p.status(p.cons, so.UID).Stats; st.BytesFromWAN != 0 || st.WaitingConns != 1 || st.ActiveConns != 0 {
				t.Fatalf("inbound gateway while the consumer is away: %+v; want 1 waiting, nothing read from the WAN", st)
			}
			if held >= total {
				t.Fatalf("the producer wrote all %d bytes before the consumer listened; want it held back", held)
			}
			t.Logf("the producer was held after %d MiB of %d", held>>20, total>>20)
			cons := newSinkAt(t, net.JoinHostPort(host, port), nil)
			r := cons.next(t, 2*time.Minute)
			s := <-done
			if s.err != nil {
				t.Fatalf("producer's send: %v", s.err)
			}
			if r.err != nil || r.n != total || r.sum != s.sum {
				t.Fatalf("consumer read %d bytes (err %v), sha256 match %v; want %d identical bytes, then a clean end", r.n, r.err, r.sum == s.sum, total)
			}
			if b, err := io.ReadAll(c); err != nil || len(b) != 0 {
				t.Fatalf("producer read %d bytes, %v after the consumer closed; want a clean EOF", len(b), err)
			}
			eventually(t, 10*time.Second, "the inbound gateway to end the connection", func() bool {
				st := stats()
				return st.ActiveConns == 0 && st.TotalConns == 1
			})
			if st := stats(); st.AbortedConns != 0 || st.WaitingConns != 0 || st.BytesFromWAN != total {
				t.Fatalf("inbound gateway after the transfer: %+v; want %d bytes relayed, nothing aborted or waiting", st, total)
			}
		})
	}
}

// TestLateConsumerNeverComes: with a wait of 2 s (s2uc --app_wait) and
// no consumer, each producer connection that sent its bytes and its end
// reads a reset, never a clean end; the inbound gateway counts them as
// dial_failed with the reason, and says the outage once in its log.
func TestLateConsumerNeverComes(t *testing.T) {
	p := newPair(t, pairOpts{})
	host, port := lateAddr(t)
	so := p.wire("alice", host, port, 1, "--app_wait", "2s")
	if st := p.status(p.cons, so.UID); st.AppWaitS == nil || *st.AppWaitS != 2 {
		t.Fatalf("the inbound view's app_wait_s is %v, want 2", st.AppWaitS)
	}
	const n = 5
	var cs []*net.TCPConn
	for range n {
		c, err := dialFrom("", so.Listeners[0])
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(time.Minute))
		if _, err := c.Write([]byte("nobody will read this")); err != nil {
			t.Fatal(err)
		}
		c.CloseWrite()
		cs = append(cs, c)
	}
	for i, c := range cs {
		b, err := io.ReadAll(c)
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("producer connection %d read %d bytes, then %v; want a reset (ECONNRESET), never a clean end", i, len(b), err)
		}
	}
	stats := p.statsOn(p.cons, so.UID)
	eventually(t, 10*time.Second, "the inbound gateway to count every abort", func() bool {
		return stats().AbortedByKind[api.EndDialFailed] == n
	})
	// As a user sees it.
	st := p.status(p.cons, so.UID)
	reason := st.Stats.LastErrors[api.EndDialFailed].Reason
	if want := "application " + net.JoinHostPort(host, port) + " not reachable for 2s: "; !strings.Contains(reason, want) || !strings.Contains(reason, "connection refused") {
		t.Fatalf("last dial_failed reason %q; want it to say %q... connection refused", reason, want)
	}
	if st.Stats.WaitingConns != 0 || st.Stats.Errors != n {
		t.Fatalf("inbound gateway after the wait: %+v; want none waiting, %d errors", st.Stats, n)
	}
	if k := strings.Count(p.cons.Log(), "cannot reach the application"); k != 1 {
		t.Fatalf("the inbound gateway said %d times that it cannot reach the application, want once:\n%s", k, p.cons.Log())
	}
}
