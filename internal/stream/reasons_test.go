package stream

import (
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	"scistream/internal/api"
	"scistream/internal/waitfor"
)

// relaySides is the relay's own names of its connections, which users
// must never read ("read a: ...", "write b: ...").
var relaySides = regexp.MustCompile(`\b(read|write) [ab]:`)

// TestLastErrorsNameTheEnds: an application that resets its connection
// mid-stream is, in the status of the outbound side (its last
// application reset), "the application", and in that of the inbound
// side, whose WAN leg the outbound side then reset, "the peer
// gateway's WAN leg"; never relay's "a" or "b".
func TestLastErrorsNameTheEnds(t *testing.T) {
	p := newWiredPair(t, api.WANTLS, 0, "")
	if got, err := p.roundTrip("hello"); err != nil || got != "hello" {
		t.Fatalf("the pair does not relay: %q, %v", got, err)
	}
	for i := 0; i < 3; i++ { // each an application reset on the outbound side
		c, err := net.DialTimeout("tcp", p.out.ListenerAddrs()[0], 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(20 * time.Second))
		c.Write([]byte("half a message"))
		buf := make([]byte, len("half a message"))
		if _, err := c.Read(buf); err != nil { // echoed: the whole path is up
			t.Fatal(err)
		}
		c.(*net.TCPConn).SetLinger(0)
		c.Close() // a reset
	}
	waitfor.Must(t, 20*time.Second, "the application's resets to be counted on the outbound side", func() bool {
		return p.out.Stats().AbortedByKind[api.EndAppReset] > 0
	})
	l := p.out.Stats().LastErrors[api.EndAppReset]
	if !strings.Contains(l.Reason, "the application: ") || relaySides.MatchString(l.Reason) {
		t.Errorf("the outbound side's last application reset says %q: want the application named, not relay's a or b", l.Reason)
	}
	waitfor.Must(t, 20*time.Second, "the inbound side to count the peer's reset", func() bool {
		return len(p.in.Stats().LastErrors) > 0
	})
	for kind, l := range p.in.Stats().LastErrors {
		if !strings.Contains(l.Reason, "the peer gateway's WAN leg: ") && !strings.Contains(l.Reason, "the application: ") || relaySides.MatchString(l.Reason) {
			t.Errorf("the inbound side's last %s says %q: want the WAN leg or the application named, not relay's a or b", kind, l.Reason)
		}
	}
}
