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
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"scistream/internal/leakcheck"
	"scistream/internal/loopback"
	"scistream/internal/relay"
	"scistream/internal/relay/relaytest"
	"scistream/internal/sockmap"
)

const testTimeout = 30 * time.Second

// engines are the engines the shared correctness suite runs: splice,
// buffer, splice on pipelined legs, and sockmap with its eBPF program
// loaded when this process may load it (TestMain), so every engine passes
// the same tests.
var engines []relay.Engine

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
		leakcheck.Main(m)
	}
	withProg, err := relay.New(relay.Options{Sockmap: r})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	engines = append(engines, get(withProg, "sockmap"))
	leakcheck.Main(m, func() { r.Close() })
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
			leakcheck.Check(t)
			s := relaytest.Start(t, e)
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
			if err := s.Wait(t); err != nil {
				t.Fatalf("Relay = %v, want nil", err)
			}
			if s.AB() != size || s.BA() != 0 {
				t.Fatalf("counters a->b %d b->a %d, want %d, 0", s.AB(), s.BA(), size)
			}
			// Counters advance in bounded chunks, so live rates move
			// during a long transfer.
			if m := s.MaxChunkAB(); m > 1<<20 {
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
			leakcheck.Check(t)
			s := relaytest.Start(t, e)
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
			case <-s.Done():
				t.Fatalf("Relay returned %v while B->A was still open", s.Wait(t))
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
			if err := s.Wait(t); err != nil {
				t.Fatalf("Relay = %v, want nil", err)
			}
			s.A.Close()
			s.B.Close()
			if s.AB() != int64(len(request)) || s.BA() != int64(len(reply)) {
				t.Fatalf("counters %d, %d; want %d, %d", s.AB(), s.BA(), len(request), len(reply))
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
				leakcheck.Check(t)
				s := relaytest.Start(t, e)
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

				err := s.Wait(t)
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
			leakcheck.Check(t)
			s := relaytest.Start(t, e)
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
			if err := s.Wait(t); err == nil {
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
			leakcheck.Check(t)
			s := relaytest.Start(t, e)
			if err := s.A.Close(); err != nil {
				t.Fatal(err)
			}
			if err := s.B.Close(); err != nil {
				t.Fatal(err)
			}
			if err := s.Wait(t); err != nil && !relay.IsRoutine(err) {
				t.Fatalf("Relay = %v", err)
			}
			if s.AB() != 0 || s.BA() != 0 {
				t.Fatal("bytes counted on an idle stream")
			}
		})
	}
}

// Splice falls back to Buffer when a side is not a plain TCP socket, as a
// TLS leg is not.
func TestSpliceFallback(t *testing.T) {
	leakcheck.Check(t)
	src, srcPeer := loopback.TCPPair(t)
	p1, p2 := net.Pipe()
	t.Cleanup(func() { p1.Close(); p2.Close() })
	msg := []byte("through a pipe")
	go func() {
		srcPeer.Write(msg)
		srcPeer.CloseWrite()
	}()
	var counted atomic.Int64
	cerr := make(chan error, 1)
	e := relaytest.Engine(t, "splice", relay.Options{})
	go func() {
		err := e.Copy(p1, src, func(n int64) { counted.Add(n) })
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
	c, peer := loopback.TCPPair(t)
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
	c2, peer2 := loopback.TCPPair(t)
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
	leakcheck.Check(t)
	const n = 16
	var wg sync.WaitGroup
	for i := range n {
		e := engines[i%2]
		s := relaytest.Start(t, e)
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
	s := relaytest.Start(b, e)
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
	if err := s.Wait(b); err != nil {
		b.Fatalf("Relay = %v", err)
	}
	if s.AB() != total {
		b.Fatalf("counted %d of %d", s.AB(), total)
	}
}

func BenchmarkSplice(b *testing.B) { benchRelay(b, relaytest.Engine(b, "splice", relay.Options{})) }
func BenchmarkBuffer(b *testing.B) { benchRelay(b, relaytest.Engine(b, "buffer", relay.Options{})) }

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
	leakcheck.Check(t)
	s := relaytest.Start(t, relaytest.Engine(t, "buffer", relay.Options{BufferSize: relay.MinBufferSize}))
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
	if err := s.Wait(t); err != nil {
		t.Fatalf("Relay = %v", err)
	}
	if s.AB() != int64(len(data)) {
		t.Fatalf("counted %d of %d", s.AB(), len(data))
	}
}

// TestBufferWriteErrorReturns: when the destination fails while the
// source is idle, Copy returns at once (its reader goroutine must not
// keep it waiting on the idle source) and leaks nothing.
func TestBufferWriteErrorReturns(t *testing.T) {
	leakcheck.Check(t)
	srcPeer, src := loopback.TCPPair(t)
	dst, dstPeer := loopback.TCPPair(t)
	// srcPeer stays open and silent after one message.
	if _, err := srcPeer.Write(bytes.Repeat([]byte("x"), 100)); err != nil {
		t.Fatal(err)
	}
	dstPeer.SetLinger(0)
	dstPeer.Close() // writes to dst now fail (reset)
	e := relaytest.Engine(t, "buffer", relay.Options{})
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
		relaytest.RoundTrips(b, client, make([]byte, size), size)
	}
	b.Run("direct", func(b *testing.B) {
		c, s := loopback.TCPPair(b)
		run(b, c, s)
	})
	for _, e := range engines {
		b.Run(e.Name(), func(b *testing.B) {
			s := relaytest.Start(b, e)
			run(b, s.A, s.B)
		})
	}
}

// TestMaxPipes checks the splice engine's cap on pipes: with one pipe
// allowed, a connection's two directions hold one between them (the other
// is copied in user space), both still carry every byte, and the pipe is
// given back when the relay ends.
func TestMaxPipes(t *testing.T) {
	leakcheck.Check(t)
	engines, err := relay.New(relay.Options{MaxPipes: 1})
	if err != nil {
		t.Fatal(err)
	}
	e, err := engines.Get("splice")
	if err != nil {
		t.Fatal(err)
	}
	s := relaytest.Start(t, e)
	a, b := bytes.Repeat([]byte("a"), 1<<20), bytes.Repeat([]byte("b"), 1<<20)
	errc := make(chan error, 2)
	go func() { _, err := s.A.Write(a); errc <- err }()
	go func() { _, err := s.B.Write(b); errc <- err }()
	for _, c := range []struct {
		conn *net.TCPConn
		want []byte
	}{{s.B, a}, {s.A, b}} {
		c.conn.SetReadDeadline(time.Now().Add(testTimeout))
		got := make([]byte, len(c.want))
		if _, err := io.ReadFull(c.conn, got); err != nil || !bytes.Equal(got, c.want) {
			t.Fatalf("read %d bytes: %v", len(got), err)
		}
	}
	for range 2 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	if n := engines.PipesInUse(); n != 1 {
		t.Errorf("%d pipes in use by a connection with both directions running, want 1 (the cap)", n)
	}
	s.A.CloseWrite()
	s.B.CloseWrite()
	if err := s.Wait(t); err != nil {
		t.Fatalf("Relay = %v", err)
	}
	if n := engines.PipesInUse(); n != 0 {
		t.Errorf("%d pipes in use after the relay ended", n)
	}
}

// A count function that waits (a paced stream's) must not hold Relay up
// once the other direction failed: RelayAborting calls onAbort, which
// ends the wait, and Relay returns.
func TestRelayAbortingWakesCount(t *testing.T) {
	for _, e := range engines {
		t.Run(e.Name(), func(t *testing.T) {
			leakcheck.Check(t)
			appA, relA := loopback.TCPPair(t)
			relB, appB := loopback.TCPPair(t)
			woke := make(chan struct{})
			var once sync.Once
			wake := func() { once.Do(func() { close(woke) }) }
			t.Cleanup(wake)
			blocked := make(chan struct{}, 1)
			countAB := func(int64) {
				select {
				case blocked <- struct{}{}:
				default:
				}
				<-woke // paced "forever", until the abort
			}
			done := make(chan error, 1)
			go func() { done <- relay.RelayAborting(e, relA, relB, countAB, func(int64) {}, wake) }()
			if _, err := appA.Write([]byte("hello")); err != nil {
				t.Fatal(err)
			}
			<-blocked // the a->b copy waits in its count
			appB.SetLinger(0)
			appB.Close() // b->a fails with a reset
			select {
			case err := <-done:
				if err == nil {
					t.Fatal("Relay returned nil after a reset")
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Relay still waits in a count 10s after the other direction failed")
			}
		})
	}
}
