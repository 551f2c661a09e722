package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"scistream/internal/waitfor"
)

var updateDocs = flag.Bool("update_docs", false, "rewrite docs/flags.md from the binaries' --help instead of comparing")

// quickstartBlock matches a fenced sh block of README.md marked with the
// HTML comment before it: <!-- quickstart: NAME -->.
var quickstartBlock = regexp.MustCompile("(?s)<!-- quickstart: ([^>]+?) -->\n```sh\n(.*?)```")

// readmeBlocks returns the quickstart blocks of README.md by name, in
// their order.
func readmeBlocks(t *testing.T) (names []string, blocks map[string]string) {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks = map[string]string{}
	for _, m := range quickstartBlock.FindAllStringSubmatch(string(b), -1) {
		names = append(names, m[1])
		blocks[m[1]] = m[2]
	}
	return names, blocks
}

// shellBlock is one README block running in bash, as in a terminal of
// its own: its own process group, so that stopping it stops what it
// started.
type shellBlock struct {
	name string
	cmd  *exec.Cmd
	out  bytes.Buffer
	done chan struct{}
}

func startBlock(t *testing.T, dir string, env []string, name, script string) *shellBlock {
	t.Helper()
	b := &shellBlock{name: name, done: make(chan struct{})}
	b.cmd = exec.Command("bash", "-c", script)
	b.cmd.Dir, b.cmd.Env = dir, env
	b.cmd.Stdout, b.cmd.Stderr = &b.out, &b.out
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { b.cmd.Wait(); close(b.done) }()
	t.Cleanup(func() {
		syscall.Kill(-b.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-b.done:
		case <-time.After(20 * time.Second):
			syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
			<-b.done
		}
		if t.Failed() {
			t.Logf("block %q printed:\n%s", name, b.out.String())
		}
	})
	return b
}

// runBlock runs a README block to its end (bounded) and returns what it
// printed; it fails the test unless the block exits 0.
func runBlock(t *testing.T, dir string, env []string, name, script string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir, cmd.Env = dir, env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("block %q: %v\n%s", name, err, out)
	}
	return string(out)
}

// TestReadmeQuickstart runs README.md's quickstart blocks verbatim in
// bash, each as in a terminal of its own, with the built binaries in
// bin/ and a home directory of the test's: the two gateway blocks stay
// up, the stream blocks must carry their data end to end (netcat on
// both sides) and release. The addresses are the README's own
// (127.0.0.2:5000, 127.0.0.3:5000), so the test fails at once, saying
// so, if something else holds them.
func TestReadmeQuickstart(t *testing.T) {
	for _, tool := range []string{"bash", "nc", "jq", "base64"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing(t, tool+" not installed (README's quickstart uses it)")
		}
	}
	names, blocks := readmeBlocks(t)
	want := []string{"consumer gateway", "producer gateway", "stream", "s2uc stream"}
	if strings.Join(names, "|") != strings.Join(want, "|") {
		t.Fatalf("README.md quickstart blocks %q, want %q (each a fenced sh block after <!-- quickstart: NAME -->)", names, want)
	}
	for _, a := range []string{"127.0.0.3:5000", "127.0.0.2:5000", "127.0.0.1:8080", "127.0.0.1:8081"} {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			t.Fatalf("the README's address %s is taken (%v): stop what holds it and run the test again", a, err)
		}
		ln.Close()
	}
	root := t.TempDir() // stands for the repository's root after make demo
	if err := os.Symlink(bins.dir, filepath.Join(root, "bin")); err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "SCISTREAM_HOME" && k != "SCISTREAM_TOKEN" && k != "HOME" {
			env = append(env, kv)
		}
	}
	env = append(env, "HOME="+t.TempDir())

	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	defer hc.CloseIdleConnections()
	for _, g := range []struct{ block, addr string }{
		{"consumer gateway", "127.0.0.3:5000"},
		{"producer gateway", "127.0.0.2:5000"},
	} {
		b := startBlock(t, root, env, g.block, blocks[g.block])
		// A person waits until the gateway says it listens; the test
		// waits for its /healthz (or for the block to end, which fails).
		waitfor.Must(t, 30*time.Second, g.block+" to answer on "+g.addr, func() bool {
			select {
			case <-b.done:
				t.Fatalf("block %q ended: %v\n%s", g.block, b.cmd.ProcessState, b.out.String())
			default:
			}
			resp, err := hc.Get("https://" + g.addr + "/healthz")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		})
	}
	qs := filepath.Join(root, "quickstart")

	out := runBlock(t, root, env, "stream", blocks["stream"])
	got, err := os.ReadFile(filepath.Join(qs, "received"))
	if err != nil || string(got) != "hello through two gateways\n" {
		t.Fatalf("the consumer received %q (%v), want the producer's line\n%s", got, err, out)
	}
	if n := strings.Count(out, "released "); n != 2 {
		t.Errorf("the stream block released %d sides, want 2:\n%s", n, out)
	}
	if !strings.Contains(out, "inbound connected") || !strings.Contains(out, "outbound connected") {
		t.Errorf("s2uc status shows not both sides connected:\n%s", out)
	}

	out = runBlock(t, root, env, "s2uc stream", blocks["s2uc stream"])
	got, err = os.ReadFile(filepath.Join(qs, "received2"))
	var sent strings.Builder
	for i := 1; i <= 100000; i++ {
		fmt.Fprintf(&sent, "%d\n", i)
	}
	if err != nil || string(got) != sent.String() {
		t.Fatalf("the consumer received %d bytes (%v), want seq 1 100000 (%d bytes)\n%s", len(got), err, sent.Len(), out)
	}
	if n := strings.Count(out, "released "); n != 2 {
		t.Errorf("the s2uc stream block released %d sides, want 2:\n%s", n, out)
	}

	// The README sends the reader to the status page with the token the
	// first block made: its data, GET /v1/status, answers that token.
	tok, err := os.ReadFile(filepath.Join(qs, "token"))
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", "https://127.0.0.3:5000/v1/status", nil)
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /v1/status with the quickstart's token: %s, want 200 (the README says the status page shows the user's streams)", resp.Status)
	}
}
