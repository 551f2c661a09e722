package e2e

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	mrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"scistream/internal/localgw"
	"scistream/internal/oidctest"
)

// The SciStream 1.2 daemon's command lines as the 1.2 documentation
// prints them (issue 36), each run with the real s2cs from a directory
// holding server.crt and server.key, as a 1.2 site does, with only
// --peer_ca added (and tokens, or for a --client_id line a local issuer
// standing in for Globus Auth, where the line checks no token): two
// gateways, PROD and CONS, each with the row's command line; then the
// 1.2 client's inbound and outbound requests through them, and data.
//
// A 1.2 line without --listener_ip binds 0.0.0.0 on its default ports
// (5000, 5100-5200), so each gateway runs in a network namespace of its
// own (lab): one interface, one address, which it advertises. No
// gateway binds in this host's namespace; the test's own listeners (the
// application, the issuer) are on its end of the lab's link.

// lab is a bridge in a network namespace of its own, a network namespace
// per host on it (one veth each), and a veth from the test's namespace
// to the bridge, so that the test, the 1.2 client and the applications
// reach every host, in one /24.
type lab struct {
	t      *testing.T
	name   string // prefix of the namespaces' names
	net    string // the /24's first three octets, "10.213.7"
	hub    string // the bridge's namespace
	hostIP string // the test's address on the lab
	hosts  int
}

var labs atomic.Int32

// newLab builds a lab, and takes it down when t ends; it skips t
// without root or the ip command.
func newLab(t *testing.T) *lab {
	t.Helper()
	if os.Geteuid() != 0 {
		missing(t, "network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		missing(t, "no ip command (iproute2)")
	}
	sweepLabs()
	n := labs.Add(1)
	l := &lab{t: t, name: fmt.Sprintf("s2l12-%d-%d", os.Getpid(), n)}
	l.hub = l.name + "-hub"
	l.net = freeNet(t)
	l.hostIP = l.net + ".254"
	dev := fmt.Sprintf("s2l%04x%02x", os.Getpid()&0xffff, n&0xff) // at most 15 characters
	l.ip("netns", "add", l.hub)
	t.Cleanup(func() {
		exec.Command("ip", "link", "del", dev).Run()
		exec.Command("ip", "netns", "del", l.hub).Run()
	})
	l.ip("-n", l.hub, "link", "add", "br0", "type", "bridge")
	l.ip("-n", l.hub, "link", "set", "br0", "up")
	l.ip("link", "add", dev, "type", "veth", "peer", "name", "test", "netns", l.hub)
	l.ip("-n", l.hub, "link", "set", "test", "master", "br0", "up")
	l.ip("addr", "add", l.hostIP+"/24", "dev", dev)
	l.ip("link", "set", dev, "up")
	return l
}

// sweepLabs deletes the namespaces of labs whose test process is gone
// (killed before its cleanup ran); their links go with them.
func sweepLabs() {
	ents, _ := os.ReadDir("/run/netns")
	for _, e := range ents {
		var pid, n int
		if _, err := fmt.Sscanf(e.Name(), "s2l12-%d-%d", &pid, &n); err != nil || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			exec.Command("ip", "netns", "del", e.Name()).Run()
		}
	}
}

// freeNet picks a /24 in 10.200.0.0-10.239.255.0 that none of this
// host's addresses is in.
func freeNet(t *testing.T) string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for range 100 {
		cand := fmt.Sprintf("10.%d.%d", 200+mrand.IntN(40), mrand.IntN(256))
		_, subnet, _ := net.ParseCIDR(cand + ".0/24")
		taken := false
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && (subnet.Contains(n.IP) || n.Contains(subnet.IP)) {
				taken = true
			}
		}
		if !taken {
			return cand
		}
	}
	t.Fatal("no free /24 in 10.200.0.0/13 for the lab")
	return ""
}

func (l *lab) ip(args ...string) {
	l.t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		l.t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// host adds a host to the lab: a network namespace whose one interface,
// eth0, is on the bridge with the addresses given (the lab's .1, .2, ...
// if none); it returns the namespace and its first address.
func (l *lab) host(name string, addrs ...string) (string, string) {
	l.t.Helper()
	l.hosts++
	if len(addrs) == 0 {
		addrs = []string{fmt.Sprintf("%s.%d", l.net, l.hosts)}
	}
	ns := l.name + "-" + name
	l.ip("netns", "add", ns)
	l.t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	l.ip("-n", ns, "link", "set", "lo", "up")
	port := fmt.Sprintf("h%d", l.hosts)
	l.ip("-n", l.hub, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
	l.ip("-n", l.hub, "link", "set", port, "master", "br0", "up")
	for _, a := range addrs {
		l.ip("-n", ns, "addr", "add", a+"/24", "dev", "eth0")
	}
	l.ip("-n", ns, "link", "set", "eth0", "up")
	return ns, addrs[0]
}

// selfSigned writes server.crt and server.key into dir as a 1.2 site
// makes them (openssl req -x509: a self-signed certificate for the
// gateway's address, which the 1.2 client trusts as it is), and returns
// the certificate's path.
func selfSigned(t *testing.T, dir, ip string) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: ip},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		IPAddresses: []net.IP{net.ParseIP(ip)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	crt := filepath.Join(dir, "server.crt")
	if err := os.WriteFile(crt, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "server.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return crt
}

// site12 is one gateway's host and directory, as a 1.2 site has them:
// server.crt, server.key, and what the migration adds, partners.pem
// (--peer_ca: the other site's certificate) and a token file.
type site12 struct {
	ns, ip, dir, cert string
}

// sites12 makes the PROD and CONS sites on l, each trusting the other's
// certificate, with tokens the token file of both.
func sites12(t *testing.T, l *lab, tokens map[string]string) (prod, cons site12) {
	t.Helper()
	s := [2]site12{}
	for i, name := range []string{"prod", "cons"} {
		s[i].ns, s[i].ip = l.host(name)
		s[i].dir = t.TempDir()
		s[i].cert = selfSigned(t, s[i].dir, s[i].ip)
		if err := localgw.WriteTokens(filepath.Join(s[i].dir, "tokens"), tokens); err != nil {
			t.Fatal(err)
		}
	}
	for i := range s {
		other, err := os.ReadFile(s[1-i].cert)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(s[i].dir, "partners.pem"), other, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return s[0], s[1]
}

// run starts s2cs with args, exactly, in the site's namespace and
// directory.
func (s site12) run(t *testing.T, name string, args []string) *localgw.Gateway {
	t.Helper()
	g, err := localgw.Start(context.Background(), localgw.Options{
		S2CS: bins.s2cs, Args: args, Exact: true, Dir: s.dir, CertFile: s.cert,
		Prefix: []string{"ip", "netns", "exec", s.ns}, ReadyTimeout: 30 * time.Second,
	})
	if err != nil && strings.Contains(err.Error(), "open files does not even cover") {
		// The tutorials' 10,001 data ports take 2 open files each: on a
		// machine whose hard limit is below that (a 1.2 site's unit has
		// LimitNOFILE=65536, deploy/systemd), the line is taken as 1.2's
		// and refused for the limit alone, saying what to raise it to.
		var lim syscall.Rlimit
		syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
		if !strings.Contains(err.Error(), "raise it to at least") {
			t.Fatalf("s2cs %s refused for the limit of open files without the fix: %v", strings.Join(args, " "), err)
		}
		t.Skipf("this machine's hard limit of open files (%d) is below what s2cs %s plans for; it said so: %v", lim.Max, strings.Join(args, " "), err)
	}
	if err != nil {
		t.Fatalf("start the %s gateway with s2cs %s: %v", name, strings.Join(args, " "), err)
	}
	t.Cleanup(func() {
		g.Stop()
		if t.Failed() {
			t.Logf("%s gateway (s2cs %s) log:\n%s", name, strings.Join(args, " "), lastLines(g.Log(), 60))
		}
	})
	return g
}

// refuse runs s2cs with args in the site's namespace and directory and
// returns what it said on stderr, failing t unless it exited 2 at once.
func (s site12) refuse(t *testing.T, args []string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", s.ns, bins.s2cs}, args...)...)
	cmd.Dir = s.dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Fatalf("s2cs %s: %v, want a refusal (exit status 2); stderr:\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stderr.String()
}

// row12 is a 1.2 command line as the 1.2 documentation prints it.
type row12 struct {
	where string // where the 1.2 documentation prints it
	line  string // after "s2cs"; {ip} is the gateway's address, where the documentation writes "..."
	// became are what the gateway's one log line of the 1.2 options
	// must say; {ip} as in line.
	became []string
}

// rows12 are the table of issue 36, every line that starts.
var rows12 = []row12{
	{"getting started, quickstart", "-t Haproxy --verbose",
		[]string{`marked_by="-t, --type Haproxy"`, "type=\"Haproxy: engine splice", "tells peers {ip}, this host's one IPv4 address", "port_range=\"5100-5200 (1.2's default)\"", "server_crt=\"not given: ", "/server.crt (1.2's default"}},
	{"quickstart; authentication guide", "-t Haproxy --verbose --client_id=INFO_ID --client_secret=CONTACTUSFORTHIS",
		[]string{`marked_by="-t, --type Haproxy, --client_id, --client_secret"`, "client_id=\"token introspection at https://", "as client INFO_ID, secret from --client_secret (inline, as 1.2 took it)"}},
	{"troubleshooting", "--verbose --type=Haproxy",
		[]string{`marked_by="--type Haproxy"`, "binds 0.0.0.0 and tells peers {ip}"}},
	{"tutorials", "--type=Haproxy", []string{`marked_by="--type Haproxy"`}},
	{"tutorials", "--port-range=10000-20000", []string{`marked_by=--peer_ca`, "tells peers {ip}"}},
	{"the -v of 1.2's start()", "-v", []string{`marked_by=-v`, `v="--verbose=true (the debug log)"`}},
	{"tutorials", "--verbose --port=5007 --listener-ip={ip} --type=Haproxy",
		[]string{`marked_by="--type Haproxy"`, `port="5007: the same"`, `listener_ip="{ip}: the same"`, "/server.crt (1.2's default"}},
	{"1.2's start(): type S2DS", "--type=S2DS", []string{`marked_by="--type S2DS"`, "type=\"S2DS: engine splice"}},
}

// TestLegacy12CommandLine: every row starts with only --peer_ca added
// (and the token check its line lacks), reads ./server.crt and
// ./server.key, advertises the address peers reach, says in one log
// line what each 1.2 option became, and an unmodified 1.2 client's
// inbound and outbound requests (num_conn 3) then carry data through
// it, byte-exact, and release.
func TestLegacy12CommandLine(t *testing.T) {
	needPython(t, "grpc", "grpc_tools")
	gen := genStubs(t)
	script, err := filepath.Abs("legacy12/s2uc12.py")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows12 {
		t.Run(r.line, func(t *testing.T) {
			l := newLab(t)
			e := &legacyEnv{pair: &pair{t: t, tokens: map[string]string{"alice": localgw.NewToken()}}, gen: gen, script: script}
			prod, cons := sites12(t, l, e.tokens)
			extra := []string{"--tokens=tokens"}
			if strings.Contains(r.line, "--client_id") {
				// Globus Auth, faked: a local issuer with the line's
				// client, reached on the lab, introspects opaque tokens.
				is := oidctest.Start(t, oidctest.Options{Opaque: true, IP: net.ParseIP(l.hostIP), IntrospectionClientID: "INFO_ID", IntrospectionSecret: "CONTACTUSFORTHIS"})
				e.tokens["alice"] = is.MintOpaque(oidctest.Claims{Subject: "alice"})
				extra = []string{"--introspection_url=" + is.URL + "/introspect", "--oidc_ca=" + is.CAFile}
			}
			args := func(s site12) []string {
				a := strings.Fields(strings.ReplaceAll(r.line, "{ip}", s.ip))
				return append(append(a, "--peer_ca=partners.pem"), extra...)
			}
			gp := prod.run(t, "PROD", args(prod))
			gc := cons.run(t, "CONS", args(cons))

			app := newSink(t, l.hostIP, nil)
			in := must(t, e.pyTrust(t, gp, prod.cert, "alice", "inbound", "--targets", net.JoinHostPort(l.hostIP, app.port()), "--num_conn", "3"))
			for _, ln := range in.Listeners {
				if h, _, _ := net.SplitHostPort(ln); h != prod.ip {
					t.Errorf("PROD listener %s: want it on the gateway's address %s", ln, prod.ip)
				}
			}
			out := must(t, e.pyTrust(t, gc, cons.cert, "alice", "outbound", "--uid", in.UID, "--targets", strings.Join(in.Listeners, ","), "--num_conn", "3"))
			if len(in.Listeners) != 3 || len(out.Listeners) != 3 {
				t.Fatalf("listeners: PROD %v, CONS %v; want 3 each", in.Listeners, out.Listeners)
			}
			for _, ln := range out.Listeners {
				send(t, ln, randomBytes(t, 1<<20), app)
			}
			must(t, e.pyTrust(t, gc, cons.cert, "alice", "release", "--uid", in.UID))
			must(t, e.pyTrust(t, gp, prod.cert, "alice", "release", "--uid", in.UID))
			checkSaid12(t, gp, prod, r)
			checkSaid12(t, gc, cons, r)
		})
	}
}

// checkSaid12 checks the gateway's log of its 1.2 command line: one line
// that says what each option became (r.became), a warning for an inline
// secret and never the secret itself.
func checkSaid12(t *testing.T, g *localgw.Gateway, s site12, r row12) {
	t.Helper()
	log := g.Log()
	var said []string
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "SciStream 1.2 command line: each 1.2 option") {
			said = append(said, line)
		}
	}
	if len(said) != 1 {
		t.Fatalf("s2cs %s said what its 1.2 options became in %d lines, want 1:\n%s", r.line, len(said), lastLines(log, 40))
	}
	for _, w := range r.became {
		if w = strings.ReplaceAll(w, "{ip}", s.ip); !strings.Contains(said[0], w) {
			t.Errorf("s2cs %s: its line of the 1.2 options lacks %q:\n%s", r.line, w, said[0])
		}
	}
	if strings.Contains(r.line, "--client_secret") {
		if strings.Contains(log, "CONTACTUSFORTHIS") {
			t.Errorf("s2cs %s logged the client secret", r.line)
		}
		if !strings.Contains(log, "--client_secret is on the command line, which every user of this host can read") {
			t.Errorf("s2cs %s did not warn of the secret on its command line", r.line)
		}
	}
	if f := strings.Fields(r.line); (slices.Contains(f, "-v") || slices.Contains(f, "--verbose")) && !strings.Contains(log, "level=DEBUG") {
		t.Errorf("s2cs %s: no debug line in the log: -v is --verbose", r.line)
	}
}

// TestLegacy12CommandLineRefused: what a 1.2 line cannot have is
// refused at once with the reason and the fix: --ssl=False (a plaintext
// control plane), a 1.2 line without --peer_ca, and one without
// --listener_ip on a host of two addresses (which one peers reach is not
// s2cs's to guess).
func TestLegacy12CommandLineRefused(t *testing.T) {
	l := newLab(t)
	prod, _ := sites12(t, l, map[string]string{"alice": localgw.NewToken()})
	for _, c := range []struct {
		line     string
		mentions []string
	}{
		{"--type=Haproxy --ssl=False --peer_ca=partners.pem --tokens=tokens", []string{"s2cs: --ssl=False: refused: 1.2 then served its control protocol in plaintext",
			"tokens and the streams' listeners cross the network", "over TLS only", "Drop --ssl=False"}},
		{"--type=Haproxy --ssl=False --tokens=tokens", []string{"--ssl=False: refused"}},
		{"-t Haproxy --verbose --tokens=tokens", []string{"a SciStream 1.2 command line (-t, --type Haproxy) serves the 1.2 control protocol, which needs --peer_ca FILE"}},
		{"--port-range=10000-20000 --tokens=tokens", []string{"--listener_ip is required", "a SciStream 1.2 command line, which takes 1.2's 0.0.0.0, is one with --peer_ca FILE"}},
	} {
		t.Run(c.line, func(t *testing.T) {
			said := prod.refuse(t, strings.Fields(c.line))
			for _, m := range c.mentions {
				if !strings.Contains(said, m) {
					t.Errorf("s2cs %s said %q; want it to say %q", c.line, said, m)
				}
			}
		})
	}
	t.Run("two addresses", func(t *testing.T) {
		ns, ip := l.host("two", l.net+".21", l.net+".22")
		s := site12{ns: ns, ip: ip, dir: prod.dir}
		said := s.refuse(t, strings.Fields("-t Haproxy --verbose --peer_ca=partners.pem --tokens=tokens"))
		for _, m := range []string{"without --listener_ip", "this host has 2 IPv4 addresses (" + l.net + ".21 on eth0, " + l.net + ".22 on eth0)", "give --listener_ip IP"} {
			if !strings.Contains(said, m) {
				t.Errorf("on a host of two addresses, s2cs said %q; want it to say %q", said, m)
			}
		}
	})
}
