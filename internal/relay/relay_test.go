package relay_test

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"scistream/internal/relay"
	"scistream/internal/sockmap"
	"scistream/internal/waitfor"
)

const testTimeout = 30 * time.Second

// engines are the engines the shared correctness suite runs: splice,
// buffer, splice on pipelined legs, and sockmap with its eBPF program
// loaded when this process may load it (TestMain), so every engine passes
// the same tests.
var engines []relay.Engine

// engine returns the engine called name built with default options.
func engine(tb testing.TB, name string) relay.Engine {
	tb.Helper()
	set, err := relay.New(relay.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	e, err := set.Get(name)
	if err != nil {
		tb.Fatal(err)
	}
	return e
}

// splicePipelined is splice with both sides seen as relay.Pipelined, as a
// QUIC stream is: the suite also covers the ring splice copies through
// on QUIC legs.
type splicePipelined struct{ relay.Engine }

func (splicePipelined) Name() string { return "splice-pipelined" }

func (e splicePipelined) Copy(dst, src net.Conn, count func(int64)) error {
	return e.Engine.Copy(pipelinedConn{dst}, pipelinedConn{src}, count)
}

type pipelinedConn struct{ net.Conn }

func (pipelinedConn) PipelinedCopy() {}

func TestMain(m *testing.M) {
	set, err := relay.New(relay.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	get := func(set *relay.Engines, name string) relay.Engine {
		e, err := set.Get(name)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return e
	}
	engines = []relay.Engine{get(set, "splice"), get(set, "buffer"), splicePipelined{get(set, "splice")}}
	r, err := sockmap.New(sockmap.Config{})
	if err != nil {
		fmt.Fprintf(os.Stderr, "relay tests: sockmap engine not loaded, the suite runs splice and buffer only: %v\n", err)
		os.Exit(m.Run())
	}
	withProg, err := relay.New(relay.Options{Sockmap: r})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	engines = append(engines, get(withProg, "sockmap"))
	code := m.Run()
	r.Close()
	os.Exit(code)
}

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(tb testing.TB) (client, server *net.TCPConn) {
	tb.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	type res struct {
		c   *net.TCPConn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := ln.AcceptTCP()
		ch <- res{c, err}
	}()
	client, err = net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { client.Close() })
	r := <-ch
	if r.err != nil {
		tb.Fatal(r.err)
	}
	tb.Cleanup(func() { r.c.Close() })
	return client, r.c
}

// session is application A <-> [a relay b] <-> application B.
type session struct {
	A, B   *net.TCPConn // the applications' ends
	ab, ba atomic.Int64
	maxAB  atomic.Int64 // largest single count(n) a->b
	done   chan error
}

func startRelay(tb testing.TB, e relay.Engine) *session {
	tb.Helper()
	s := &session{done: make(chan error, 1)}
	var ra, rb *net.TCPConn
	s.A, ra = tcpPair(tb)
	rb, s.B = tcpPair(tb)
	go func() {
		err := relay.Relay(e, ra, rb,
			func(n int64) {
				s.ab.Add(n)
				for {
					m := s.maxAB.Load()
					if n <= m || s.maxAB.CompareAndSwap(m, n) {
						break
					}
				}
			},
			func(n int64) { s.ba.Add(n) })
		s.done <- err
	}()
	tb.Cleanup(func() {
		// Make sure Relay ends even if a test failed midway.
		s.A.SetLinger(0)
		s.A.Close()
		s.B.SetLinger(0)
		s.B.Close()
		select {
		case <-s.done:
		case <-time.After(testTimeout):
			tb.Error("Relay did not return after both applications closed")
		}
	})
	return s
}

// wait returns Relay's result.
func (s *session) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-s.done:
		s.done <- err // keep it for Cleanup
		return err
	case <-time.After(testTimeout):
		t.Fatal("Relay did not return")
		return nil
	}
}

// noLeak records the goroutine count now and, after the test's other
// cleanups (registered later, so run earlier), waits for it to come back.
func noLeak(t *testing.T) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() { waitfor.Goroutines(t, before, 5*time.Second) })
}

func deadline(c net.Conn) { c.SetDeadline(time.Now().Add(testTimeout)) }

func TestEngines(t *testing.T) {
	if got := relay.Names(); !slices.Equal(got, []string{"splice", "buffer", "sockmap"}) {
		t.Fatalf("Names() = %v", got)
	}
	set, err := relay.New(relay.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(set.Names(), relay.Names()) {
		t.Fatalf("Engines.Names() = %v, want %v", set.Names(), relay.Names())
	}
	for _, name := range relay.Names() {
		e, err := set.Get(name)
		if err != nil || e.Name() != name {
			t.Fatalf("Get(%q) = %v, %v", name, e, err)
		}
	}
	if set.Kernel() {
		t.Fatal("Kernel() without a sockmap program")
	}
	_, err = set.Get("zerocopy")
	if !errors.Is(err, relay.ErrUnknownEngine) || !strings.Contains(err.Error(), "splice, buffer, sockmap") {
		t.Fatalf("Get(zerocopy) = %v; want ErrUnknownEngine listing the engines", err)
	}
}

func TestBulkTransfer(t *testing.T) {
	const size = 64 << 20
	data := make([]byte, size)
	rand.Read(data)
	want := sha256.Sum256(data)
	for _, e := range engines {
		t.Run(e.Name(), func(t *testing.T) {
			noLeak(t)
			s := startRelay(t, e)
			deadline(s.A)
			deadline(s.B)
			werr := make(chan error, 1)
			go func() {
				_, err := s.A.Write(data)
				if err == nil {
					err = s.A.CloseWrite()
				}
				werr <- err
			}()
			h := sha256.New()
			n, err := io.CopyBuffer(h, s.B, make([]byte, 1<<20))
			if err != nil {
				t.Fatalf("read after %d bytes: %v", n, err)
			}
			if err := <-werr; err != nil {
				t.Fatalf("write: %v", err)
			}
			if n != size {
				t.Fatalf("received %d bytes, want %d", n, size)
			}
			if got := h.Sum(nil); !bytes.Equal(got, want[:]) {
				t.Fatalf("sha256 %x, want %x", got, want)
			}
			if err := s.B.CloseWrite(); err != nil {
				t.Fatal(err)
			}
			if err := s.wait(t); err != nil {
				t.Fatalf("Relay = %v, want nil", err)
			}
			if s.ab.Load() != size || s.ba.Load() != 0 {
				t.Fatalf("counters a->b %d b->a %d, want %d, 0", s.ab.Load(), s.ba.Load(), size)
			}
			// Counters advance in bounded chunks, so live rates move
			// during a long transfer.
			if m := s.maxAB.Load(); m > 1<<20 {
				t.Fatalf("largest counted chunk %d bytes", m)
			}
			// A sees B's end of stream.
			if n, err := s.A.Read(make([]byte, 1)); n != 0 || err != io.EOF {
				t.Fatalf("A read %d, %v; want io.EOF", n, err)
			}
		})
	}
}

func TestHalfClose(t *testing.T) {
	for _, e := range engines {
		t.Run(e.Name(), func(t *testing.T) {
			noLeak(t)
			s := startRelay(t, e)
			deadline(s.A)
			deadline(s.B)
			request := []byte("request: all of it")
			if _, err := s.A.Write(request); err != nil {
				t.Fatal(err)
			}
			if err := s.A.CloseWrite(); err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(s.B) // ends at EOF forwarded from A
			if err != nil || !bytes.Equal(got, request) {
				t.Fatalf("B read %q, %v", got, err)
			}
			select {
			case err := <-s.done:
				t.Fatalf("Relay returned %v while B->A was still open", err)
			default:
			}
			// The other direction keeps flowing after the half-close.
			reply := bytes.Repeat([]byte("reply "), 100000)
			werr := make(chan error, 1)
			go func() {
				_, err := s.B.Write(reply)
				if err == nil {
					err = s.B.CloseWrite()
				}
				werr <- err
			}()
			got, err = io.ReadAll(s.A)
			if err != nil || !bytes.Equal(got, reply) {
				t.Fatalf("A read %d bytes, %v; want %d", len(got), err, len(reply))
			}
			if err := <-werr; err != nil {
				t.Fatal(err)
			}
			if err := s.wait(t); err != nil {
				t.Fatalf("Relay = %v, want nil", err)
			}
			s.A.Close()
			s.B.Close()
			if s.ab.Load() != int64(len(request)) || s.ba.Load() != int64(len(reply)) {
				t.Fatalf("counters %d, %d; want %d, %d", s.ab.Load(), s.ba.Load(), len(request), len(reply))
			}
		})
	}
}

// isAbort reports whether err is what an application should see when the
// stream was aborted: an error, and not a clean end of stream.
func isAbort(err error) bool {
	return err != nil && !errors.Is(err, io.EOF)
}

func TestResetPropagates(t *testing.T) {
	for _, e := range engines {
		for _, side := range []string{"A", "B"} {
			t.Run(e.Name()+"/reset "+side, func(t *testing.T) {
				noLeak(t)
				s := startRelay(t, e)
				deadline(s.A)
				deadline(s.B)
				resetter, other := s.A, s.B
				if side == "B" {
					resetter, other = s.B, s.A
				}
				// Some traffic first, so the stream is established
				// end to end.
				if _, err := resetter.Write([]byte("hello")); err != nil {
					t.Fatal(err)
				}
				if _, err := io.ReadFull(other, make([]byte, 5)); err != nil {
					t.Fatal(err)
				}
				resetter.SetLinger(0)
				resetter.Close()

				err := s.wait(t)
				if err == nil {
					t.Fatal("Relay returned nil after a reset")
				}
				if !relay.IsRoutine(err) {
					t.Fatalf("Relay = %v; a peer reset should be routine", err)
				}
				n, rerr := other.Read(make([]byte, 16))
				if n != 0 || !isAbort(rerr) {
					t.Fatalf("other side read %d, %v; want an error, not EOF", n, rerr)
				}
				if !errors.Is(rerr, syscall.ECONNRESET) {
					t.Fatalf("other side read error %v, want ECONNRESET", rerr)
				}
			})
		}
	}
}

// A reset while the other direction is mid-transfer must abort it too.
func TestResetDuringTransfer(t *testing.T) {
	for _, e := range engines {
		t.Run(e.Name(), func(t *testing.T) {
			noLeak(t)
			s := startRelay(t, e)
			deadline(s.A)
			deadline(s.B)
			// A streams to B until it fails; B reads a little, then
			// resets.
			werr := make(chan error, 1)
			go func() {
				buf := make([]byte, 64<<10)
				for {
					if _, err := s.A.Write(buf); err != nil {
						werr <- err
						return
					}
				}
			}()
			if _, err := io.ReadFull(s.B, make([]byte, 1<<20)); err != nil {
				t.Fatal(err)
			}
			s.B.SetLinger(0)
			s.B.Close()
			if err := s.wait(t); err == nil {
				t.Fatal("Relay returned nil after a reset")
			}
			select {
			case err := <-werr:
				if !isAbort(err) {
					t.Fatalf("A's write ended with %v", err)
				}
			case <-time.After(testTimeout):
				t.Fatal("A's writes never failed")
			}
		})
	}
}

// An idle stream whose applications both close ends the relay.
func TestRelayReturnsAfterBothClose(t *testing.T) {
	for _, e := range engines {
		t.Run(e.Name(), func(t *testing.T) {
			noLeak(t)
			s := startRelay(t, e)
			if err := s.A.Close(); err != nil {
				t.Fatal(err)
			}
			if err := s.B.Close(); err != nil {
				t.Fatal(err)
			}
			if err := s.wait(t); err != nil && !relay.IsRoutine(err) {
				t.Fatalf("Relay = %v", err)
			}
			if s.ab.Load() != 0 || s.ba.Load() != 0 {
				t.Fatal("bytes counted on an idle stream")
			}
		})
	}
}

// Splice falls back to Buffer when a side is not a plain TCP socket, as a
// TLS leg is not.
func TestSpliceFallback(t *testing.T) {
	noLeak(t)
	src, srcPeer := tcpPair(t)
	p1, p2 := net.Pipe()
	t.Cleanup(func() { p1.Close(); p2.Close() })
	msg := []byte("through a pipe")
	go func() {
		srcPeer.Write(msg)
		srcPeer.CloseWrite()
	}()
	var counted atomic.Int64
	cerr := make(chan error, 1)
	go func() {
		err := engine(t, "splice").Copy(p1, src, func(n int64) { counted.Add(n) })
		p1.Close()
		cerr <- err
	}()
	p2.SetDeadline(time.Now().Add(testTimeout))
	got, err := io.ReadAll(p2)
	if err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("read %q, %v", got, err)
	}
	if err := <-cerr; err != nil {
		t.Fatalf("Copy = %v", err)
	}
	if counted.Load() != int64(len(msg)) {
		t.Fatalf("counted %d", counted.Load())
	}
}

func TestAbort(t *testing.T) {
	c, peer := tcpPair(t)
	deadline(peer)
	relay.Abort(c)
	if _, err := peer.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("peer read %v, want ECONNRESET", err)
	}
	// Abort of a connection without NetConn or SetLinger still closes it.
	p1, p2 := net.Pipe()
	t.Cleanup(func() { p2.Close() })
	relay.Abort(p1)
	if _, err := p1.Write([]byte("x")); err == nil {
		t.Fatal("Abort did not close a pipe")
	}
	// Abort digs through NetConn wrappers to reset the socket.
	c2, peer2 := tcpPair(t)
	deadline(peer2)
	relay.Abort(&wrapped{Conn: c2})
	if _, err := peer2.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("wrapped: peer read %v, want ECONNRESET", err)
	}
}

type wrapped struct{ net.Conn }

func (w *wrapped) NetConn() net.Conn { return w.Conn }

func TestIsRoutine(t *testing.T) {
	for _, err := range []error{nil, io.EOF, net.ErrClosed, syscall.ECONNRESET, syscall.EPIPE,
		&net.OpError{Op: "read", Err: syscall.ECONNRESET}} {
		if !relay.IsRoutine(err) {
			t.Errorf("IsRoutine(%v) = false", err)
		}
	}
	for _, err := range []error{errors.New("boom"), io.ErrUnexpectedEOF, syscall.ETIMEDOUT} {
		if relay.IsRoutine(err) {
			t.Errorf("IsRoutine(%v) = true", err)
		}
	}
}

// Many concurrent relays stay independent and leave nothing behind.
func TestConcurrentRelays(t *testing.T) {
	noLeak(t)
	const n = 16
	var wg sync.WaitGroup
	for i := range n {
		e := engines[i%2]
		s := startRelay(t, e)
		wg.Add(1)
		go func() {
			defer wg.Done()
			deadline(s.A)
			deadline(s.B)
			msg := bytes.Repeat([]byte{byte(i)}, 100000+i)
			go func() { s.A.Write(msg); s.A.CloseWrite() }()
			got, err := io.ReadAll(s.B)
			if err != nil || !bytes.Equal(got, msg) {
				t.Errorf("relay %d: got %d bytes, %v", i, len(got), err)
			}
			s.B.CloseWrite()
		}()
	}
	wg.Wait()
}

func benchRelay(b *testing.B, e relay.Engine) {
	const op = 32 << 20 // bytes per iteration
	s := startRelay(b, e)
	chunk := make([]byte, 1<<20)
	rand.Read(chunk)
	buf := make([]byte, 1<<20)
	total := int64(b.N) * op
	werr := make(chan error, 1)
	b.SetBytes(op)
	b.ReportAllocs()
	b.ResetTimer()
	go func() {
		var err error
		for left := total; left > 0 && err == nil; left -= int64(len(chunk)) {
			_, err = s.A.Write(chunk[:min(int64(len(chunk)), left)])
		}
		werr <- err
	}()
	for got := int64(0); got < total; {
		n, err := s.B.Read(buf)
		got += int64(n)
		if err != nil {
			b.Fatalf("read after %d of %d bytes: %v", got, total, err)
		}
	}
	b.StopTimer()
	if err := <-werr; err != nil {
		b.Fatal(err)
	}
	// The relay counts a chunk once its write returned, which may be
	// after the reader got it: end the relay before checking.
	s.A.CloseWrite()
	s.B.CloseWrite()
	select {
	case err := <-s.done:
		s.done <- err
		if err != nil {
			b.Fatalf("Relay = %v", err)
		}
	case <-time.After(testTimeout):
		b.Fatal("Relay did not return")
	}
	if s.ab.Load() != total {
		b.Fatalf("counted %d of %d", s.ab.Load(), total)
	}
}

func BenchmarkSplice(b *testing.B) { benchRelay(b, engine(b, "splice")) }
func BenchmarkBuffer(b *testing.B) { benchRelay(b, engine(b, "buffer")) }

func TestBufferSize(t *testing.T) {
	for _, c := range []struct {
		size, want int
		ok         bool
	}{
		{0, relay.DefaultBufferSize, true},
		{relay.MinBufferSize, relay.MinBufferSize, true},
		{10e6, 10e6, true}, // seed 000's 10 MB
		{relay.MaxBufferSize, relay.MaxBufferSize, true},
		{relay.MinBufferSize - 1, 0, false},
		{-1, 0, false},
		{relay.MaxBufferSize + 1, 0, false},
	} {
		set, err := relay.New(relay.Options{BufferSize: c.size})
		if (err == nil) != c.ok {
			t.Errorf("New(BufferSize %d) = %v; want ok %v", c.size, err, c.ok)
			continue
		}
		if !c.ok {
			if !errors.Is(err, relay.ErrBufferSize) {
				t.Errorf("New(BufferSize %d) = %v; want ErrBufferSize", c.size, err)
			}
			continue
		}
		if got := set.BufferSize(); got != c.want {
			t.Errorf("New(BufferSize %d).BufferSize() = %d, want %d", c.size, got, c.want)
		}
	}
}

// TestBufferRingWraps streams through the smallest ring, so the reader
// and writer wrap around it hundreds of times, with the sender writing
// odd sizes and the receiver reading slowly at first (the ring fills and
// the reader must wait for room).
func TestBufferRingWraps(t *testing.T) {
	noLeak(t)
	set, err := relay.New(relay.Options{BufferSize: relay.MinBufferSize})
	if err != nil {
		t.Fatal(err)
	}
	e, err := set.Get("buffer")
	if err != nil {
		t.Fatal(err)
	}
	s := startRelay(t, e)
	deadline(s.A)
	deadline(s.B)
	data := make([]byte, 40<<20+7)
	rand.Read(data)
	go func() {
		b := data
		for i := 0; len(b) > 0; i++ {
			n := min(len(b), 1+i*7919%(300<<10))
			if _, err := s.A.Write(b[:n]); err != nil {
				return
			}
			b = b[n:]
		}
		s.A.CloseWrite()
	}()
	var got []byte
	buf := make([]byte, 1<<20)
	for i := 0; ; i++ {
		n, err := s.B.Read(buf[:min(len(buf), 1+i*4099%(200<<10))])
		got = append(got, buf[:n]...)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("read after %d bytes: %v", len(got), err)
		}
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("received %d bytes differing from the %d sent", len(got), len(data))
	}
	s.B.CloseWrite()
	if err := s.wait(t); err != nil {
		t.Fatalf("Relay = %v", err)
	}
	if s.ab.Load() != int64(len(data)) {
		t.Fatalf("counted %d of %d", s.ab.Load(), len(data))
	}
}

// TestBufferWriteErrorReturns: when the destination fails while the
// source is idle, Copy returns at once (its reader goroutine must not
// keep it waiting on the idle source) and leaks nothing.
func TestBufferWriteErrorReturns(t *testing.T) {
	noLeak(t)
	srcPeer, src := tcpPair(t)
	dst, dstPeer := tcpPair(t)
	// srcPeer stays open and silent after one message.
	if _, err := srcPeer.Write(bytes.Repeat([]byte("x"), 100)); err != nil {
		t.Fatal(err)
	}
	dstPeer.SetLinger(0)
	dstPeer.Close() // writes to dst now fail (reset)
	e := engine(t, "buffer")
	cerr := make(chan error, 1)
	go func() {
		cerr <- e.Copy(dst, src, func(int64) {})
	}()
	select {
	case err := <-cerr:
		if err == nil || !relay.IsRoutine(err) {
			t.Fatalf("Copy = %v, want a reset or broken pipe", err)
		}
	case <-time.After(testTimeout):
		t.Fatal("Copy did not return after its destination failed")
	}
}

// BenchmarkRequestReply measures the round trip of a 16 KiB request and
// a 16 KiB reply through one relay of each engine and directly, in the
// same run; it reports the median and 99th percentile round trip.
func BenchmarkRequestReply(b *testing.B) {
	const size = 16 << 10
	run := func(b *testing.B, client, server *net.TCPConn) {
		go func() { // echo server
			buf := make([]byte, size)
			for {
				if _, err := io.ReadFull(server, buf); err != nil {
					return
				}
				if _, err := server.Write(buf); err != nil {
					return
				}
			}
		}()
		req := make([]byte, size)
		resp := make([]byte, size)
		rtts := make([]time.Duration, 0, b.N)
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			t0 := time.Now()
			if _, err := client.Write(req); err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadFull(client, resp); err != nil {
				b.Fatal(err)
			}
			rtts = append(rtts, time.Since(t0))
		}
		b.StopTimer()
		slices.Sort(rtts)
		b.ReportMetric(float64(rtts[len(rtts)/2].Nanoseconds())/1e3, "p50-us")
		b.ReportMetric(float64(rtts[len(rtts)*99/100].Nanoseconds())/1e3, "p99-us")
	}
	b.Run("direct", func(b *testing.B) {
		c, s := tcpPair(b)
		run(b, c, s)
	})
	for _, e := range engines {
		b.Run(e.Name(), func(b *testing.B) {
			s := startRelay(b, e)
			run(b, s.A, s.B)
		})
	}
}
