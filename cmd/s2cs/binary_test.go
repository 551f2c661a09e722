package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"scistream/internal/cliflag/cliflagtest"
	"scistream/internal/localgw"
	"scistream/internal/version"
)

// buildS2CS builds the s2cs binary into a temporary directory.
func buildS2CS(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "s2cs")
	if out, err := exec.Command("go", "build", "-o", bin, "scistream/cmd/s2cs").CombinedOutput(); err != nil {
		t.Fatalf("go build s2cs: %v\n%s", err, out)
	}
	return bin
}

// TestBinaryCommandLine runs the real s2cs as a user would: a mistyped
// flag is one line on stderr naming it, the nearest flag and --help
// (not the usage, nor the error twice), exit status 2; --version is one
// line on stdout; the bash completion script, loaded in bash, completes
// a flag.
func TestBinaryCommandLine(t *testing.T) {
	bin := buildS2CS(t)
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, "--listner_ip", "127.0.0.1")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Errorf("--listner_ip: %v, want exit status 2", err)
	}
	if want := "s2cs: unknown flag --listner_ip: did you mean --listener_ip? (s2cs --help lists the flags)\n"; stderr.String() != want || stdout.Len() != 0 {
		t.Errorf("--listner_ip: stderr %q, stdout %q; want stderr %q", stderr.String(), stdout.String(), want)
	}

	out, err := exec.Command(bin, "--version").Output()
	if err != nil || !strings.HasPrefix(string(out), "s2cs "+version.Version+" (commit ") || strings.Count(string(out), "\n") != 1 {
		t.Errorf("--version: %v, %q", err, out)
	}

	script, err := exec.Command(bin, "completion", "bash").Output()
	if err != nil {
		t.Fatalf("completion bash: %v", err)
	}
	for _, c := range []struct{ words, want string }{
		{"s2cs --listen", "--listener_ip"},
		{"s2cs --listener_ip 127.0.0.1 --log_f", "--log_format"},
		{"s2cs --server_crt ", ""}, // a file name: bash's own completion
	} {
		if got := cliflagtest.Line(t, string(script), "_s2cs", c.words); got != c.want {
			t.Errorf("%q completes to %q, want %q", c.words, got, c.want)
		}
	}
	for _, sh := range []string{"zsh", "fish"} {
		out, err := exec.Command(bin, "completion", sh).Output()
		if err != nil || !strings.Contains(string(out), "listener_ip") {
			t.Errorf("completion %s: %v\n%s", sh, err, out)
		}
	}
	if err := exec.Command(bin, "completion", "tcsh").Run(); !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Errorf("completion tcsh: %v, want exit status 2", err)
	}
}

// TestJSONLogLines starts the real s2cs with --log_format json and
// parses every line it writes, on stdout and stderr, as JSON: at start
// (the certificate, its fingerprint, the metrics listener, the control
// address), at a clean stop, and when it cannot start (a port taken).
func TestJSONLogLines(t *testing.T) {
	bin := buildS2CS(t)
	dir := t.TempDir()
	ip := localgw.RandomLoopback()
	cmd := exec.Command(bin, "--listener_ip", ip, "--port", "0", "--port_range", "5100-5101", "--state_dir", filepath.Join(dir, "state"),
		"--insecure_no_auth", "--log_format", "json", "--metrics_listen", net.JoinHostPort(ip, "0"))
	var lines outputLines
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	serving := make(chan string, 1)
	var wg sync.WaitGroup
	wg.Add(2)
	go lines.read(&wg, "stdout", stdout, serving)
	go lines.read(&wg, "stderr", stderr, nil)
	var addr string
	select {
	case addr = <-serving:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
	}
	cmd.Process.Signal(syscall.SIGTERM)
	wg.Wait()
	if err := cmd.Wait(); err != nil || addr == "" {
		t.Fatalf("s2cs: %v, control address %q; lines not JSON: %q", err, addr, lines.notJSON)
	}
	lines.check(t, "certificate SHA-256 fingerprint ", "generated self-signed certificate ", "metrics on http://", "control API on https://", "stopped")

	// Its control port taken, s2cs says why it stops in JSON too.
	var again outputLines
	cmd = exec.Command(bin, "--listener_ip", ip, "--port", strings.Split(addr, ":")[1], "--port_range", "5100-5101", "--state_dir", filepath.Join(dir, "state"),
		"--insecure_no_auth", "--log_format", "json")
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the port s2cs used is taken again: %v", err)
	}
	defer ln.Close()
	stdout, _ = cmd.StdoutPipe()
	stderr, _ = cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	wg.Add(2)
	go again.read(&wg, "stdout", stdout, nil)
	go again.read(&wg, "stderr", stderr, nil)
	wg.Wait()
	var ee *exec.ExitError
	if err := cmd.Wait(); !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Errorf("s2cs on a taken port: %v, want exit status 2", err)
	}
	again.check(t, "s2cs stopped: control API: listen tcp "+addr)
}

// outputLines collects the lines of s2cs's output and those that are not
// JSON records with a time, level and message.
type outputLines struct {
	mu            sync.Mutex
	msgs, notJSON []string
}

// read reads one output to its end; on the line that says where the
// control API is, it sends the address to serving, if not nil.
func (l *outputLines) read(wg *sync.WaitGroup, name string, r interface{ Read([]byte) (int, error) }, serving chan<- string) {
	defer wg.Done()
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		var rec struct{ Time, Level, Msg string }
		err := json.Unmarshal(sc.Bytes(), &rec)
		l.mu.Lock()
		if err != nil || rec.Time == "" || rec.Level == "" || rec.Msg == "" {
			l.notJSON = append(l.notJSON, name+": "+sc.Text())
		} else {
			l.msgs = append(l.msgs, rec.Msg)
		}
		l.mu.Unlock()
		if a, ok := strings.CutPrefix(rec.Msg, "control API on https://"); ok && serving != nil {
			serving <- strings.Fields(a)[0]
		}
	}
}

// check fails t for every line that was not a JSON record and every
// message prefix in want that no record's message starts with.
func (l *outputLines) check(t *testing.T, want ...string) {
	t.Helper()
	for _, line := range l.notJSON {
		t.Errorf("a line that is not a JSON log record: %s", line)
	}
	for _, w := range want {
		found := false
		for _, m := range l.msgs {
			found = found || strings.HasPrefix(m, w)
		}
		if !found {
			t.Errorf("no record whose message starts %q among:\n%s", w, strings.Join(l.msgs, "\n"))
		}
	}
}

// TestStartupFactsOnce (issue 36): the real s2cs, started as an
// operator starts it (text log on stderr, the facts to act on on
// stdout, both on one terminal or in one journal), says each start-up
// fact once: where the control API listens, where the metrics are, the
// plan of open files. The lines scripts read stay on stdout.
func TestStartupFactsOnce(t *testing.T) {
	bin := buildS2CS(t)
	dir := t.TempDir()
	ip := localgw.RandomLoopback()
	cmd := exec.Command(bin, "--listener_ip", ip, "--port", "0", "--port_range", "5100-5101", "--state_dir", filepath.Join(dir, "state"),
		"--insecure_no_auth", "--metrics_listen", net.JoinHostPort(ip, "0"))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var out, log []string
	serving := make(chan string, 1)
	var wg sync.WaitGroup
	read := func(r io.Reader, to *[]string) {
		defer wg.Done()
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			mu.Lock()
			*to = append(*to, sc.Text())
			mu.Unlock()
			if a, ok := strings.CutPrefix(sc.Text(), "s2cs: control API on https://"); ok {
				serving <- strings.Fields(a)[0]
			}
		}
	}
	wg.Add(2)
	go read(stdout, &out)
	go read(stderr, &log)
	var addr string
	select {
	case addr = <-serving:
	case <-time.After(30 * time.Second):
	}
	// The log's last start-up line comes after the control API's: wait
	// for the stop to flush both.
	cmd.Process.Signal(syscall.SIGTERM)
	wg.Wait()
	if err := cmd.Wait(); err != nil || addr == "" {
		t.Fatalf("s2cs: %v, control address %q\n%s\n%s", err, addr, strings.Join(out, "\n"), strings.Join(log, "\n"))
	}
	var metrics string
	for _, l := range out {
		if a, ok := strings.CutPrefix(l, "s2cs: metrics on http://"); ok {
			metrics, _, _ = strings.Cut(a, "/")
		}
	}
	all := append(append([]string{}, out...), log...)
	for _, f := range []struct{ fact, word string }{
		{"the control API's address", addr},
		{"the metrics listener's address", metrics},
		{"the plan of open files", "open files"},
		{"the certificate's fingerprint", "fingerprint"},
	} {
		var said []string
		for _, l := range all {
			if f.word != "" && strings.Contains(l, f.word) {
				said = append(said, l)
			}
		}
		if len(said) != 1 {
			t.Errorf("%s (%q) is said %d times, want once:\n%s", f.fact, f.word, len(said), strings.Join(said, "\n"))
		}
	}
}
