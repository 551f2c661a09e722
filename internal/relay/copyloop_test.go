package relay

import (
	"bytes"
	"crypto/sha256"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"testing"
	"time"

	"scistream/internal/loopback"
)

// hidden hides a connection's type, so copyLoop sees neither a TCP
// socket nor a try-reader: the way a TLS leg's bytes come.
type hidden struct{ net.Conn }

// TestCopyLoopSlowDestination: copying into a consumer that reads in
// small sips (its socket fills again and again, so writes wait and the
// loop holds its buffer across them), every byte arrives, in order.
func TestCopyLoopSlowDestination(t *testing.T) {
	srcW, srcR := loopback.TCPPair(t)
	dstW, dstR := loopback.TCPPair(t)
	for _, c := range []*net.TCPConn{srcW, srcR, dstW, dstR} {
		c.SetDeadline(time.Now().Add(time.Minute))
	}
	dstR.SetReadBuffer(16 << 10)
	const total = 32 << 20
	data := make([]byte, total)
	rng := rand.NewChaCha8([32]byte{7})
	rng.Read(data)
	go func() {
		srcW.Write(data)
		srcW.CloseWrite()
	}()
	errc := make(chan error, 1)
	var moved int64
	go func() {
		err := newCopyBufs(DefaultCopyBudget).copyLoop(dstW, hidden{srcR}, func(n int64) { moved += n })
		dstW.CloseWrite()
		errc <- err
	}()
	h := sha256.New()
	buf := make([]byte, 3<<10)
	var got int
	for {
		n, err := dstR.Read(buf) // small sips: the destination stays full
		h.Write(buf[:n])
		got += n
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	want := sha256.Sum256(data)
	if got != total || moved != total || !bytes.Equal(h.Sum(nil), want[:]) {
		t.Fatalf("consumer got %d bytes (copy counted %d) of %d, or other bytes", got, moved, total)
	}
}

// TestCopyBufsBySize: each copy reads through 512 KiB while the budget
// gives that much to every copy running, and through smaller buffers,
// down to 4 KiB, as more run at once.
func TestCopyBufsBySize(t *testing.T) {
	c := newCopyBufs(DefaultCopyBudget)
	for _, tc := range []struct {
		active int64
		want   int
	}{{0, 512 << 10}, {1, 512 << 10}, {64, 512 << 10}, {65, 256 << 10}, {128, 256 << 10}, {129, 64 << 10}, {512, 64 << 10}, {513, 16 << 10}, {2048, 16 << 10}, {2049, 4 << 10}, {10000, 4 << 10}} {
		c.active.Store(tc.active)
		b := c.get()
		if len(*b) != tc.want {
			t.Errorf("%d copies running: a %d-byte buffer, want %d", tc.active, len(*b), tc.want)
		}
		c.put(b)
	}
}

// TestRingsBySize: a QUIC leg's copy gets a ring of the configured size
// while the ring budget allows it for every copy running, and smaller
// ones (down to 16 KiB) as more run at once.
func TestRingsBySize(t *testing.T) {
	r := newRings(DefaultRingBudget, DefaultBufferSize)
	var sizes []int
	for _, b := range r.bySize {
		sizes = append(sizes, b.size)
	}
	if want := []int{4 << 20, 1 << 20, 256 << 10, 64 << 10, 16 << 10}; !slices.Equal(sizes, want) {
		t.Fatalf("ring sizes %v, want %v", sizes, want)
	}
	for _, tc := range []struct {
		n    int64
		want int
	}{{1, 4 << 20}, {128, 4 << 20}, {129, 1 << 20}, {512, 1 << 20}, {2048, 256 << 10}, {8192, 64 << 10}, {8193, 16 << 10}, {20000, 16 << 10}} {
		if got := r.pick(tc.n).size; got != tc.want {
			t.Errorf("%d copies running: a %d-byte ring, want %d", tc.n, got, tc.want)
		}
	}
	if small := newRings(DefaultRingBudget, MinBufferSize); len(small.bySize) != 2 {
		t.Fatalf("a 64 KiB buffer size gives %d ring sizes, want 2 (64 and 16 KiB)", len(small.bySize))
	}
}
