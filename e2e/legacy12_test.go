package e2e

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"scistream/internal/api"
	"scistream/internal/localgw"
	"scistream/internal/waitfor"
)

// The SciStream 1.2 control protocol (issue 29): a Python client
// generated now from the project's own .proto (internal/legacy12)
// drives the exact call sequences of the 1.2 s2uc through two real s2cs
// started with the 1.2 daemon's command line; the WAN leg between them is
// mutual TLS under --peer_ca.

func newCA(t *testing.T, name string) (*x509.Certificate, *ecdsa.PrivateKey, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return c, key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// issue writes a gateway certificate for ip under ca into dir and returns
// its certificate and key files.
func issue(t *testing.T, dir, name, ip string, ca *x509.Certificate, caKey *ecdsa.PrivateKey) [2]string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.ParseIP(ip)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	cf, kf := filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := os.WriteFile(cf, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kf, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return [2]string{cf, kf}
}

// legacyEnv is two gateways started with the 1.2 command line, the
// generated client, and the tokens of the pair harness.
type legacyEnv struct {
	*pair
	gen, script string
	caFile      string // the facility CA: --peer_ca, and the clients' --server_cert
	ca          *x509.Certificate
	caKey       *ecdsa.PrivateKey
}

// genStubs generates the Python gRPC stubs from the project's .proto.
func genStubs(t *testing.T) string {
	t.Helper()
	out := t.TempDir()
	proto, err := filepath.Abs("../internal/legacy12")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("python3", "-m", "grpc_tools.protoc", "-I"+proto, "--python_out="+out, "--grpc_python_out="+out, filepath.Join(proto, "scistream.proto"))
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("generate the Python client from scistream.proto: %v\n%s", err, b)
	}
	return out
}

func newLegacyEnv(t *testing.T) *legacyEnv {
	t.Helper()
	needPython(t, "grpc", "grpc_tools")
	dir := t.TempDir()
	e := &legacyEnv{pair: &pair{t: t, dir: dir, tokens: map[string]string{}, home: filepath.Join(dir, "home")}}
	e.gen = genStubs(t)
	script, err := filepath.Abs("legacy12/s2uc12.py")
	if err != nil {
		t.Fatal(err)
	}
	e.script = script
	for _, id := range []string{"alice", "bob"} {
		e.tokens[id] = localgw.NewToken()
	}
	e.tokensFile = filepath.Join(dir, "tokens")
	if err := localgw.WriteTokens(e.tokensFile, e.tokens); err != nil {
		t.Fatal(err)
	}
	var pemCA []byte
	e.ca, e.caKey, pemCA = newCA(t, "facility CA")
	e.caFile = filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(e.caFile, pemCA, 0o644); err != nil {
		t.Fatal(err)
	}
	ips, err := localgw.DistinctLoopbacks(2)
	if err != nil {
		t.Fatal(err)
	}
	// 30 sessions at once (below) wait for their partner: more than the
	// default --quota_pending of one user.
	e.prod = e.start12("prod", ips[0], "5600-5699", issue(t, dir, "prod", ips[0], e.ca, e.caKey), e.caFile, "--quota_pending=64")
	e.cons = e.start12("cons", ips[1], "5700-5799", issue(t, dir, "cons", ips[1], e.ca, e.caKey), e.caFile, "--quota_pending=64")
	return e
}

// start12 starts s2cs as a 1.2 systemd unit does ("start" first, Fire
// style flags, a 1.2 proxy type), plus --peer_ca, extra, and this test's
// tokens, state and loopback policy.
func (e *legacyEnv) start12(name, ip, ports string, cert [2]string, peerCA string, extra ...string) *localgw.Gateway {
	e.t.Helper()
	args := append([]string{
		"--server_crt=" + cert[0], "--server_key=" + cert[1], "--listener_ip=" + ip, "--port=0",
		"--port_range=" + ports, "--type=Haproxy", "--verbose",
		"--peer_ca=" + peerCA,
	}, extra...)
	g, err := localgw.Start(context.Background(), localgw.Options{
		S2CS: bins.s2cs, ListenerIP: ip, PortRange: ports, StateDir: filepath.Join(e.dir, name),
		TokensFile: e.tokensFile, Args: args,
		// exec keeps the PID: Stop signals s2cs itself.
		Prefix: []string{"sh", "-c", `exec "$0" start "$@"`},
	})
	if err != nil {
		e.t.Fatalf("start %s gateway with the 1.2 command line: %v", name, err)
	}
	g.CertFile = e.caFile // what the clients trust: the facility CA
	e.t.Cleanup(func() {
		g.Stop()
		if e.t.Failed() {
			e.t.Logf("%s gateway log:\n%s", name, lastLines(g.Log(), 80))
		}
	})
	return g
}

// call12 is the answer of one s2uc12.py command.
type call12 struct {
	UID           string   `json:"uid"`
	Listeners     []string `json:"listeners"`
	ProdListeners []string `json:"prod_listeners"`
	Error         string   `json:"error"`
	Message       string   `json:"message"`
	Inbound       []call12 `json:"inbound"`
	Outbound      []call12 `json:"outbound"`
}

// py runs s2uc12.py with args against g as identity id ("" sends no
// valid token) and returns its answer.
func (e *legacyEnv) py(t *testing.T, g *localgw.Gateway, id string, args ...string) call12 {
	t.Helper()
	token := "INVALID_TOKEN" // what the 1.2 client sends without a token
	if id != "" {
		token = e.tokens[id]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	argv := append([]string{e.script, args[0], "--gen", e.gen, "--s2cs", g.Addr, "--server_cert", e.caFile, "--token", token}, args[1:]...)
	cmd := exec.CommandContext(ctx, "python3", argv...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("s2uc12.py %s: %v\nstderr:\n%s", strings.Join(args, " "), err, lastLines(errb.String(), 20))
	}
	var c call12
	if err := json.Unmarshal(out.Bytes(), &c); err != nil {
		t.Fatalf("s2uc12.py %s: output is not JSON: %v\n%s\nstderr:\n%s", strings.Join(args, " "), err, out.String(), errb.String())
	}
	return c
}

// must fails t unless c succeeded.
func must(t *testing.T, c call12) call12 {
	t.Helper()
	if c.Error != "" {
		t.Fatalf("1.2 call refused: %s: %s", c.Error, c.Message)
	}
	return c
}

// send writes data to addr (a CONS gateway listener) and closes, then
// checks the sink got exactly data.
func send(t *testing.T, addr string, data []byte, s *sink) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatalf("dial the CONS listener %s: %v", addr, err)
	}
	defer c.Close()
	if _, err := c.Write(data); err != nil {
		t.Fatalf("write to %s: %v", addr, err)
	}
	c.(*net.TCPConn).CloseWrite()
	r := s.next(t, 30*time.Second)
	if r.err != nil || r.n != int64(len(data)) || r.sum != sha256.Sum256(data) {
		t.Fatalf("through %s the producer got %d bytes (err %v), want %d byte-exact", addr, r.n, r.err, len(data))
	}
}

func randomBytes(t *testing.T, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestLegacy12(t *testing.T) {
	e := newLegacyEnv(t)
	prodIP, _, _ := net.SplitHostPort(e.prod.Addr)

	// Data flows from the application that connects (at CONS) to the
	// one that listens (at PROD): a sink stands for the latter.
	open := func(t *testing.T, numConn int, hello string) (call12, call12, *sink) {
		t.Helper()
		s := newSink(t, "127.0.0.1", nil)
		in := must(t, e.py(t, e.prod, "alice", "inbound", "--targets", "127.0.0.1:"+s.port(), "--num_conn", fmt.Sprint(numConn), "--hello", hello))
		out := must(t, e.py(t, e.cons, "alice", "outbound", "--uid", in.UID, "--targets", strings.Join(in.Listeners, ","), "--num_conn", fmt.Sprint(numConn)))
		return in, out, s
	}

	t.Run("sequences", func(t *testing.T) {
		p := e.on(t)
		// Each side waits for its partner (listening) until it is
		// known: the CONS side by its update, the PROD side by the
		// first WAN leg of the CONS gateway (its watch leg, a second
		// after the update), before any data.
		s := newSink(t, "127.0.0.1", nil)
		in := must(t, e.py(t, e.prod, "alice", "inbound", "--targets", "127.0.0.1:"+s.port(), "--num_conn", "2"))
		prod := e.stateOn(t, e.prod, in.UID)
		if st := prod(); st != api.StateListening {
			t.Errorf("PROD side before its CONS side came: %s; want listening", st)
		}
		out := must(t, e.py(t, e.cons, "alice", "outbound", "--uid", in.UID, "--targets", strings.Join(in.Listeners, ","), "--num_conn", "2"))
		if st := e.stateOn(t, e.cons, in.UID)(); st != api.StateWired {
			t.Errorf("CONS side after its update: %s; want wired", st)
		}
		waitfor.Must(t, 30*time.Second, "the PROD side to be wired by the CONS gateway's first WAN leg", func() bool { return prod() == api.StateWired })
		if len(in.Listeners) != 2 || len(out.Listeners) != 2 {
			t.Fatalf("listeners: PROD %v, CONS %v; want 2 each", in.Listeners, out.Listeners)
		}
		for _, l := range in.Listeners {
			if h, _, _ := net.SplitHostPort(l); h != prodIP {
				t.Errorf("PROD listener %s is not on the gateway's --listener_ip %s", l, prodIP)
			}
		}
		want := "127.0.0.1:" + s.port()
		if len(in.ProdListeners) != 2 || in.ProdListeners[0] != want || in.ProdListeners[1] != want {
			t.Errorf("prod_listeners %v: want the target expanded to num_conn, [%s %s]", in.ProdListeners, want, want)
		}
		for _, l := range out.Listeners {
			send(t, l, randomBytes(t, 4<<20), s)
		}
		// An ordinary stream: our own s2uc sees it on both gateways,
		// its counters count the bytes, and it releases it.
		st := p.status(e.prod, in.UID)
		if st.Role != api.RoleInbound || st.State != api.StateConnected || st.Owner != "alice" || st.Stats.BytesFromWAN != 8<<20 {
			t.Errorf("PROD side through s2uc status: role %s state %s owner %s from_wan %d; want inbound connected alice %d", st.Role, st.State, st.Owner, st.Stats.BytesFromWAN, 8<<20)
		}
		if st := p.status(e.cons, in.UID); st.Role != api.RoleOutbound || st.State != api.StateConnected || st.Stats.BytesToWAN != 8<<20 {
			t.Errorf("CONS side through s2uc status: role %s state %s to_wan %d; want outbound connected %d", st.Role, st.State, st.Stats.BytesToWAN, 8<<20)
		}
		if list := p.mustS2UC("alice", "list", "--s2cs", e.cons.Addr, "--server_cert", e.caFile); !strings.Contains(list, in.UID) {
			t.Errorf("s2uc list on CONS does not show %s:\n%s", in.UID, list)
		}
		// Release on one side with our s2uc, the other with 1.2's.
		p.mustS2UC("alice", "release", in.UID, "--s2cs", e.cons.Addr, "--server_cert", e.caFile)
		must(t, e.py(t, e.prod, "alice", "release", "--uid", in.UID))
		var ended api.Stream
		if err := json.Unmarshal([]byte(p.mustS2UC("alice", "status", in.UID, "--s2cs", e.prod.Addr, "--server_cert", e.caFile, "--output", "json")), &ended); err != nil || ended.State != api.StateReleased {
			t.Errorf("PROD side after the 1.2 release: %s (%v), want released", ended.State, err)
		}
		// Releasing an ended stream again answers as the API does.
		must(t, e.py(t, e.prod, "alice", "release", "--uid", in.UID))
	})

	t.Run("hello first", func(t *testing.T) {
		in, out, s := open(t, 1, "first")
		send(t, out.Listeners[0], randomBytes(t, 1<<20), s)
		must(t, e.py(t, e.cons, "alice", "release", "--uid", in.UID))
		must(t, e.py(t, e.prod, "alice", "release", "--uid", in.UID))
	})

	t.Run("req without hello", func(t *testing.T) {
		start := time.Now()
		c := e.py(t, e.prod, "alice", "inbound", "--targets", "127.0.0.1:9", "--hello", "never")
		if c.Error != "DEADLINE_EXCEEDED" || !strings.Contains(c.Message, "no hello") {
			t.Fatalf("req never followed by hello: %s %q; want DEADLINE_EXCEEDED naming the missing hello", c.Error, c.Message)
		}
		if d := time.Since(start); d > 25*time.Second {
			t.Errorf("the refusal took %v: the wait must be bounded (10 s)", d)
		}
	})

	t.Run("refusals", func(t *testing.T) {
		s := newSink(t, "127.0.0.1", nil)
		if c := e.py(t, e.prod, "", "inbound", "--targets", "127.0.0.1:"+s.port(), "--hello", "first"); c.Error != "UNAUTHENTICATED" {
			t.Errorf("no token (INVALID_TOKEN): %s %q; want UNAUTHENTICATED", c.Error, c.Message)
		}
		in := must(t, e.py(t, e.prod, "alice", "inbound", "--targets", "127.0.0.1:"+s.port()))
		defer e.py(t, e.prod, "alice", "release", "--uid", in.UID)
		if c := e.py(t, e.prod, "alice", "inbound", "--uid", in.UID, "--targets", "127.0.0.1:"+s.port()); c.Error != "ALREADY_EXISTS" {
			t.Errorf("a second req for a live uid: %s %q; want ALREADY_EXISTS", c.Error, c.Message)
		}
		// Another identity's stream of the same UID is not this one.
		if c := e.py(t, e.prod, "bob", "release", "--uid", in.UID); c.Error != "NOT_FOUND" {
			t.Errorf("bob releasing alice's stream: %s %q; want NOT_FOUND", c.Error, c.Message)
		}
		// The target policy holds: --allow_peers is 127.0.0.0/8 here.
		if c := e.py(t, e.cons, "alice", "outbound", "--uid", in.UID, "--targets", "10.0.0.1:5000", "--num_conn", "1"); (c.Error != "PERMISSION_DENIED" && c.Error != "INVALID_ARGUMENT") || !strings.Contains(c.Message, "allow_peers") {
			t.Errorf("CONS update toward a peer outside --allow_peers: %s %q; want a refusal naming --allow_peers", c.Error, c.Message)
		}
		must(t, e.py(t, e.cons, "alice", "release", "--uid", in.UID))
		if c := e.py(t, e.prod, "alice", "inbound", "--targets", "127.0.0.1:"+s.port(), "--num_conn", "0", "--hello", "first"); c.Error != "INVALID_ARGUMENT" {
			t.Errorf("num_conn 0: %s %q; want INVALID_ARGUMENT", c.Error, c.Message)
		}
	})

	t.Run("30 concurrent sessions", func(t *testing.T) {
		const n = 30
		sinks := make([]*sink, n)
		sets := make([][]string, n)
		for i := range sinks {
			sinks[i] = newSink(t, "127.0.0.1", nil)
			sets[i] = []string{"127.0.0.1:" + sinks[i].port()}
		}
		js, _ := json.Marshal(sets)
		c := e.py(t, e.prod, "alice", "many", "--cons", e.cons.Addr, "--targets_json", string(js))
		if len(c.Inbound) != n || len(c.Outbound) != n {
			t.Fatalf("many: %d inbound, %d outbound answers, want %d", len(c.Inbound), len(c.Outbound), n)
		}
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i := range n {
			in, out := must(t, c.Inbound[i]), must(t, c.Outbound[i])
			if len(in.ProdListeners) != 1 || in.ProdListeners[0] != sets[i][0] {
				t.Fatalf("session %d got prod_listeners %v, want its own %v: sessions crossed", i, in.ProdListeners, sets[i])
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				data := []byte(fmt.Sprintf("session %02d %s", i, in.UID))
				conn, err := net.DialTimeout("tcp", out.Listeners[0], 10*time.Second)
				if err != nil {
					errs <- err
					return
				}
				defer conn.Close()
				conn.Write(data)
				conn.(*net.TCPConn).CloseWrite()
				select {
				case r := <-sinks[i].got:
					if !bytes.Equal(r.data, data) {
						errs <- fmt.Errorf("session %d: its producer got %q, want %q", i, r.data, data)
					}
				case <-time.After(60 * time.Second):
					errs <- fmt.Errorf("session %d: nothing reached its producer", i)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		for i := range n {
			must(t, e.py(t, e.prod, "alice", "release", "--uid", c.Inbound[i].UID))
			must(t, e.py(t, e.cons, "alice", "release", "--uid", c.Inbound[i].UID))
		}
	})

	t.Run("peer not under peer_ca", func(t *testing.T) {
		// A gateway whose certificate another CA issued, trusting the
		// facility's: the PROD gateway refuses its WAN legs.
		rogueCA, rogueKey, _ := newCA(t, "nobody's partner")
		ips, err := localgw.DistinctLoopbacks(1)
		if err != nil {
			t.Fatal(err)
		}
		rogue := e.start12("rogue", ips[0], "5800-5849", issue(t, e.dir, "rogue", ips[0], rogueCA, rogueKey), e.caFile)
		rogue.CertFile = filepath.Join(e.dir, "rogue.crt")
		s := newSink(t, "127.0.0.1", nil)
		in := must(t, e.py(t, e.prod, "alice", "inbound", "--targets", "127.0.0.1:"+s.port()))
		defer e.py(t, e.prod, "alice", "release", "--uid", in.UID)
		out := must(t, e.pyTrust(t, rogue, rogue.CertFile, "alice", "outbound", "--uid", in.UID, "--targets", strings.Join(in.Listeners, ","), "--num_conn", "1"))
		conn, err := net.DialTimeout("tcp", out.Listeners[0], 10*time.Second)
		switch {
		case errors.Is(err, syscall.ECONNRESET):
			// On a starved machine the rogue gateway can accept, fail
			// its WAN leg and reset the connection before the dial
			// returns: refused all the same.
		case err != nil:
			t.Fatal(err)
		default:
			conn.Write([]byte("must not arrive"))
			conn.(*net.TCPConn).CloseWrite()
			conn.SetReadDeadline(time.Now().Add(30 * time.Second))
			buf := make([]byte, 16)
			if _, err := conn.Read(buf); err == nil {
				t.Error("the rogue gateway's connection got an answer")
			}
			conn.Close()
		}
		p := e.on(t)
		stats := p.statsOn(e.prod, in.UID)
		waitfor.Must(t, 30*time.Second, "the PROD gateway to count the refused WAN leg", func() bool { return stats().RejectedConns > 0 })
		if got := stats().TotalConns; got != 0 {
			t.Errorf("PROD relayed %d connections from the rogue gateway", got)
		}
		select {
		case r := <-s.got:
			t.Errorf("the producer got %d bytes through a gateway not under --peer_ca", r.n)
		default:
		}
		if log := e.prod.Log(); !strings.Contains(log, "not issued under --peer_ca") {
			t.Errorf("the PROD gateway's log does not say why the leg was refused")
		}
	})

	t.Run("partner never comes", func(t *testing.T) {
		// A PROD gateway whose users may have one stream waiting for
		// its partner, for 8 s: long enough that the refusals below
		// come while it still waits, on a starved machine too (there
		// the two calls took 2.5 s, and a stream of 2 s had expired
		// and freed its place by the second).
		ips, err := localgw.DistinctLoopbacks(1)
		if err != nil {
			t.Fatal(err)
		}
		g := e.start12("lonely", ips[0], "5850-5899", issue(t, e.dir, "lonely", ips[0], e.ca, e.caKey), e.caFile, "--quota_pending=1", "--pending_timeout=8s")
		p := e.on(t)
		s := newSink(t, "127.0.0.1", nil)
		in := must(t, e.py(t, g, "alice", "inbound", "--targets", "127.0.0.1:"+s.port()))
		// A second 1.2 PROD request is refused as a native one is. It
		// sends no hello: the 1.2 client's hello, 0.5 s after its req,
		// would wait for a req that was refused and hold alice's place
		// until it lapses (HelloWait), and the request after the
		// expiry below would meet it.
		if c := e.py(t, g, "alice", "inbound", "--hello", "never", "--targets", "127.0.0.1:"+s.port()); c.Error != "RESOURCE_EXHAUSTED" || !strings.Contains(c.Message, "--quota_pending") {
			t.Errorf("a second 1.2 PROD request: %s %q; want RESOURCE_EXHAUSTED naming --quota_pending", c.Error, c.Message)
		}
		if _, errs, code := p.s2uc("alice", "inbound-request", "--s2cs", g.Addr, "--server_cert", e.caFile, "--remote_ip", "127.0.0.1", "--receiver_ports", s.port(), "--num_conn", "1"); code == 0 || !strings.Contains(errs, "no_resources") || !strings.Contains(errs, "--quota_pending") {
			t.Errorf("a native inbound request beside it: exit %d, %q; want no_resources naming --quota_pending", code, errs)
		}
		// Its partner never comes: it expires and frees its port.
		state := e.stateOn(t, g, in.UID)
		waitfor.Must(t, 60*time.Second, "the lonely PROD stream to expire", func() bool { return state() == api.StateExpired })
		for _, l := range in.Listeners {
			ln, err := net.Listen("tcp", l)
			if err != nil {
				t.Errorf("port %s of the expired stream: %v; want it free", l, err)
				continue
			}
			ln.Close()
		}
		// It holds nothing: the same request again is served.
		if c := e.py(t, g, "alice", "inbound", "--uid", in.UID, "--targets", "127.0.0.1:"+s.port()); c.Error != "" {
			t.Errorf("the same inbound-request again after the expiry: %s %q; want it served", c.Error, c.Message)
		}
		must(t, e.py(t, g, "alice", "release", "--uid", in.UID))
	})

	t.Run("beside a native stream", func(t *testing.T) {
		p := e.on(t)
		in, out, s := open(t, 1, "after")
		native := newSink(t, "127.0.0.1", nil)
		so := p.wireVia("alice", e.prod, e.cons, "127.0.0.1", native.port(), 1)
		a, b := randomBytes(t, 2<<20), randomBytes(t, 2<<20)
		send(t, out.Listeners[0], a, s)
		send(t, so.Listeners[0], b, native)
		must(t, e.py(t, e.cons, "alice", "release", "--uid", in.UID))
		must(t, e.py(t, e.prod, "alice", "release", "--uid", in.UID))
		p.mustS2UC("alice", "release", so.UID, "--s2cs", e.prod.Addr, "--server_cert", e.caFile)
		p.mustS2UC("alice", "release", so.UID, "--s2cs", e.cons.Addr, "--server_cert", e.caFile)
	})
}

// stateOn returns a function that reads the state of alice's stream uid
// on g through the control API: cheap enough to poll.
func (e *legacyEnv) stateOn(t *testing.T, g *localgw.Gateway, uid string) func() api.State {
	t.Helper()
	c, err := g.Client(e.tokens["alice"])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return func() api.State {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		v, err := c.Get(ctx, uid)
		if err != nil {
			t.Fatalf("status of %s on %s: %v", uid, g.Addr, err)
		}
		return v.State
	}
}

// pyTrust is py with another certificate trusted for the control channel.
func (e *legacyEnv) pyTrust(t *testing.T, g *localgw.Gateway, certFile, id string, args ...string) call12 {
	t.Helper()
	saved := e.caFile
	e.caFile = certFile
	defer func() { e.caFile = saved }()
	return e.py(t, g, id, args...)
}
