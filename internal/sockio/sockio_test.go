package sockio_test

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"scistream/internal/loopback"
	"scistream/internal/sockio"
	"scistream/internal/waitfor"
)

const testTimeout = 10 * time.Second

// deadline gives each conn a deadline testTimeout from now, so a raw
// call that never returns fails the test.
func deadline(cs ...*net.TCPConn) {
	for _, c := range cs {
		c.SetDeadline(time.Now().Add(testTimeout))
	}
}

func raw(t testing.TB, c *net.TCPConn) *sockio.Conn {
	t.Helper()
	s, err := sockio.New(c)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestReadWrite moves more than a socket buffer holds through raw
// writes and raw reads, then sees the end of stream.
func TestReadWrite(t *testing.T) {
	a, b := loopback.TCPPair(t)
	deadline(a, b)
	ra, rb := raw(t, a), raw(t, b)
	data := make([]byte, 8<<20)
	rand.Read(data)
	werr := make(chan error, 1)
	go func() {
		n, err := ra.Write(data)
		if err == nil && n != len(data) {
			err = io.ErrShortWrite
		}
		if err == nil {
			err = a.CloseWrite()
		}
		werr <- err
	}()
	var got []byte
	buf := make([]byte, 100<<10)
	for {
		n, err := rb.Read(buf)
		got = append(got, buf[:n]...)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("Read after %d bytes: %v", len(got), err)
		}
	}
	if err := <-werr; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("received %d bytes differing from the %d sent", len(got), len(data))
	}
}

// TestDeadlineAndClose: a raw Read honours the read deadline and returns
// when another goroutine closes the connection, like net.Conn.Read.
func TestDeadlineAndClose(t *testing.T) {
	a, _ := loopback.TCPPair(t)
	deadline(a)
	ra := raw(t, a)
	a.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := ra.Read(make([]byte, 10)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read past the deadline = %v", err)
	}
	a.SetReadDeadline(time.Now().Add(testTimeout))
	errc := make(chan error, 1)
	go func() {
		_, err := ra.Read(make([]byte, 10))
		errc <- err
	}()
	a.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Read on a closed conn = %v, want net.ErrClosed", err)
		}
	case <-time.After(testTimeout):
		t.Fatal("Read did not return after Close")
	}
}

// TestSplice moves a stream socket -> pipe -> socket and sees EOF.
func TestSplice(t *testing.T) {
	src, in := loopback.TCPPair(t)
	out, dst := loopback.TCPPair(t)
	deadline(src, in, out, dst)
	rin, rout := raw(t, in), raw(t, out)
	p, err := sockio.NewPipe(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.Size() < 64<<10 {
		t.Fatalf("pipe size %d", p.Size())
	}
	data := make([]byte, 5<<20+123)
	rand.Read(data)
	go func() {
		src.Write(data)
		src.CloseWrite()
	}()
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(dst)
		got <- b
	}()
	moved := 0
	for {
		n, err := rin.SpliceIn(p)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SpliceIn: %v", err)
		}
		if n <= 0 || p.Len() != n || n > p.Size() {
			t.Fatalf("SpliceIn moved %d, pipe holds %d of %d", n, p.Len(), p.Size())
		}
		m, err := rout.SpliceOut(p)
		if err != nil || m != n || p.Len() != 0 {
			t.Fatalf("SpliceOut = %d, %v; pipe holds %d; want %d", m, err, p.Len(), n)
		}
		moved += m
	}
	out.CloseWrite()
	if b := <-got; moved != len(data) || !bytes.Equal(b, data) {
		t.Fatalf("moved %d, received %d bytes; sent %d", moved, len(b), len(data))
	}
}

// TestNoAllocs: the hot-path calls allocate nothing.
func TestNoAllocs(t *testing.T) {
	a, b := loopback.TCPPair(t)
	deadline(a, b)
	ra, rb := raw(t, a), raw(t, b)
	buf := make([]byte, 4096)
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := ra.Write(buf); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(rb, buf); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per write+read, want 0", allocs)
	}
	// The relay's idle-aware calls too: TryWrite, WaitReadable, and
	// TryRead both with bytes and without (ErrWouldBlock).
	allocs = testing.AllocsPerRun(200, func() {
		if n, err := ra.TryWrite(buf); err != nil || n != len(buf) {
			t.Fatalf("TryWrite = %d, %v", n, err)
		}
		if err := rb.WaitReadable(); err != nil {
			t.Fatal(err)
		}
		for got := 0; got < len(buf); {
			n, err := rb.TryRead(buf[got:])
			if err == sockio.ErrWouldBlock {
				if err := rb.WaitReadable(); err != nil {
					t.Fatal(err)
				}
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			got += n
		}
		if _, err := rb.TryRead(buf); err != sockio.ErrWouldBlock {
			t.Fatalf("TryRead of nothing = %v, want ErrWouldBlock", err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per TryWrite+WaitReadable+TryRead, want 0", allocs)
	}
}

// BenchmarkReadWrite compares raw socket calls with net.Conn's.
func BenchmarkReadWrite(b *testing.B) {
	for _, mode := range []string{"sockio", "net"} {
		b.Run(mode, func(b *testing.B) {
			x, y := loopback.TCPPair(b)
			var w io.Writer = x
			var r io.Reader = y
			if mode == "sockio" {
				w, r = raw(b, x), raw(b, y)
			}
			buf := make([]byte, 64<<10)
			rbuf := make([]byte, 64<<10)
			b.SetBytes(int64(len(buf)))
			b.ReportAllocs()
			done := make(chan struct{})
			go func() {
				defer close(done)
				for range b.N {
					if _, err := w.Write(buf); err != nil {
						return
					}
				}
			}()
			for got := 0; got < b.N*len(buf); {
				n, err := r.Read(rbuf)
				if err != nil {
					b.Fatal(err)
				}
				got += n
			}
			<-done
		})
	}
}

// WaitWritable returns at once while the socket has room, waits while
// its send buffer is full (up to the write deadline), and returns once
// the peer reads.
func TestWaitWritable(t *testing.T) {
	a, b := loopback.TCPPair(t)
	deadline(a, b)
	ra := raw(t, a)
	if err := ra.WaitWritable(); err != nil {
		t.Fatalf("WaitWritable on an empty socket: %v", err)
	}
	chunk := make([]byte, 64<<10)
	for total := 0; ; total += len(chunk) {
		a.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		if _, err := ra.Write(chunk); err != nil {
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatal(err)
			}
			break
		}
		if total > 1<<30 {
			t.Fatal("the socket never filled")
		}
	}
	a.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	if err := ra.WaitWritable(); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("WaitWritable on a full socket = %v, want the deadline", err)
	}
	a.SetWriteDeadline(time.Time{})
	done := make(chan error, 1)
	go func() { done <- ra.WaitWritable() }()
	b.SetReadDeadline(time.Now().Add(testTimeout))
	go io.Copy(io.Discard, b) // ends when the test closes the sockets
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("WaitWritable after the peer read: %v", err)
		}
	case <-time.After(testTimeout):
		t.Fatal("WaitWritable did not return after the peer read")
	}
}

// TestReset: a socket the peer reset reads as reset even after a write
// took the reset's error (the read then returns a plain end of stream);
// one after the peer's FIN does not; one whose orderly close ended with
// this side's FIN does (Reset's documented limit).
func TestReset(t *testing.T) {
	c, peer := loopback.TCPPair(t)
	deadline(c, peer)
	s := raw(t, c)
	peer.SetLinger(0)
	peer.Close()
	waitfor.Must(t, testTimeout, "the reset to arrive", func() bool { return sockio.Reset(c) })
	if _, err := s.Write([]byte("x")); !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("write after the reset: %v", err)
	}
	if _, err := s.Read(make([]byte, 16)); err != io.EOF {
		t.Fatalf("read after the reset's error was taken: %v; the kernel now says io.EOF (the race Reset is for)", err)
	}

	c2, peer2 := loopback.TCPPair(t)
	deadline(c2, peer2)
	peer2.CloseWrite()
	if _, err := raw(t, c2).Read(make([]byte, 16)); err != io.EOF {
		t.Fatalf("read after FIN: %v, want io.EOF", err)
	}
	if sockio.Reset(c2) {
		t.Fatal("a socket after the peer's FIN reads as reset")
	}
	c2.CloseWrite()
	if _, err := io.ReadAll(peer2); err != nil {
		t.Fatal(err)
	}
	waitfor.Must(t, testTimeout, "the orderly close to end in CLOSE", func() bool { return sockio.Reset(c2) })
}

// TestWaitReadable: it returns once a byte is there, leaving it to be
// read; at the peer's end it says EOF; a silent peer keeps it waiting
// until the read deadline.
func TestWaitReadable(t *testing.T) {
	c, peer := loopback.TCPPair(t)
	c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if err := sockio.WaitReadable(c); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("silent peer: %v, want the deadline", err)
	}
	deadline(c, peer)
	peer.Write([]byte("hi"))
	if err := sockio.WaitReadable(c); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 2)
	if _, err := io.ReadFull(c, b); err != nil || string(b) != "hi" {
		t.Fatalf("read after WaitReadable: %q, %v", b, err)
	}
	peer.CloseWrite()
	if err := sockio.WaitReadable(c); err != io.EOF {
		t.Fatalf("after the peer's FIN: %v, want io.EOF", err)
	}
}

// TestEnded: an open connection, with bytes and then the peer's FIN
// unread, has not ended; a reset says ECONNRESET without a read, and the
// bytes before it are not what decides; a closed socket says so.
func TestEnded(t *testing.T) {
	c, peer := loopback.TCPPair(t)
	deadline(c, peer)
	if err := sockio.Ended(c); err != nil {
		t.Fatalf("open connection: %v", err)
	}
	if _, err := peer.Write([]byte("unread")); err != nil {
		t.Fatal(err)
	}
	peer.CloseWrite()
	if err := sockio.WaitReadable(c); err != nil {
		t.Fatal(err)
	}
	if err := sockio.Ended(c); err != nil {
		t.Fatalf("bytes and the peer's FIN unread: %v, want nil (they are still to be read)", err)
	}
	b := make([]byte, 6)
	if _, err := io.ReadFull(c, b); err != nil || string(b) != "unread" {
		t.Fatalf("the bytes after Ended: %q, %v", b, err)
	}

	c2, peer2 := loopback.TCPPair(t)
	deadline(c2, peer2)
	peer2.Write([]byte("unread"))
	peer2.SetLinger(0)
	peer2.Close()
	var err error
	waitfor.Must(t, testTimeout, "the reset to be seen", func() bool { err = sockio.Ended(c2); return err != nil })
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("after a reset: %v, want ECONNRESET", err)
	}

	c3, _ := loopback.TCPPair(t)
	c3.Close()
	if err := sockio.Ended(c3); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("closed socket: %v, want net.ErrClosed", err)
	}
}

// TestConnWaitReadable: Conn.WaitReadable returns only once the socket
// became readable, ended or failed, or at the read deadline; it does not
// look again after the poller woke it, so the read that follows tells
// which, and a read that finds nothing waits again. Every byte comes
// once, in order; the peer's FIN reads as io.EOF and its reset as
// ECONNRESET after it.
func TestConnWaitReadable(t *testing.T) {
	read := func(t *testing.T, s *sockio.Conn, b []byte) (int, error) {
		t.Helper()
		for {
			if err := s.WaitReadable(); err != nil && err != io.EOF {
				return 0, err
			}
			n, err := s.TryRead(b)
			if err != sockio.ErrWouldBlock {
				return n, err
			}
		}
	}
	t.Run("bytes and the end", func(t *testing.T) {
		a, b := loopback.TCPPair(t)
		rb := raw(t, b)
		b.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		if err := rb.WaitReadable(); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("silent peer: %v, want the deadline", err)
		}
		deadline(a, b)
		buf := make([]byte, 16)
		for i := range 200 {
			// The reader waits first (most rounds), or finds the
			// byte there: either way it reads it, once.
			got := make(chan error, 1)
			var n int
			go func() {
				var err error
				n, err = read(t, rb, buf)
				got <- err
			}()
			if _, err := a.Write([]byte{byte(i)}); err != nil {
				t.Fatal(err)
			}
			if err := <-got; err != nil || n != 1 || buf[0] != byte(i) {
				t.Fatalf("round %d: read %d bytes %v, %v; want the byte %d", i, n, buf[:n], err, byte(i))
			}
		}
		a.CloseWrite()
		if n, err := read(t, rb, buf); n != 0 || err != io.EOF {
			t.Fatalf("after the peer's FIN: %d, %v; want io.EOF", n, err)
		}
	})
	t.Run("reset", func(t *testing.T) {
		a, b := loopback.TCPPair(t)
		deadline(a, b)
		rb := raw(t, b)
		got := make(chan error, 1)
		go func() {
			_, err := read(t, rb, make([]byte, 16))
			got <- err
		}()
		a.SetLinger(0)
		a.Close()
		if err := <-got; !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("after the peer's reset: %v, want ECONNRESET", err)
		}
	})
}
