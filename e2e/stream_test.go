package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"scistream/internal/localgw"
)

// TestSeedWorkflow follows the ORNL runbook (seed 001 sec. 3.4) with the
// real binaries: inbound-request, outbound-request, `echo 123 | nc`, then
// release on each side.
func TestSeedWorkflow(t *testing.T) {
	nc, err := exec.LookPath("nc")
	if err != nil {
		t.Skip("nc not installed (scripts/setup installs netcat-openbsd)")
	}
	p := newPair(t, pairOpts{})
	app := newSink(t, "127.0.0.1", nil)

	out := p.mustS2UC("alice", "inbound-request", "--server_cert="+p.cons.CertFile, "--s2cs", p.cons.Addr,
		"--remote_ip", "127.0.0.1", "--receiver_ports", app.port(), "--num_conn", "1")
	m := regexp.MustCompile(`(?m)^uid: (\S+)\nlisteners: (\S+):(\d+)$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("inbound-request output lacks uid/listeners lines:\n%s", out)
	}
	uid, consHost, proxyC := m[1], m[2], m[3]
	if strings.Contains(out, "['") || strings.Contains(out, "secret") {
		t.Fatalf("human output must be plain and secret-free:\n%s", out)
	}
	out = p.mustS2UC("alice", "outbound-request", "--server_cert="+p.prod.CertFile, "--s2cs", p.prod.Addr,
		"--remote_ip", consHost, "--receiver_ports", proxyC, "--num_conn", "1", uid, consHost+":"+proxyC)
	m = regexp.MustCompile(`(?m)^uid: (\S+)\nlisteners: (\S+)$`).FindStringSubmatch(out)
	if m == nil || m[1] != uid {
		t.Fatalf("outbound-request output lacks uid %s / listeners:\n%s", uid, out)
	}
	proxyP := m[2]
	host, port, _ := net.SplitHostPort(proxyP)

	cmd := exec.Command("sh", "-c", fmt.Sprintf("echo 123 | %s -N %s %s", nc, host, port))
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("echo 123 | nc: %v: %s", err, b)
	}
	r := app.next(t, 10*time.Second)
	if r.err != nil || string(r.data) != "123\n" {
		t.Fatalf("consumer got %q (err %v), want \"123\\n\"", r.data, r.err)
	}

	// status through the local record shows both sides and the bytes.
	var st struct {
		Gateways []struct {
			Role  string `json:"role"`
			State string `json:"state"`
			Stats struct {
				BytesToWAN   int64 `json:"bytes_to_wan"`
				BytesFromWAN int64 `json:"bytes_from_wan"`
				TotalConns   int64 `json:"total_conns"`
			} `json:"stats"`
		} `json:"gateways"`
	}
	if err := json.Unmarshal([]byte(p.mustS2UC("alice", "status", uid, "--output", "json")), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Gateways) != 2 {
		t.Fatalf("status shows %d gateways, want 2", len(st.Gateways))
	}
	for _, g := range st.Gateways {
		moved := g.Stats.BytesToWAN + g.Stats.BytesFromWAN
		if g.State != "connected" || moved != 4 || g.Stats.TotalConns != 1 {
			t.Errorf("%s side: state %s, %d bytes, %d conns; want connected, 4, 1", g.Role, g.State, moved, g.Stats.TotalConns)
		}
	}

	out = p.mustS2UC("alice", "release", uid)
	if strings.Count(out, "released "+uid) != 2 {
		t.Fatalf("release should report both sides:\n%s", out)
	}
	if _, err := dialFrom("", proxyP); err == nil {
		t.Fatalf("producer listener %s still accepts after release", proxyP)
	}
	if _, err := dialFrom("", consHost+":"+proxyC); err == nil {
		t.Fatalf("consumer listener still accepts after release")
	}
}

// TestChannels: --receiver_ports 2 ports, --num_conn 3: listener i leads
// to receiver port i mod 2, and the listeners keep that order.
func TestChannels(t *testing.T) {
	p := newPair(t, pairOpts{})
	a := newSink(t, "127.0.0.1", nil)
	b := newSink(t, "127.0.0.1", nil)
	so := p.wire("alice", "127.0.0.1", a.port()+","+b.port(), 3)
	want := []*sink{a, b, a}
	for i, l := range so.Listeners {
		c, err := dialFrom("", l)
		if err != nil {
			t.Fatal(err)
		}
		msg := fmt.Sprintf("channel %d", i)
		c.Write([]byte(msg))
		c.Close()
		if r := want[i].next(t, 5*time.Second); string(r.data) != msg {
			t.Fatalf("listener %d (%s): receiver %d got %q, want %q", i, l, i%2, r.data, msg)
		}
	}
}

// TestBufferEngineRingSize: gateways started with --type buffer and the
// smallest --buffer_size carry a stream intact over both WAN transports
// (the rings wrap around many times), and s2cs refuses sizes out of range,
// naming the flag and the range.
func TestBufferEngineRingSize(t *testing.T) {
	for _, bad := range []string{"1KiB", "2GiB", "lots"} {
		out, err := exec.Command(bins.s2cs, "--listener_ip", "127.0.0.1", "--insecure_no_auth",
			"--state_dir", t.TempDir(), "--buffer_size", bad).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "--buffer_size") {
			t.Fatalf("s2cs --buffer_size %s: err %v, output %q; want a refusal naming the flag", bad, err, out)
		}
	}
	for _, wan := range []string{"tls", "tcp"} {
		t.Run(wan, func(t *testing.T) {
			p := newPair(t, pairOpts{args: []string{"--insecure_tcp_wan", "--type", "buffer", "--buffer_size", "64KiB"}})
			app := newSink(t, "127.0.0.1", nil)
			so := p.wire("alice", app.host(), app.port(), 1, "--wan", wan)
			for _, g := range []*localgw.Gateway{p.prod, p.cons} {
				if !strings.Contains(g.Log(), "buffer_size=64KiB") {
					t.Fatalf("gateway log does not report buffer_size=64KiB:\n%s", g.Log())
				}
			}
			if so.Inbound.Engine != "buffer" || so.Outbound.Engine != "buffer" {
				t.Fatalf("stream engines %q/%q, want buffer (the gateways' default)", so.Inbound.Engine, so.Outbound.Engine)
			}
			const total = 64 << 20
			c, err := dialFrom("", so.Listeners[0])
			if err != nil {
				t.Fatal(err)
			}
			sum := sendRandom(t, c, total, 2)
			c.CloseWrite()
			r := app.next(t, time.Minute)
			c.Close()
			if r.err != nil || r.n != total || r.sum != sum {
				t.Fatalf("consumer got %d bytes (err %v), sha256 match %v; want %d identical bytes", r.n, r.err, r.sum == sum, total)
			}
		})
	}
}

// TestStreamOutputFresh: what s2uc stream prints is both sides as they are
// once wired, not as they were created: the inbound side wired (attached,
// no data has passed yet) and pinned to the outbound gateway (workflow
// engines parse this), and the applications named by what they do, not
// as producer and consumer.
func TestStreamOutputFresh(t *testing.T) {
	p := newPair(t, pairOpts{})
	app := newSink(t, "127.0.0.1", nil)
	var out struct {
		UID               string
		Inbound, Outbound struct {
			State          string `json:"state"`
			PeerCertSHA256 string `json:"peer_cert_sha256"`
			WANCertSHA256  string `json:"wan_cert_sha256"`
			Secret         string `json:"secret"`
		}
	}
	js := p.mustS2UC("alice", "stream", "--inbound_s2cs", p.cons.Addr, "--inbound_server_cert", p.cons.CertFile,
		"--outbound_s2cs", p.prod.Addr, "--outbound_server_cert", p.prod.CertFile,
		"--remote_ip", "127.0.0.1", "--receiver_ports", app.port(), "--output", "json")
	if err := json.Unmarshal([]byte(js), &out); err != nil {
		t.Fatal(err)
	}
	if out.Inbound.State != "wired" || out.Outbound.State != "wired" ||
		out.Inbound.PeerCertSHA256 != out.Outbound.WANCertSHA256 || out.Outbound.PeerCertSHA256 != out.Inbound.WANCertSHA256 ||
		out.Inbound.PeerCertSHA256 == "" || out.Inbound.Secret != "" {
		t.Fatalf("s2uc stream --output json is not both sides as wired:\n%s", js)
	}
	text := p.mustS2UC("alice", "stream", "--inbound_s2cs", p.cons.Addr, "--inbound_server_cert", p.cons.CertFile,
		"--outbound_s2cs", p.prod.Addr, "--outbound_server_cert", p.prod.CertFile,
		"--remote_ip", "127.0.0.1", "--receiver_ports", app.port())
	for _, want := range []string{
		"the application that connects: connect it to " + p.prod.Opts.ListenerIP + ":",
		"the application that listens: listen on 127.0.0.1:" + app.port() + "; the inbound gateway connects to it",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("s2uc stream output lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "producer") || strings.Contains(text, "consumer") {
		t.Errorf("s2uc stream output names producer or consumer, which may be the wrong way round:\n%s", text)
	}
}
