package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"scistream/internal/netbed"
)

// s2benchBin builds s2bench next to the s2cs of TestMain (where it looks
// for s2cs), once: the testbed's delay line is s2bench itself, so these
// tests drive the real binary as a subprocess.
var s2benchBin = sync.OnceValues(func() (string, error) {
	bin := filepath.Join(filepath.Dir(s2csBin), "s2bench")
	out, err := exec.Command("go", "build", "-o", bin, "scistream/cmd/s2bench").CombinedOutput()
	if err != nil {
		return "", &buildError{err, out}
	}
	return bin, nil
})

type buildError struct {
	err error
	out []byte
}

func (e *buildError) Error() string {
	return "go build s2bench: " + e.err.Error() + "\n" + string(e.out)
}

// needTestbed skips where network namespaces cannot be built, saying
// why, and returns the s2bench binary.
func needTestbed(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := netbed.Available(ctx); err != nil {
		t.Skipf("network namespaces cannot be built here: %v", err)
	}
	serializeTestbeds(t)
	bin, err := s2benchBin()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// serializeTestbeds holds an exclusive lock, across test processes,
// until the test ends: testbed tests in several packages would otherwise
// run at once (go test runs packages in parallel) and load the machine
// enough to push each other's measured RTT and rate off their bounds.
func serializeTestbeds(t *testing.T) {
	t.Helper()
	f, err := os.OpenFile("/run/scistream-testbed-tests.lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() }) // closing releases the lock
}

func testbedName() string {
	b := make([]byte, 3)
	rand.Read(b)
	return "cb" + hex.EncodeToString(b)
}

// checkNoTestbed fails if anything of testbed name is left.
func checkNoTestbed(t *testing.T, root, name string) {
	t.Helper()
	if m, _ := filepath.Glob("/run/netns/s2-" + name + "-*"); len(m) > 0 {
		t.Errorf("namespaces left: %v", m)
	}
	if m, _ := filepath.Glob("/sys/class/net/s2" + name + "*"); len(m) > 0 {
		t.Errorf("links left: %v", m)
	}
	if m, _ := filepath.Glob(filepath.Join(root, name+"*")); len(m) > 0 {
		t.Errorf("state left: %v", m)
	}
}

func s2bench(t *testing.T, bin string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	t.Logf("s2bench %s:\n%s", strings.Join(args, " "), out)
	return string(out), err
}

// TestTestbedUpRunDown brings a 10 ms testbed up, runs a short verified
// stream directly and through real gateways in it, and takes it down.
func TestTestbedUpRunDown(t *testing.T) {
	bin := needTestbed(t)
	root, name := t.TempDir(), testbedName()
	bed := []string{"--name", name, "--state_root", root}
	t.Cleanup(func() {
		exec.Command(bin, append([]string{"testbed", "down"}, bed...)...).Run()
		checkNoTestbed(t, root, name)
	})
	out, err := s2bench(t, bin, append([]string{"testbed", "up", "--rtt", "10ms", "--rate", "100mbit"}, bed...)...)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"testbed " + name + " is up", "measured: RTT direct", "congestion control"} {
		if !strings.Contains(out, want) {
			t.Errorf("up output lacks %q", want)
		}
	}
	if out, err := s2bench(t, bin, append([]string{"testbed", "up", "--rtt", "10ms"}, bed...)...); err == nil || !strings.Contains(out, "already up") {
		t.Errorf("second up: %v; want an already-up error", err)
	}

	jsonPath := filepath.Join(t.TempDir(), "out.json")
	out, err = s2bench(t, bin, append([]string{"testbed", "run", "--workload", "64KiB", "--bytes", "4MiB", "--engine", "buffer", "--json", jsonPath}, bed...)...)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "taken down") {
		t.Error("run took down a testbed it did not bring up")
	}
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var recs []map[string]any
	if err := json.Unmarshal(b, &recs); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, r := range recs {
		p, _ := r["path"].(string)
		seen[p] = true
		rtt, _ := r["rtt_ms_measured"].(float64)
		if r["integrity_ok"] != true || r["bytes"] != float64(4<<20) || r["size_bytes"] != float64(64<<10) ||
			r["preset"] != "custom" || r["engine"] != "buffer" || math.Abs(rtt-10) > 1 {
			t.Errorf("record %v", r)
		}
	}
	if len(recs) != 2 || !seen["direct"] || !seen["gateways"] {
		t.Fatalf("want one direct and one gateways record, got %s", b)
	}

	if _, err := s2bench(t, bin, append([]string{"testbed", "down"}, bed...)...); err != nil {
		t.Fatal(err)
	}
	checkNoTestbed(t, root, name)
}

// TestTestbedRunInterrupted: a run that brought the testbed up and is
// interrupted (SIGINT) mid-experiment takes it all down.
func TestTestbedRunInterrupted(t *testing.T) {
	bin := needTestbed(t)
	root, name := t.TempDir(), testbedName()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "testbed", "run", "--name", name, "--state_root", root, "--rtt", "10ms", "--rate", "100mbit",
		"--workload", "64KiB,1MiB", "--bytes", "64MiB")
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		exec.Command(bin, "testbed", "down", "--name", name, "--state_root", root).Run()
		checkNoTestbed(t, root, name)
	})
	var log bytes.Buffer
	sc := bufio.NewScanner(pr)
	interrupted := false
	done := make(chan error, 1)
	go func() { done <- cmd.Wait(); pw.Close() }()
	for sc.Scan() {
		log.WriteString(sc.Text() + "\n")
		if !interrupted && strings.HasPrefix(sc.Text(), "gateways: outbound s2cs pid") {
			cmd.Process.Signal(syscall.SIGINT)
			interrupted = true
		}
	}
	err := <-done
	t.Logf("output:\n%s", log.String())
	if !interrupted {
		t.Fatalf("the run never started its experiment: %v", err)
	}
	if err == nil {
		t.Fatal("interrupted run exited 0")
	}
	if !strings.Contains(log.String(), "testbed "+name+" taken down") {
		t.Error("interrupted run did not report taking the testbed down")
	}
	checkNoTestbed(t, root, name)
	m := testbedPIDRE.FindStringSubmatch(log.String())
	if m == nil {
		t.Fatal("no gateway PIDs in the output")
	}
	for _, ps := range m[1:] {
		p, _ := strconv.Atoi(ps)
		if err := syscall.Kill(p, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("s2cs pid %d still exists after the interrupted run (kill 0: %v)", p, err)
		}
	}
}

var testbedPIDRE = regexp.MustCompile(`outbound s2cs pid (\d+) .*inbound s2cs pid (\d+) `)

func TestTestbedFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--preset", "moon"}, "unknown preset"},
		{[]string{"run", "--name", "Bad-Name"}, "--name"},
		{[]string{"run", "--rate", "fast"}, "--rate"},
		{[]string{"run", "--rtt", "1h"}, "out of range"},
		{[]string{"run", "--workload", "0"}, "--workload"},
		{[]string{"run", "--workload", "1MiB", "--bytes", "1MiB"}, "--bytes"},
		{[]string{"run", "--engine", "zero"}, "use splice or buffer"},
		{[]string{"run", "--reps", "0"}, "--reps 0 out of range"},
		{[]string{"up", "extra"}, `unexpected argument "extra"`},
		{[]string{"down", "--name", ""}, "--name"},
		{[]string{"sideways"}, "unknown subcommand"},
	} {
		var stderr bytes.Buffer
		err := run(context.Background(), append([]string{"testbed"}, c.args...), &stderr, &stderr)
		var ue usageError
		if err == nil || !errors.As(err, &ue) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: got %v, want a usage error containing %q", c.args, err, c.want)
		}
	}
}
