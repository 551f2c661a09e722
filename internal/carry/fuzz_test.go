package carry

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// FuzzParseFrames: any 16 bytes give a header or ErrFrame, never a
// panic; a valid header encodes back to the same bytes; open and join
// payloads round trip.
func FuzzParseFrames(f *testing.F) {
	f.Add(AppendHeader(nil, Header{Type: TypeData, Length: 5, Pos: 9}), []byte("hello"))
	f.Add(AppendOpen(nil, Open{ID: ID{7}, Window: 1 << 20, Stripes: 1})[:HeaderLen], AppendOpen(nil, Open{ID: ID{7}, Window: 1 << 20, Stripes: 1})[HeaderLen:])
	f.Add(AppendJoin(nil, Join{ID: ID{3}}, 77)[:HeaderLen], AppendJoin(nil, Join{ID: ID{3}}, 77)[HeaderLen:])
	f.Fuzz(func(t *testing.T, hdr, payload []byte) {
		if len(hdr) < HeaderLen {
			return
		}
		h, err := ParseHeader(hdr[:HeaderLen])
		if err != nil {
			return
		}
		if got := AppendHeader(nil, h); !bytes.Equal(got, hdr[:HeaderLen]) {
			t.Fatalf("header %+v encodes to %x, was %x", h, got, hdr[:HeaderLen])
		}
		switch h.Type {
		case TypeOpen:
			if o, err := ParseOpen(payload); err == nil {
				if b := AppendOpen(nil, o)[HeaderLen:]; !bytes.Equal(b, payload) {
					t.Fatalf("open %+v encodes to %x, was %x", o, b, payload)
				}
			}
		case TypeJoin:
			if j, err := ParseJoin(payload); err == nil {
				if b := AppendJoin(nil, j, 0)[HeaderLen:]; !bytes.Equal(b, payload) {
					t.Fatalf("join %+v encodes to %x, was %x", j, b, payload)
				}
			}
		}
	})
}

// fakeLeg is a leg whose peer sends b and then ends; what this side
// writes is dropped.
type fakeLeg struct {
	r *bytes.Reader
}

func (l *fakeLeg) Read(b []byte) (int, error)         { return l.r.Read(b) }
func (l *fakeLeg) Write(b []byte) (int, error)        { return len(b), nil }
func (l *fakeLeg) Close() error                       { return nil }
func (l *fakeLeg) LocalAddr() net.Addr                { return &net.TCPAddr{} }
func (l *fakeLeg) RemoteAddr() net.Addr               { return &net.TCPAddr{} }
func (l *fakeLeg) SetDeadline(t time.Time) error      { return nil }
func (l *fakeLeg) SetReadDeadline(t time.Time) error  { return nil }
func (l *fakeLeg) SetWriteDeadline(t time.Time) error { return nil }

// FuzzLeg: whatever a peer sends on a leg (frames well or badly formed,
// in any order), the connection ends (in order or with an error), never
// panics or hangs, and its application receives at most what data
// frames carried; striped too (frames out of order, overlapping, past
// the window, a fin before the bytes under it).
func FuzzLeg(f *testing.F) {
	var ok []byte
	ok = AppendHeader(ok, Header{Type: TypeAccepted, Length: 1 << 20})
	ok = AppendHeader(ok, Header{Type: TypeData, Length: 3, Pos: 0})
	ok = append(ok, "abc"...)
	ok = AppendHeader(ok, Header{Type: TypeFin, Pos: 3})
	ok = AppendHeader(ok, Header{Type: TypeAck, Pos: 1, Length: 1 << 20})
	f.Add(ok, true, false)
	f.Add(ok[HeaderLen:], false, false)
	f.Add(AppendReason(nil, TypeReset, "bye\x1b[2J"), false, false)
	var ooo []byte
	ooo = AppendHeader(ooo, Header{Type: TypeAccepted, Length: 1 << 20, Stripes: 4})
	ooo = AppendHeader(ooo, Header{Type: TypeData, Length: 3, Pos: 3})
	ooo = append(ooo, "def"...)
	ooo = AppendHeader(ooo, Header{Type: TypeData, Length: 4, Pos: 0})
	ooo = append(ooo, "abcd"...)
	ooo = AppendHeader(ooo, Header{Type: TypeFin, Pos: 6})
	f.Add(ooo, true, true)
	f.Add(ooo[HeaderLen:], false, true)
	f.Fuzz(func(t *testing.T, b []byte, dialer, striped bool) {
		c := New(Config{Window: 64 << 10}, dialer)
		if striped {
			c.SetStripes(4)
		}
		app, peer := net.Pipe()
		got := make(chan int, 1)
		go func() {
			n, _ := io.Copy(io.Discard, peer)
			got <- int(n)
		}()
		done := make(chan error, 1)
		go func() { done <- c.Relay(app, &fakeLeg{r: bytes.NewReader(b)}, Counts{}) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("Relay did not end on %x", b)
		}
		peer.Close()
		if n := <-got; n > len(b) {
			t.Fatalf("the application got %d bytes from %d on the leg", n, len(b))
		}
	})
}

// TestLargestDataFrame: a peer's data frame of MaxData bytes within a
// wide window arrives whole; one byte more is a broken frame that ends
// the connection (it once passed the header's check and overran the
// largest receive chunk: a panic of the whole gateway).
func TestLargestDataFrame(t *testing.T) {
	for _, n := range []int{MaxData, MaxData + 1, 1 << 20} {
		var b []byte
		b = AppendHeader(b, Header{Type: TypeData, Length: uint32(n), Pos: 0})
		b = append(b, bytes.Repeat([]byte{'x'}, n)...)
		c := New(Config{Window: 16 << 20}, false)
		appGW, app := tcpPair(t)
		legGW, peer := tcpPair(t)
		go peer.Write(b) // and the leg stays open
		done := make(chan error, 1)
		go func() { done <- c.Relay(appGW, legGW, Counts{}) }()
		if n <= MaxData {
			app.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.ReadFull(app, make([]byte, n)); err != nil {
				t.Errorf("a data frame of %d bytes: the application read %v", n, err)
			}
			c.Abort(errors.New("the test is done"), "")
			<-done
			continue
		}
		select {
		case err := <-done:
			if !errors.Is(err, ErrFrame) {
				t.Errorf("a data frame of %d bytes (over MaxData) ended the connection with %v, want a broken frame", n, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("a data frame of %d bytes (over MaxData) did not end the connection", n)
		}
		app.SetReadDeadline(time.Now().Add(5 * time.Second))
		if k, _ := io.Copy(io.Discard, app); k != 0 {
			t.Errorf("a data frame of %d bytes (over MaxData): the application got %d of them", n, k)
		}
	}
}

// TestTopClass: a sender reads into chunks of at most a quarter of its
// window, and of at least the smallest class.
func TestTopClass(t *testing.T) {
	for _, c := range []struct{ window, want int }{{1, 16 << 10}, {64 << 10, 16 << 10}, {1 << 20, 256 << 10}, {16 << 20, MaxData}, {1 << 30, MaxData}} {
		if got := chunkSizes[topClass(c.window)]; got != c.want {
			t.Errorf("window %d: chunks up to %d, want %d", c.window, got, c.want)
		}
	}
}
