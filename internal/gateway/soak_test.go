package gateway

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"scistream/internal/api"
	"scistream/internal/auth"
	"scistream/internal/bench"
	"scistream/internal/client"
	"scistream/internal/waitfor"
)

// TestSoak creates, uses and releases streams one after another through
// two gateways, over real TLS legs and relays (2,000 of them; 200 with
// -short), and checks the gateways end where they started: goroutines,
// descriptors and memory.
func TestSoak(t *testing.T) {
	n := 2000
	if testing.Short() {
		n = 200
	}
	tokens, err := auth.ParseTokens(strings.NewReader(auth.HashToken(aliceToken) + " alice\n"))
	if err != nil {
		t.Fatal(err)
	}
	// Warnings only: a debug line per connection would be most of the
	// work. A stream released in order is no alarm: none may appear.
	var warns logLines
	warnings := func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(&warns, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	prod, cons := startGW(t, tokens, warnings), startGW(t, tokens, warnings)
	waitReady(t, prod)
	waitReady(t, cons)
	app, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	go func() { // the application: echoes what it reads, then ends in order
		for {
			c, err := app.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
				c.(*net.TCPConn).CloseWrite()
			}()
		}
	}()
	in, _ := client.New(client.Config{Addr: cons.addr, ServerCert: cons.cert, Token: aliceToken})
	out, _ := client.New(client.Config{Addr: prod.addr, ServerCert: prod.cert, Token: aliceToken})
	defer in.Close()
	defer out.Close()
	ctx := context.Background()
	msg := []byte("one stream's worth of bytes")
	one := func(i int) {
		inS, outS, err := client.Wire(ctx, in, out,
			&api.InboundRequest{RemoteIP: "127.0.0.1", ReceiverPorts: []int{app.Addr().(*net.TCPAddr).Port}, NumConn: 1},
			api.OutboundRequest{NumConn: 1, Allow: []string{"127.0.0.0/8"}}, nil)
		if err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
		c, err := net.Dial("tcp", outS.Listeners[0])
		if err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
		c.SetDeadline(time.Now().Add(30 * time.Second))
		c.Write(msg)
		c.(*net.TCPConn).CloseWrite()
		got, err := io.ReadAll(c)
		c.Close()
		if err != nil || string(got) != string(msg) {
			t.Fatalf("stream %d: echoed %q, %v", i, got, err)
		}
		for _, cl := range []*client.Client{out, in} {
			if _, err := cl.Release(ctx, inS.UID); err != nil {
				t.Fatalf("stream %d: release on %s: %v", i, cl.Addr(), err)
			}
		}
	}
	settled := func() (goroutines, fds int, heap, rss uint64) {
		in.Close()
		out.Close()
		waitfor.Cond(10*time.Second, func() bool { return prod.srv.alloc.InUse() == 0 && cons.srv.alloc.InUse() == 0 })
		debug.FreeOSMemory() // a GC, and freed memory back to the system
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		ents, _ := os.ReadDir("/proc/self/fd")
		return runtime.NumGoroutine(), len(ents), m.HeapInuse + m.StackInuse, selfRSS()
	}
	for i := range 20 { // warm up: pools, caches, the clients' connections
		one(i)
	}
	g0, fd0, mem0, rss0 := settled()
	start := time.Now()
	for i := range n {
		one(i)
	}
	took := time.Since(start)
	var g1, fd1 int
	var mem1, rss1 uint64
	waitfor.Cond(30*time.Second, func() bool {
		g1, fd1, mem1, rss1 = settled()
		return g1 <= g0 && fd1 <= fd0
	})
	t.Logf("%d streams in %s (%.1f ms each); goroutines %d -> %d, descriptors %d -> %d, heap and stacks %.1f -> %.1f MB, RSS %.1f -> %.1f MB",
		n, took.Round(time.Millisecond), took.Seconds()*1000/float64(n), g0, g1, fd0, fd1, float64(mem0)/1e6, float64(mem1)/1e6, float64(rss0)/1e6, float64(rss1)/1e6)
	if g1 > g0 || fd1 > fd0 {
		t.Errorf("after %d streams: goroutines %d -> %d, descriptors %d -> %d", n, g0, g1, fd0, fd1)
	}
	if mem1 > mem0+8<<20 {
		t.Errorf("after %d streams the heap and stacks grew from %.1f to %.1f MB", n, float64(mem0)/1e6, float64(mem1)/1e6)
	}
	// Both gateways and the test's clients live in this process; the
	// runtime keeps some memory mapped, so RSS gets a wider margin. The
	// race detector's shadow memory grows with every goroutine that ever
	// ran: with -race only the heap and stacks say anything.
	if !raceEnabled && rss1 > rss0+16<<20 {
		t.Errorf("after %d streams the process's RSS grew from %.1f to %.1f MB", n, float64(rss0)/1e6, float64(rss1)/1e6)
	}
	for _, g := range []*testGW{prod, cons} {
		if live := len(g.srv.live()); live != 0 {
			t.Errorf("%d streams still live", live)
		}
	}
	if w := warns.String(); w != "" {
		t.Errorf("warnings while streams were created and released in order:\n%s", w)
	}
}

// selfRSS returns this process's resident memory in bytes, 0 if unknown.
func selfRSS() uint64 {
	rss, _ := bench.ProcessRSS(os.Getpid())
	return uint64(rss)
}
