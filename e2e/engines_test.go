package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"scistream/internal/api"
	"scistream/internal/client"
	"scistream/internal/localgw"
)

// The correctness suite every data-plane configuration passes, through the
// real s2cs and s2uc binaries: a gigabyte byte-identical, half-close, many
// concurrent connections on one stream, an application that dies in the
// middle of a transfer, and a release in the middle of a transfer.

// engineConfig is one data-plane configuration: the engine both gateways
// run by default (s2cs --type) and the stream's WAN transport (s2uc --wan).
type engineConfig struct{ engine, wan string }

func (c engineConfig) String() string { return c.engine + "-" + c.wan }

var engineConfigs = []engineConfig{
	{"splice", "tls"},
	{"buffer", "tls"},
	{"splice", "tcp"},
	{"buffer", "tcp"},
	{"sockmap", "tcp"},
	{"splice", "quic"},
}

// TestEngineSuite runs the five checks for every configuration, on one
// gateway pair per configuration; each check opens its own stream (and its
// own consumer applications), so a failed check leaves nothing behind that
// the next one could read.
func TestEngineSuite(t *testing.T) {
	for _, cfg := range engineConfigs {
		t.Run(cfg.String(), func(t *testing.T) {
			e := newEngineEnv(t, cfg)
			t.Run("gigabyte", e.gigabyte)
			t.Run("half-close", e.halfClose)
			t.Run("many-connections", e.manyConnections)
			t.Run("peer-death", e.peerDeath)
			t.Run("release-mid-transfer", e.releaseMidTransfer)
			if cfg.engine == "sockmap" {
				e.kernelRedirected(t)
			}
		})
	}
}

// engineEnv is a configuration's gateway pair and control clients.
type engineEnv struct {
	cfg        engineConfig
	p          *pair
	prod, cons *client.Client
}

func newEngineEnv(t *testing.T, cfg engineConfig) *engineEnv {
	t.Helper()
	args := []string{"--type", cfg.engine}
	if cfg.wan == "tcp" {
		args = append(args, "--insecure_tcp_wan")
	}
	p := newPair(t, pairOpts{args: args})
	if cfg.engine == "sockmap" {
		for _, g := range []string{p.prod.Log(), p.cons.Log()} {
			if strings.Contains(g, "engine sockmap available") {
				continue
			}
			if os.Geteuid() != 0 {
				t.Skipf("the sockmap engine loads an eBPF program, which needs root (CAP_BPF, CAP_NET_ADMIN); running as uid %d", os.Geteuid())
			}
			t.Skipf("running as root, but the gateway could not load the sockmap program: %s", logLine(g, "engine sockmap unavailable"))
		}
	}
	e := &engineEnv{cfg: cfg, p: p}
	var err error
	if e.prod, err = p.prod.Client(p.tokens["alice"]); err != nil {
		t.Fatal(err)
	}
	if e.cons, err = p.cons.Client(p.tokens["alice"]); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.prod.Close(); e.cons.Close() })
	return e
}

// kernelRedirected stops the gateways and checks, from the totals each
// logs at exit, that the kernel redirected bytes: the sockmap
// configuration did not quietly run in user space.
func (e *engineEnv) kernelRedirected(t *testing.T) {
	t.Helper()
	for _, g := range []*localgw.Gateway{e.p.prod, e.p.cons} {
		if err := g.Stop(); err != nil {
			t.Fatalf("stop gateway: %v", err)
		}
		line := logLine(g.Log(), "sockmap totals")
		m := regexp.MustCompile(`kernel_bytes=(\d+)`).FindStringSubmatch(line)
		if m == nil || m[1] == "0" {
			t.Errorf("the sockmap gateway's kernel redirected no bytes: %s", line)
		} else {
			t.Logf("%s", line)
		}
	}
}

// logLine returns the first line of log containing s.
func logLine(log, s string) string {
	for l := range strings.Lines(log) {
		if strings.Contains(l, s) {
			return strings.TrimSpace(l)
		}
	}
	return fmt.Sprintf("(no line with %q in the log)", s)
}

// testStream is a stream opened by one check. Listener i leads to plain
// (even i), a consumer that reads to EOF and closes, or to reply (odd i),
// one that reads to EOF, then writes replyData and closes.
type testStream struct {
	streamOut
	plain, reply *sink
	replyData    []byte
}

// open wires a stream of numConn channels with the configuration's WAN
// transport and checks both gateways run the configuration's engine.
func (e *engineEnv) open(t *testing.T, numConn int) *testStream {
	t.Helper()
	var reply bytes.Buffer
	if err := writeRandom(&reply, 256<<10, 99); err != nil {
		t.Fatal(err)
	}
	s := &testStream{replyData: reply.Bytes()}
	s.plain = newSink(t, "127.0.0.1", nil)
	s.reply = newSink(t, "127.0.0.1", s.replyData)
	s.streamOut = e.p.on(t).wire("alice", "127.0.0.1", s.plain.port()+","+s.reply.port(), numConn, "--wan", e.cfg.wan)
	if s.Inbound.Engine != e.cfg.engine || s.Outbound.Engine != e.cfg.engine {
		t.Fatalf("stream engines inbound %q, outbound %q; want %s", s.Inbound.Engine, s.Outbound.Engine, e.cfg.engine)
	}
	return s
}

// sinkFor is the consumer application behind listener i.
func (s *testStream) sinkFor(i int) *sink {
	if i%2 == 0 {
		return s.plain
	}
	return s.reply
}

// finish half-closes c and reads what the consumer behind listener i sends
// back before its EOF: nothing for plain, replyData for reply.
func (s *testStream) finish(c interface {
	CloseWrite() error
	io.Reader
}, i int) error {
	if err := c.CloseWrite(); err != nil {
		return err
	}
	got, err := io.ReadAll(c)
	if err != nil {
		return fmt.Errorf("after %d bytes of the consumer's answer: %w", len(got), err)
	}
	var want []byte
	if i%2 == 1 {
		want = s.replyData
	}
	if !bytes.Equal(got, want) {
		return fmt.Errorf("read %d bytes before EOF, want the consumer's %d", len(got), len(want))
	}
	return nil
}

// stats returns the stream's counters on the producer's and the consumer's
// gateway.
func (e *engineEnv) stats(t *testing.T, uid string) (prod, cons api.Stats) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, side := range []struct {
		c  *client.Client
		st *api.Stats
	}{{e.prod, &prod}, {e.cons, &cons}} {
		s, err := side.c.Get(ctx, uid)
		if err != nil {
			t.Fatalf("status of %s on %s: %v", uid, side.c.Addr(), err)
		}
		if s.Stats != nil {
			*side.st = *s.Stats
		}
	}
	return prod, cons
}

// settled waits until neither gateway relays a connection of the stream
// any more, then checks each counted wantConns connections and aborted
// exactly wantAborted of them, each by the consumer's reset (app_reset on
// the consumer's gateway, peer_reset on the producer's) and none as an
// error of the gateways: nothing else was disturbed.
func (e *engineEnv) settled(t *testing.T, uid string, wantConns, wantAborted int64) {
	t.Helper()
	var prod, cons api.Stats
	eventually(t, 10*time.Second, "both gateways to end the stream's connections", func() bool {
		prod, cons = e.stats(t, uid)
		return prod.ActiveConns == 0 && cons.ActiveConns == 0
	})
	for _, g := range []struct {
		side string
		st   api.Stats
		kind string
	}{{"producer's", prod, api.EndPeerReset}, {"consumer's", cons, api.EndAppReset}} {
		if g.st.TotalConns != wantConns || g.st.AbortedConns != wantAborted {
			t.Errorf("%s gateway: %d connections, %d aborted; want %d, %d aborted", g.side, g.st.TotalConns, g.st.AbortedConns, wantConns, wantAborted)
		}
		if g.st.Errors != 0 || g.st.AbortedByKind[g.kind] != wantAborted {
			t.Errorf("%s gateway counted %d errors and aborts by kind %v (last: %v); want the %d aborts as %s, no error",
				g.side, g.st.Errors, g.st.AbortedByKind, g.st.LastErrors, wantAborted, g.kind)
		}
		if wantAborted > 0 && g.st.LastErrors[g.kind].Reason == "" {
			t.Errorf("%s gateway gives no reason for its last %s: %v", g.side, g.kind, g.st.LastErrors)
		}
	}
}

// gigabyte: 1 GiB (256 MiB with -short) of random bytes arrive
// byte-identical, and the producer then reads a clean EOF.
func (e *engineEnv) gigabyte(t *testing.T) {
	total := int64(1 << 30)
	if testing.Short() {
		total = 256 << 20
	}
	s := e.open(t, 1)
	c, err := dialFrom("", s.Listeners[0])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(3 * time.Minute))
	start := time.Now()
	sum := sendRandom(t, c, total, 3)
	c.CloseWrite()
	r := s.plain.next(t, 3*time.Minute)
	el := time.Since(start)
	if r.err != nil || r.n != total || r.sum != sum {
		t.Fatalf("consumer got %d bytes (err %v), sha256 match %v; want %d identical bytes", r.n, r.err, r.sum == sum, total)
	}
	// The consumer's end reaches the producer as EOF: nothing was cut.
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if b, err := io.ReadAll(c); err != nil || len(b) != 0 {
		t.Fatalf("producer read %d bytes, %v after the transfer; want a clean EOF", len(b), err)
	}
	c.Close()
	e.settled(t, s.UID, 1, 0)
	t.Logf("%d MiB over %s in %s (%.0f MB/s)", total>>20, e.cfg, el.Round(time.Millisecond), float64(total)/el.Seconds()/1e6)
}

// halfClose: the producer sends, then shuts its write half; the consumer
// reads to EOF, then replies over the direction still open; the producer
// reads the whole reply, then EOF.
func (e *engineEnv) halfClose(t *testing.T) {
	s := e.open(t, 2)
	c, err := dialFrom("", s.Listeners[1])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	const size = 1 << 20
	sum := sendRandom(t, c, size, 4)
	if err := s.finish(c, 1); err != nil {
		t.Fatalf("producer after its half-close: %v", err)
	}
	r := s.reply.next(t, 10*time.Second)
	if r.err != nil || r.n != size || r.sum != sum {
		t.Fatalf("consumer got %d bytes (err %v), sha256 match %v; want %d identical bytes, then EOF, then its reply written", r.n, r.err, r.sum == sum, size)
	}
	c.Close()
	e.settled(t, s.UID, 1, 0)
}

// manyConnections: 64 connections, all open at once over the four
// channels of one stream, each carry their own bytes (distinct data and
// lengths) intact, and each ends cleanly both ways.
func (e *engineEnv) manyConnections(t *testing.T) {
	const conns, numConn, size = 64, 4, 512 << 10
	s := e.open(t, numConn)
	cs := make([]interface {
		io.ReadWriteCloser
		CloseWrite() error
	}, conns)
	for i := range cs {
		c, err := dialFrom("", s.Listeners[i%numConn])
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(2 * time.Minute))
		cs[i] = c
	}
	// Every connection is open before any sends: they all run at once.
	sums := make([][32]byte, conns)
	errs := make([]error, conns)
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := sha256.New()
			if err := writeRandom(io.MultiWriter(h, c), size+int64(i), 100+uint64(i)); err != nil {
				errs[i] = fmt.Errorf("send: %w", err)
				return
			}
			copy(sums[i][:], h.Sum(nil))
			errs[i] = s.finish(c, i%numConn)
		}()
	}
	got := map[int64]sinkResult{}
	for i := range conns {
		r := s.sinkFor(i).next(t, 2*time.Minute)
		if prev, dup := got[r.n]; dup {
			t.Errorf("two consumer connections of %d bytes (errs %v, %v)", r.n, prev.err, r.err)
		}
		got[r.n] = r
	}
	wg.Wait()
	var bad []string
	for i := range conns {
		if errs[i] != nil {
			bad = append(bad, fmt.Sprintf("producer %d: %v", i, errs[i]))
		}
		r, ok := got[size+int64(i)]
		switch {
		case !ok:
			bad = append(bad, fmt.Sprintf("connection %d: no consumer connection of its %d bytes", i, size+i))
		case r.err != nil || r.sum != sums[i]:
			bad = append(bad, fmt.Sprintf("connection %d: consumer err %v, sha256 match %v", i, r.err, r.sum == sums[i]))
		}
	}
	if len(bad) > 0 {
		t.Fatalf("%d of %d connections failed: %s", len(bad), conns, strings.Join(bad, "; "))
	}
	for _, c := range cs {
		c.Close()
	}
	e.settled(t, s.UID, conns, 0)
}

// bystander is a connection left open halfway through its transfer while
// a check disturbs others: it must finish as if nothing happened.
type bystander struct {
	s  *testStream
	ch int
	c  *net.TCPConn
	h  hash.Hash
}

const bystanderHalf = 1 << 20

// startBystander opens a connection on channel ch of s, sends the first
// half of its bytes and waits until the consumer has accepted it.
func (s *testStream) startBystander(t *testing.T, ch int, seed uint64) *bystander {
	t.Helper()
	k := s.sinkFor(ch)
	before := k.accepted.Load()
	c, err := dialFrom("", s.Listeners[ch])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(time.Minute))
	b := &bystander{s: s, ch: ch, c: c, h: sha256.New()}
	if err := writeRandom(io.MultiWriter(b.h, c), bystanderHalf, seed); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the consumer to accept the bystander's connection", func() bool {
		return k.accepted.Load() > before
	})
	return b
}

// finish sends the second half and checks every byte arrived intact and
// the connection ended cleanly both ways.
func (b *bystander) finish(t *testing.T, seed uint64) {
	t.Helper()
	if err := writeRandom(io.MultiWriter(b.h, b.c), bystanderHalf, seed); err != nil {
		t.Fatalf("bystander on stream %s: %v", b.s.UID, err)
	}
	if err := b.s.finish(b.c, b.ch); err != nil {
		t.Fatalf("bystander on stream %s: %v", b.s.UID, err)
	}
	r := b.s.sinkFor(b.ch).next(t, 10*time.Second)
	if ok := bytes.Equal(r.sum[:], b.h.Sum(nil)); r.err != nil || r.n != 2*bystanderHalf || !ok {
		t.Fatalf("bystander on stream %s: consumer got %d bytes (err %v), sha256 match %v; want %d identical bytes", b.s.UID, r.n, r.err, ok, 2*bystanderHalf)
	}
	b.c.Close()
}

// peerDeath: the consumer application resets its connection in the middle
// of a transfer. The producer's writes fail within a bound; connections
// open beside it, one on the same channel (for QUIC, the same QUIC
// connection) and one on another stream, carry on undisturbed, and a
// fresh connection through the same channel works end to end.
func (e *engineEnv) peerDeath(t *testing.T) {
	other := e.open(t, 1)
	s := e.open(t, 2)
	byOther := other.startBystander(t, 0, 5)
	bySame := s.startBystander(t, 1, 6)

	// The victim: the consumer reads 4 MiB of it, then resets.
	s.reply.resetNext(4 << 20)
	victim, err := dialFrom("", s.Listeners[1])
	if err != nil {
		t.Fatal(err)
	}
	defer victim.Close()
	victim.SetWriteDeadline(time.Now().Add(30 * time.Second))
	var sent atomic.Int64
	werr := make(chan error, 1)
	go func() {
		chunk := make([]byte, 64<<10)
		for {
			n, err := victim.Write(chunk)
			sent.Add(int64(n))
			if err != nil {
				werr <- err
				return
			}
		}
	}()
	if r := s.reply.next(t, 30*time.Second); !errors.Is(r.err, errSinkReset) {
		t.Fatalf("the consumer's victim connection ended after %d bytes with %v, want its reset", r.n, r.err)
	}
	select {
	case err := <-werr:
		if os.IsTimeout(err) {
			t.Fatalf("producer's writes hung after %d bytes when the consumer reset: %v", sent.Load(), err)
		}
		t.Logf("producer's write failed after %d bytes: %v", sent.Load(), err)
	case <-time.After(time.Minute):
		t.Fatal("producer's writes never ended after the consumer reset")
	}
	victim.Close()

	// A fresh connection through the same channel works end to end.
	fresh, err := dialFrom("", s.Listeners[1])
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	fresh.SetDeadline(time.Now().Add(30 * time.Second))
	sum := sendRandom(t, fresh, 1<<20, 7)
	if err := s.finish(fresh, 1); err != nil {
		t.Fatalf("fresh connection after the reset: %v", err)
	}
	if r := s.reply.next(t, 10*time.Second); r.err != nil || r.n != 1<<20 || r.sum != sum {
		t.Fatalf("fresh connection after the reset: consumer got %d bytes (err %v), sha256 match %v", r.n, r.err, r.sum == sum)
	}
	fresh.Close()

	bySame.finish(t, 8)
	byOther.finish(t, 9)
	e.settled(t, s.UID, 3, 1)
	e.settled(t, other.UID, 1, 0)
}

// releaseMidTransfer: s2uc release while bytes flow. Both applications'
// connections end promptly (the producer's writes fail, the consumer
// reads a reset: the transfer must not look complete), the stream's
// ports are free on both gateways (TCP, and UDP for QUIC) and come back
// to the next stream, the gateways return to their baseline descriptors,
// and another stream is undisturbed.
func (e *engineEnv) releaseMidTransfer(t *testing.T) {
	other := e.open(t, 1)
	// The baseline: no stream of this pair relays anything.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// A stream that carried data keeps a watch leg (dialed a second
	// after its first data leg, on tls and tcp): wait for those too.
	eventually(t, 10*time.Second, "earlier checks' connections to end, and their watch legs to be up, on both gateways", func() bool {
		for _, c := range []*client.Client{e.prod, e.cons} {
			ss, err := c.List(ctx, false)
			if err != nil {
				t.Fatalf("list on %s: %v", c.Addr(), err)
			}
			for _, s := range ss {
				if s.Stats != nil && s.Stats.ActiveConns != 0 {
					return false
				}
				if e.cfg.wan != "quic" && s.Stats != nil && s.Stats.TotalConns > 0 && s.Stats.Peer != api.PeerUp {
					return false
				}
			}
		}
		return true
	})
	baseProd, baseCons := fdCount(e.p.prod.PID()), fdCount(e.p.cons.PID())

	s := e.open(t, 2)
	in, err := e.cons.Get(ctx, s.UID)
	if err != nil {
		t.Fatal(err)
	}
	wanListeners := in.Listeners
	c, err := dialFrom("", s.Listeners[0])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetWriteDeadline(time.Now().Add(time.Minute))
	var sent atomic.Int64
	werr := make(chan error, 1)
	go func() {
		chunk := make([]byte, 64<<10)
		for {
			n, err := c.Write(chunk)
			sent.Add(int64(n))
			if err != nil {
				werr <- err
				return
			}
		}
	}()
	eventually(t, 30*time.Second, "bytes flowing through both gateways", func() bool {
		_, cons := e.stats(t, s.UID)
		return cons.BytesFromWAN >= 8<<20
	})
	releasing := time.Now()
	e.p.on(t).mustS2UC("alice", "release", s.UID)

	select {
	case err := <-werr:
		if os.IsTimeout(err) {
			t.Fatalf("producer's writes hung after the release (%d bytes sent): %v", sent.Load(), err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("producer's writes never failed after the release")
	}
	r := s.plain.next(t, 10*time.Second)
	t.Logf("release: within %s of its start, the producer's write failed after %d bytes and the consumer's connection ended after %d bytes with %v",
		time.Since(releasing).Round(time.Millisecond), sent.Load(), r.n, r.err)
	if r.err == nil {
		t.Errorf("consumer read a clean end of stream after %d bytes of a transfer cut by the release", r.n)
	}
	c.Close()

	for _, l := range append(append([]string(nil), s.Listeners...), wanListeners...) {
		if c, err := dialFrom("", l); err == nil {
			c.Close()
			t.Fatalf("listener %s still accepts after the release", l)
		}
	}
	if e.cfg.wan == "quic" {
		for _, l := range wanListeners {
			if !udpFree(l) {
				t.Fatalf("UDP port %s still bound after the release", l)
			}
		}
	}
	eventually(t, 10*time.Second, "gateways to return to their baseline descriptors", func() bool {
		return fdCount(e.p.prod.PID()) <= baseProd && fdCount(e.p.cons.PID()) <= baseCons
	})

	// The next stream gets the freed ports, and works.
	s2 := e.open(t, 2)
	in2, err := e.cons.Get(ctx, s2.UID)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(s2.Listeners, ",") != strings.Join(s.Listeners, ",") || strings.Join(in2.Listeners, ",") != strings.Join(wanListeners, ",") {
		t.Fatalf("released ports not reused: %v and %v, then %v and %v", s.Listeners, wanListeners, s2.Listeners, in2.Listeners)
	}
	for _, st := range []*testStream{s2, other} {
		c, err := dialFrom("", st.Listeners[0])
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(30 * time.Second))
		sum := sendRandom(t, c, 1<<20, 8)
		if err := st.finish(c, 0); err != nil {
			t.Fatalf("stream %s after the release: %v", st.UID, err)
		}
		if r := st.plain.next(t, 10*time.Second); r.err != nil || r.n != 1<<20 || r.sum != sum {
			t.Fatalf("stream %s after the release: consumer got %d bytes (err %v), sha256 match %v", st.UID, r.n, r.err, r.sum == sum)
		}
		c.Close()
		e.settled(t, st.UID, 1, 0)
	}
}
