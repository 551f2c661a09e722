package main

import (
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestTranslate12: the 1.2 daemon's command lines, in every spelling
// Fire took (1.2.1's, and the later branch's with "start" first), become
// s2cs's flags, and what marks each as 1.2's is found; s2cs's own lines
// pass unchanged and are not 1.2's.
func TestTranslate12(t *testing.T) {
	for _, c := range []struct {
		args, want []string
		marks      []string
		id, secret string
		ssl        string
	}{
		// s2cs's own lines, kebab-case included: not 1.2's.
		{args: []string{"--listener_ip", "10.0.0.1", "--type", "splice"}, want: []string{"--listener_ip", "10.0.0.1", "--type=splice"}},
		{args: []string{"--port-range=10000-20000"}, want: []string{"--port-range=10000-20000"}},
		{args: []string{"--verbose", "--port=5007", "--listener-ip=10.0.0.1"}, want: []string{"--verbose", "--port=5007", "--listener-ip=10.0.0.1"}},
		// The 1.2 documentation's lines.
		{args: []string{"-t", "Haproxy", "--verbose"}, want: []string{"--type=splice", "--verbose"}, marks: []string{"-t", "--type Haproxy"}},
		{args: []string{"-t", "Haproxy", "--verbose", "--client_id=INFO_ID", "--client_secret=CONTACTUSFORTHIS"}, want: []string{"--type=splice", "--verbose"},
			marks: []string{"-t", "--type Haproxy", "--client_id", "--client_secret"}, id: "INFO_ID", secret: "CONTACTUSFORTHIS"},
		{args: []string{"--verbose", "--type=Haproxy"}, want: []string{"--verbose", "--type=splice"}, marks: []string{"--type Haproxy"}},
		{args: []string{"--type=Haproxy", "--ssl=False"}, want: []string{"--type=splice"}, marks: []string{"--type Haproxy", "--ssl"}, ssl: "--ssl=False"},
		{args: []string{"-v"}, want: []string{"--verbose=true"}, marks: []string{"-v"}},
		{args: []string{"--verbose", "--port=5007", "--listener-ip=10.0.0.1", "--type=Haproxy"}, want: []string{"--verbose", "--port=5007", "--listener-ip=10.0.0.1", "--type=splice"}, marks: []string{"--type Haproxy"}},
		{args: []string{"--type=S2DS"}, want: []string{"--type=splice"}, marks: []string{"--type S2DS"}},
		// Fire's other spellings.
		{args: []string{"--server_crt=a.crt", "--server_key=a.key", "--listener_ip=10.0.0.1", "--port=5000", "--port_range=5100-5200", "--type=Haproxy", "--verbose"},
			want: []string{"--server_crt=a.crt", "--server_key=a.key", "--listener_ip=10.0.0.1", "--port=5000", "--port_range=5100-5200", "--type=splice", "--verbose"}, marks: []string{"--type Haproxy"}},
		{args: []string{"start", "--type", "StunnelSubprocess", "--client-id=cid", "--client_secret", "s3cret"}, want: []string{"--type=splice"},
			marks: []string{"start", "--type StunnelSubprocess", "--client_id", "--client_secret"}, id: "cid", secret: "s3cret"},
		{args: []string{"start"}, marks: []string{"start"}},
		{args: []string{"-l", "10.0.0.1", "-v", "False", "--v=True"}, want: []string{"--listener_ip=10.0.0.1", "--verbose=false", "--verbose=true"}, marks: []string{"-l", "-v"}},
		{args: []string{"--verbose", "True", "--t=Nginx"}, want: []string{"--verbose=true", "--type=splice"}, marks: []string{"-t", "--type Nginx"}},
		{args: []string{"--ssl", "--ssl=True", "--ssl", "true", "-t", "haproxy"}, want: []string{"--type=splice"}, marks: []string{"--ssl", "-t", "--type haproxy"}},
		{args: []string{"--ssl", "False"}, marks: []string{"--ssl"}, ssl: "--ssl=False"},
		{args: []string{"--nossl"}, marks: []string{"--nossl"}, ssl: "--nossl"},
		{args: []string{"--ssl=maybe"}, marks: []string{"--ssl"}, ssl: "--ssl=maybe"},
		{args: []string{"--type=Nginx", "--", "--type=Nginx"}, want: []string{"--type=splice", "--", "--type=Nginx"}, marks: []string{"--type Nginx"}},
	} {
		got, l := translate12(c.args)
		if !slices.Equal(got, c.want) || !slices.Equal(l.marks, c.marks) || l.clientID != c.id || l.clientSecret != c.secret || l.ssl != c.ssl {
			t.Errorf("translate12(%q) = %q (marks %q, id %q, secret %q, ssl %q); want %q (marks %q, id %q, secret %q, ssl %q)",
				c.args, got, l.marks, l.clientID, l.clientSecret, l.ssl, c.want, c.marks, c.id, c.secret, c.ssl)
		}
	}
}

// fakeAddrs are a host's addresses for apply.
func fakeAddrs(addrs ...string) func() ([]ifAddr, error) {
	return func() ([]ifAddr, error) {
		var out []ifAddr
		for i, a := range addrs {
			out = append(out, ifAddr{iface: "eth" + string(rune('0'+i)), ip: netip.MustParseAddr(a)})
		}
		return out, nil
	}
}

// parse12 parses a command line as run does, up to apply, in dir on a
// host with addrs.
func parse12(t *testing.T, dir string, addrs func() ([]ifAddr, error), args ...string) (*options, *legacyArgs, error) {
	t.Helper()
	args, l := translate12(args)
	o, err := parseFlags(args, io.Discard)
	if err != nil {
		t.Fatalf("parseFlags(%q): %v", args, err)
	}
	return o, l, l.apply(o, o.ops.given(), dir, addrs)
}

// TestApply12: a 1.2 command line takes 1.2's defaults for what it
// leaves out (the address 0.0.0.0 bound and this host's one address
// told peers, the data ports 5100-5200, ./server.crt and ./server.key,
// the 1.2 protocol on), keeps what it gives, and turns --client_id and
// --client_secret into introspection at Globus Auth; s2cs's own lines
// take none of it.
func TestApply12(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"server.crt", "server.key"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	one := fakeAddrs("127.0.0.1", "fe80::1", "169.254.1.1", "2001:db8::1", "10.1.2.3")
	crt, key := filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key")
	for _, c := range []struct {
		args                             []string
		grpc                             bool
		listener, bind, ports, cert, key string
	}{
		{[]string{"-t", "Haproxy", "--verbose", "--peer_ca=ca.pem", "--tokens=t"}, true, "10.1.2.3", "0.0.0.0", "5100-5200", crt, key},
		{[]string{"--port-range=10000-20000", "--peer_ca=ca.pem"}, true, "10.1.2.3", "0.0.0.0", "10000-20000", crt, key},
		{[]string{"--verbose", "--port=5007", "--listener-ip=10.9.9.9", "--type=Haproxy", "--peer_ca=ca.pem"}, true, "10.9.9.9", "", "5100-5200", crt, key},
		{[]string{"--type=S2DS", "--peer_ca=ca.pem", "--bind=10.1.2.3", "--server_crt=mine.crt", "--server_key=mine.key"}, true, "10.1.2.3", "10.1.2.3", "5100-5200", "mine.crt", "mine.key"},
		// s2cs's own, serving 1.2 clients too: no 1.2 default.
		{[]string{"--control_grpc", "--peer_ca=ca.pem", "--listener_ip=10.9.9.9"}, true, "10.9.9.9", "", "5100-5199", "", ""},
		{[]string{"--listener_ip=10.9.9.9", "--type=splice"}, false, "10.9.9.9", "", "5100-5199", "", ""},
	} {
		o, _, err := parse12(t, dir, one, c.args...)
		if err != nil || o.legacy.grpc != c.grpc || o.listenerIP != c.listener || o.bindIP != c.bind || o.portRange != c.ports || o.certFile != c.cert || o.keyFile != c.key {
			t.Errorf("%q: grpc %v, listener_ip %q, bind %q, port_range %q, server_crt %q, server_key %q, %v; want %v, %q, %q, %q, %q, %q",
				c.args, o.legacy.grpc, o.listenerIP, o.bindIP, o.portRange, o.certFile, o.keyFile, err, c.grpc, c.listener, c.bind, c.ports, c.cert, c.key)
		}
	}

	o, l, err := parse12(t, dir, one, "-t", "Haproxy", "--client_id=INFO_ID", "--client_secret=CONTACTUSFORTHIS", "--peer_ca=ca.pem")
	if err != nil || o.id.introURL != globusIntrospect || o.id.introClientID != "INFO_ID" || o.id.introSecret != "CONTACTUSFORTHIS" || o.id.introIDClaim != "username" {
		t.Errorf("--client_id/--client_secret: url %q, client %q, identity claim %q, secret set %v, %v; want Globus Auth's introspection as INFO_ID, the username",
			o.id.introURL, o.id.introClientID, o.id.introIDClaim, o.id.introSecret != "", err)
	}
	for _, n := range l.became {
		if strings.Contains(n.became, "CONTACTUSFORTHIS") {
			t.Errorf("what %s became says the secret: %q", n.name, n.became)
		}
	}
	// A secret alone: 1.2's default client; the introspection flags
	// given win over the 1.2 defaults.
	o, _, err = parse12(t, dir, one, "--client_secret=S", "--introspection_url=https://idp.example/introspect", "--peer_ca=ca.pem")
	if err != nil || o.id.introURL != "https://idp.example/introspect" || o.id.introClientID != defaultClientID12 {
		t.Errorf("--client_secret alone: url %q, client %q, %v; want the given URL and 1.2's default client", o.id.introURL, o.id.introClientID, err)
	}

	for _, c := range []struct {
		dir     string
		addrs   func() ([]ifAddr, error)
		args    []string
		mention string
	}{
		{dir, one, []string{"--type=Haproxy", "--ssl=False", "--peer_ca=ca.pem"}, "--ssl=False: refused: 1.2 then served its control protocol in plaintext"},
		{dir, one, []string{"--nossl", "--peer_ca=ca.pem"}, "Drop --nossl"},
		{dir, one, []string{"--ssl=maybe", "--peer_ca=ca.pem"}, "--ssl=maybe: 1.2 took --ssl=True or --ssl=False"},
		{dir, one, []string{"-t", "Haproxy", "--verbose"}, "a SciStream 1.2 command line (-t, --type Haproxy) serves the 1.2 control protocol, which needs --peer_ca FILE"},
		{dir, one, []string{"--client_id=X", "--peer_ca=ca.pem"}, "--client_id X (1.2: Globus Auth) needs the client's secret"},
		{dir, fakeAddrs("127.0.0.1", "169.254.9.9"), []string{"-t", "Haproxy", "--peer_ca=ca.pem"}, "no IPv4 address but loopback and link-local ones: give --listener_ip IP"},
		{dir, fakeAddrs("10.1.2.3", "172.17.0.1"), []string{"-t", "Haproxy", "--peer_ca=ca.pem"}, "this host has 2 IPv4 addresses (10.1.2.3 on eth0, 172.17.0.1 on eth1)"},
		{t.TempDir(), one, []string{"-t", "Haproxy", "--peer_ca=ca.pem", "--server_crt=a.crt"}, ""},
	} {
		_, _, err := parse12(t, c.dir, c.addrs, c.args...)
		if c.mention == "" {
			if err != nil {
				t.Errorf("%q: %v", c.args, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.mention) {
			t.Errorf("%q: %v; want an error saying %q", c.args, err, c.mention)
		}
	}
	// A certificate without its key in the working directory.
	half := t.TempDir()
	if err := os.WriteFile(filepath.Join(half, "server.crt"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := parse12(t, half, one, "-t", "Haproxy", "--peer_ca=ca.pem"); err == nil || !strings.Contains(err.Error(), "holds server.crt but not server.key: put it there, or give --server_key FILE") {
		t.Errorf("./server.crt without ./server.key: %v", err)
	}
}

// TestPickAdvertised: the one IPv4 unicast address that is neither
// loopback nor link-local, or an error listing what there is.
func TestPickAdvertised(t *testing.T) {
	for _, c := range []struct {
		addrs []string
		want  string
	}{
		{[]string{"10.1.2.3"}, "10.1.2.3"},
		{[]string{"127.0.0.1", "::1", "fe80::1", "169.254.3.3", "2001:db8::7", "192.0.2.2"}, "192.0.2.2"},
		{[]string{"2001:db8::7"}, ""},
		{nil, ""},
		{[]string{"10.1.2.3", "10.1.2.4"}, ""},
	} {
		cands, _ := fakeAddrs(c.addrs...)()
		ip, err := pickAdvertised(cands)
		if got := ip.String(); c.want != "" && (err != nil || got != c.want) || c.want == "" && err == nil {
			t.Errorf("pickAdvertised(%v) = %s, %v; want %q", c.addrs, ip, err, c.want)
		}
	}
}

// TestLegacyRefusals: the gRPC endpoint does not start without --peer_ca,
// whether asked for (--control_grpc) or implied by a 1.2 command line.
func TestLegacyRefusals(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	base := []string{"--state_dir", state, "--insecure_no_auth", "--listener_ip", "127.0.0.1"}
	for _, c := range []struct {
		args    []string
		mention string
	}{
		{[]string{"--control_grpc"}, "--control_grpc (the SciStream 1.2 control protocol) needs --peer_ca FILE"},
		{[]string{"--type=Haproxy"}, "needs --peer_ca FILE"},
		{[]string{"-t", "Haproxy", "--verbose"}, "a SciStream 1.2 command line (-t, --type Haproxy) serves the 1.2 control protocol, which needs --peer_ca FILE"},
		{[]string{"--peer_ca", "ca.pem", "--control_grpc=false"}, "--peer_ca is for the streams of SciStream 1.2 clients, and --control_grpc=false turns their protocol off"},
		{[]string{"--peer_ca", "ca.pem", "--type=Haproxy", "--ssl=False"}, "--ssl=False: refused"},
		{[]string{"--control_grpc", "--peer_ca", "ca.pem", "--node", "n1"}, "--control_grpc: the 1.2 protocol is not served by a node of a facility"},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			refused(t, state, append(append([]string{}, base...), c.args...), c.mention)
		})
	}
	refused(t, state, append([]string{"start"}, base...), "needs --peer_ca FILE")
	// A line nothing marks as 1.2's, without --listener_ip, says how
	// one becomes a 1.2 line.
	refused(t, state, []string{"--state_dir", state, "--insecure_no_auth", "--port-range=10000-20000"}, "--listener_ip is required: give the IP address peers use to reach this gateway (a SciStream 1.2 command line, which takes 1.2's 0.0.0.0, is one with --peer_ca FILE")
	// A 1.2 line without a token check says what 1.2 did and what to give.
	refused(t, state, []string{"--state_dir", state, "--listener_ip", "127.0.0.1", "--type=Haproxy", "--peer_ca", "ca.pem"}, "a SciStream 1.2 command line (--type Haproxy) without --client_secret: 1.2 then checked no token, and s2cs always checks them: pass --tokens FILE")
}
