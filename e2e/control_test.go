package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"scistream/internal/api"
	"scistream/internal/certs"
	"scistream/internal/client"
	"scistream/internal/waitfor"
)

// TestConcurrentStreams: 20 identities request streams at the same moment
// through s2uc; each gets its own listeners leading to its own consumer.
// (The reference answered 13 of 30 concurrent pairs with another
// session's listeners.)
func TestConcurrentStreams(t *testing.T) {
	p := newPair(t, pairOpts{})
	const n = 20
	apps := make([]*sink, n)
	outs := make([]streamOut, n)
	for i := range apps {
		apps[i] = newSink(t, "127.0.0.1", nil)
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			id := fmt.Sprintf("user%02d", i)
			args := []string{"stream",
				"--inbound_s2cs", p.cons.Addr, "--inbound_server_cert", p.cons.CertFile,
				"--outbound_s2cs", p.prod.Addr, "--outbound_server_cert", p.prod.CertFile,
				"--remote_ip", "127.0.0.1", "--receiver_ports", apps[i].port(), "--num_conn", "1", "--output", "json"}
			out, errs, code := p.s2uc(id, args...)
			if code != 0 {
				t.Errorf("%s: exit %d: %s", id, code, errs)
				return
			}
			json.Unmarshal([]byte(out), &outs[i])
		}()
	}
	close(start)
	wg.Wait()
	if t.Failed() {
		return
	}
	seen := map[string]int{}
	for i, so := range outs {
		if prev, dup := seen[so.Listeners[0]]; dup {
			t.Fatalf("streams %d and %d share listener %s", prev, i, so.Listeners[0])
		}
		seen[so.Listeners[0]] = i
	}
	for i, so := range outs {
		c, err := dialFrom("", so.Listeners[0])
		if err != nil {
			t.Fatal(err)
		}
		msg := fmt.Sprintf("for consumer %d", i)
		c.Write([]byte(msg))
		c.Close()
		if r := apps[i].next(t, 10*time.Second); string(r.data) != msg {
			t.Fatalf("consumer %d got %q, want %q", i, r.data, msg)
		}
	}
	// Each identity sees only its own stream.
	var list api.StreamList
	json.Unmarshal([]byte(p.mustS2UC("user07", "list", "--s2cs", p.prod.Addr, "--server_cert", p.prod.CertFile, "--output", "json")), &list)
	if len(list.Streams) != 1 || list.Streams[0].UID != outs[7].UID {
		t.Fatalf("user07 lists %d streams, want only its own", len(list.Streams))
	}
}

// sendOne sends msg (at most the sink's 4 KiB head) on one connection to
// listener and checks that app received it whole.
func sendOne(t *testing.T, listener string, app *sink, msg string) {
	t.Helper()
	c, err := dialFrom("", listener)
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte(msg))
	c.Close()
	if r := app.next(t, 10*time.Second); string(r.data) != msg {
		t.Fatalf("consumer got %d bytes (%.40q...), want %d (%.40q...)", len(r.data), r.data, len(msg), msg)
	}
}

// TestRestartRestores: a gateway killed with SIGKILL comes back with its
// streams on the same ports, and applications can reconnect.
func TestRestartRestores(t *testing.T) {
	p := newPair(t, pairOpts{})
	app := newSink(t, "127.0.0.1", nil)
	so := p.wire("alice", app.host(), app.port(), 1)
	send := func(msg string) { t.Helper(); sendOne(t, so.Listeners[0], app, msg) }
	send("before")
	p.restart(&p.cons, false)
	p.restart(&p.prod, true)
	send("after restart")
	out := p.mustS2UC("alice", "status", so.UID, "--s2cs", p.cons.Addr, "--server_cert", p.cons.CertFile)
	if !strings.Contains(out, "inbound connected") {
		t.Fatalf("restored stream status:\n%s", out)
	}
}

// TestCountersSurviveRestart: a gateway stopped and started again counts
// on from what its streams carried before (it stores their counters as
// it stops), so a release after the restart reports every byte, and the
// released stream keeps its final counters for status.
func TestCountersSurviveRestart(t *testing.T) {
	p := newPair(t, pairOpts{})
	app := newSink(t, "127.0.0.1", nil)
	so := p.wire("alice", app.host(), app.port(), 1)
	send := func(msg string) { t.Helper(); sendOne(t, so.Listeners[0], app, msg) }
	before, after := strings.Repeat("b", 4000), strings.Repeat("a", 3000)
	send(before)
	p.restart(&p.prod, true)
	send(after)
	stats := func(args ...string) *api.Stats {
		t.Helper()
		var v api.Stream
		out := p.mustS2UC("alice", append(args, "--s2cs", p.prod.Addr, "--server_cert", p.prod.CertFile, "--output", "json")...)
		if err := json.Unmarshal([]byte(out), &v); err != nil || v.Stats == nil {
			t.Fatalf("s2uc %v: %v, no stats in\n%s", args, err, out)
		}
		return v.Stats
	}
	want := int64(len(before) + len(after))
	// The second connection's bytes may still be on their way into the
	// counters when the consumer has them: wait for them.
	waitfor.Must(t, 10*time.Second, "the restored stream's counters", func() bool { return stats("status", so.UID).BytesToWAN == want })
	if st := stats("status", so.UID); st.TotalConns != 2 {
		t.Fatalf("restored stream: %d connections, want 2 (one before the restart)", st.TotalConns)
	}
	var rel struct{ Released []api.Stream }
	out := p.mustS2UC("alice", "release", so.UID, "--s2cs", p.prod.Addr, "--server_cert", p.prod.CertFile, "--output", "json")
	if err := json.Unmarshal([]byte(out), &rel); err != nil || len(rel.Released) != 1 || rel.Released[0].Stats == nil {
		t.Fatalf("s2uc release: %v\n%s", err, out)
	}
	if st := rel.Released[0].Stats; st.BytesToWAN != want || st.TotalConns != 2 {
		t.Fatalf("release after a restart reports %d bytes in %d connections, want %d in 2", st.BytesToWAN, st.TotalConns, want)
	}
	if st := stats("status", so.UID); st.BytesToWAN != want {
		t.Fatalf("the released stream's status: %d bytes, want its final %d", st.BytesToWAN, want)
	}
}

// rawCall makes a raw HTTPS request with an optional token and body.
func rawCall(t *testing.T, addr, method, path, token, body string) (int, api.Error, []byte) {
	t.Helper()
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest(method, "https://"+addr+path, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var eb api.ErrorBody
	json.Unmarshal(b, &eb)
	return resp.StatusCode, eb.Error, b
}

// TestAuth: no token and a wrong token are refused; another identity's
// stream is not found, exactly as a stream that does not exist (no
// identity learns of another's streams); the owner still can.
func TestAuth(t *testing.T) {
	p := newPair(t, pairOpts{})
	app := newSink(t, "127.0.0.1", nil)
	so := p.wire("alice", app.host(), app.port(), 1)
	cases := []struct {
		name, method, path, token string
		status                    int
		code                      api.Code
	}{
		{"no token", "GET", "/v1/streams", "", 401, api.CodeUnauthenticated},
		{"wrong token", "GET", "/v1/streams", "not-a-token", 401, api.CodeUnauthenticated},
		{"other identity status", "GET", "/v1/streams/" + so.UID, p.tokens["bob"], 404, api.CodeNotFound},
		{"other identity release", "DELETE", "/v1/streams/" + so.UID, p.tokens["bob"], 404, api.CodeNotFound},
		{"other identity attach", "POST", "/v1/streams/" + so.UID + "/attach", p.tokens["bob"], 404, api.CodeNotFound},
		{"unknown stream", "GET", "/v1/streams/00000000-0000-4000-8000-000000000000", p.tokens["bob"], 404, api.CodeNotFound},
		{"no token create", "POST", "/v1/streams/inbound", "", 401, api.CodeUnauthenticated},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, e, body := rawCall(t, p.prod.Addr, c.method, c.path, c.token, "")
			if status != c.status || e.Code != c.code || e.Message == "" {
				t.Fatalf("got %d %s; want %d %s (body %s)", status, e.Code, c.status, c.code, body)
			}
		})
	}
	// bob's list is empty; alice's has the stream; the stream still works.
	status, _, body := rawCall(t, p.prod.Addr, "GET", "/v1/streams", p.tokens["bob"], "")
	if status != 200 || strings.Contains(string(body), so.UID) {
		t.Fatalf("bob's list shows alice's stream: %s", body)
	}
	_, errs, code := p.s2uc("bob", "release", so.UID, "--s2cs", p.prod.Addr, "--server_cert", p.prod.CertFile)
	if code == 0 || !strings.Contains(errs, "not_found") || strings.Count(strings.TrimSpace(errs), "\n") != 0 {
		t.Fatalf("s2uc release as bob: exit %d, stderr %q; want non-zero and one not_found line", code, errs)
	}
	c, _ := dialFrom("", so.Listeners[0])
	c.Write([]byte("still mine"))
	c.Close()
	if r := app.next(t, 5*time.Second); string(r.data) != "still mine" {
		t.Fatalf("stream broken after refused requests: %q", r.data)
	}
	// The token never appears in a gateway log.
	for _, g := range []string{p.prod.Log(), p.cons.Log()} {
		for _, tok := range p.tokens {
			if strings.Contains(g, tok) {
				t.Fatal("a token appears in a gateway log")
			}
		}
	}
}

// TestWANRefusesStrangers: on the inbound gateway's WAN listener, a TLS
// client with another certificate, a client with the right certificate
// but no stream secret, and plaintext garbage are each refused, and the
// stream keeps working.
func TestWANRefusesStrangers(t *testing.T) {
	p := newPair(t, pairOpts{})
	app := newSink(t, "127.0.0.1", nil)
	so := p.wire("alice", app.host(), app.port(), 1)
	var st api.Stream
	json.Unmarshal([]byte(p.mustS2UC("alice", "status", so.UID, "--s2cs", p.cons.Addr, "--server_cert", p.cons.CertFile, "--output", "json")), &st)
	wanAddr := st.Listeners[0]

	certPEM, keyPEM, _ := certs.SelfSigned([]string{"127.0.0.1"}, time.Hour)
	stranger, _ := tls.X509KeyPair(certPEM, keyPEM)
	prodID, err := certs.Load(filepath.Join(p.prod.Opts.StateDir, "s2cs.crt"), filepath.Join(p.prod.Opts.StateDir, "s2cs.key"))
	if err != nil {
		t.Fatal(err)
	}
	try := func(cert tls.Certificate, payload []byte) error {
		raw, err := dialFrom("", wanAddr)
		if err != nil {
			return err
		}
		defer raw.Close()
		raw.SetDeadline(time.Now().Add(5 * time.Second))
		tc := tls.Client(raw, &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13})
		if err := tc.Handshake(); err != nil {
			return err
		}
		tc.Write(payload)
		// A refused connection is closed by the gateway: reading ends
		// with an error or EOF and never yields application bytes.
		b := make([]byte, 1)
		_, err = tc.Read(b)
		return err
	}
	if err := try(stranger, []byte("hello")); err == nil {
		t.Fatal("a stranger's certificate was accepted")
	}
	fakePreface := append([]byte("S2W1"), byte(len(so.UID)))
	fakePreface = append(fakePreface, so.UID...)
	fakePreface = append(fakePreface, 0, 0)
	fakePreface = append(fakePreface, bytes.Repeat([]byte{0xAB}, 32)...)
	if err := try(prodID.TLS, fakePreface); err == nil {
		t.Fatal("a WAN connection without the stream secret was accepted")
	}
	raw, _ := dialFrom("", wanAddr)
	raw.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
	raw.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, _ := raw.Read(make([]byte, 64)); n > 5 {
		t.Fatalf("plaintext garbage got %d bytes of answer", n)
	}
	raw.Close()
	c, _ := dialFrom("", so.Listeners[0])
	c.Write([]byte("unharmed"))
	c.Close()
	if r := app.next(t, 5*time.Second); string(r.data) != "unharmed" {
		t.Fatalf("stream broken after refused WAN connections: %q", r.data)
	}
	var after api.Stream
	json.Unmarshal([]byte(p.mustS2UC("alice", "status", so.UID, "--s2cs", p.cons.Addr, "--server_cert", p.cons.CertFile, "--output", "json")), &after)
	if after.Stats.RejectedConns < 3 {
		t.Fatalf("inbound side counted %d refused WAN connections, want >= 3", after.Stats.RejectedConns)
	}
}

// TestAllowList: the outbound listener admits only sources in the
// stream's allow-list.
func TestAllowList(t *testing.T) {
	p := newPair(t, pairOpts{})
	app := newSink(t, "127.0.0.1", nil)
	so := p.wire("alice", app.host(), app.port(), 1, "--allow", "127.0.0.77/32")
	c, err := dialFrom("127.0.0.78", so.Listeners[0])
	if err == nil {
		// The gateway resets the connection at once; a timeout would
		// mean it was relayed instead.
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, rerr := c.Read(make([]byte, 1))
		c.Close()
		if rerr == nil || os.IsTimeout(rerr) {
			t.Fatalf("source outside the allow-list was not refused (read: %v)", rerr)
		}
	}
	var st api.Stream
	json.Unmarshal([]byte(p.mustS2UC("alice", "status", so.UID, "--s2cs", p.prod.Addr, "--server_cert", p.prod.CertFile, "--output", "json")), &st)
	if st.Stats == nil || st.Stats.RejectedConns != 1 || st.Stats.TotalConns != 0 {
		t.Fatalf("outbound stats after a refused source: %+v; want 1 refused, 0 relayed", st.Stats)
	}
	c, err = dialFrom("127.0.0.77", so.Listeners[0])
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("allowed"))
	c.Close()
	if r := app.next(t, 5*time.Second); string(r.data) != "allowed" {
		t.Fatalf("allowed source: consumer got %q", r.data)
	}
}

// TestBadInput: malformed requests get invalid_argument (or
// no_resources) with a message naming the problem, and s2uc exits
// non-zero with one line.
func TestBadInput(t *testing.T) {
	p := newPair(t, pairOpts{portRange: "5100-5102"})
	tok := p.tokens["alice"]
	cases := []struct {
		name, body string
		status     int
		code       api.Code
		mentions   string
	}{
		{"malformed JSON", `{"remote_ip": "127.0.0.1",`, 400, api.CodeInvalidArgument, "malformed JSON"},
		{"unknown field", `{"remote_ip":"127.0.0.1","receiver_ports":[80],"num_conn":1,"colour":"red"}`, 400, api.CodeInvalidArgument, "colour"},
		{"bad port", `{"remote_ip":"127.0.0.1","receiver_ports":[70000],"num_conn":1}`, 400, api.CodeInvalidArgument, "70000"},
		{"num_conn 0", `{"remote_ip":"127.0.0.1","receiver_ports":[80],"num_conn":0}`, 400, api.CodeInvalidArgument, "num_conn"},
		{"num_conn 10000", `{"remote_ip":"127.0.0.1","receiver_ports":[80],"num_conn":10000}`, 400, api.CodeInvalidArgument, "num_conn"},
		{"no remote_ip", `{"receiver_ports":[80],"num_conn":1}`, 400, api.CodeInvalidArgument, "remote_ip"},
		{"bad wan", `{"remote_ip":"127.0.0.1","receiver_ports":[80],"num_conn":1,"wan":"carrier-pigeon"}`, 400, api.CodeInvalidArgument, "wan"},
		{"tcp wan not allowed", `{"remote_ip":"127.0.0.1","receiver_ports":[80],"num_conn":1,"wan":"tcp"}`, 403, api.CodePermissionDenied, "insecure_tcp_wan"},
		{"bad uid", `{"uid":"../../etc","remote_ip":"127.0.0.1","receiver_ports":[80],"num_conn":1}`, 400, api.CodeInvalidArgument, "uid"},
		{"wrong type", `{"remote_ip":"127.0.0.1","receiver_ports":"80","num_conn":1}`, 400, api.CodeInvalidArgument, "receiver_ports"},
		{"trailing data", `{"remote_ip":"127.0.0.1","receiver_ports":[80],"num_conn":1} {}`, 400, api.CodeInvalidArgument, "trailing"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, e, body := rawCall(t, p.cons.Addr, "POST", "/v1/streams/inbound", tok, c.body)
			if status != c.status || e.Code != c.code || !strings.Contains(e.Message, c.mentions) {
				t.Fatalf("got %d %s %q; want %d %s mentioning %q (%s)", status, e.Code, e.Message, c.status, c.code, c.mentions, body)
			}
		})
	}
	// Outbound-specific checks.
	ob := func(fields string) string {
		return `{"uid":"0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b6c","num_conn":1,` + fields + `}`
	}
	for _, c := range []struct{ name, body, mentions string }{
		{"no secret", ob(`"peer_listeners":["127.0.0.1:5100"],"peer_cert":"x"`), "secret"},
		{"bad peer", ob(`"peer_listeners":["nowhere"],"secret":"AAAA"`), "host:port"},
		{"bad cert", ob(`"peer_listeners":["127.0.0.1:5100"],"secret":"` + strings.Repeat("A", 43) + `=","peer_cert":"junk"`), "peer_cert"},
		{"bad allow", ob(`"peer_listeners":["127.0.0.1:5100"],"secret":"` + strings.Repeat("A", 43) + `=","peer_cert":"` + jsonEscape(p.cons.CertFile) + `","allow":["10.0.0.0/99"]`), "allow"},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, e, body := rawCall(t, p.prod.Addr, "POST", "/v1/streams/outbound", tok, c.body)
			if status != 400 || !strings.Contains(e.Message, c.mentions) {
				t.Fatalf("got %d %q; want 400 mentioning %q (%s)", status, e.Message, c.mentions, body)
			}
		})
	}
	// Exhausting the range: 3 ports, ask for 2 then 2 more.
	app := newSink(t, "127.0.0.1", nil)
	p.wire("alice", app.host(), app.port(), 2)
	_, errs, code := p.s2uc("alice", "inbound-request", "--s2cs", p.cons.Addr, "--server_cert", p.cons.CertFile,
		"--remote_ip", "127.0.0.1", "--receiver_ports", app.port(), "--num_conn", "2")
	if code == 0 || !strings.Contains(errs, "no_resources") || !strings.Contains(errs, "port_range") {
		t.Fatalf("exhausted range: exit %d, %q; want no_resources naming --port_range", code, errs)
	}
	// The refusal names its request, which the gateway logged under
	// that id: what an operator asks a user for.
	m := regexp.MustCompile(`\(request ([A-Z2-7]+) in the gateway's log\)`).FindStringSubmatch(errs)
	if m == nil {
		t.Fatalf("exhausted range: %q names no request id", errs)
	}
	if !strings.Contains(p.cons.Log(), "request_id="+m[1]+" method=POST") {
		t.Fatalf("the gateway logged no request %s:\n%s", m[1], lastLines(p.cons.Log(), 20))
	}
	// s2uc's own validation.
	for _, args := range [][]string{
		{"inbound-request", "--s2cs", p.cons.Addr, "--remote_ip", "127.0.0.1", "--receiver_ports", "0", "--num_conn", "1"},
		{"inbound-request", "--s2cs", p.cons.Addr, "--remote_ip", "127.0.0.1", "--receiver_ports", "80", "--num_conn", "10000"},
		{"inbound-request", "--s2cs", "no-port", "--remote_ip", "127.0.0.1", "--receiver_ports", "80"},
		{"outbound-request", "--s2cs", p.prod.Addr, "--remote_ip", "127.0.0.1", "--receiver_ports", "5100", "0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b6c"},
		{"list", "--s2cs", p.prod.Addr}, // no --server_cert: self-signed cert refused
		{"frobnicate"},
	} {
		_, errs, code := p.s2uc("alice", args...)
		lines := strings.Split(strings.TrimSpace(errs), "\n")
		if code == 0 || len(lines) != 1 || !strings.HasPrefix(lines[0], "s2uc: ") {
			t.Errorf("s2uc %v: exit %d, stderr %q; want non-zero and one 's2uc: ...' line", args, code, errs)
		}
	}
}

func jsonEscape(path string) string {
	b, _ := os.ReadFile(path)
	s, _ := json.Marshal(string(b))
	return string(s[1 : len(s)-1])
}

// TestSetupTime measures how long wiring both sides takes (inbound,
// outbound, attach) through the client library, as a workflow engine
// would call it. The reference spends over a second in fixed sleeps.
func TestSetupTime(t *testing.T) {
	p := newPair(t, pairOpts{})
	in, _ := client.New(client.Config{Addr: p.cons.Addr, ServerCert: p.cons.CertFile, Token: p.tokens["alice"]})
	out, _ := client.New(client.Config{Addr: p.prod.Addr, ServerCert: p.prod.CertFile, Token: p.tokens["alice"]})
	defer in.Close()
	defer out.Close()
	ctx := context.Background()
	var durs []time.Duration
	for i := 0; i < 10; i++ {
		start := time.Now()
		inS, _, err := client.Wire(ctx, in, out,
			&api.InboundRequest{RemoteIP: "127.0.0.1", ReceiverPorts: []int{9}, NumConn: 1},
			api.OutboundRequest{NumConn: 1}, nil)
		if err != nil {
			t.Fatal(err)
		}
		durs = append(durs, time.Since(start))
		in.Release(ctx, inS.UID)
		out.Release(ctx, inS.UID)
	}
	t.Logf("stream setup (inbound+outbound+attach) over HTTPS, 10 runs: %v", durs)
}

// TestTargetPolicy (issue 25, finding 1): real gateways started without
// --allow_targets (the consumer's) or --allow_peers (the producer's)
// refuse a stream that would make them dial their own host or a cloud
// metadata service, and the user reads which flag would allow it.
func TestTargetPolicy(t *testing.T) {
	// Giving one list keeps localgw from giving both (its loopback
	// default), so each gateway has the other default.
	p := newPair(t, pairOpts{consArgs: []string{"--allow_peers", "127.0.0.0/8"}, prodArgs: []string{"--allow_targets", "127.0.0.0/8"}})
	consHost, _, _ := net.SplitHostPort(p.cons.Addr)
	for _, host := range []string{"127.0.0.1", consHost, "169.254.169.254"} {
		_, errs, code := p.s2uc("alice", "inbound-request", "--server_cert", p.cons.CertFile, "--s2cs", p.cons.Addr,
			"--remote_ip", host, "--receiver_ports", "8080", "--num_conn", "1")
		if code == 0 || !strings.Contains(errs, "remote_ip "+host+" port 8080") || !strings.Contains(errs, "s2cs --allow_targets") {
			t.Errorf("inbound-request --remote_ip %s: exit %d, %q; want a refusal naming the field and --allow_targets", host, code, errs)
		}
	}
	status, e, body := rawCall(t, p.prod.Addr, "POST", "/v1/streams/outbound", p.tokens["alice"],
		`{"uid":"0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b6c","num_conn":1,"peer_listeners":["127.0.0.1:443"],"secret":"`+strings.Repeat("A", 43)+`="}`)
	if status != 403 || e.Code != api.CodePermissionDenied || !strings.Contains(e.Message, "--allow_peers") {
		t.Errorf("outbound to 127.0.0.1:443: %d %s; want 403 naming --allow_peers", status, body)
	}
	// Each gateway's own list lets the other kind through: an
	// application on 127.0.0.1 behind the producer's gateway, a peer on
	// loopback for the consumer's, and its own data ports never.
	status, e, body = rawCall(t, p.prod.Addr, "POST", "/v1/streams/inbound", p.tokens["alice"], `{"remote_ip":"127.0.0.1","receiver_ports":[8080],"num_conn":1}`)
	if status != 201 {
		t.Errorf("inbound to 127.0.0.1 where --allow_targets lists it: %d %s", status, body)
	}
	prodHost, _, _ := net.SplitHostPort(p.prod.Addr)
	status, e, body = rawCall(t, p.prod.Addr, "POST", "/v1/streams/inbound", p.tokens["alice"], `{"remote_ip":"`+prodHost+`","receiver_ports":[5100],"num_conn":1}`)
	if status != 403 || !strings.Contains(e.Message, "this gateway's own data-port range") {
		t.Errorf("inbound to the gateway's own data port: %d %s", status, body)
	}
}
