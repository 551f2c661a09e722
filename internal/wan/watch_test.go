package wan_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"scistream/internal/api"
	"scistream/internal/wan"
)

// acceptLeg starts a listener for the stream's channel-0 leg l and returns
// its address and the results of wan.AcceptLeg on each connection.
func acceptLeg(t *testing.T, l *wan.Leg) (string, <-chan legResult) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	ch := make(chan legResult, 4)
	go func() {
		for {
			raw, err := ln.Accept()
			if err != nil {
				return
			}
			r, err := wan.AcceptLeg(context.Background(), raw, l)
			if err != nil {
				ch <- legResult{err: err}
				continue
			}
			t.Cleanup(func() { r.Conn.Close() })
			ch <- legResult{r.Conn, r.Watch(), nil}
		}
	}()
	return ln.Addr().String(), ch
}

type legResult struct {
	conn  net.Conn
	watch bool
	err   error
}

func nextLeg(t *testing.T, ch <-chan legResult) legResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(testTimeout):
		t.Fatal("AcceptLeg did not return")
		return legResult{}
	}
}

// TestWatchLeg: the listener of channel 0 tells the watch leg from a data
// leg; each word the sender gives before closing arrives as its PeerEnd,
// and a leg that ends without a word (as a dead process's does) is lost.
func TestWatchLeg(t *testing.T) {
	for _, tr := range []string{api.WANTLS, api.WANTCP} {
		t.Run(tr, func(t *testing.T) {
			dl, al := legs(t, tr)
			dl.Channel, al.Channel = 0, 0
			addr, ch := acceptLeg(t, al)

			data, err := dial(t, addr, dl)
			if err != nil {
				t.Fatal(err)
			}
			if r := nextLeg(t, ch); r.err != nil || r.watch {
				t.Fatalf("a data leg on channel 0: watch %v, %v", r.watch, r.err)
			}
			data.Close()

			for _, end := range []wan.PeerEnd{wan.PeerReleased, wan.PeerStopping, wan.PeerLost} {
				w, err := wan.DialWatch(context.Background(), addr, dl)
				if err != nil {
					t.Fatal(err)
				}
				r := nextLeg(t, ch)
				if r.err != nil || !r.watch {
					t.Fatalf("the watch leg: watch %v, %v", r.watch, r.err)
				}
				peer := wan.NewWatch(r.conn)
				got := make(chan wan.PeerEnd, 1)
				go func() { e, _ := peer.Wait(); got <- e }()
				w.Close(end)
				if e := <-got; e != end {
					t.Fatalf("closed with %s, the peer saw %s", end, e)
				}
				peer.Close(wan.PeerLost)
			}
		})
	}
}

// TestWatchLegRefused: only the listener of channel 0 takes the watch leg,
// Accept (for data legs alone) refuses it, and its preface must prove the
// secret like any other.
func TestWatchLegRefused(t *testing.T) {
	dl, al := legs(t, api.WANTLS) // channel 7
	addr, ch := acceptLeg(t, al)
	if _, err := wan.DialWatch(context.Background(), addr, dl); err != nil {
		t.Fatal(err) // the preface is sent before the acceptor decides
	}
	if r := nextLeg(t, ch); !errors.Is(r.err, wan.ErrWrongStream) {
		t.Fatalf("watch leg to channel 7's listener: %v, want ErrWrongStream", r.err)
	}
	dl.Channel, al.Channel = 0, 0
	addr0, ch0 := listen(t, al)
	if _, err := wan.DialWatch(context.Background(), addr0, dl); err != nil {
		t.Fatal(err)
	}
	if r := waitAccept(t, ch0); !errors.Is(r.err, wan.ErrWrongStream) {
		t.Fatalf("watch leg to wan.Accept: %v, want ErrWrongStream", r.err)
	}
	bad := *dl
	bad.Secret = wan.NewSecret()
	addr1, ch1 := acceptLeg(t, al)
	if _, err := wan.DialWatch(context.Background(), addr1, &bad); err != nil {
		t.Fatal(err)
	}
	if r := nextLeg(t, ch1); !errors.Is(r.err, wan.ErrBadSecret) {
		t.Fatalf("watch leg without the secret: %v, want ErrBadSecret", r.err)
	}
}
