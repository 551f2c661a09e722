package sockmap_test

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"hash"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"scistream/internal/leakcheck"
	"scistream/internal/loopback"
	"scistream/internal/relay"
	"scistream/internal/relay/relaytest"
	"scistream/internal/sockmap"
	"scistream/internal/waitfor"
)

const testTimeout = 60 * time.Second

func TestMain(m *testing.M) { leakcheck.Main(m) }

// newRedirector loads the program. Without the privileges to load it the
// tests skip (saying why); as root on a kernel that refuses it they fail,
// since the engine is then broken where it should work.
func newRedirector(tb testing.TB, cfg sockmap.Config) *sockmap.Redirector {
	tb.Helper()
	r, err := sockmap.New(cfg)
	if err != nil {
		if errors.Is(err, sockmap.ErrUnavailable) && os.Geteuid() != 0 {
			tb.Skipf("needs CAP_BPF: %v", err)
		}
		tb.Fatal(err)
	}
	tb.Cleanup(func() { r.Close() })
	return r
}

// sockmapEngine returns the relay's sockmap engine around r (nil: the
// program is not loaded, so it copies as splice does).
func sockmapEngine(tb testing.TB, r *sockmap.Redirector) relay.Engine {
	tb.Helper()
	return relaytest.Engine(tb, "sockmap", relay.Options{Sockmap: r})
}

func deadline(cs ...net.Conn) {
	for _, c := range cs {
		c.SetDeadline(time.Now().Add(testTimeout))
	}
}

// stream is a reproducible byte stream of a given seed.
func stream(seed uint64) io.Reader {
	var s [32]byte
	s[0] = byte(seed)
	s[1] = byte(seed >> 8)
	return rand.NewChaCha8(s)
}

// sendHashed writes n bytes of stream(seed) to c and closes its write half.
func sendHashed(c *net.TCPConn, seed uint64, n int64, h hash.Hash) error {
	if _, err := io.CopyBuffer(c, io.TeeReader(io.LimitReader(stream(seed), n), h), make([]byte, 1<<20)); err != nil {
		return err
	}
	return c.CloseWrite()
}

func TestBulkTransfer1GB(t *testing.T) {
	size := int64(1 << 30)
	if testing.Short() {
		size = 64 << 20
	}
	leakcheck.Check(t)
	r := newRedirector(t, sockmap.Config{})
	s := relaytest.Start(t, sockmapEngine(t, r))
	deadline(s.A, s.B)
	sent := sha256.New()
	werr := make(chan error, 1)
	go func() { werr <- sendHashed(s.A, 1, size, sent) }()
	got := sha256.New()
	n, err := io.CopyBuffer(got, s.B, make([]byte, 1<<20))
	if err != nil {
		t.Fatalf("read after %d bytes: %v", n, err)
	}
	if err := <-werr; err != nil {
		t.Fatalf("write: %v", err)
	}
	if n != size || !bytes.Equal(got.Sum(nil), sent.Sum(nil)) {
		t.Fatalf("received %d bytes, sha256 %x; sent %d, sha256 %x", n, got.Sum(nil), size, sent.Sum(nil))
	}
	if err := s.B.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if err := s.Wait(t); err != nil {
		t.Fatalf("Relay = %v", err)
	}
	if s.AB() != size || s.BA() != 0 {
		t.Fatalf("counted %d, %d; want %d, 0", s.AB(), s.BA(), size)
	}
	if m := s.MaxChunkAB(); m > 1<<20 {
		t.Fatalf("largest counted chunk %d bytes: live rates would jump", m)
	}
	st := r.Stats()
	t.Logf("stats %+v", st)
	if st.Redirected != 2 || st.KernelBytes == 0 {
		t.Fatalf("the kernel path was not used: %+v", st)
	}
	if st.KernelBytes+st.UserBytes != size {
		t.Fatalf("kernel %d + user %d bytes != %d", st.KernelBytes, st.UserBytes, size)
	}
}

// Many short streams, each half-closed in one direction then answered:
// the end of every stream must come after its last byte (a naive "send
// queue looks empty" check truncated 1 stream in 36).
func TestManyHalfClosedStreams(t *testing.T) {
	leakcheck.Check(t)
	r := newRedirector(t, sockmap.Config{})
	const n = 48
	var wg sync.WaitGroup
	for i := range n {
		s := relaytest.Start(t, sockmapEngine(t, r))
		wg.Add(1)
		go func() {
			defer wg.Done()
			deadline(s.A, s.B)
			size := int64(1 + (i*7919)%300000)
			// One byte first, so the stream's FIN comes after the
			// kernel path is set up (a FIN before it is copied in
			// user space, also correct but not what this tests).
			if _, err := s.A.Write([]byte{'x'}); err != nil {
				t.Error(err)
				return
			}
			if _, err := io.ReadFull(s.B, make([]byte, 1)); err != nil {
				t.Error(err)
				return
			}
			sent := sha256.New()
			go sendHashed(s.A, uint64(i), size, sent)
			got := sha256.New()
			m, err := io.Copy(got, s.B) // ends at the forwarded FIN
			if err != nil || m != size {
				t.Errorf("stream %d: B read %d of %d bytes, %v", i, m, size, err)
				return
			}
			if !bytes.Equal(got.Sum(nil), sent.Sum(nil)) {
				t.Errorf("stream %d: sha256 differs", i)
				return
			}
			reply := bytes.Repeat([]byte{byte(i)}, 1000+i)
			go func() { s.B.Write(reply); s.B.CloseWrite() }()
			back, err := io.ReadAll(s.A)
			if err != nil || !bytes.Equal(back, reply) {
				t.Errorf("stream %d: A read %d bytes, %v; want %d", i, len(back), err, len(reply))
				return
			}
			if err := s.Wait(t); err != nil {
				t.Errorf("stream %d: Relay = %v", i, err)
			}
			if s.AB() != size+1 || s.BA() != int64(len(reply)) {
				t.Errorf("stream %d: counted %d, %d; want %d, %d", i, s.AB(), s.BA(), size+1, len(reply))
			}
		}()
	}
	wg.Wait()
	// Every A->B direction went through the kernel (B->A may see
	// its FIN before it is set up, and then copies in user space).
	if st := r.Stats(); st.Redirected < n || st.Redirected+st.Fallbacks != 2*n {
		t.Fatalf("%d of %d directions redirected in the kernel: %+v", st.Redirected, 2*n, st)
	} else {
		t.Logf("stats %+v", st)
	}
}

func ioctl(tb testing.TB, c *net.TCPConn, req uint) int64 {
	tb.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		tb.Fatal(err)
	}
	var v int
	var ierr error
	if err := rc.Control(func(fd uintptr) { v, ierr = unix.IoctlGetInt(int(fd), req) }); err != nil || ierr != nil {
		tb.Fatal(err, ierr)
	}
	return int64(v)
}

func rcvbuf(tb testing.TB, c *net.TCPConn) int64 {
	rc, _ := c.SyscallConn()
	var v int
	rc.Control(func(fd uintptr) { v, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF) })
	return int64(v)
}

// A consumer that stops reading must stop the producer, with the bytes
// held between the relay's two sockets bounded (a naive redirect queues
// the whole transfer in the kernel).
func TestMemoryBoundedWhenConsumerStalls(t *testing.T) {
	leakcheck.Check(t)
	const window = 1 << 20
	const total = 256 << 20
	r := newRedirector(t, sockmap.Config{Window: window})
	s := relaytest.Start(t, sockmapEngine(t, r))
	deadline(s.A, s.B)
	var produced atomic.Int64
	sent := sha256.New()
	werr := make(chan error, 1)
	go func() {
		src := io.TeeReader(io.LimitReader(stream(7), total), sent)
		buf := make([]byte, 64<<10)
		for {
			n, err := io.ReadFull(src, buf)
			if n > 0 {
				if _, werr2 := s.A.Write(buf[:n]); werr2 != nil {
					werr <- werr2
					return
				}
				produced.Add(int64(n))
			}
			if err != nil {
				werr <- s.A.CloseWrite()
				return
			}
		}
	}()
	// B reads nothing: wait until the producer is blocked (no progress
	// for a while), bounded in time.
	last, since := int64(-1), time.Now()
	if !waitfor.Cond(30*time.Second, func() bool {
		if p := produced.Load(); p != last {
			last, since = p, time.Now()
			return false
		}
		return time.Since(since) > 500*time.Millisecond
	}) {
		t.Fatalf("producer never blocked: %d bytes written", produced.Load())
	}
	p := produced.Load()
	aq := ioctl(t, s.A, unix.SIOCOUTQ)  // in A's send queue
	bq := ioctl(t, s.B, unix.SIOCINQ)   // in B's receive queue
	oq := ioctl(t, s.RB, unix.SIOCOUTQ) // in rb's send queue
	held := p - aq - bq - oq            // taken from ra's TCP, not yet in rb
	bound := int64(window) + rcvbuf(t, s.RA) + 256<<10 + 64<<10
	t.Logf("producer blocked after %d bytes; A sendq %d, rb sendq %d, B recvq %d; held in the relay %d (bound %d)", p, aq, oq, bq, held, bound)
	if p >= total {
		t.Fatal("the producer was never blocked")
	}
	if held > bound {
		t.Fatalf("%d bytes held inside the relay, more than the bound %d", held, bound)
	}
	// No stall: the egress socket is full, and nothing redirected waits
	// ahead of it (the kernel's worker would retry such bytes only a
	// jiffy after room appears). The gauge is refreshed by the copier's
	// polls, at most 50 ms apart.
	if !waitfor.Cond(2*time.Second, func() bool { return r.Stats().KernelQueued == 0 }) {
		t.Fatalf("%d redirected bytes wait in the kernel ahead of the full egress socket", r.Stats().KernelQueued)
	}
	// The consumer resumes: every byte arrives, once, in order.
	got := sha256.New()
	n, err := io.CopyBuffer(got, s.B, make([]byte, 1<<20))
	if err != nil || n != total {
		t.Fatalf("B read %d bytes, %v", n, err)
	}
	if err := <-werr; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Sum(nil), sent.Sum(nil)) {
		t.Fatal("sha256 differs")
	}
	s.B.CloseWrite()
	if err := s.Wait(t); err != nil {
		t.Fatalf("Relay = %v", err)
	}
	t.Logf("stats %+v", r.Stats())
}

// Resets from either side, before and during a transfer: the relay
// package's shared engine suite runs this engine with its program loaded.

// A release aborts the relay's own sockets mid-transfer (as the gateway
// does): both applications see an error, the Redirector is left clean.
func TestReleaseMidTransfer(t *testing.T) {
	leakcheck.Check(t)
	r := newRedirector(t, sockmap.Config{})
	s := relaytest.Start(t, sockmapEngine(t, r))
	deadline(s.A, s.B)
	go io.Copy(s.A, stream(3)) // until it fails
	if _, err := io.ReadFull(s.B, make([]byte, 4<<20)); err != nil {
		t.Fatal(err)
	}
	relay.Abort(s.RA)
	relay.Abort(s.RB)
	if err := s.Wait(t); err == nil {
		t.Fatal("Relay returned nil after a release")
	}
	if _, err := io.Copy(io.Discard, s.B); err == nil {
		t.Fatal("consumer saw a clean end of stream after a release")
	}
	closed := make(chan struct{})
	go func() { r.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(testTimeout):
		t.Fatal("Redirector.Close blocked: a Copy did not return")
	}
}

// Bytes already in the receive queue, part of one skb read by user space
// before the relay starts (as a WAN preface read is), must neither be
// lost nor duplicated: the program takes whole skbs.
func TestPartlyReadQueueBeforeStart(t *testing.T) {
	leakcheck.Check(t)
	r := newRedirector(t, sockmap.Config{})
	A, ra := loopback.TCPPair(t)
	rb, B := loopback.TCPPair(t)
	deadline(A, B, ra)
	msg := make([]byte, 200000)
	io.ReadFull(stream(5), msg)
	if _, err := A.Write(msg[:100000]); err != nil {
		t.Fatal(err)
	}
	pre := make([]byte, 1000)
	if _, err := io.ReadFull(ra, pre); err != nil { // the "preface"
		t.Fatal(err)
	}
	done := make(chan error, 1)
	e := sockmapEngine(t, r)
	go func() { done <- relay.Relay(e, ra, rb, func(int64) {}, func(int64) {}) }()
	go func() { A.Write(msg[100000:]); A.CloseWrite() }()
	got, err := io.ReadAll(B)
	if err != nil || !bytes.Equal(got, msg[1000:]) {
		t.Fatalf("B read %d bytes (%v), want %d; equal=%v", len(got), err, len(msg)-1000, bytes.Equal(got, msg[1000:]))
	}
	B.CloseWrite()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestUnavailableFallsBack(t *testing.T) {
	_, err := sockmap.New(sockmap.Config{ForceUnavailable: true})
	if !errors.Is(err, sockmap.ErrUnavailable) {
		t.Fatalf("New = %v, want ErrUnavailable", err)
	}
	// Without a Redirector the engine is Splice: still correct.
	s := relaytest.Start(t, sockmapEngine(t, nil))
	deadline(s.A, s.B)
	go func() { s.A.Write([]byte("plain")); s.A.CloseWrite() }()
	if got, err := io.ReadAll(s.B); err != nil || string(got) != "plain" {
		t.Fatalf("read %q, %v", got, err)
	}
	s.B.CloseWrite()
	if err := s.Wait(t); err != nil {
		t.Fatal(err)
	}
}

// A side that is not a plain TCP socket (a TLS leg) is copied in user space.
func TestNotTCPFallsBack(t *testing.T) {
	r := newRedirector(t, sockmap.Config{})
	src, peer := loopback.TCPPair(t)
	p1, p2 := net.Pipe()
	t.Cleanup(func() { p1.Close(); p2.Close() })
	go func() { peer.Write([]byte("through a pipe")); peer.CloseWrite() }()
	errc := make(chan error, 1)
	e := sockmapEngine(t, r)
	go func() { errc <- e.Copy(p1, src, func(int64) {}); p1.Close() }()
	p2.SetDeadline(time.Now().Add(testTimeout))
	if got, err := io.ReadAll(p2); err != nil || string(got) != "through a pipe" {
		t.Fatalf("read %q, %v", got, err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if st := r.Stats(); st.Redirected != 0 {
		t.Fatalf("a pipe was handed to the kernel: %+v", st)
	}
}

func TestConfig(t *testing.T) {
	if _, err := sockmap.New(sockmap.Config{Window: 1000}); err == nil || errors.Is(err, sockmap.ErrUnavailable) {
		t.Fatalf("a 1000-byte window was accepted: %v", err)
	}
}
