package relay_test

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"io"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"scistream/internal/leakcheck"
	"scistream/internal/loopback"
	"scistream/internal/relay"
	"scistream/internal/relay/relaytest"
	"scistream/internal/waitfor"
)

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	return len(ents)
}

// Every path out of Relay (clean end, and a release while the consumer
// does not read, so bytes sit in the engine's pipe or ring) returns
// promptly and closes every descriptor it used, pipes included.
func TestNoDescriptorLeak(t *testing.T) {
	for _, e := range engines {
		t.Run(e.Name(), func(t *testing.T) {
			leakcheck.Check(t)
			before := openFDs(t)
			for i := range 20 {
				s := relaytest.Start(t, e)
				A, B := s.A, s.B
				deadline(A)
				deadline(B)
				if i%2 == 0 {
					// Clean end both ways.
					if _, err := A.Write([]byte("ping")); err != nil {
						t.Fatal(err)
					}
					A.CloseWrite()
					if b, err := io.ReadAll(B); err != nil || string(b) != "ping" {
						t.Fatalf("B read %q, %v", b, err)
					}
					B.CloseWrite()
					if b, err := io.ReadAll(A); err != nil || len(b) != 0 {
						t.Fatalf("A read %q, %v", b, err)
					}
				} else {
					// B never reads: the relay blocks writing to it with
					// bytes in flight. Release it as a gateway does.
					go A.Write(make([]byte, 8<<20))
					waitfor.Must(t, testTimeout, "the relay to move bytes", func() bool { return s.AB() > 0 })
					relay.Abort(s.RA)
					relay.Abort(s.RB)
				}
				select {
				case <-s.Done():
				case <-time.After(5 * time.Second):
					t.Fatalf("round %d: Relay did not return", i)
				}
				A.Close()
				B.Close()
			}
			// A Close while another goroutine still writes (A above)
			// releases the descriptor only when that write returns.
			if !waitfor.Cond(5*time.Second, func() bool { return openFDs(t) <= before }) {
				t.Fatalf("open descriptors: %d before, %d after", before, openFDs(t))
			}
		})
	}
}

// Tiny socket buffers force short reads, writes and splices at every
// step, and a slow consumer keeps the relay's writes blocking: every
// byte must still arrive, once, in order.
func TestTinyBuffersSlowConsumer(t *testing.T) {
	const size = 1 << 20
	data := make([]byte, size)
	rand.Read(data)
	want := sha256.Sum256(data)
	for _, e := range engines {
		t.Run(e.Name(), func(t *testing.T) {
			leakcheck.Check(t)
			A, ra := loopback.TCPPair(t)
			rb, B := loopback.TCPPair(t)
			for _, c := range []*net.TCPConn{A, ra, rb, B} {
				c.SetReadBuffer(16 << 10)
				c.SetWriteBuffer(16 << 10)
			}
			var ab atomic.Int64
			done := make(chan error, 1)
			go func() {
				done <- relay.Relay(e, ra, rb, func(n int64) { ab.Add(n) }, func(int64) {})
			}()
			deadline(A)
			deadline(B)
			go func() {
				A.Write(data)
				A.CloseWrite()
			}()
			h := sha256.New()
			buf := make([]byte, 1500)
			var got int64
			for {
				n, err := B.Read(buf)
				h.Write(buf[:n])
				got += int64(n)
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatalf("read after %d bytes: %v", got, err)
				}
			}
			if got != size || !bytes.Equal(h.Sum(nil), want[:]) {
				t.Fatalf("received %d bytes (want %d), digest match %v", got, size, bytes.Equal(h.Sum(nil), want[:]))
			}
			B.CloseWrite()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("Relay = %v", err)
				}
			case <-time.After(testTimeout):
				t.Fatal("Relay did not return")
			}
			if ab.Load() != size {
				t.Fatalf("counted %d, want %d", ab.Load(), size)
			}
		})
	}
}
