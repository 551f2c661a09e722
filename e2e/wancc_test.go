package e2e

import (
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"scistream/internal/bytesize"
	"scistream/internal/tcpbuf"
	"scistream/internal/tcpcc"
)

// TestWANCongestionControl: s2cs --wan_cc sets the congestion control
// of both ends of the gateways' WAN legs, whatever the host's default,
// and leaves the LAN legs (the producer's and the consumer's sockets at
// the gateways) on the host's default, as the kernel itself reports
// for each socket (ss -ti); status says which the WAN legs run.
func TestWANCongestionControl(t *testing.T) {
	host, err := tcpcc.Resolve(tcpcc.Host)
	if err != nil {
		t.Fatal(err)
	}
	want := ""
	for _, cc := range []string{"reno", "bbr", "cubic"} {
		if cc != host.HostDefault && tcpcc.Probe(cc) == nil {
			want = cc
			break
		}
	}
	if want == "" {
		t.Skipf("no congestion control other than the host's %s can be set here", host.HostDefault)
	}
	if _, err := exec.LookPath("ss"); err != nil {
		missing(t, "no ss (the Debian package iproute2)")
	}
	p := newPair(t, pairOpts{args: []string{"--wan_cc", want}})
	app := newSink(t, "127.0.0.1", nil)
	so := p.wire("alice", app.host(), app.port(), 1)
	c, err := net.Dial("tcp", so.Listeners[0])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the consumer to be connected", func() bool { return app.accepted.Load() == 1 })

	var st struct {
		Gateways []struct {
			Role      string   `json:"role"`
			Listeners []string `json:"listeners"`
			WANCC     string   `json:"wan_cc"`
		} `json:"gateways"`
	}
	if err := json.Unmarshal([]byte(p.mustS2UC("alice", "status", so.UID, "--output", "json")), &st); err != nil {
		t.Fatal(err)
	}
	inPort := ""
	for _, g := range st.Gateways {
		if g.WANCC != want {
			t.Errorf("the %s gateway's status says its WAN legs run %q, want %q", g.Role, g.WANCC, want)
		}
		if g.Role == "inbound" && len(g.Listeners) == 1 {
			_, inPort, _ = net.SplitHostPort(g.Listeners[0])
		}
	}
	if inPort == "" {
		t.Fatalf("no inbound listener in the status: %+v", st)
	}
	if text := p.mustS2UC("alice", "status", so.UID); !strings.Contains(text, "wan tls ("+want+")") {
		t.Errorf("s2uc status does not say the WAN legs run %s:\n%s", want, text)
	}
	// The start line says how far the host lets the legs' buffers
	// grow, and the advice comes exactly when that is short of a long
	// path's need.
	lim := tcpbuf.Read()
	log := p.prod.Log()
	if !strings.Contains(log, "tcp_rmem_max="+bytesize.Format(lim.Recv)+" tcp_wmem_max="+bytesize.Format(lim.Send)) {
		t.Errorf("the gateway's start line does not say the host's TCP buffer limits %+v:\n%s", lim, lastLines(log, 20))
	}
	if advice := strings.Contains(log, "fix=\""+tcpbuf.Fix); advice != lim.Low() {
		t.Errorf("TCP buffer limits %+v (low %v): the gateway's log gives the fix: %v", lim, lim.Low(), advice)
	}
	_, outPort, _ := net.SplitHostPort(so.Listeners[0])
	appPort := app.port()
	available := strings.Fields(readProcSys(t, "tcp_available_congestion_control"))
	// Every established socket of each gateway, by its ports: a WAN
	// leg (or the watch leg) runs want, a LAN leg the host's default.
	eventually(t, 30*time.Second, "every leg of both gateways to run the congestion control it should", func() bool {
		socks := gatewaySockets(t, available, p.prod.PID(), p.cons.PID())
		var wan, lan int
		ok := true
		for _, s := range socks {
			var expect string
			switch {
			case s.pid == p.prod.PID() && s.local == outPort, s.pid == p.cons.PID() && s.peer == appPort:
				expect, lan = host.HostDefault, lan+1
			case s.pid == p.prod.PID() && s.peer == inPort, s.pid == p.cons.PID() && s.local == inPort:
				expect, wan = want, wan+1
			default:
				continue // the control API's connections
			}
			if s.cc != expect {
				t.Logf("gateway pid %d socket %s -> %s runs %s, want %s", s.pid, s.local, s.peer, s.cc, expect)
				ok = false
			}
		}
		return ok && lan == 2 && wan >= 2
	})
}

// socket is one established TCP socket of a gateway, as ss shows it.
type socket struct {
	pid         int
	local, peer string // ports
	cc          string
}

// gatewaySockets lists the established TCP sockets of the processes
// pids with their congestion control (ss -tinpH), a name of available.
func gatewaySockets(t *testing.T, available []string, pids ...int) []socket {
	t.Helper()
	out, err := exec.Command("ss", "-tinpH", "state", "established").Output()
	if err != nil {
		t.Fatalf("ss: %v", err)
	}
	lines := strings.Split(string(out), "\n")
	var socks []socket
	for i := 0; i+1 < len(lines); i++ {
		f := strings.Fields(lines[i])
		if len(f) < 5 || !strings.HasPrefix(f[4], "users:") {
			continue
		}
		pid := 0
		for _, p := range pids {
			if strings.Contains(f[4], "pid="+strconv.Itoa(p)+",") {
				pid = p
			}
		}
		if pid == 0 {
			continue
		}
		s := socket{pid: pid, local: portOf(f[2]), peer: portOf(f[3])}
		for _, w := range strings.Fields(lines[i+1]) {
			for _, a := range available {
				if w == a {
					s.cc = w
				}
			}
		}
		socks = append(socks, s)
	}
	return socks
}

func portOf(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

func readProcSys(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/net/ipv4/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}
