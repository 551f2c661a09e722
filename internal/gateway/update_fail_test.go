package gateway

import (
	"testing"
	"time"

	"scistream/internal/api"
)

// TestUpdateStoreRefused: a PATCH the store refuses answers unavailable
// and changes nothing: the lease is not renewed (the stream still
// expires when it would have), and the stream's view keeps the rate it
// is paced at and the reservation the gateway counts.
func TestUpdateStoreRefused(t *testing.T) {
	var fs *failingStore
	clk := &clock{t: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)}
	s := newTestServer(t, func(c *Config) {
		fs = &failingStore{Store: c.Store}
		c.Store = fs
		c.Now = clk.Now
		c.Capacity.Rate = 1e9
		c.PendingTimeout = time.Hour
	})
	var st api.Stream
	callOK(t, s, "POST", "/v1/streams/inbound", aliceToken, rateBody(100e6, 0, 60), 201, &st)
	path := "/v1/streams/" + st.UID
	fs.fail.Store(true)
	callErr(t, s, "PATCH", path, aliceToken, `{"rate":300000000,"lease_s":3600}`, 503, api.CodeUnavailable, "retry later")
	fs.fail.Store(false)
	var got api.Stream
	callOK(t, s, "GET", path, aliceToken, "", 200, &got)
	if got.Rate != 100e6 || got.LeaseS != 60 || !got.Expires.Equal(st.Expires) {
		t.Fatalf("after a refused PATCH the stream shows rate %d, lease %d s to %s; want the unchanged 100 Mbit/s, 60 s to %s",
			got.Rate, got.LeaseS, got.Expires, st.Expires)
	}
	if r := liveStream(t, s, st.UID).bucket(dirToWAN).Rate(); r != 100e6 || info(t, s).ReservedRate != 100e6 {
		t.Fatalf("after a refused PATCH paced at %d, %d reserved", r, info(t, s).ReservedRate)
	}
	s.sweep(clk.Add(61*time.Second), time.Time{})
	callOK(t, s, "GET", path, aliceToken, "", 200, &got)
	if got.State != api.StateExpired {
		t.Fatalf("a lease renewal the store refused kept the stream alive past its lease: %s", got.State)
	}
}
