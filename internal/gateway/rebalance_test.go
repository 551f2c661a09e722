package gateway

import (
	"sync"
	"testing"

	"scistream/internal/api"
	"scistream/internal/ports"
	"scistream/internal/stream"
)

// TestRebalanceConcurrent: grants changing at once on many streams (a
// burst of PATCHes, releases) leave best effort with what the last of
// them leaves, never with a sum one of them took before another's
// change: a stale sum would keep best effort paced, or unpaced, for
// nothing until the next change of a grant.
func TestRebalanceConcurrent(t *testing.T) {
	const n = 16
	s := newTestServer(t, func(c *Config) {
		c.Capacity.Rate = 1e9
		c.PortRange = ports.Range{Lo: 5100, Hi: 5115}
		c.Quota.Streams, c.Quota.Ports = n, n
	})
	var sts []*stream.Stream
	for range n {
		var got api.Stream
		callOK(t, s, "POST", "/v1/streams/inbound", aliceToken, rateBody(0, 0, 0), 201, &got)
		sts = append(sts, liveStream(t, s, got.UID))
	}
	for round := range 200 {
		var wg sync.WaitGroup
		for i, st := range sts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if round%2 == 0 || i%2 == 0 {
					st.Pace.Set(10e6)
				} else {
					st.Pace.Set(0)
				}
				s.rebalance()
			}()
		}
		wg.Wait()
		var sum int64
		for _, st := range sts {
			sum += int64(st.Pace.Rate())
		}
		if got := int64(s.env.BestEffort.Reserved()); got != sum {
			t.Fatalf("round %d: best effort set for %d reserved, the streams hold %d", round, got, sum)
		}
	}
}
