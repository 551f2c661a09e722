package wan_test

import (
	"context"
	"errors"
	"testing"

	"scistream/internal/api"
	"scistream/internal/wan"
	"scistream/internal/wan/wantest"
)

// TestWatchLeg: the listener of channel 0 tells the watch leg from a data
// leg; each word the sender gives before closing arrives as its PeerEnd,
// and a leg that ends without a word (as a dead process's does) is lost.
func TestWatchLeg(t *testing.T) {
	for _, tr := range []string{api.WANTLS, api.WANTCP} {
		t.Run(tr, func(t *testing.T) {
			dl, al := legs(t, tr)
			dl.Channel, al.Channel = 0, 0
			addr, next := wantest.AcceptLegs(t, al)

			data, err := dial(t, addr, dl)
			if err != nil {
				t.Fatal(err)
			}
			if r := next(t); r.Err != nil || r.Watch {
				t.Fatalf("a data leg on channel 0: watch %v, %v", r.Watch, r.Err)
			}
			data.Close()

			for _, end := range []wan.PeerEnd{wan.PeerReleased, wan.PeerStopping, wan.PeerLost} {
				w, err := wan.DialWatch(context.Background(), addr, dl)
				if err != nil {
					t.Fatal(err)
				}
				r := next(t)
				if r.Err != nil || !r.Watch {
					t.Fatalf("the watch leg: watch %v, %v", r.Watch, r.Err)
				}
				peer := wan.NewWatch(r.Conn)
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
	addr, next := wantest.AcceptLegs(t, al)
	if _, err := wan.DialWatch(context.Background(), addr, dl); err != nil {
		t.Fatal(err) // the preface is sent before the acceptor decides
	}
	if r := next(t); !errors.Is(r.Err, wan.ErrWrongStream) {
		t.Fatalf("watch leg to channel 7's listener: %v, want ErrWrongStream", r.Err)
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
	addr1, next1 := wantest.AcceptLegs(t, al)
	if _, err := wan.DialWatch(context.Background(), addr1, &bad); err != nil {
		t.Fatal(err)
	}
	if r := next1(t); !errors.Is(r.Err, wan.ErrBadSecret) {
		t.Fatalf("watch leg without the secret: %v, want ErrBadSecret", r.Err)
	}
}
