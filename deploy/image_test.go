package deploy

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"scistream/internal/localgw"
	"scistream/internal/waitfor"
)

// podman runs podman with a storage and configuration of its own, in a
// directory the test removes: the host's images and containers are not
// touched, and nothing is cached between runs. The image is FROM
// scratch, so building it pulls nothing.
type podman struct {
	t   *testing.T
	bin string
	env []string
}

// newPodman skips the test, saying why, where podman cannot run
// containers.
func newPodman(t *testing.T) *podman {
	t.Helper()
	bin := lookPath(t, "podman", "podman")
	if os.Geteuid() != 0 {
		t.Skip("the image test runs podman as root (rootless podman needs subordinate uids set up for the user)")
	}
	dir := t.TempDir()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	// Set for a container in a container: limits no higher than ours
	// (podman's defaults are, and without CAP_SYS_RESOURCE the runtime
	// cannot raise them), cgroupfs and a file for events (no systemd),
	// and runc where installed (crun refuses a hybrid cgroup hierarchy).
	// Every path podman writes is under dir, so the test touches nothing
	// of the host's podman (its networks, events, images) and leaves
	// nothing behind.
	conf := fmt.Sprintf(`[containers]
default_ulimits = ["nofile=%d:%d", "nproc=4096:4096"]
[network]
network_config_dir = %q
[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = %q
tmp_dir = %q
`, lim.Max, lim.Max, filepath.Join(dir, "net"), filepath.Join(dir, "events.log"), filepath.Join(dir, "tmp"))
	if _, err := exec.LookPath("runc"); err == nil {
		conf += "runtime = \"runc\"\n"
	}
	storage := fmt.Sprintf("[storage]\ndriver = \"vfs\"\ngraphroot = %q\nrunroot = %q\n", filepath.Join(dir, "storage"), filepath.Join(dir, "run"))
	for name, text := range map[string]string{"containers.conf": conf, "storage.conf": storage} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p := &podman{t: t, bin: bin, env: append(os.Environ(),
		"CONTAINERS_CONF="+filepath.Join(dir, "containers.conf"),
		"CONTAINERS_STORAGE_CONF="+filepath.Join(dir, "storage.conf"))}
	t.Cleanup(func() {
		// Containers hold mounts in the storage: podman removes them, and
		// the images, before TempDir's cleanup removes the directory.
		p.run("rm", "--all", "--force")
		p.run("rmi", "--all", "--force")
	})
	return p
}

// run runs podman with args and returns its stdout, stderr and exit
// status.
func (p *podman) run(args ...string) (string, string, int) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, p.bin, args...)
	cmd.Env = p.env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		p.t.Fatalf("podman %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), errb.String(), code
}

// must runs podman and fails the test unless it exits 0.
func (p *podman) must(args ...string) string {
	p.t.Helper()
	out, errs, code := p.run(args...)
	if code != 0 {
		p.t.Fatalf("podman %s: exit %d: %s%s", strings.Join(args, " "), code, out, errs)
	}
	return strings.TrimSpace(out)
}

// containerGW is an s2cs container of the image, on the host's network.
type containerGW struct {
	name, addr, cert string
}

// freePort returns a port free on ip now, for a control API whose
// address the test must know before the container starts.
func freePort(t *testing.T, ip string) int {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startContainer runs the image as docs/deploy.md says: its
// configuration directory mounted read-only at /etc/scistream, its
// state directory (owned by the image's user) at /var/lib/scistream.
func startContainer(t *testing.T, p *podman, image, name, tokens string) *containerGW {
	t.Helper()
	dir := t.TempDir()
	etc, state := filepath.Join(dir, "etc"), filepath.Join(dir, "state")
	for _, d := range []string{etc, state} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(state, 65532, 0); err != nil {
		t.Fatal(err)
	}
	ip := localgw.RandomLoopback()
	port := freePort(t, ip)
	b, err := os.ReadFile(tokens)
	if err != nil {
		t.Fatal(err)
	}
	// Readable by the image's user, who owns nothing here.
	if err := os.WriteFile(filepath.Join(etc, "tokens"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	// The applications and the peer gateway are on this host's loopback
	// (docs/security.md: a gateway dials loopback only when listed).
	config := fmt.Sprintf("listener_ip: %s\nport: %d\nport_range: 5100-5103\ntokens: /etc/scistream/tokens\nlog_format: json\nallow_targets: 127.0.0.0/8\nallow_peers: 127.0.0.0/8\n", ip, port)
	if err := os.WriteFile(filepath.Join(etc, "s2cs.yaml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	p.must("run", "--detach", "--name", name, "--network", "host",
		"-v", etc+":/etc/scistream:ro", "-v", state+":/var/lib/scistream", image)
	t.Cleanup(func() {
		if t.Failed() {
			out, errs, _ := p.run("logs", name)
			t.Logf("%s log:\n%s%s", name, out, errs)
		}
		p.run("rm", "--force", "--time", "5", name)
	})
	g := &containerGW{name: name, addr: net.JoinHostPort(ip, strconv.Itoa(port))}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	defer hc.CloseIdleConnections()
	waitfor.Must(t, 30*time.Second, name+" to answer /healthz", func() bool {
		resp, err := hc.Get("https://" + g.addr + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	// The user pins a copy of the certificate the gateway generated: the
	// file in the state directory is the image user's (uid 65532), who
	// could change it, and s2uc pins no file another user owns
	// (docs/deploy.md).
	b, err = os.ReadFile(filepath.Join(state, "s2cs.crt"))
	if err != nil {
		t.Fatal(err)
	}
	g.cert = filepath.Join(dir, "s2cs.crt")
	if err := os.WriteFile(g.cert, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return g
}

// TestContainerImage builds the image with scripts/image.sh and streams
// through two gateway containers: a real producer and consumer on
// loopback, s2uc on the host wiring the stream, every byte checked. A
// container without its configuration file exits at once, saying which
// file it wants; one told to stop stops cleanly.
func TestContainerImage(t *testing.T) {
	p := newPodman(t)
	start := time.Now()
	image := "localhost/scistream:test"
	cmd := exec.Command("bash", "../scripts/image.sh", image)
	cmd.Env = p.env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/image.sh: %v\n%s", err, out)
	}
	built := time.Since(start)
	size := p.must("image", "inspect", "--format", "{{.Size}}", image)
	t.Logf("image built in %s, %s bytes", built.Round(100*time.Millisecond), size)

	// A careless start: no configuration mounted.
	out, errs, code := p.run("run", "--rm", "--network", "host", image)
	if code != 2 || !strings.Contains(out+errs, "s2cs: --config: open /etc/scistream/s2cs.yaml: no such file or directory") {
		t.Errorf("without a configuration: exit %d, %q; want 2 and the file it wants", code, out+errs)
	}

	token := localgw.NewToken()
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := localgw.WriteTokens(tokens, map[string]string{"alice": token}); err != nil {
		t.Fatal(err)
	}
	prefix := "scistream-test-" + filepath.Base(t.TempDir())
	cons := startContainer(t, p, image, prefix+"-cons", tokens)
	prod := startContainer(t, p, image, prefix+"-prod", tokens)

	// The consumer application listens on the host; the consumer
	// gateway's container dials it.
	app, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	type result struct {
		n   int64
		sum [32]byte
		err error
	}
	got := make(chan result, 1)
	go func() {
		c, err := app.Accept()
		if err != nil {
			got <- result{err: err}
			return
		}
		defer c.Close()
		h := sha256.New()
		n, err := io.Copy(h, c)
		var r result
		r.n, r.err = n, err
		copy(r.sum[:], h.Sum(nil))
		got <- r
	}()

	home := t.TempDir()
	s2uc := func(args ...string) string {
		t.Helper()
		c := exec.Command(bins.s2uc, args...)
		c.Env = append(os.Environ(), "SCISTREAM_HOME="+home, "SCISTREAM_TOKEN="+token)
		out, err := c.Output()
		if err != nil {
			var stderr []byte
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = ee.Stderr
			}
			t.Fatalf("s2uc %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr)
		}
		return string(out)
	}
	var stream struct {
		UID       string   `json:"uid"`
		Listeners []string `json:"listeners"`
	}
	wired := s2uc("stream",
		"--inbound_s2cs", cons.addr, "--inbound_server_cert", cons.cert,
		"--outbound_s2cs", prod.addr, "--outbound_server_cert", prod.cert,
		"--remote_ip", "127.0.0.1", "--receiver_ports", strconv.Itoa(app.Addr().(*net.TCPAddr).Port),
		"--num_conn", "1", "--allow", "127.0.0.0/8", "--output", "json")
	if err := json.Unmarshal([]byte(wired), &stream); err != nil || len(stream.Listeners) != 1 {
		t.Fatalf("s2uc stream: %v\n%s", err, wired)
	}

	// The producer application.
	payload := make([]byte, 8<<20)
	rand.Read(payload)
	c, err := net.Dial("tcp", stream.Listeners[0])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(payload); err != nil {
		t.Fatalf("producer write: %v", err)
	}
	c.(*net.TCPConn).CloseWrite()
	select {
	case r := <-got:
		if r.err != nil || r.n != int64(len(payload)) || r.sum != sha256.Sum256(payload) {
			t.Fatalf("consumer read %d bytes (%v), sha256 match %v; want %d bytes, the same", r.n, r.err, r.sum == sha256.Sum256(payload), len(payload))
		}
	case <-time.After(time.Minute):
		t.Fatal("the consumer got no end of stream within a minute")
	}
	s2uc("release", stream.UID)

	// Stopped as a pod is (SIGTERM), the gateway ends cleanly.
	for _, g := range []*containerGW{cons, prod} {
		p.must("stop", "--time", "20", g.name)
		if code := p.must("inspect", "--format", "{{.State.ExitCode}}", g.name); code != "0" {
			t.Errorf("%s stopped with exit status %s, want 0", g.name, code)
		}
	}
	t.Logf("image test took %s", time.Since(start).Round(100*time.Millisecond))
}
