package e2e

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"scistream/internal/localgw"
)

// This file holds what the application tests (apps_test.go) share: running
// the example programs of examples/ as real processes, reading the JSON
// events they print, and wiring a stream in either direction.

// examplesDir is examples/ at the module root (go test runs in e2e/).
func examplesDir(t *testing.T) string {
	t.Helper()
	d, err := filepath.Abs("../examples")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// longRun reports whether SCISTREAM_LONG=1 asks for the full-size
// measurement runs that docs/applications.md reports (minutes, not seconds).
func longRun() bool { return os.Getenv("SCISTREAM_LONG") == "1" }

// needPython skips t unless python3 can import every module. CI installs
// them all (scripts/setup.sh), so a skip there is a setup defect.
func needPython(t *testing.T, modules ...string) {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not on PATH: run scripts/setup.sh")
	}
	imp := "import " + strings.Join(modules, ", ")
	if out, err := exec.Command("python3", "-c", imp).CombinedOutput(); err != nil {
		t.Skipf("python3 cannot %q (%s): run scripts/setup.sh, which installs pyzmq, numpy, pika and Pillow",
			imp, strings.TrimSpace(lastLines(string(out), 1)))
	}
}

// needCommand skips t unless a program is installed.
func needCommand(t *testing.T, path, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(path)
	if err != nil {
		t.Skipf("%s not installed: run scripts/setup.sh (installs the Debian package %s)", path, pkg)
	}
	return p
}

// proc is an application process. Its stdout is read as JSON lines
// ({"event": ...}); stderr is kept for the failure log.
type proc struct {
	t    *testing.T
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error // exit status, valid after done

	mu     sync.Mutex // guards the following fields
	events []map[string]any
	raw    []json.RawMessage
	stderr bytes.Buffer
	cond   chan struct{} // closed and replaced on every new event
}

type lockedWriter struct{ p *proc }

func (w lockedWriter) Write(b []byte) (int, error) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	return w.p.stderr.Write(b)
}

// startProc starts argv with extra environment; the process is stopped
// (SIGTERM to its process group, then SIGKILL) when the test ends, and
// its stderr logged if the test failed.
func startProc(t *testing.T, name string, env []string, argv ...string) *proc {
	t.Helper()
	p := &proc{t: t, name: name, done: make(chan struct{}), cond: make(chan struct{})}
	p.cmd = exec.Command(argv[0], argv[1:]...)
	// Unbuffered, and no __pycache__ written into examples/.
	p.cmd.Env = append(os.Environ(), "PYTHONUNBUFFERED=1", "PYTHONDONTWRITEBYTECODE=1")
	p.cmd.Env = append(p.cmd.Env, env...)
	// Its own process group, so a script's children stop with it.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p.cmd.Stderr = lockedWriter{p}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			var ev map[string]any
			line := append([]byte(nil), sc.Bytes()...)
			if json.Unmarshal(line, &ev) != nil {
				ev = map[string]any{"event": "text", "text": string(line)}
			}
			p.mu.Lock()
			p.events = append(p.events, ev)
			p.raw = append(p.raw, line)
			close(p.cond)
			p.cond = make(chan struct{})
			p.mu.Unlock()
		}
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stop(10 * time.Second)
		if t.Failed() {
			t.Logf("%s stderr (last lines):\n%s", name, lastLines(p.stderrText(), 30))
		}
	})
	return p
}

// stop asks the process group to end (SIGTERM) and kills it if it has
// not within grace. Idempotent.
func (p *proc) stop(grace time.Duration) {
	select {
	case <-p.done:
		return
	default:
	}
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-p.done
	}
}

func (p *proc) stderrText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// event waits for the first event named name and returns it.
func (p *proc) event(name string, within time.Duration) map[string]any {
	p.t.Helper()
	deadline := time.After(within)
	for {
		p.mu.Lock()
		for _, ev := range p.events {
			if ev["event"] == name {
				p.mu.Unlock()
				return ev
			}
		}
		wake := p.cond
		p.mu.Unlock()
		select {
		case <-wake:
		case <-p.done:
			// Give the reader's last events a look before failing.
			p.mu.Lock()
			for _, ev := range p.events {
				if ev["event"] == name {
					p.mu.Unlock()
					return ev
				}
			}
			p.mu.Unlock()
			p.t.Fatalf("%s exited (%v) before printing a %q event; stderr:\n%s", p.name, p.err, name, lastLines(p.stderrText(), 20))
		case <-deadline:
			p.t.Fatalf("%s printed no %q event within %s; stderr:\n%s", p.name, name, within, lastLines(p.stderrText(), 20))
		}
	}
}

// result waits for the process to exit and decodes its "result" event
// into v. It fails the test if the process failed or printed none.
func (p *proc) result(within time.Duration, v any) {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(within):
		p.stop(5 * time.Second)
		p.t.Fatalf("%s did not finish within %s; stderr:\n%s", p.name, within, lastLines(p.stderrText(), 20))
	}
	p.mu.Lock()
	var raw json.RawMessage
	for i, ev := range p.events {
		if ev["event"] == "result" {
			raw = p.raw[i]
		}
	}
	p.mu.Unlock()
	if raw == nil {
		p.t.Fatalf("%s exited (%v) without a result; stderr:\n%s", p.name, p.err, lastLines(p.stderrText(), 20))
	}
	if err := json.Unmarshal(raw, v); err != nil {
		p.t.Fatalf("%s result: %v: %s", p.name, err, raw)
	}
	if p.err != nil {
		p.t.Fatalf("%s failed (%v): %s\nstderr:\n%s", p.name, p.err, raw, lastLines(p.stderrText(), 20))
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// wireVia opens a stream whose inbound side is the gateway in front of
// the listening application (appHost:ports) and whose outbound side is
// the one the connecting application uses; it returns the outbound
// listeners. p.wire is the common case inbound = consumer gateway.
func (p *pair) wireVia(id string, inbound, outbound *localgw.Gateway, appHost, ports string, numConn int, extra ...string) streamOut {
	p.t.Helper()
	args := []string{"stream",
		"--inbound_s2cs", inbound.Addr, "--inbound_server_cert", inbound.CertFile,
		"--outbound_s2cs", outbound.Addr, "--outbound_server_cert", outbound.CertFile,
		"--remote_ip", appHost, "--receiver_ports", ports, "--num_conn", strconv.Itoa(numConn),
		"--allow", "127.0.0.0/8", "--output", "json"}
	out := p.mustS2UC(id, append(args, extra...)...)
	var so streamOut
	if err := json.Unmarshal([]byte(out), &so); err != nil {
		p.t.Fatalf("s2uc stream output is not JSON: %v\n%s", err, out)
	}
	if so.UID == "" || len(so.Listeners) != numConn {
		p.t.Fatalf("s2uc stream output lacks uid or %d listeners: %s", numConn, out)
	}
	p.t.Cleanup(func() { p.s2uc(id, "release", so.UID) })
	return so
}

// freePort returns a TCP port that was free on ip a moment ago, for
// programs that must be told their port (iperf3, RabbitMQ). It is below
// the kernel's range of ephemeral ports (ip_local_port_range): a port
// from that range, free now, can be any outgoing connection's local
// port by the time the program binds it (RabbitMQ boots for seconds,
// and CI saw its distribution port taken so, on 127.0.0.1, where every
// test dials). Below the range only an explicit bind can take it.
func freePort(t *testing.T, ip string) int {
	t.Helper()
	lo := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil && v > 2048 {
				lo = v
			}
		}
	}
	from := max(1024, lo-8000)
	for range 200 {
		port := from + mrand.IntN(lo-from)
		ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
		if err != nil {
			continue
		}
		ln.Close()
		return port
	}
	t.Fatalf("no free port on %s in %d-%d after 200 tries", ip, from, lo-1)
	return 0
}

// waitListening polls /proc/net/tcp until a socket listens on ip:port,
// so a test can wait on a server that prints nothing when it is ready,
// without connecting to it (one-shot servers would count the probe).
func waitListening(t *testing.T, ip string, port int, within time.Duration, p *proc) {
	t.Helper()
	want := fmt.Sprintf("%s:%04X", hexIPv4(ip), port)
	eventually(t, within, fmt.Sprintf("a listener on %s:%d", ip, port), func() bool {
		if p != nil {
			select {
			case <-p.done:
				t.Fatalf("%s exited (%v) before listening; stderr:\n%s", p.name, p.err, lastLines(p.stderrText(), 20))
			default:
			}
		}
		b, err := os.ReadFile("/proc/net/tcp")
		if err != nil {
			t.Fatalf("read /proc/net/tcp: %v", err)
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) > 3 && f[1] == want && f[3] == "0A" { // 0A = LISTEN
				return true
			}
		}
		return false
	})
}

// hexIPv4 is how /proc/net/tcp writes an IPv4 address (host byte order,
// little-endian here).
func hexIPv4(ip string) string {
	v4 := net.ParseIP(ip).To4()
	return strings.ToUpper(hex.EncodeToString([]byte{v4[3], v4[2], v4[1], v4[0]}))
}
