package deploy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"scistream/internal/localgw"
	"scistream/internal/waitfor"
)

// compose runs podman-compose on one project, with the test's podman
// (its own storage and configuration) and the compose file's variables.
type compose struct {
	t       *testing.T
	dir     string // where compose.yaml is
	project string
	env     []string
}

func (c *compose) run(args ...string) (string, error) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "python3", append([]string{"-m", "podman_compose", "-p", c.project, "-f", "compose.yaml"}, args...)...)
	cmd.Dir, cmd.Env = c.dir, c.env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func (c *compose) must(args ...string) string {
	c.t.Helper()
	out, err := c.run(args...)
	if err != nil {
		c.t.Fatalf("podman-compose %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// composeCmd skips the test, saying why, unless python3 has
// podman-compose 1.0.6 or later (scripts/setup.sh installs it). Debian
// 12's 1.0.3 puts every container on the project's network as well,
// which podman refuses for a network_mode: host service.
func composeCmd(t *testing.T) {
	t.Helper()
	lookPath(t, "python3", "python3")
	out, err := exec.Command("python3", "-c", `import podman_compose as p; print(p.__version__)`).Output()
	v := strings.TrimSpace(string(out))
	if err != nil || !regexp.MustCompile(`^(1\.0\.([6-9]|\d\d)|1\.[1-9]|[2-9])`).MatchString(v) {
		t.Skipf("python3 has no podman-compose 1.0.6 or later (%q, %v): run scripts/setup.sh, which installs it", v, err)
	}
}

// TestCompose runs deploy/compose as its README says, with podman-compose:
// the image built from deploy/Containerfile with the context
// scripts/image.sh --context lays, two gateways, a consumer and a
// producer in containers on loopback addresses of the test's, and the
// client container wiring the stream. The consumer verifies every
// message (sequence, length, CRC-32C) and must report exactly the bytes
// the producer sent; then status (both sides connected) and release
// (both sides) through the client service, and down --volumes.
func TestCompose(t *testing.T) {
	composeCmd(t)
	p := newPodman(t)
	start := time.Now()

	// The compose directory's layout, in a directory of the test's:
	// compose.yaml finds ../Containerfile from its context.
	root := t.TempDir()
	dir := filepath.Join(root, "deploy", "compose")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for src, dst := range map[string]string{"compose/compose.yaml": filepath.Join(dir, "compose.yaml"), "Containerfile": filepath.Join(root, "deploy", "Containerfile")} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("bash", "../scripts/image.sh", "--context", filepath.Join(dir, "context"))
	cmd.Env = p.env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/image.sh --context: %v\n%s", err, out)
	}
	// The token file, as the README makes it (a hash and an identity per
	// line), readable by the image's user.
	token := localgw.NewToken()
	sum := sha256.Sum256([]byte(token))
	if err := os.WriteFile(filepath.Join(dir, "tokens"), []byte(hex.EncodeToString(sum[:])+" alice\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	consIP, prodIP, appIP := localgw.RandomLoopback(), localgw.RandomLoopback(), localgw.RandomLoopback()
	consPort, prodPort, appPort := freePort(t, consIP), freePort(t, prodIP), freePort(t, appIP)
	const sent = 32 << 20
	c := &compose{t: t, dir: dir, project: "scistream-compose-" + strings.ToLower(filepath.Base(root)),
		env: append(p.env, "SCISTREAM_TOKEN="+token,
			"CONS_IP="+consIP, "PROD_IP="+prodIP, "APP_IP="+appIP,
			"CONS_PORT="+strconv.Itoa(consPort), "PROD_PORT="+strconv.Itoa(prodPort), "APP_PORT="+strconv.Itoa(appPort),
			fmt.Sprintf("BYTES=%d", sent))}
	t.Cleanup(func() {
		if t.Failed() {
			for _, s := range []string{"consumer-gw", "producer-gw", "consumer", "client", "producer"} {
				out, _ := c.run("logs", s)
				t.Logf("%s:\n%s", s, out)
			}
		}
		if out, err := c.run("down", "--volumes"); err != nil {
			t.Errorf("podman-compose down --volumes: %v\n%s", err, out)
		}
	})
	c.must("up", "-d")
	t.Logf("up -d (image built, five containers started) in %s", time.Since(start).Round(100*time.Millisecond))

	// The consumer exits after its one run: 0 only if every message was
	// verified. The client and the producer start again on failure, up
	// to their compose file's bound: one that gave up ends the wait.
	container := func(service string) string {
		// Found by label: podman-compose versions name containers apart.
		name := p.must("ps", "--all", "--format", "{{.Names}}", "--filter", "label=io.podman.compose.project="+c.project, "--filter", "label=com.docker.compose.service="+service)
		if name == "" || strings.Contains(name, "\n") {
			t.Fatalf("the %s's container: %q, want one name", service, name)
		}
		return name
	}
	name := container("consumer")
	gaveUp := map[string]string{container("client"): "30", container("producer"): "60"}
	var state string
	waitfor.Must(t, 3*time.Minute, "the consumer container to end its run", func() bool {
		for n, bound := range gaveUp {
			if st := p.must("inspect", "--format", "{{.State.Status}} {{.RestartCount}}", n); st == "exited "+bound {
				t.Fatalf("%s gave up after %s restarts", n, bound)
			}
		}
		state = p.must("inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}", name)
		return strings.HasPrefix(state, "exited")
	})
	if state != "exited 0" {
		t.Fatalf("the consumer container: %s, want exited 0", state)
	}
	logs := c.must("logs", "consumer")
	want := fmt.Sprintf(" %d bytes, ", sent)
	if !regexp.MustCompile(`run 1 \(path gateways, .*`+want+`.*integrity ok`).MatchString(logs) || !strings.Contains(logs, "1 run(s), all verified") {
		t.Fatalf("the consumer's log does not show one verified run of %d bytes:\n%s", sent, logs)
	}

	// The client's log names the stream; status and release through the
	// client service, as the README says.
	uidRE := regexp.MustCompile(`(?m)^uid: ([0-9a-f-]{36})$`)
	m := uidRE.FindAllStringSubmatch(c.must("logs", "client"), -1)
	if len(m) == 0 {
		t.Fatal("the client's log names no stream uid")
	}
	uid := m[len(m)-1][1]
	status := c.must("run", "-T", "--rm", "--no-deps", "client", "status", uid)
	if !strings.Contains(status, "inbound connected") || !strings.Contains(status, "outbound connected") ||
		!strings.Contains(status, fmt.Sprintf("bytes %s to WAN", bytesText(sent))) {
		t.Errorf("s2uc status in the client container:\n%s", status)
	}
	released := c.must("run", "-T", "--rm", "--no-deps", "client", "release", uid)
	if n := strings.Count(released, "released "+uid); n != 2 {
		t.Errorf("s2uc release in the client container released %d sides, want 2:\n%s", n, released)
	}
	t.Logf("compose test took %s", time.Since(start).Round(100*time.Millisecond))
}

// bytesText is how s2uc status prints n bytes of whole MiB.
func bytesText(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
