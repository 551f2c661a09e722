package wan_test

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"scistream/internal/api"
	"scistream/internal/relay"
	"scistream/internal/waitfor"
	"scistream/internal/wan"
)

// TestEndedUnread: a leg held unread is not over while the peer's bytes
// and its orderly end wait (they read intact afterwards); once the peer
// aborts it, Ended says so without a read, as a reset by the peer; once
// this side closes it, as net.ErrClosed. For every transport.
func TestEndedUnread(t *testing.T) {
	for _, transport := range []string{api.WANTLS, api.WANTCP, api.WANQUIC} {
		t.Run(transport, func(t *testing.T) {
			pair := func() (dc, ac net.Conn) {
				if transport == api.WANQUIC {
					dc, ac, _, _, _ := quicPair(t, wan.QUICConfig{})
					return dc, ac
				}
				dl, al := legs(t, transport)
				addr, ch := listen(t, al)
				dc, err := dial(t, addr, dl)
				if err != nil {
					t.Fatalf("Dial: %v", err)
				}
				r := waitAccept(t, ch)
				if r.err != nil {
					t.Fatalf("Accept: %v", r.err)
				}
				return dc, r.conn
			}

			dc, ac := pair()
			if _, err := dc.Write([]byte("held")); err != nil {
				t.Fatal(err)
			}
			closeWrite(t, dc)
			// The bytes and the end reach the acceptor's buffers; no
			// read of ac tells when, so ask for a while: an Ended that
			// took the orderly end for an end would say so.
			var err error
			if waitfor.Cond(200*time.Millisecond, func() bool { err = wan.Ended(ac); return err != nil }) {
				t.Fatalf("a leg whose peer sent bytes and its end, unread: %v, want nil", err)
			}
			ac.SetReadDeadline(time.Now().Add(testTimeout))
			if got, err := io.ReadAll(ac); err != nil || string(got) != "held" {
				t.Fatalf("read after holding: %q, %v; want \"held\" then EOF", got, err)
			}

			dc, ac = pair()
			dc.Write([]byte("lost"))
			relay.Abort(dc)
			waitfor.Must(t, testTimeout, "Ended to see the peer's abort", func() bool { err = wan.Ended(ac); return err != nil })
			if !wan.ResetByPeer(err) {
				t.Fatalf("after the peer's abort: %v, want a reset by the peer", err)
			}

			_, ac = pair()
			relay.Abort(ac)
			if err := wan.Ended(ac); !errors.Is(err, net.ErrClosed) {
				t.Fatalf("after this side's abort: %v, want net.ErrClosed", err)
			}
		})
	}
}
