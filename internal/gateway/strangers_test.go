package gateway

import (
	"errors"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"scistream/internal/api"
	"scistream/internal/store"
	"scistream/internal/strangers"
	"scistream/internal/waitfor"
)

// TestSilentStrangerCost: a WAN connection that opens and says nothing
// costs the gateway at most 8 KiB (heap and goroutine stack) while it
// waits for its handshake deadline.
func TestSilentStrangerCost(t *testing.T) {
	const n = 2000
	s := newTestServer(t, func(c *Config) {
		c.Strangers = strangers.Limits{PerListener: 2 * n, PerSource: 2 * n, Total: 2 * n}
	})
	var st api.Stream
	callOK(t, s, "POST", "/v1/streams/inbound", aliceToken, inboundBody(9), 201, &st)
	in := func() int {
		return s.strange.InHandshake()
	}
	measure := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapInuse + m.StackInuse
	}
	before := measure()
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range n {
		c, err := net.Dial("tcp", st.Listeners[0])
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	waitfor.Must(t, 30*time.Second, "every stranger to be in its handshake", func() bool { return in() == n })
	// The test's own connections count too (a net.Conn each, about
	// 0.5 KiB): the bound holds with them.
	per := float64(measure()-before) / n
	t.Logf("%d silent strangers: %.1f KiB each (heap and stacks of both ends)", n, per/1024)
	// The bound is 16 KiB. This design costs about 5 (the
	// goroutine waits for the first byte before any TLS state exists);
	// starting the handshake at once costs about 13, which 8 refuses.
	// The race detector's instrumentation adds its own: 5 to 9 KiB here,
	// depending on what the process ran before (a second run in one
	// process reads 8.5); 11 still refuses the handshake at once, which
	// costs more under it too.
	bound := 8.0
	if raceEnabled {
		bound = 11
	}
	if per > bound*1024 {
		t.Errorf("a silent stranger costs %.1f KiB, want at most %.0f", per/1024, bound)
	}
	for _, c := range conns {
		c.Close()
	}
	waitfor.Must(t, 30*time.Second, "the strangers to be gone", func() bool { return in() == 0 })
}

// TestStrangerCaps: a flood from strangers is refused over the caps, and
// counted by reason in one summary line per interval, never a line per
// connection; a source the peer authenticated from is not capped.
func TestStrangerCaps(t *testing.T) {
	var logs logLines
	clk := &clock{t: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)}
	s := newTestServer(t, func(c *Config) {
		c.Strangers = strangers.Limits{PerListener: 8, PerSource: 4, Total: 100}
		c.Now = clk.Now
		c.Logger = logs.logger()
	})
	var st api.Stream
	callOK(t, s, "POST", "/v1/streams/inbound", aliceToken, inboundBody(9), 201, &st)
	refused := func(from string, k int) int { return refusedOf(t, st.Listeners[0], from, k) }
	if got := refused("127.0.0.61", 10); got != 6 { // per source: 4 held, 6 refused
		t.Fatalf("10 strangers from one source, a cap of 4: %d refused, want 6", got)
	}
	if got := refused("127.0.0.62", 10); got != 6 { // per listener: 8 in all, so 4 more held
		t.Fatalf("10 more from another source, a listener cap of 8: %d refused, want 6", got)
	}
	// The peer's address, once it authenticated, is not capped.
	peer := &net.TCPAddr{IP: net.ParseIP("127.0.0.63")}
	s.mu.Lock()
	s.streams[store.Key{Owner: "alice", UID: st.UID}].Trusted.Add(peer, time.Now())
	s.mu.Unlock()
	if got := refused("127.0.0.63", 3); got != 0 {
		t.Fatalf("the peer's address was refused %d times over the strangers' caps", got)
	}
	s.sweep(clk.Add(strangers.SummaryInterval), clk.Now())
	if n := logs.count("refused "); n != 1 {
		t.Fatalf("%d refusal lines, want one summary:\n%s", n, logs.String())
	}
	if !logs.has("refused 12 connections in the last 10s") || !logs.has("12 "+strangers.ReasonCap) {
		t.Fatalf("summary line does not count the 12 refusals by reason:\n%s", logs.String())
	}
	if logs.count("level=WARN") != 1 {
		t.Fatalf("refusals logged at warn one by one:\n%s", logs.String())
	}
}

func isTimeoutErr(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// logLines collects a server's log lines.
type logLines struct {
	mu sync.Mutex // guards b
	b  strings.Builder
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// logger returns a logger at info level that writes to l.
func (l *logLines) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

func (l *logLines) count(s string) int { return strings.Count(l.String(), s) }
func (l *logLines) has(s string) bool  { return strings.Contains(l.String(), s) }

// refusedOf opens k connections to addr from the source address from,
// and returns how many the gateway reset (during the connect, or at once
// after it); the others stay open until the test ends.
func refusedOf(t *testing.T, addr, from string, k int) int {
	t.Helper()
	n := 0
	for range k {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			if !errors.Is(err, syscall.ECONNRESET) {
				t.Fatal(err)
			}
			n++
			continue
		}
		t.Cleanup(func() { c.Close() })
		c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); err != nil && !isTimeoutErr(err) {
			n++
		}
	}
	return n
}

// TestTrustBounded (issue 25, finding 2): a source trusted because a leg
// of the attacker's own stream authenticated from it holds at most its
// share of the trusted pool and a stranger's share, not every slot: a
// flood of silent connections from it is reset past that, and another
// user's peer still gets in.
func TestTrustBounded(t *testing.T) {
	const flood = 1100
	s := newTestServer(t, nil) // the default limits: 128 per source, 1,024 in all, 256 trusted
	var own, other api.Stream
	callOK(t, s, "POST", "/v1/streams/inbound", aliceToken, inboundBody(9), 201, &own)
	callOK(t, s, "POST", "/v1/streams/inbound", bobToken, inboundBody(9), 201, &other)
	s.mu.Lock()
	st := s.streams[store.Key{Owner: "alice", UID: own.UID}]
	s.mu.Unlock()
	st.Trusted.Add(&net.TCPAddr{IP: net.ParseIP("127.0.0.81")}, time.Now())
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.81")}}
	conns := make([]net.Conn, 0, flood)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range flood {
		c, err := d.Dial("tcp", own.Listeners[0])
		if err != nil {
			if errors.Is(err, syscall.ECONNRESET) {
				continue // reset before the connect returned
			}
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	held := func() int {
		return s.strange.InHandshake()
	}
	const want = 128 + 128 // its trusted share, and a stranger's per source
	waitfor.Must(t, 30*time.Second, "every connection of the flood to be admitted or reset", func() bool {
		return int(st.Refused.HandshakeCap.Load())+held() == flood
	})
	if got := held(); got != want {
		t.Fatalf("a trusted source held %d of %d silent connections in their handshake, want %d", got, flood, want)
	}
	// Bob's peer, a stranger so far, is not reset.
	if got := refusedOf(t, other.Listeners[0], "127.0.0.82", 1); got != 0 {
		t.Fatal("another user's peer was reset while the trusted source flooded")
	}
}
