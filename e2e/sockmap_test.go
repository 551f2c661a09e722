package e2e

import (
	"bytes"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// The sockmap engine through two real gateways with plaintext TCP WAN
// legs: several connections at once, each byte-identical, each ended by
// a half-close that the consumer answers.
func TestSockmapEngineThroughGateways(t *testing.T) {
	p := newPair(t, pairOpts{args: []string{"--insecure_tcp_wan", "--type", "sockmap"}})
	for _, g := range []string{p.prod.Log(), p.cons.Log()} {
		if !strings.Contains(g, "engine sockmap available") {
			if os.Geteuid() != 0 {
				t.Skipf("the eBPF program needs CAP_BPF:\n%s", g)
			}
			t.Fatalf("gateway did not load the sockmap program:\n%s", g)
		}
	}
	reply := []byte("all received")
	app := newSink(t, "127.0.0.1", reply)
	const conns = 6
	so := p.wire("alice", app.host(), app.port(), conns, "--wan", "tcp")
	size := int64(64 << 20)
	if testing.Short() {
		size = 8 << 20
	}
	var wg sync.WaitGroup
	sums := make([][32]byte, conns)
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := dialFrom("", so.Listeners[i])
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(2 * time.Minute))
			sums[i] = sendRandom(t, c, size+int64(i), uint64(i))
			c.CloseWrite()
			got, err := io.ReadAll(c)
			if err != nil || !bytes.Equal(got, reply) {
				t.Errorf("connection %d: producer read %q, %v; want the consumer's reply", i, got, err)
			}
		}()
	}
	seen := map[int64][32]byte{}
	for range conns {
		r := app.next(t, 2*time.Minute)
		if r.err != nil {
			t.Fatalf("consumer: %v", r.err)
		}
		seen[r.n] = r.sum
	}
	wg.Wait()
	for i := range conns {
		if seen[size+int64(i)] != sums[i] {
			t.Errorf("connection %d: %d bytes not received byte-identical (received lengths: %v)", i, size+int64(i), keys(seen))
		}
	}
	if strings.Contains(p.prod.Log()+p.cons.Log(), "connection aborted") {
		t.Errorf("a connection was aborted:\n%s\n%s", p.prod.Log(), p.cons.Log())
	}
}

// Without the eBPF program (here: --no_sockmap) the gateway says so at
// start and streams asking for sockmap still work, through splice.
func TestSockmapUnavailableUsesSplice(t *testing.T) {
	p := newPair(t, pairOpts{args: []string{"--insecure_tcp_wan", "--type", "sockmap", "--no_sockmap"}})
	for _, g := range []string{p.prod.Log(), p.cons.Log()} {
		if !strings.Contains(g, "engine sockmap unavailable: using splice") {
			t.Fatalf("gateway did not say sockmap is unavailable:\n%s", g)
		}
	}
	app := newSink(t, "127.0.0.1", nil)
	so := p.wire("alice", app.host(), app.port(), 1, "--wan", "tcp")
	c, err := dialFrom("", so.Listeners[0])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sum := sendRandom(t, c, 1<<20, 9)
	c.CloseWrite()
	if r := app.next(t, time.Minute); r.err != nil || r.n != 1<<20 || r.sum != sum {
		t.Fatalf("consumer got %d bytes, %v", r.n, r.err)
	}
	eventually(t, 10*time.Second, "the per-stream notice", func() bool {
		return strings.Contains(p.prod.Log(), "engine sockmap not loaded on this gateway")
	})
}

func keys(m map[int64][32]byte) []int64 {
	var ks []int64
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// With TLS WAN legs the kernel cannot redirect: the stream still works,
// copied in user space, and the gateway says why once.
func TestSockmapWithTLSLegs(t *testing.T) {
	p := newPair(t, pairOpts{args: []string{"--type", "sockmap"}})
	if !strings.Contains(p.prod.Log(), "engine sockmap available") && os.Geteuid() != 0 {
		t.Skip("the eBPF program needs CAP_BPF")
	}
	app := newSink(t, "127.0.0.1", nil)
	so := p.wire("alice", app.host(), app.port(), 1)
	c, err := dialFrom("", so.Listeners[0])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sum := sendRandom(t, c, 4<<20, 11)
	c.CloseWrite()
	if r := app.next(t, time.Minute); r.err != nil || r.n != 4<<20 || r.sum != sum {
		t.Fatalf("consumer got %d bytes, %v", r.n, r.err)
	}
	for _, g := range []string{p.prod.Log(), p.cons.Log()} {
		if n := strings.Count(g, "redirects only between plain TCP sockets"); n != 1 {
			t.Fatalf("notice about TLS legs logged %d times, want once per stream:\n%s", n, g)
		}
	}
}
