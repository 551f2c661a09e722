package gateway

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"scistream/internal/api"
	"scistream/internal/client"
	"scistream/internal/metricstest"
	"scistream/internal/waitfor"
)

// get sends GET url with token (if any) and returns the status and body;
// certFile, if set, is the server's certificate to trust.
func get(t *testing.T, url, certFile, token string) (int, []byte) {
	t.Helper()
	tr := &http.Transport{}
	if certFile != "" {
		pem, err := os.ReadFile(certFile)
		if err != nil {
			t.Fatal(err)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		tr.TLSClientConfig = &tls.Config{RootCAs: pool}
	}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: read body: %v", url, err)
	}
	return resp.StatusCode, b
}

// scrapeGW scrapes g's /metrics on its control API as alice, checks the
// exposition with promtool, and parses it.
func scrapeGW(t *testing.T, g *testGW) metricstest.Metrics {
	t.Helper()
	code, b := get(t, "https://"+g.addr+"/metrics", g.cert, aliceToken)
	if code != http.StatusOK {
		t.Fatalf("GET /metrics as alice: %d %s", code, b)
	}
	metricstest.Promtool(t, b)
	return metricstest.Parse(t, b)
}

// transfer sends n bytes from a producer through the stream's outbound
// listener to the application behind app, which answers with m bytes; it
// returns once both ends read everything and closed.
func transfer(t *testing.T, app *net.TCPListener, listener string, n, m int) {
	t.Helper()
	p, err := net.Dial("tcp", listener)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := app.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var wg sync.WaitGroup
	wg.Add(1)
	var got int64
	var rerr error
	go func() { // the application: read all, then answer
		defer wg.Done()
		got, rerr = io.Copy(io.Discard, c)
		if rerr == nil {
			_, rerr = c.Write(bytes.Repeat([]byte("r"), m))
		}
		c.(*net.TCPConn).CloseWrite()
	}()
	if _, err := p.Write(bytes.Repeat([]byte("p"), n)); err != nil {
		t.Fatal(err)
	}
	p.(*net.TCPConn).CloseWrite()
	back, err := io.Copy(io.Discard, p)
	wg.Wait()
	if err != nil || rerr != nil || got != int64(n) || back != int64(m) {
		t.Fatalf("transfer: application read %d (%v), producer read %d (%v); want %d and %d", got, rerr, back, err, n, m)
	}
}

// TestMetricsKnownTransfer sends a known number of bytes each way through
// a stream and checks the metrics of both gateways say exactly that, on
// the control API (authenticated) and on the plain metrics listener, with
// the refusals, handshake failures and API errors provoked on the way,
// and that promtool finds nothing wrong; then releases the stream and
// checks its series are gone while the gateway's count of ended streams
// grew.
func TestMetricsKnownTransfer(t *testing.T) {
	plain, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fast := func(c *Config) { c.Observe.RateInterval = 20 * time.Millisecond }
	readers := func(c *Config) { c.Roles = mustPolicy(t, "user any\nreader identity alice\n") }
	p := startPair(t, func(c *Config) { fast(c); readers(c); c.Quota.Streams = 2 }, func(c *Config) { fast(c); readers(c); c.Observe.MetricsListener = plain })
	app, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	ctx := context.Background()
	port := app.Addr().(*net.TCPAddr).Port
	inS, outS, err := p.wire(ctx, port, "127.0.0.0/8")
	if err != nil {
		t.Fatal(err)
	}
	const n, m = 3<<20 + 17, 1<<20 + 5
	transfer(t, app, outS.Listeners[0], n, m)
	waitfor.Must(t, 10*time.Second, "both gateways to count the transfer", func() bool {
		o, err1 := p.out.Get(ctx, outS.UID)
		i, err2 := p.in.Get(ctx, inS.UID)
		return err1 == nil && err2 == nil && o.Stats.BytesToWAN == n && o.Stats.BytesFromWAN == m &&
			i.Stats.BytesFromWAN == n && i.Stats.BytesToWAN == m && o.Stats.ActiveConns == 0 && i.Stats.ActiveConns == 0
	})

	// A second stream whose allow-list the producer is outside of, and a
	// stranger that speaks garbage to the first stream's WAN listener.
	_, deny, err := p.wire(ctx, port, "192.0.2.0/24")
	if err != nil {
		t.Fatal(err)
	}
	if c, err := net.Dial("tcp", deny.Listeners[0]); err == nil {
		c.Read(make([]byte, 1)) // reset at once
		c.Close()
	}
	if c, err := net.Dial("tcp", inS.Listeners[0]); err == nil {
		c.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
		c.Read(make([]byte, 1))
		c.Close()
	}
	waitfor.Must(t, 10*time.Second, "both refusals to be counted", func() bool {
		o, err1 := p.out.Get(ctx, deny.UID)
		i, err2 := p.in.Get(ctx, inS.UID)
		return err1 == nil && err2 == nil && o.Stats.RejectedConns == 1 && i.Stats.RejectedConns == 1
	})
	// API errors: no token, a wrong one, and a stream over alice's quota
	// of two.
	if code, _ := get(t, "https://"+p.prod.addr+"/metrics", p.prod.cert, ""); code != http.StatusUnauthorized {
		t.Fatalf("GET /metrics without a token: %d, want 401", code)
	}
	if code, _ := get(t, "https://"+p.prod.addr+"/metrics", p.prod.cert, "not-a-token"); code != http.StatusUnauthorized {
		t.Fatalf("GET /metrics with a wrong token: %d, want 401", code)
	}
	if _, err := p.in.Inbound(ctx, &api.InboundRequest{RemoteIP: "127.0.0.1", ReceiverPorts: []int{port}, NumConn: 1}); !isCode(err, api.CodeNoResources) {
		t.Fatalf("a third inbound stream over a quota of two: %v, want no_resources", err)
	}

	out := scrapeGW(t, p.prod)
	in := scrapeGW(t, p.cons)
	ol := metricstest.Labels{"uid": outS.UID, "owner": "alice", "role": "outbound"}
	il := metricstest.Labels{"uid": inS.UID, "owner": "alice", "role": "inbound"}
	with := func(l metricstest.Labels, kv ...string) metricstest.Labels {
		c := metricstest.Labels{}
		for k, v := range l {
			c[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			c[kv[i]] = kv[i+1]
		}
		return c
	}
	for _, c := range []struct {
		ms   metricstest.Metrics
		name string
		l    metricstest.Labels
		want float64
	}{
		{out, "scistream_stream_bytes_total", with(ol, "direction", "to_wan"), n},
		{out, "scistream_stream_bytes_total", with(ol, "direction", "from_wan"), m},
		{in, "scistream_stream_bytes_total", with(il, "direction", "from_wan"), n},
		{in, "scistream_stream_bytes_total", with(il, "direction", "to_wan"), m},
		{out, "scistream_stream_connections_total", ol, 1},
		{in, "scistream_stream_connections_total", il, 1},
		{out, "scistream_stream_connections", with(ol, "state", "active"), 0},
		{out, "scistream_stream_connections_aborted_total", with(ol, "kind", api.EndAppReset), 0},
		{out, "scistream_stream_info", with(ol, "state", "connected", "wan", "tls", "engine", "splice", "resume", api.ResumeOn), 1},
		{in, "scistream_stream_info", with(il, "resume", api.ResumeOn), 1},
		// The connection ended in order, its legs never lost: no
		// resume, and nothing held.
		{out, "scistream_stream_parked_conns", ol, 0},
		{in, "scistream_stream_parked_conns", il, 0},
		{out, "scistream_stream_resumed_legs_total", ol, 0},
		{in, "scistream_stream_resent_bytes_total", il, 0},
		{out, "scistream_stream_parked_seconds_total", ol, 0},
		{in, "scistream_stream_resume_expired_total", il, 0},
		{out, "scistream_parked_conns", nil, 0},
		{in, "scistream_resume_buffer_capacity_bytes", nil, 1 << 30},
		// The stream whose one connection was refused never had a leg:
		// what its connections do is not known yet.
		{out, "scistream_stream_info", metricstest.Labels{"uid": deny.UID, "resume": "unknown"}, 1},
		{out, "scistream_stream_connections_refused_total", metricstest.Labels{"uid": deny.UID, "reason": "allow_list"}, 1},
		{out, "scistream_stream_connections_refused_total", metricstest.Labels{"uid": deny.UID, "reason": "over_cap"}, 0},
		{in, "scistream_stream_wan_handshake_failures_total", il, 1},
		{in, "scistream_refused_connections_total", metricstest.Labels{"reason": "tls"}, 1},
		{out, "scistream_refused_connections_total", metricstest.Labels{"reason": "allow_list"}, 1},
		// The stream that carried data is connected on both sides; the
		// one whose only connection was refused by the allow-list is
		// wired (no data leg has worked).
		{out, "scistream_streams", metricstest.Labels{"state": "connected"}, 1},
		{in, "scistream_streams", metricstest.Labels{"state": "connected"}, 1},
		{out, "scistream_streams", metricstest.Labels{"state": "wired"}, 1},
		{in, "scistream_streams", metricstest.Labels{"state": "wired"}, 1},
		{out, "scistream_stream_info", metricstest.Labels{"uid": deny.UID, "role": "outbound", "state": "wired"}, 1},
		{in, "scistream_ports_in_use", nil, 2},
		{in, "scistream_ports_capacity", nil, 21},
		{out, "scistream_api_errors_total", metricstest.Labels{"code": "unauthenticated"}, 2},
		{in, "scistream_api_errors_total", metricstest.Labels{"code": "no_resources"}, 1},
		{out, "scistream_ready", nil, 1},
		{in, "scistream_control_refused_total", metricstest.Labels{"reason": "per_source"}, 0},
		{in, "scistream_control_refused_total", metricstest.Labels{"reason": "h2_resets"}, 0},
	} {
		if got := c.ms.Value(t, c.name, c.l); got != c.want {
			t.Errorf("%s%v = %g, want %g", c.name, c.l, got, c.want)
		}
	}
	// The transfer's bytes went through the resume buffers of both
	// gateways (framed legs), given back since.
	for name, ms := range map[string]metricstest.Metrics{"producer": out, "consumer": in} {
		if peak := ms.Value(t, "scistream_resume_buffer_peak_bytes", nil); peak <= 0 || peak > 1<<30 {
			t.Errorf("the %s's gateway's scistream_resume_buffer_peak_bytes %g, want some of its 1GiB", name, peak)
		}
	}
	// The rates came from the same counters: every sample the producer's
	// gateway took, over the stream's life, adds up to the bytes.
	o, err := p.out.Get(ctx, outS.UID)
	if err != nil {
		t.Fatal(err)
	}
	if r := o.Stats.Rates; r == nil || r.ToWAN.Life.Samples == 0 || r.IntervalS != 0.02 {
		t.Errorf("outbound stream's rates: %+v", r)
	}

	// The plain listener serves the same metrics, to anyone, and nothing
	// else.
	code, b := get(t, "http://"+plain.Addr().String()+"/metrics", "", "")
	if code != http.StatusOK {
		t.Fatalf("plain GET /metrics: %d %s", code, b)
	}
	if got := metricstest.Parse(t, b).Value(t, "scistream_stream_bytes_total", with(ol, "direction", "to_wan")); got != n {
		t.Errorf("plain listener: bytes to WAN %g, want %d", got, n)
	}
	for _, path := range []string{"/v1/streams", "/v1/status", "/v1/info", "/status", "/healthz", "/metrics/", "/"} {
		if code, b := get(t, "http://"+plain.Addr().String()+path, "", aliceToken); code != http.StatusNotFound || strings.Contains(string(b), outS.UID) {
			t.Errorf("plain listener GET %s: %d %.100s; want 404 and no stream", path, code, b)
		}
	}

	// Released: the stream's series are gone, the ended count grew.
	if _, err := p.out.Release(ctx, outS.UID); err != nil {
		t.Fatal(err)
	}
	out = scrapeGW(t, p.prod)
	if k := out.Series(metricstest.Labels{"uid": outS.UID}); k != 0 {
		t.Errorf("%d series of released stream %s left", k, outS.UID)
	}
	if k := out.Series(metricstest.Labels{"uid": deny.UID}); k == 0 {
		t.Errorf("no series of live stream %s", deny.UID)
	}
	if got := out.Value(t, "scistream_streams_ended_total", metricstest.Labels{"state": "released"}); got != 1 {
		t.Errorf("streams ended as released: %g, want 1", got)
	}
}

// wire opens a stream from the producer gateway to port on 127.0.0.1
// whose outbound side admits allow.
func (p *gwPair) wire(ctx context.Context, port int, allow string) (inS, outS *api.Stream, err error) {
	return client.Wire(ctx, p.in, p.out, &api.InboundRequest{RemoteIP: "127.0.0.1", ReceiverPorts: []int{port}, NumConn: 1},
		api.OutboundRequest{NumConn: 1, Allow: []string{allow}}, nil)
}

func isCode(err error, c api.Code) bool {
	var ae *api.Error
	return errors.As(err, &ae) && ae.Code == c
}

// TestMetricsCollectorConsistent registers the collector in a pedantic
// registry, which checks every metric it sends against its descriptions
// and that no two series are the same, with streams of two identities
// holding the same uid.
func TestMetricsCollectorConsistent(t *testing.T) {
	s := newTestServer(t, nil)
	const uid = "0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b6c"
	for _, tok := range []string{aliceToken, bobToken} {
		b := fmt.Sprintf(`{"uid":%q,"remote_ip":"127.0.0.1","receiver_ports":[9000],"num_conn":1}`, uid)
		callOK(t, s, "POST", "/v1/streams/inbound", tok, b, 201, nil)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(s.obs.Collector())
	fams, err := reg.Gather()
	if err != nil {
		t.Fatalf("pedantic gather: %v", err)
	}
	n := 0
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "uid" && l.GetValue() == uid {
					n++
				}
			}
		}
	}
	if n == 0 || n%2 != 0 {
		t.Errorf("%d series of uid %s, want the same number for each of its two owners", n, uid)
	}
}

// TestMetricsScrapeFlood scrapes the plain listener 64 times at once
// while streams come and go: every scrape is answered (200, or 503 past
// the cap of scrapes at once), and the server stops with nothing left
// running (TestMain's leak check).
func TestMetricsScrapeFlood(t *testing.T) {
	plain, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := newTestServer(t, func(c *Config) { c.Observe.MetricsListener = plain })
	s.obs.Serve(s.ctx, s.httpServer)
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Get("http://" + plain.Addr().String() + "/metrics")
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				codes[-1]++
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes[resp.StatusCode]++
		}()
	}
	for i := range 8 { // streams created and released meanwhile
		b := fmt.Sprintf(`{"remote_ip":"127.0.0.1","receiver_ports":[%d],"num_conn":1}`, 9000+i)
		var v api.Stream
		callOK(t, s, "POST", "/v1/streams/inbound", aliceToken, b, 201, &v)
		callOK(t, s, "DELETE", "/v1/streams/"+v.UID, aliceToken, "", 200, nil)
	}
	wg.Wait()
	if codes[200] == 0 || codes[200]+codes[503] != 64 {
		t.Errorf("scrape answers by status: %v; want 64 of 200 or 503, some 200", codes)
	}
	// Garbage on the listener gets an HTTP error, not a hang.
	c, err := net.Dial("tcp", plain.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("\x16\x03\x01\x00\xa5garbage\r\n\r\n"))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, _ := io.ReadAll(io.LimitReader(c, 12))
	if !strings.HasPrefix(string(line), "HTTP/1.1 400") {
		t.Errorf("garbage on the metrics listener: answered %q, want HTTP/1.1 400", line)
	}
}

// TestMetricsListenerLifecycle: a listener given to a server that never
// serves is closed by Shutdown; one that is not on loopback is served
// with a warning; Shutdown is idempotent.
func TestMetricsListenerLifecycle(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := newTestServer(t, func(c *Config) { c.Observe.MetricsListener = ln })
	s.Shutdown(context.Background())
	s.Shutdown(context.Background())
	if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept on the metrics listener after Shutdown: %v, want it closed", err)
	}

	ln, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var logs logLines
	s = newTestServer(t, func(c *Config) {
		c.Observe.MetricsListener = wideListener{ln}
		c.Logger = logs.logger()
	})
	s.obs.Serve(s.ctx, s.httpServer)
	if code, _ := get(t, "http://"+ln.Addr().String()+"/metrics", "", ""); code != http.StatusOK {
		t.Fatalf("metrics listener: %d", code)
	}
	if !logs.has("not on a loopback address") {
		t.Errorf("no warning for a metrics listener on %s:\n%s", wideListener{ln}.Addr(), logs.String())
	}
	s.Shutdown(context.Background())
	if _, err := net.Dial("tcp", ln.Addr().String()); err == nil {
		t.Errorf("metrics listener still accepts after Shutdown")
	}
}

// wideListener is a loopback listener that says it listens on every
// address (the test binds nothing but loopback).
type wideListener struct{ net.Listener }

func (wideListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4zero, Port: 9100} }

// TestMetricsDocumented: every metric the gateway's collector describes
// is in docs/operations.md, by name, so that one added without its
// meaning fails here.
func TestMetricsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	s := newTestServer(t, nil)
	ch := make(chan *prometheus.Desc, 128)
	s.obs.Collector().Describe(ch)
	close(ch)
	name := regexp.MustCompile(`fqName: "([a-z_]+)"`)
	n := 0
	for d := range ch {
		m := name.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("no name in %s", d)
		}
		n++
		if !bytes.Contains(doc, []byte("`"+m[1]+"`")) {
			t.Errorf("metric %s is not in docs/operations.md", m[1])
		}
	}
	if n < 40 {
		t.Fatalf("only %d metrics described", n)
	}
}
