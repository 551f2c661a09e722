package e2e

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"scistream/internal/certs"
	"scistream/internal/localgw"
)

// sniRouter is a real HAProxy in TCP mode in front of shared WAN ports,
// as a facility's 443-only edge (seed 001: OpenShift passthrough routes)
// would be: it reads the TLS server name of each connection's
// ClientHello and passes the connection, untouched, to the gateway whose
// domain the name ends with. It knows domains, not streams, so streams
// come and go without a reload.
type sniRouter struct {
	addr string // where peers dial, port 443
	cmd  *exec.Cmd
}

// startSNIRouter starts HAProxy on a fresh loopback address, port 443,
// routing names under each domain of routes to its backend: one or more
// servers, each "host:port" and any HAProxy server options
// (send-proxy-v2, check). A backend of several takes them in turn, and
// a connection its server refuses is passed to the next; backendOpts are
// more lines of every backend (its health check).
func startSNIRouter(t *testing.T, routes map[string][]string, backendOpts ...string) *sniRouter {
	t.Helper()
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		t.Skip("haproxy not installed (scripts/setup.sh installs it)")
	}
	ip := localgw.RandomLoopback()
	r := &sniRouter{addr: net.JoinHostPort(ip, "443")}
	var cfg strings.Builder
	fmt.Fprintf(&cfg, `global
    maxconn 4096
defaults
    mode tcp
    timeout connect 5s
    timeout client 5m
    timeout server 5m
frontend wan
    bind %s
    tcp-request inspect-delay 5s
    tcp-request content accept if { req.ssl_hello_type 1 }
`, r.addr)
	domains := slices.Sorted(maps.Keys(routes))
	for i, domain := range domains {
		fmt.Fprintf(&cfg, "    use_backend gw%d if { req.ssl_sni -m end .%s }\n", i, domain)
	}
	for i, domain := range domains {
		fmt.Fprintf(&cfg, "backend gw%d\n    balance roundrobin\n    retries 3\n    option redispatch 1\n", i)
		for _, o := range backendOpts {
			fmt.Fprintf(&cfg, "    %s\n", o)
		}
		for j, server := range routes[domain] {
			fmt.Fprintf(&cfg, "    server gw%d-%d %s\n", i, j, server)
		}
	}
	// Names routed nowhere have no default backend: HAProxy closes them.
	path := filepath.Join(t.TempDir(), "haproxy.cfg")
	if err := os.WriteFile(path, []byte(cfg.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "-c", "-f", path).CombinedOutput(); err != nil {
		t.Fatalf("haproxy refuses its config: %v\n%s\n%s", err, out, cfg.String())
	}
	var log strings.Builder
	r.cmd = exec.Command(bin, "-db", "-f", path)
	r.cmd.Stdout, r.cmd.Stderr = &log, &log
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { r.cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		r.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			r.cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("haproxy log:\n%s", log.String())
		}
	})
	eventually(t, 10*time.Second, "haproxy to listen on "+r.addr, func() bool {
		select {
		case <-exited:
			t.Fatalf("haproxy exited: %s", log.String())
		default:
		}
		c, err := net.DialTimeout("tcp", r.addr, time.Second)
		if err != nil {
			return false
		}
		c.Close()
		return true
	})
	return r
}

// TestSNIRouter: two consumer gateways sit behind one HAProxy on port
// 443, each with its shared WAN port and its own domain; the router tells
// one of them each connection's source with the PROXY protocol. Streams of two
// identities, wired step by step and in one call, carry their bytes
// through the router; releasing one leaves another's open connection
// alone; names routed nowhere, names of no stream and the wrong secret
// are all refused at the shared ports behind the router.
func TestSNIRouter(t *testing.T) {
	p := newPair(t, pairOpts{})
	ipA, ipB := localgw.RandomLoopback(), localgw.RandomLoopback()
	router := startSNIRouter(t, map[string][]string{
		"a.wan.test": {net.JoinHostPort(ipA, "8443") + " send-proxy-v2"},
		"b.wan.test": {net.JoinHostPort(ipB, "8443")},
	})
	gwArgs := func(domain string) []string {
		return []string{"--wan_port", "8443", "--wan_domain", domain, "--wan_advertise", router.addr}
	}
	// A hears from the router who each peer is (the PROXY protocol).
	consA := p.start("consA", ipA, pairOpts{args: append(gwArgs("a.wan.test"), "--wan_proxy_protocol", "--wan_proxy_from", "127.0.0.1")}) // HAProxy's address
	consB := p.start("consB", ipB, pairOpts{args: gwArgs("b.wan.test")})
	app := newSink(t, "127.0.0.1", nil)

	// alice, step by step, to gateway A.
	out := p.mustS2UC("alice", "inbound-request", "--server_cert="+consA.CertFile, "--s2cs", consA.Addr,
		"--remote_ip", "127.0.0.1", "--receiver_ports", app.port(), "--num_conn", "2")
	m := regexp.MustCompile(`(?m)^uid: (\S+)\nlisteners: (\S+)\nserver name: ([a-z0-9]+\.a\.wan\.test) `).FindStringSubmatch(out)
	if m == nil || m[2] != router.addr {
		t.Fatalf("inbound-request on a shared port: want the router %s as the one listener and a name under a.wan.test:\n%s", router.addr, out)
	}
	uidA := m[1]
	host, port, _ := net.SplitHostPort(router.addr)
	out = p.mustS2UC("alice", "outbound-request", "--server_cert="+p.prod.CertFile, "--s2cs", p.prod.Addr,
		"--remote_ip", host, "--receiver_ports", port, "--num_conn", "2", uidA)
	lm := regexp.MustCompile(`(?m)^listeners: (\S+) (\S+)$`).FindStringSubmatch(out)
	if lm == nil {
		t.Fatalf("outbound-request output lacks two listeners:\n%s", out)
	}
	alice := []string{lm[1], lm[2]}

	// bob, in one call, to gateway B; and alice again, to B.
	wireTo := func(id string, g *localgw.Gateway) streamOut {
		t.Helper()
		saved := p.cons
		p.cons = g
		defer func() { p.cons = saved }()
		return p.wire(id, "127.0.0.1", app.port(), 2)
	}
	bob := wireTo("bob", consB)
	alice2 := wireTo("alice", consB)

	send := func(addr string, n int64, seed uint64) {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		sum := sendRandom(t, c, n, seed)
		c.(*net.TCPConn).CloseWrite()
		r := app.next(t, 30*time.Second)
		if r.err != nil || r.n != n || r.sum != sum {
			t.Fatalf("through %s: consumer got %d bytes (err %v), want %d identical", addr, r.n, r.err, n)
		}
	}
	for i, addr := range []string{alice[0], alice[1], bob.Listeners[0], bob.Listeners[1], alice2.Listeners[1]} {
		send(addr, 8<<20, uint64(i))
	}

	// bob's connection stays open while alice's streams are released.
	c, err := net.Dial("tcp", bob.Listeners[0])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	h := sha256.New()
	w := io.MultiWriter(h, c)
	if err := writeRandom(w, 1<<20, 100); err != nil {
		t.Fatal(err)
	}
	p.mustS2UC("alice", "release", uidA)
	p.mustS2UC("alice", "release", alice2.UID)
	if err := writeRandom(w, 1<<20, 101); err != nil {
		t.Fatalf("bob's connection after alice's releases: %v", err)
	}
	c.(*net.TCPConn).CloseWrite()
	r := app.next(t, 30*time.Second)
	if r.err != nil || r.n != 2<<20 || !bytes.Equal(r.sum[:], h.Sum(nil)) {
		t.Fatalf("bob's connection across alice's releases: %d bytes of %d (err %v), or not the same", r.n, 2<<20, r.err)
	}

	// Refusals at the router and behind it.
	stranger, _, _, err := certs.LoadOrGenerate(t.TempDir(), []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	handshake := func(name string) error {
		raw, err := net.DialTimeout("tcp", router.addr, 5*time.Second)
		if err != nil {
			return err
		}
		defer raw.Close()
		raw.SetDeadline(time.Now().Add(10 * time.Second))
		tc := tls.Client(raw, &tls.Config{MinVersion: tls.VersionTLS13, ServerName: name,
			Certificates: []tls.Certificate{stranger.TLS}, InsecureSkipVerify: true})
		if err := tc.Handshake(); err != nil {
			return err
		}
		_, err = tc.Read(make([]byte, 1))
		return err
	}
	// A name under no gateway's domain: the router drops it.
	if err := handshake("x.elsewhere.test"); err == nil || os.IsTimeout(err) || !strings.Contains(err.Error(), "EOF") {
		t.Errorf("a name routed nowhere: %v; want the router to close the connection", err)
	}
	// A name of no stream, and bob's stream's name with a certificate
	// that is not pinned: the same answer, so the first says nothing of
	// which streams exist.
	unknown := handshake("aaaaaaaaaaaaaaaaaaaaaaaaaa.b.wan.test")
	wrongCert := handshake(bobServerName(t, p, bob.UID))
	if wrongCert == nil || !strings.Contains(wrongCert.Error(), "bad certificate") || unknown == nil || unknown.Error() != wrongCert.Error() {
		t.Errorf("behind the router, a name of no stream got %v, a wrong certificate %v; want the same bad certificate alert", unknown, wrongCert)
	}

	// Gateway B killed and restarted: bob's stream is back under its name.
	p.restart(&consB, false)
	send(bob.Listeners[1], 4<<20, 7)
}

// bobServerName returns the server name of bob's stream uid, from his
// local record of it.
func bobServerName(t *testing.T, p *pair, uid string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(p.home, "bob", "streams", uid+".json"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`"server_name": "([^"]+)"`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("bob's record of %s has no server name: %s", uid, b)
	}
	return string(m[1])
}
