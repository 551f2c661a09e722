package sockmap_test

import (
	"bytes"
	"crypto/sha256"
	"io"
	"sync"
	"testing"

	"scistream/internal/loopback"
	"scistream/internal/relay"
	"scistream/internal/sockmap"
)

// Two relays in series (as two gateways), several connections at once,
// the middle hop starting with a preface read in user space. It caught
// bytes lost when the ingress socket was taken out of the map while data
// arrived (see pass).
func TestChainedRelays(t *testing.T) {
	r1 := newRedirector(t, sockmap.Config{})
	r2 := newRedirector(t, sockmap.Config{})
	e1, e2 := sockmapEngine(t, r1), sockmapEngine(t, r2)
	const conns = 6
	size := int64(8 << 20)
	if testing.Short() {
		size = 4 << 20
	}
	var wg sync.WaitGroup
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			A, ra := loopback.TCPPair(t)
			rb, ma := loopback.TCPPair(t) // WAN leg
			mb, B := loopback.TCPPair(t)
			deadline(A, B, ma, rb)
			// A preface in user space on the middle hop, as a WAN leg has,
			// written (as the gateway does) before the relay starts: the
			// relay counts what its egress socket took from its start, and
			// rightly aborts on 8 bytes it did not send (it did, under
			// load, when this write raced the relay's start).
			if _, err := rb.Write([]byte("preface-")); err != nil {
				t.Error(err)
				return
			}
			go relay.Relay(e1, ra, rb, func(int64) {}, func(int64) {})
			sent := sha256.New()
			go sendHashed(A, uint64(i), size+int64(i), sent)
			pre := make([]byte, 8)
			if _, err := io.ReadFull(ma, pre); err != nil {
				t.Error(err)
				return
			}
			go relay.Relay(e2, ma, mb, func(int64) {}, func(int64) {})
			got := sha256.New()
			n, err := io.Copy(got, B)
			if err != nil || n != size+int64(i) || !bytes.Equal(got.Sum(nil), sent.Sum(nil)) {
				t.Errorf("conn %d: got %d of %d bytes, %v, equal %v", i, n, size+int64(i), err, bytes.Equal(got.Sum(nil), sent.Sum(nil)))
			}
			B.CloseWrite()
		}()
	}
	wg.Wait()
	t.Logf("r1 %+v\nr2 %+v", r1.Stats(), r2.Stats())
}
