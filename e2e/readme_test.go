package e2e

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
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

// A terminal of the README's reader: an interactive bash in a window of
// a tmux server of the test's own, into which a block's lines are typed
// one after the other, without waiting for each to finish, as a paste
// arrives in a shell that has no bracketed paste (bash before 5.1, a
// paste through screen) or as a person types ahead: the lines not yet
// read wait in the terminal. A block that works only when bash reads it
// whole from a script (a background job that reads the terminal is
// stopped, SIGTTIN) hangs here as it does for that reader.
type terminal struct {
	t    *testing.T
	tm   *tmux
	name string
}

// openTerminal opens window name running an interactive bash in dir
// with env.
func openTerminal(t *testing.T, tm *tmux, dir string, env []string, name string) *terminal {
	t.Helper()
	args := []string{"new-window", "-d", "-n", name, "-c", dir}
	if _, err := tm.run("has-session", "-t", "readme"); err != nil {
		args = []string{"new-session", "-d", "-s", "readme", "-n", name, "-x", "200", "-y", "50", "-c", dir}
	}
	for _, kv := range env {
		args = append(args, "-e", kv)
	}
	tm.must(append(args, "bash --norc --noprofile -i")...)
	tm.must("set-option", "-t", "readme", "remain-on-exit", "on")
	tm.must("set-option", "-t", "readme", "history-limit", "20000")
	return &terminal{t: t, tm: tm, name: name}
}

// typeLines types each line of block and Enter after it, all at once.
func (x *terminal) typeLines(block string) {
	x.t.Helper()
	for _, line := range strings.Split(strings.TrimRight(block, "\n"), "\n") {
		if line != "" {
			x.tm.must("send-keys", "-t", "readme:"+x.name, "-l", line)
		}
		x.tm.must("send-keys", "-t", "readme:"+x.name, "Enter")
	}
}

// screen returns what the terminal shows, its history included, long
// lines joined.
func (x *terminal) screen() string {
	out, _ := x.tm.run("capture-pane", "-p", "-J", "-S", "-", "-t", "readme:"+x.name)
	return out
}

// run types block, then a line that prints a mark once the block's
// lines before it ran, and waits for the mark (bounded): a block that
// hangs fails here. It returns what the terminal showed.
func (x *terminal) run(block string, within time.Duration) string {
	x.t.Helper()
	x.typeLines(block)
	x.typeLines(`echo "== the block ran: $((40+2)) =="`) // the mark, not its echo, says 42
	var out string
	if !waitfor.Cond(within, func() bool { out = x.screen(); return strings.Contains(out, "== the block ran: 42 ==") }) {
		x.t.Fatalf("the block typed into terminal %q did not finish within %v; it shows:\n%s", x.name, within, out)
	}
	return out
}

// s2csOf returns the PID of the s2cs process run with arg (bounded wait).
func s2csOf(t *testing.T, arg string) int {
	t.Helper()
	pid := 0
	waitfor.Must(t, 10*time.Second, "the s2cs process with "+arg, func() bool {
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			n, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			if err != nil {
				continue
			}
			args := strings.Split(string(b), "\x00")
			if filepath.Base(args[0]) == "s2cs" && slices.Contains(args, arg) {
				pid = n
				return true
			}
		}
		return false
	})
	return pid
}

// TestReadmeQuickstart runs README.md's quickstart blocks verbatim, each
// typed line by line into an interactive bash in a terminal of its own
// (terminal, above), with the built binaries in bin/ and a home
// directory of the test's: the two gateway blocks stay up, the stream
// blocks must finish by themselves, carry their data end to end (netcat
// on both sides) and release. Then Ctrl-C stops one gateway and closing
// its terminal the other. The addresses are the README's own
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
	env := []string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH"), "TERM=xterm", "LANG=C.UTF-8"}
	tm := newTmux(t)
	var gateways []int
	t.Cleanup(func() {
		for _, pid := range gateways {
			syscall.Kill(pid, syscall.SIGTERM)
		}
	})

	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	defer hc.CloseIdleConnections()
	terms := map[string]*terminal{}
	for _, g := range []struct{ block, addr, state string }{
		{"consumer gateway", "127.0.0.3:5000", "--state_dir=cons"},
		{"producer gateway", "127.0.0.2:5000", "--state_dir=prod"},
	} {
		x := openTerminal(t, tm, root, env, strings.Fields(g.block)[0])
		terms[g.block] = x
		x.typeLines(blocks[g.block])
		// A person waits until the gateway says it listens; the test
		// waits for its /healthz.
		if !waitfor.Cond(30*time.Second, func() bool {
			resp, err := hc.Get("https://" + g.addr + "/healthz")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		}) {
			t.Fatalf("%s does not answer on %s; its terminal shows:\n%s", g.block, g.addr, x.screen())
		}
		gateways = append(gateways, s2csOf(t, g.state))
	}
	qs := filepath.Join(root, "quickstart")

	out := openTerminal(t, tm, root, env, "user").run(blocks["stream"], 30*time.Second)
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

	out = openTerminal(t, tm, root, env, "third").run(blocks["s2uc stream"], 30*time.Second)
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

	// Ctrl-C stops the consumer's gateway; closing its terminal stops
	// the producer's (a SIGHUP sent while it is open reloads).
	gone := func(pid int) bool { return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) }
	syscall.Kill(gateways[1], syscall.SIGHUP)
	if !waitfor.Cond(10*time.Second, func() bool { return strings.Contains(terms["producer gateway"].screen(), "reloaded: new tokens") }) || gone(gateways[1]) {
		t.Errorf("a SIGHUP sent to the producer's gateway on an open terminal did not reload it; the terminal shows:\n%s", terms["producer gateway"].screen())
	}
	tm.must("send-keys", "-t", "readme:consumer", "C-c")
	if !waitfor.Cond(20*time.Second, func() bool { return gone(gateways[0]) }) {
		t.Errorf("Ctrl-C did not stop the consumer's gateway; its terminal shows:\n%s", terms["consumer gateway"].screen())
	}
	tm.must("kill-window", "-t", "readme:producer")
	if !waitfor.Cond(20*time.Second, func() bool { return gone(gateways[1]) }) {
		t.Errorf("closing its terminal did not stop the producer's gateway (PID %d)", gateways[1])
	}
}
