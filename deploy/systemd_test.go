package deploy

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"scistream/internal/localgw"
)

// lookPath returns the path of the tool name, skipping the test (with
// the Debian package that provides it) when it is not installed.
func lookPath(t *testing.T, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s not installed: run scripts/setup.sh (installs the Debian package %s)", name, pkg)
	}
	return p
}

// unitDir installs the units as an operator does (docs/deploy.md), into
// a directory of its own, with ExecStart's binary the test's build:
// systemd-analyze verify checks that the binary exists. sockmap adds
// the drop-in for instance gw1.
func unitDir(t *testing.T, sockmap bool) string {
	t.Helper()
	dir := t.TempDir()
	unit, err := os.ReadFile("systemd/s2cs@.service")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(unit, []byte("ExecStart=/usr/local/bin/s2cs ")) {
		t.Fatal("s2cs@.service does not start /usr/local/bin/s2cs, where docs/deploy.md installs it")
	}
	unit = bytes.ReplaceAll(unit, []byte("/usr/local/bin/s2cs"), []byte(bins.s2cs))
	if err := os.WriteFile(filepath.Join(dir, "s2cs@.service"), unit, 0o644); err != nil {
		t.Fatal(err)
	}
	if sockmap {
		dropin := filepath.Join(dir, "s2cs@gw1.service.d")
		os.Mkdir(dropin, 0o755)
		b, err := os.ReadFile("systemd/sockmap.conf")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dropin, "sockmap.conf"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// analyze runs systemd-analyze with the units of dir (and no others
// but the system's) and returns stdout and stderr.
func analyze(t *testing.T, tool, dir string, args ...string) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, tool, args...)
	// The trailing colon appends the built-in search path.
	cmd.Env = append(os.Environ(), "SYSTEMD_UNIT_PATH="+dir+":")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("systemd-analyze %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String(), errb.String()
}

// exposure parses systemd-analyze security's table: which checks pass
// (by name, e.g. "CapabilityBoundingSet=~CAP_BPF") and the overall
// exposure (0 safest, 10 least safe).
func exposure(t *testing.T, out string) (map[string]bool, float64) {
	t.Helper()
	checks := map[string]bool{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && (f[0] == "✓" || f[0] == "✗") {
			checks[f[1]] = f[0] == "✓"
		}
	}
	m := regexp.MustCompile(`Overall exposure level for \S+: ([0-9.]+) `).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no overall exposure in:\n%s", out)
	}
	level, _ := strconv.ParseFloat(m[1], 64)
	return checks, level
}

// TestSystemdUnits: s2cs@.service, alone and with the sockmap drop-in,
// passes systemd-analyze verify without a word, and its security
// analysis shows the hardening the unit promises: a static non-root
// user, no new privileges, a read-only system, no home, a private
// /tmp, and of all capabilities only CAP_NET_BIND_SERVICE, plus CAP_BPF
// and CAP_NET_ADMIN with the drop-in.
func TestSystemdUnits(t *testing.T) {
	tool := lookPath(t, "systemd-analyze", "systemd")
	for _, sockmap := range []bool{false, true} {
		t.Run(fmt.Sprintf("sockmap=%v", sockmap), func(t *testing.T) {
			dir := unitDir(t, sockmap)
			out, errs := analyze(t, tool, dir, "verify", "--man=no", "s2cs@gw1.service")
			if out != "" || errs != "" {
				t.Fatalf("systemd-analyze verify said:\n%s%s", out, errs)
			}
			out, _ = analyze(t, tool, dir, "security", "--offline=true", "s2cs@gw1.service")
			checks, level := exposure(t, out)
			t.Logf("exposure %.1f", level)
			for _, must := range []string{"User=/DynamicUser=", "NoNewPrivileges=", "ProtectSystem=", "ProtectHome=", "PrivateTmp=",
				"PrivateDevices=", "CapabilityBoundingSet=~CAP_SYS_ADMIN", "CapabilityBoundingSet=~CAP_SYS_PTRACE",
				"RestrictNamespaces=~user", "SystemCallFilter=~@mount", "RestrictSUIDSGID=", "MemoryDenyWriteExecute="} {
				if !checks[must] {
					t.Errorf("security check %s fails or is missing:\n%s", must, out)
				}
			}
			for _, capCheck := range []string{"CapabilityBoundingSet=~CAP_BPF", "CapabilityBoundingSet=~CAP_NET_ADMIN"} {
				if pass, ok := checks[capCheck]; !ok || pass == sockmap {
					t.Errorf("%s: pass %v, want %v (the sockmap drop-in alone grants it)", capCheck, pass, !sockmap)
				}
			}
			if level > 2.5 {
				t.Errorf("overall exposure %.1f, want at most 2.5:\n%s", level, out)
			}
		})
	}
}

// TestSysusers: the sysusers.d file creates the scistream system user
// and group the unit runs as, with no login shell (systemd-sysusers on
// an empty root directory, as it runs on a fresh host).
func TestSysusers(t *testing.T) {
	tool := lookPath(t, "systemd-sysusers", "systemd")
	root := t.TempDir()
	os.Mkdir(filepath.Join(root, "etc"), 0o755)
	conf, err := filepath.Abs("systemd/scistream.sysusers")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(tool, "--root="+root, conf).CombinedOutput(); err != nil {
		t.Fatalf("systemd-sysusers: %v\n%s", err, out)
	}
	passwd, err := os.ReadFile(filepath.Join(root, "etc/passwd"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^scistream:x:(\d+):(\d+):[^:]*:/var/lib/scistream:(\S+)$`).FindStringSubmatch(string(passwd))
	if m == nil {
		t.Fatalf("no scistream user in:\n%s", passwd)
	}
	if uid, _ := strconv.Atoi(m[1]); uid == 0 || uid >= 1000 || !strings.HasSuffix(m[3], "nologin") {
		t.Errorf("scistream user %v: want a system uid (1-999) and no login shell", m)
	}
	unit, _ := os.ReadFile("systemd/s2cs@.service")
	if !bytes.Contains(unit, []byte("\nUser=scistream\n")) || !bytes.Contains(unit, []byte("\nGroup=scistream\n")) {
		t.Error("s2cs@.service does not run as the scistream user and group")
	}
}

// execStart returns the unit's command line as systemd would run it for
// instance with the state under stateRoot (%S), and the configuration
// directory /etc/scistream moved to etc.
func execStart(t *testing.T, instance, stateRoot, etc string) []string {
	t.Helper()
	unit, err := os.ReadFile("systemd/s2cs@.service")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^ExecStart=(.*)$`).FindSubmatch(unit)
	if m == nil {
		t.Fatal("s2cs@.service has no ExecStart")
	}
	line := strings.NewReplacer("%i", instance, "%S", stateRoot, "/etc/scistream/", etc+"/", "/usr/local/bin/s2cs", bins.s2cs).Replace(string(m[1]))
	if strings.ContainsAny(line, "%$\"'\\") {
		t.Fatalf("ExecStart %q uses specifiers, variables or quoting this test does not expand", m[1])
	}
	return strings.Fields(line)
}

// TestSystemdStart runs the unit's ExecStart as systemd would (its
// specifiers expanded, NOTIFY_SOCKET set for Type=notify), with a
// configuration file written as docs/deploy.md says: the gateway says
// READY=1, answers /healthz, keeps its state in the instance's state
// directory, and stops with status 0 on SIGTERM.
func TestSystemdStart(t *testing.T) {
	dir := t.TempDir()
	etc := filepath.Join(dir, "etc")
	stateRoot := filepath.Join(dir, "var-lib")
	for _, d := range []string{etc, filepath.Join(stateRoot, "scistream", "gw1")} {
		if err := os.MkdirAll(d, 0o700); err != nil { // StateDirectory= makes the latter
			t.Fatal(err)
		}
	}
	tokens := filepath.Join(etc, "gw1.tokens")
	if err := localgw.WriteTokens(tokens, map[string]string{"alice": localgw.NewToken()}); err != nil {
		t.Fatal(err)
	}
	ip := localgw.RandomLoopback()
	config := fmt.Sprintf("listener_ip: %s\nport: 0\nport_range: 5100-5110\ntokens: %s\nlog_format: json\n", ip, tokens)
	if err := os.WriteFile(filepath.Join(etc, "gw1.yaml"), []byte(config), 0o640); err != nil {
		t.Fatal(err)
	}
	notify := filepath.Join(dir, "notify")
	sock, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: notify, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()

	args := execStart(t, "gw1", stateRoot, etc)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+notify)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = nil, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		cmd.Process.Kill() // by its PID; a no-op once it exited
		<-exited
		if t.Failed() {
			t.Logf("s2cs log:\n%s", stderr.String())
		}
	}()
	state := readNotify(t, sock)
	addr, ok := strings.CutPrefix(state, "READY=1\nSTATUS=control API on https://")
	if !ok {
		t.Fatalf("notification %q, want READY=1 with the control API's address", state)
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("https://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("READY=1, but /healthz: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("READY=1, but /healthz answers %d", resp.StatusCode)
	}
	for _, f := range []string{"state.db", "s2cs.crt"} {
		if _, err := os.Stat(filepath.Join(stateRoot, "scistream", "gw1", f)); err != nil {
			t.Errorf("not in the instance's state directory: %v", err)
		}
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if state := readNotify(t, sock); state != "STOPPING=1" {
		t.Errorf("notification at SIGTERM %q, want STOPPING=1", state)
	}
	select {
	case err := <-exited:
		exited <- err // for the deferred wait
		if err != nil {
			t.Fatalf("s2cs after SIGTERM: %v", err)
		}
	case <-time.After(30 * time.Second): // the unit's TimeoutStopSec
		t.Fatal("s2cs did not stop within the unit's TimeoutStopSec")
	}
	if !strings.Contains(stderr.String(), `"msg":"configuration file","path":"`+filepath.Join(etc, "gw1.yaml")) {
		t.Errorf("the log does not name the configuration file")
	}
}

// readNotify reads one notification, waiting at most 15 s.
func readNotify(t *testing.T, c *net.UnixConn) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(15 * time.Second))
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("no notification from s2cs: %v", err)
	}
	return string(buf[:n])
}
