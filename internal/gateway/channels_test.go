package gateway

import (
	"encoding/json"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"scistream/internal/api"
	"scistream/internal/store"
	"scistream/internal/waitfor"
)

// TestListenersArmed: the listener of an inbound channel with a
// plaintext WAN leg is armed to reset what it accepts (relay.ResetOnClose
// from the handshake on); a TLS leg's is not, so that a refused
// handshake's alert still reaches the peer.
func TestListenersArmed(t *testing.T) {
	s := newTestServer(t, func(c *Config) { c.AllowTCPWAN = true })
	linger := func(uid string) (*unix.Linger, error) {
		s.mu.Lock()
		st := s.streams[store.Key{Owner: "alice", UID: uid}]
		s.mu.Unlock()
		raw, err := st.Listeners()[0].SyscallConn()
		if err != nil {
			return nil, err
		}
		var l *unix.Linger
		var gerr error
		if err := raw.Control(func(fd uintptr) { l, gerr = unix.GetsockoptLinger(int(fd), unix.SOL_SOCKET, unix.SO_LINGER) }); err != nil {
			return nil, err
		}
		return l, gerr
	}
	for _, c := range []struct {
		wan   string
		armed bool
	}{{api.WANTCP, true}, {api.WANTLS, false}} {
		b, _ := json.Marshal(api.InboundRequest{RemoteIP: "127.0.0.1", ReceiverPorts: []int{9}, NumConn: 1, WAN: c.wan})
		var st api.Stream
		callOK(t, s, "POST", "/v1/streams/inbound", aliceToken, string(b), 201, &st)
		var l *unix.Linger
		var err error
		if c.armed {
			// The accept loop arms its listener as it starts.
			waitfor.Must(t, 10*time.Second, "the "+c.wan+" channel's listener to be armed", func() bool {
				l, err = linger(st.UID)
				return err != nil || l.Onoff == 1
			})
		} else {
			l, err = linger(st.UID)
		}
		if err != nil {
			t.Fatal(err)
		}
		if armed := l.Onoff == 1 && l.Linger == 0; armed != c.armed {
			t.Errorf("wan %s: the listener's SO_LINGER is %+v; armed %v, want %v", c.wan, *l, armed, c.armed)
		}
	}
}
