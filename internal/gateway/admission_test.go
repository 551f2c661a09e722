package gateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"scistream/internal/admission"
	"scistream/internal/api"
	"scistream/internal/client"
	"scistream/internal/intake"
	"scistream/internal/metricstest"
	"scistream/internal/pace"
	"scistream/internal/ports"
	"scistream/internal/store"
	"scistream/internal/stream"
)

// rateBody is an inbound request for one channel with a rate, a least
// rate and a lease.
func rateBody(rate, least int64, leaseS int) string {
	b, _ := json.Marshal(api.InboundRequest{RemoteIP: "127.0.0.1", ReceiverPorts: []int{9}, NumConn: 1, Rate: rate, MinRate: least, LeaseS: leaseS})
	return string(b)
}

func info(t *testing.T, s *Server) api.Info {
	t.Helper()
	var i api.Info
	callOK(t, s, "GET", "/v1/info", aliceToken, "", 200, &i)
	return i
}

// TestAdmission: a rate is granted whole when it fits the capacity and
// the owner's quota, what is left down to min_rate when not, and refused
// below that naming the limit; the streams and channels of the capacity
// bind every identity together; a release gives its share back.
func TestAdmission(t *testing.T) {
	s := newTestServer(t, func(c *Config) {
		c.PortRange = ports.Range{Lo: 5100, Hi: 5119}
		c.Capacity = admission.Capacity{Rate: 1e9, Streams: 4, Conns: 6}
		c.Quota.Rate = 600e6
	})
	var a1, a2, b1 api.Stream
	callOK(t, s, "POST", "/v1/streams/inbound", aliceToken, rateBody(500e6, 0, 0), 201, &a1)
	if a1.Rate != 500e6 || a1.RateRequested != 500e6 || a1.MinRate != 500e6 {
		t.Fatalf("first grant: rate %d requested %d min %d", a1.Rate, a1.RateRequested, a1.MinRate)
	}
	callErr(t, s, "POST", "/v1/streams/inbound", aliceToken, rateBody(500e6, 0, 0), 507, api.CodeNoResources, "--quota_rate")
	callOK(t, s, "POST", "/v1/streams/inbound", aliceToken, rateBody(500e6, 50e6, 0), 201, &a2)
	if a2.Rate != 100e6 {
		t.Fatalf("alice's second stream got %d, want the 100 Mbit/s her quota leaves", a2.Rate)
	}
	callErr(t, s, "POST", "/v1/streams/inbound", bobToken, rateBody(500e6, 0, 0), 507, api.CodeNoResources, "--capacity_rate")
	callOK(t, s, "POST", "/v1/streams/inbound", bobToken, rateBody(500e6, 300e6, 0), 201, &b1)
	if b1.Rate != 400e6 {
		t.Fatalf("bob got %d, want the 400 Mbit/s the capacity leaves", b1.Rate)
	}
	if i := info(t, s); i.CapacityRate != 1e9 || i.ReservedRate != 1e9 || i.QuotaRate != 600e6 {
		t.Fatalf("info: capacity %d reserved %d quota %d", i.CapacityRate, i.ReservedRate, i.QuotaRate)
	}
	callErr(t, s, "POST", "/v1/streams/inbound", bobToken, rateBody(1e6, 0, 0), 507, api.CodeNoResources, "--capacity_rate")
	callOK(t, s, "POST", "/v1/streams/inbound", bobToken, rateBody(0, 0, 0), 201, nil) // best effort takes no reservation
	callErr(t, s, "POST", "/v1/streams/inbound", bobToken, rateBody(0, 0, 0), 507, api.CodeNoResources, "--capacity_streams")

	callOK(t, s, "DELETE", "/v1/streams/"+a1.UID, aliceToken, "", 200, nil)
	if i := info(t, s); i.ReservedRate != 500e6 {
		t.Fatalf("reserved %d after a release of 500 Mbit/s, want 500 Mbit/s", i.ReservedRate)
	}
	body := `{"remote_ip":"127.0.0.1","receiver_ports":[9],"num_conn":4}`
	callErr(t, s, "POST", "/v1/streams/inbound", aliceToken, body, 507, api.CodeNoResources, "--capacity_conns")
	callOK(t, s, "POST", "/v1/streams/inbound", aliceToken, rateBody(500e6, 0, 0), 201, nil) // her quota again
}

// TestAdmissionRefusals: rates, least rates and leases out of range are
// refused naming the field, and nothing is held.
func TestAdmissionRefusals(t *testing.T) {
	s := newTestServer(t, func(c *Config) { c.LeaseMax = time.Hour })
	for _, c := range []struct {
		body, mention string
	}{
		{rateBody(-1, 0, 0), "rate -1"},
		{rateBody(999, 0, 0), "below the least"},
		{rateBody(int64(pace.Max)+1, 0, 0), "10 Tbit/s"},
		{rateBody(100e6, 200e6, 0), "min_rate"},
		{rateBody(0, 5e6, 0), "min_rate"},
		{rateBody(100e6, -5, 0), "min_rate"},
		{rateBody(0, 0, -1), "lease_s -1"},
		{rateBody(0, 0, 3601), "s2cs --lease_max"},
		{`{"remote_ip":"127.0.0.1","receiver_ports":[9],"num_conn":1,"rate":"10G"}`, `"rate" must be int64`},
		{`{"remote_ip":"127.0.0.1","receiver_ports":[9],"num_conn":1,"rate":1e400}`, "rate"},
	} {
		callErr(t, s, "POST", "/v1/streams/inbound", aliceToken, c.body, 400, api.CodeInvalidArgument, c.mention)
	}
	if n := s.alloc.InUse(); n != 0 || len(s.live()) != 0 {
		t.Fatalf("refusals left %d ports and %d streams", n, len(s.live()))
	}
}

// TestAdmissionConcurrent: requests that arrive together cannot reserve
// more than the capacity between them.
func TestAdmissionConcurrent(t *testing.T) {
	s := newTestServer(t, func(c *Config) {
		c.PortRange = ports.Range{Lo: 5100, Hi: 5139}
		c.Capacity.Rate = 500e6
	})
	if n := concurrently(t, s, 20, rateBody(100e6, 0, 0)); n[201] != 5 || n[507] != 15 {
		t.Fatalf("20 concurrent requests of 100 Mbit/s under a capacity of 500 Mbit/s: %v", n)
	}
}

// TestReservationSurvivesRestart: a restarted gateway holds the rates it
// granted before, and admits against them.
func TestReservationSurvivesRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	open := func() *Server {
		return newTestServer(t, func(c *Config) {
			c.Store.Close()
			st, err := store.OpenBolt(path)
			if err != nil {
				t.Fatal(err)
			}
			c.Store = st
			c.Capacity.Rate = 1e9
		})
	}
	s := open()
	var got api.Stream
	callOK(t, s, "POST", "/v1/streams/inbound", aliceToken, rateBody(700e6, 0, 0), 201, &got)
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	s = open()
	if i := info(t, s); i.ReservedRate != 700e6 {
		t.Fatalf("after a restart %d reserved, want 700 Mbit/s", i.ReservedRate)
	}
	callOK(t, s, "GET", "/v1/streams/"+got.UID, aliceToken, "", 200, &got)
	if got.Rate != 700e6 || got.State != api.StateListening {
		t.Fatalf("restored stream: %s rate %d", got.State, got.Rate)
	}
	callErr(t, s, "POST", "/v1/streams/inbound", bobToken, rateBody(400e6, 0, 0), 507, api.CodeNoResources, "300 Mbit/s left")
}

// TestUpdate: PATCH changes the rate (an increase admitted as a request
// is), the allow-list of an outbound stream and the lease, and refuses
// what it cannot do naming the field.
func TestUpdate(t *testing.T) {
	clk := &clock{t: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)}
	s := newTestServer(t, func(c *Config) {
		c.Now = clk.Now
		c.Capacity.Rate = 1e9
		c.LeaseMax = 48 * time.Hour
	})
	var a, b api.Stream
	callOK(t, s, "POST", "/v1/streams/inbound", aliceToken, rateBody(300e6, 0, 0), 201, &a)
	callOK(t, s, "POST", "/v1/streams/inbound", bobToken, rateBody(500e6, 0, 0), 201, &b)
	path := "/v1/streams/" + a.UID
	var got api.Stream
	callOK(t, s, "PATCH", path, aliceToken, `{"rate":500000000}`, 200, &got)
	if got.Rate != 500e6 || liveStream(t, s, a.UID).Bucket(stream.DirToWAN).Rate() != 500e6 {
		t.Fatalf("after PATCH rate 500M: %d", got.Rate)
	}
	callErr(t, s, "PATCH", path, aliceToken, `{"rate":600000000}`, 507, api.CodeNoResources, "--capacity_rate")
	callOK(t, s, "GET", path, aliceToken, "", 200, &got)
	if got.Rate != 500e6 {
		t.Fatalf("a refused increase changed the rate to %d", got.Rate)
	}
	got = api.Stream{} // an absent rate is best effort
	callOK(t, s, "PATCH", path, aliceToken, `{"rate":0}`, 200, &got)
	if got.Rate != 0 || info(t, s).ReservedRate != 500e6 || liveStream(t, s, a.UID).Pace.Bucket(stream.DirToWAN) != nil {
		t.Fatalf("after PATCH rate 0: rate %d, reserved %d", got.Rate, info(t, s).ReservedRate)
	}
	// With bob's 500M reserved, alice's best-effort stream shares what is left.
	if bk := liveStream(t, s, a.UID).Bucket(stream.DirFromWAN); bk == nil || bk.Rate() != 500e6 {
		t.Fatalf("a best-effort stream beside 500 Mbit/s reserved of 1 Gbit/s is paced at %v, want 500 Mbit/s", bk)
	}
	callOK(t, s, "PATCH", path, aliceToken, `{"lease_s":172800}`, 200, &got)
	if want := clk.Now().Add(48 * time.Hour); !got.Expires.Equal(want) || got.LeaseS != 172800 {
		t.Fatalf("renewed lease: %d s expiring %s, want %s", got.LeaseS, got.Expires, want)
	}
	if rec, err := s.cfg.Store.Get(store.Key{Owner: "alice", UID: a.UID}); err != nil || rec.LeaseS != 172800 || rec.Rate != 0 {
		t.Fatalf("stored after updates: %+v, %v", rec, err)
	}
	for _, c := range []struct{ body, mention string }{
		{`{}`, "nothing to update"},
		{`{"rate":-5}`, "rate -5"},
		{`{"lease_s":0}`, "lease_s 0"},
		{`{"lease_s":172801}`, "--lease_max"},
		{`{"allow":["10.0.0.0/8"]}`, "inbound stream has no allow-list"},
		{`{"min_rate":5}`, "min_rate"},
		{`{"rate":5`, "malformed"},
	} {
		callErr(t, s, "PATCH", path, aliceToken, c.body, 400, api.CodeInvalidArgument, c.mention)
	}
	callErr(t, s, "PATCH", path, bobToken, `{"rate":0}`, 404, api.CodeNotFound, "of yours")
	callOK(t, s, "DELETE", path, aliceToken, "", 200, nil)
	callErr(t, s, "PATCH", path, aliceToken, `{"rate":0}`, 409, api.CodeConflict, "has ended")
}

// TestUpdateAllow: a new allow-list admits and refuses from the next
// connection on, and is kept.
func TestUpdateAllow(t *testing.T) {
	in, out := newTestServer(t, nil), newTestServer(t, nil)
	var inS, outS api.Stream
	callOK(t, in, "POST", "/v1/streams/inbound", aliceToken, inboundBody(9), 201, &inS)
	ob, _ := json.Marshal(api.OutboundRequest{UID: inS.UID, PeerListeners: inS.Listeners, NumConn: 1,
		PeerCert: inS.WANCert, Secret: inS.Secret, Allow: []string{"127.0.0.0/8"}})
	callOK(t, out, "POST", "/v1/streams/outbound", aliceToken, string(ob), 201, &outS)
	st := liveStream(t, out, inS.UID)
	if !st.Admits(tcpAddr("127.0.0.5")) {
		t.Fatal("the first allow-list refuses 127.0.0.5")
	}
	var got api.Stream
	callOK(t, out, "PATCH", "/v1/streams/"+inS.UID, aliceToken, `{"allow":["10.1.0.0/16","192.0.2.7"]}`, 200, &got)
	if strings.Join(got.Allow, ",") != "10.1.0.0/16,192.0.2.7" || st.Admits(tcpAddr("127.0.0.5")) || !st.Admits(tcpAddr("10.1.3.4")) || !st.Admits(tcpAddr("192.0.2.7")) {
		t.Fatalf("after the update: allow %v", got.Allow)
	}
	callErr(t, out, "PATCH", "/v1/streams/"+inS.UID, aliceToken, `{"allow":["10.1.0.0/33"]}`, 400, api.CodeInvalidArgument, "allow")
	callErr(t, out, "PATCH", "/v1/streams/"+inS.UID, aliceToken, `{"allow":[`+strings.Repeat(`"10.0.0.1",`, api.MaxAllow)+`"10.0.0.1"]}`, 400, api.CodeInvalidArgument, "at most")
	if rec, err := out.cfg.Store.Get(store.Key{Owner: "alice", UID: inS.UID}); err != nil || len(rec.Allow) != 2 {
		t.Fatalf("stored allow-list: %+v, %v", rec, err)
	}
}

// TestLease: a stream lives until its lease runs out, to the second; a
// renewal runs from when it is made; the end says why and frees the
// reservation.
func TestLease(t *testing.T) {
	clk := &clock{t: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)}
	s := newTestServer(t, func(c *Config) {
		c.Now = clk.Now
		c.PendingTimeout = time.Hour
	})
	var st, other api.Stream
	callOK(t, s, "POST", "/v1/streams/inbound", aliceToken, rateBody(100e6, 0, 60), 201, &st)
	callOK(t, s, "POST", "/v1/streams/inbound", aliceToken, rateBody(0, 0, 0), 201, &other)
	if want := clk.Now().Add(time.Minute); st.LeaseS != 60 || !st.Expires.Equal(want) {
		t.Fatalf("lease %d s expiring %s, want 60 s at %s", st.LeaseS, st.Expires, want)
	}
	if other.LeaseS != int(intake.DefaultLease.Seconds()) {
		t.Fatalf("default lease %d s, want %s", other.LeaseS, intake.DefaultLease)
	}
	path := "/v1/streams/" + st.UID
	s.sweep(clk.Add(30*time.Second), time.Time{})
	callOK(t, s, "PATCH", path, aliceToken, `{"lease_s":60}`, 200, nil) // now runs to +90s
	s.sweep(clk.Add(59*time.Second), time.Time{})
	var got api.Stream
	callOK(t, s, "GET", path, aliceToken, "", 200, &got)
	if got.State != api.StateListening {
		t.Fatalf("renewed stream is %s before its renewed lease ran out", got.State)
	}
	s.sweep(clk.Add(time.Second), time.Time{})
	callOK(t, s, "GET", path, aliceToken, "", 200, &got)
	if got.State != api.StateExpired || !strings.Contains(got.Reason, "lease (1m0s) ran out") || !strings.Contains(got.Reason, "s2uc update") {
		t.Fatalf("at the end of its lease: %s %q", got.State, got.Reason)
	}
	if i := info(t, s); i.ReservedRate != 0 {
		t.Fatalf("an expired stream still reserves %d", i.ReservedRate)
	}
	callOK(t, s, "GET", "/v1/streams/"+other.UID, aliceToken, "", 200, &got)
	if got.State != api.StateListening {
		t.Fatalf("the other stream is %s", got.State)
	}
}

// TestEngineNote: a paced stream that asked for sockmap says its
// connections run on splice; a best-effort one says nothing.
func TestEngineNote(t *testing.T) {
	s := newTestServer(t, nil)
	for _, c := range []struct {
		rate int64
		note bool
	}{{100e6, true}, {0, false}} {
		b, _ := json.Marshal(api.InboundRequest{RemoteIP: "127.0.0.1", ReceiverPorts: []int{9}, NumConn: 1, Engine: "sockmap", Rate: c.rate})
		var got api.Stream
		callOK(t, s, "POST", "/v1/streams/inbound", aliceToken, string(b), 201, &got)
		if (got.EngineNote != "") != c.note || got.Engine != "sockmap" {
			t.Fatalf("rate %d on sockmap: engine %s, note %q", c.rate, got.Engine, got.EngineNote)
		}
		if st := liveStream(t, s, got.UID); (st.EngineFor().Name() == "splice") != c.note {
			t.Fatalf("rate %d on sockmap: connections run on %s", c.rate, st.EngineFor().Name())
		}
	}
}

func tcpAddr(ip string) net.Addr { return &net.TCPAddr{IP: net.ParseIP(ip), Port: 40000} }

// TestRatePaced moves bytes both ways through a stream with a rate, over
// each WAN transport and engine, and checks that no more passed than the rate and
// a burst allow: a lower bound on the time taken, which no slow machine
// can break. A higher rate set mid-transfer applies to the connection
// that is open, which carries on to the last byte.
func TestRatePaced(t *testing.T) {
	for _, c := range []struct{ wan, engine string }{
		{api.WANTLS, "splice"}, {api.WANTLS, "buffer"}, {api.WANQUIC, "splice"}, {api.WANTCP, "splice"}, {api.WANTCP, "buffer"},
	} {
		wanT := c.wan
		t.Run(c.wan+"-"+c.engine, func(t *testing.T) {
			allowTCP := func(c *Config) { c.AllowTCPWAN = true }
			p := startPair(t, allowTCP, allowTCP)
			ctx := context.Background()
			const rate = 80e6 // 10 MB/s
			inS, outS, err := client.Wire(ctx, p.in, p.out,
				&api.InboundRequest{RemoteIP: "127.0.0.1", ReceiverPorts: []int{echoApp(t)}, NumConn: 1, WAN: wanT, Rate: rate, Engine: c.engine},
				api.OutboundRequest{NumConn: 1, Allow: []string{"127.0.0.0/8"}, Engine: c.engine}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if inS.Rate != rate || outS.Rate != rate {
				t.Fatalf("granted %d inbound, %d outbound; want %d", inS.Rate, outS.Rate, int64(rate))
			}
			const n = 3e6
			start := time.Now()
			roundTrip(t, outS.Listeners[0], n)
			burst := pace.Rate(rate).BytesPerSecond() * 0.05
			if el, least := time.Since(start).Seconds(), (n-burst)/pace.Rate(rate).BytesPerSecond(); el < least {
				t.Fatalf("%d bytes each way in %.3fs at %s: faster than the rate allows (at least %.3fs)", int(n), el, pace.Rate(rate), least)
			}

			// Mid-transfer: 1 MB/s, then 100 MB/s on both sides.
			for _, c := range []*client.Client{p.in, p.out} {
				if _, err := c.Update(ctx, inS.UID, &api.UpdateRequest{Rate: ptr(int64(8e6))}); err != nil {
					t.Fatal(err)
				}
			}
			c, err := net.Dial("tcp", outS.Listeners[0])
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(60 * time.Second))
			want := make([]byte, 2<<20)
			rand.Read(want)
			go func() {
				c.Write(want)
				c.(*net.TCPConn).CloseWrite()
			}()
			got := make([]byte, len(want))
			if _, err := io.ReadFull(c, got[:128<<10]); err != nil {
				t.Fatal(err)
			}
			for _, cl := range []*client.Client{p.in, p.out} {
				s, err := cl.Update(ctx, inS.UID, &api.UpdateRequest{Rate: ptr(int64(800e6))})
				if err != nil || s.Rate != 800e6 {
					t.Fatalf("raise the rate: %v, %v", s, err)
				}
			}
			if _, err := io.ReadFull(c, got[128<<10:]); err != nil {
				t.Fatalf("after the update: %v", err)
			}
			if !bytes.Equal(got, want) {
				t.Fatal("the echo differs from what was sent")
			}
			for _, cl := range []*client.Client{p.in, p.out} {
				s, err := cl.Get(ctx, inS.UID)
				if err != nil {
					t.Fatal(err)
				}
				if s.Stats.TotalConns != 2 || s.Stats.AbortedConns != 0 {
					t.Fatalf("%s side: %d connections, %d aborted; want 2 and none", s.Role, s.Stats.TotalConns, s.Stats.AbortedConns)
				}
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// TestRateMetrics: the metrics say what is declared, what is reserved,
// and each stream's grant and lease.
func TestRateMetrics(t *testing.T) {
	clk := &clock{t: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)}
	s := newTestServer(t, func(c *Config) {
		c.Now = clk.Now
		c.Capacity.Rate = 1e9
		c.Roles = mustPolicy(t, "user any\nreader identity alice\n")
	})
	var a, b api.Stream
	callOK(t, s, "POST", "/v1/streams/inbound", aliceToken, rateBody(300e6, 0, 3600), 201, &a)
	callOK(t, s, "POST", "/v1/streams/inbound", bobToken, rateBody(0, 0, 0), 201, &b)
	code, body := call(t, s, "GET", "/metrics", aliceToken, "")
	if code != 200 {
		t.Fatalf("GET /metrics: %d %s", code, body)
	}
	metricstest.Promtool(t, body)
	ms := metricstest.Parse(t, body)
	for _, c := range []struct {
		name string
		l    metricstest.Labels
		want float64
	}{
		{"scistream_capacity_rate_bytes_per_second", nil, 125e6},
		{"scistream_reserved_rate_bytes_per_second", nil, 37.5e6},
		{"scistream_stream_rate_granted_bytes_per_second", metricstest.Labels{"uid": a.UID}, 37.5e6},
		{"scistream_stream_rate_granted_bytes_per_second", metricstest.Labels{"uid": b.UID}, 0},
		{"scistream_stream_lease_expiry_timestamp_seconds", metricstest.Labels{"uid": a.UID}, float64(clk.Now().Add(time.Hour).Unix())},
	} {
		if got := ms.Value(t, c.name, c.l); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.l, got, c.want)
		}
	}
}

// BenchmarkAdmit is the admission of one request with a rate beside n
// live streams, half of them reserving: the table (quotas and capacity
// together, admission.Usage) is scanned under Server.mu on every create
// and every raise.
func BenchmarkAdmit(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("streams=%d", n), func(b *testing.B) {
			s := newTestServer(b, func(c *Config) { c.Capacity.Rate = pace.Max; c.Quota.Rate = pace.Max; c.Quota.Streams = 1 << 20 })
			for i := range n {
				st := &stream.Stream{NumConn: 1}
				st.SetRecord(&store.Record{Role: api.RoleOutbound, State: api.StateConnected, NumConn: 1})
				if i%2 == 0 {
					st.Pace.Set(1e6)
				}
				s.streams[store.Key{Owner: fmt.Sprint("user", i%50), UID: fmt.Sprint(i)}] = st
			}
			rec := &store.Record{Owner: "user7", UID: "new", NumConn: 1, RateRequested: 1e6, MinRate: 1e6}
			b.ResetTimer()
			for b.Loop() {
				s.mu.Lock()
				err := s.admitLocked(rec)
				s.mu.Unlock()
				if err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			s.mu.Lock()
			s.streams = map[store.Key]*stream.Stream{} // not live: nothing to stop
			s.mu.Unlock()
		})
	}
}
