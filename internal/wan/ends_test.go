package wan_test

import (
	"net"
	"testing"

	"scistream/internal/api"
	"scistream/internal/wan/wantest"
)

// TestEndedUnread: wantest.EndedUnread on a TLS and a TCP leg (a QUIC
// stream's: internal/wanquic).
func TestEndedUnread(t *testing.T) {
	for _, transport := range []string{api.WANTLS, api.WANTCP} {
		t.Run(transport, func(t *testing.T) {
			wantest.EndedUnread(t, func() (dc, ac net.Conn) {
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
			})
		})
	}
}
