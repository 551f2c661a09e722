package wan_test

import (
	"net"
	"testing"

	"scistream/internal/api"
	"scistream/internal/wan"
	"scistream/internal/wan/wantest"
)

// TestEndedUnread: wantest.EndedUnread on a leg of every transport.
func TestEndedUnread(t *testing.T) {
	for _, transport := range []string{api.WANTLS, api.WANTCP, api.WANQUIC} {
		t.Run(transport, func(t *testing.T) {
			wantest.EndedUnread(t, func() (dc, ac net.Conn) {
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
			})
		})
	}
}
