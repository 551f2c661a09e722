package wan_test

import (
	"bytes"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// net.Conn allows Write from several goroutines at once; crypto/tls
// makes each Write atomic on the wire. The batched Write of wan.Conn
// must keep that: every Write's bytes arrive whole and in one piece.
func TestTLSConcurrentWrites(t *testing.T) {
	dc, ac := tlsPair(t)
	const (
		writers = 2
		writes  = 4
		chunk   = 512 << 10
	)
	done := make(chan []byte, 1)
	go func() {
		ac.SetReadDeadline(time.Now().Add(4 * testTimeout))
		b, err := io.ReadAll(ac)
		if err != nil {
			t.Errorf("acceptor read: %v", err)
		}
		done <- b
	}()
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := bytes.Repeat([]byte{byte('a' + w)}, chunk)
			for range writes {
				if _, err := dc.Write(p); err != nil {
					t.Errorf("writer %d: %v", w, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := dc.CloseWrite(); err != nil {
		t.Fatalf("CloseWrite: %v", err)
	}
	got := <-done
	if len(got) != writers*writes*chunk {
		t.Fatalf("received %d bytes, want %d", len(got), writers*writes*chunk)
	}
	seen := map[byte]int{}
	for off := 0; off < len(got); off += chunk {
		run := got[off : off+chunk]
		if bytes.Count(run, run[:1]) != chunk {
			t.Fatalf("Write at offset %d interleaved with another", off)
		}
		seen[run[0]]++
	}
	for w := range writers {
		if seen[byte('a'+w)] != writes {
			t.Fatalf("writer %d: %d writes arrived, want %d", w, seen[byte('a'+w)], writes)
		}
	}
}

// CloseWrite racing a large Write: whatever Write reports written must
// arrive, and a CloseWrite that reports success must have sent
// close_notify after it (the peer reads a clean io.EOF, not a truncation).
func TestTLSCloseWriteDuringWrite(t *testing.T) {
	const size = 1 << 20
	p := bytes.Repeat([]byte{'x'}, size)
	for i := range 20 {
		dc, ac := tlsPair(t)
		type res struct {
			n   int
			err error
		}
		wrote := make(chan res, 1)
		started := make(chan struct{})
		go func() {
			close(started)
			n, err := dc.Write(p)
			wrote <- res{n, err}
		}()
		read := make(chan res, 1)
		go func() {
			ac.SetReadDeadline(time.Now().Add(testTimeout))
			b, err := io.ReadAll(ac)
			read <- res{len(b), err}
		}()
		<-started
		cerr := dc.CloseWrite()
		w := <-wrote
		// With close_notify sent the reader ends by itself; otherwise
		// end the TCP connection so it does not wait for its deadline.
		var r res
		select {
		case r = <-read:
		case <-time.After(testTimeout / 2):
			dc.Close()
			r = <-read
		}
		if w.err == nil && w.n != size {
			t.Fatalf("round %d: Write = %d, nil", i, w.n)
		}
		if r.n < w.n {
			t.Fatalf("round %d: Write reported %d bytes (err %v), peer received %d (err %v); CloseWrite: %v",
				i, w.n, w.err, r.n, r.err, cerr)
		}
		if cerr == nil && r.err != nil {
			t.Fatalf("round %d: CloseWrite succeeded but peer read ended with %v after %d bytes (Write %d, %v)",
				i, r.err, r.n, w.n, w.err)
		}
		dc.Close()
		ac.Close()
	}
}

// A Write that fails part-way (here: its deadline passes while the peer
// does not read) must not report records that never reached the socket
// as written: the relay counts what Write reports.
func TestTLSFailedWriteDoesNotOvercount(t *testing.T) {
	for i := range 3 {
		dc, ac := tlsPair(t)
		rawTCP(t, dc).SetWriteBuffer(16 << 10)
		rawTCP(t, ac).SetReadBuffer(16 << 10)
		dc.SetWriteDeadline(time.Now().Add(300 * time.Millisecond))
		n, err := dc.Write(make([]byte, 8<<20))
		if err == nil {
			t.Fatalf("round %d: Write of 8 MiB to a peer that does not read succeeded", i)
		}
		ac.SetReadDeadline(time.Now().Add(time.Second))
		got, _ := io.Copy(io.Discard, ac)
		if int64(n) > got {
			t.Fatalf("round %d: Write reported %d bytes with %v, peer received %d", i, n, err, got)
		}
		dc.Close()
		ac.Close()
	}
}

// net.Conn allows Read from several goroutines at once. Read's probe for
// further buffered records must not make another goroutine's Read fail
// with a spurious timeout.
func TestTLSConcurrentReads(t *testing.T) {
	dc, ac := tlsPair(t)
	const total = 32 << 20
	go func() {
		p := make([]byte, 8<<10)
		for sent := 0; sent < total; sent += len(p) {
			if _, err := dc.Write(p); err != nil {
				return
			}
		}
		dc.CloseWrite()
	}()
	ac.SetReadDeadline(time.Now().Add(4 * testTimeout))
	var got atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := make([]byte, 64<<10)
			for {
				n, err := ac.Read(b)
				got.Add(int64(n))
				if err == io.EOF {
					return
				}
				if err != nil {
					t.Errorf("Read after %d bytes in all: %v", got.Load(), err)
					ac.Close()
					return
				}
			}
		}()
	}
	wg.Wait()
	if got.Load() != total {
		t.Fatalf("received %d bytes, want %d", got.Load(), total)
	}
}
