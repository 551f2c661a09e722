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
	"strings"
	"syscall"
	"testing"
	"time"

	"scistream/internal/exp/testbed"
	"scistream/internal/exp/workload"
	"scistream/internal/netbed"
)

// needTestbed skips where network namespaces cannot be built, saying
// why, and returns the s2bench binary (built by TestMain next to s2cs,
// where it looks for it; the testbed's delay line is s2bench itself).
func needTestbed(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := netbed.Available(ctx); err != nil {
		t.Skipf("network namespaces cannot be built here: %v", err)
	}
	serializeTestbeds(t)
	return s2benchBin
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
	out, err := s2bench(t, bin, append([]string{"testbed", "up", "--rtt", "10ms", "--wan_rate", "100mbit"}, bed...)...)
	if err != nil {
		t.Fatal(err)
	}
	// The hosts run cubic, as facility hosts do, on their own sockets
	// whatever the namespaces may take as their default.
	// The sockets' buffers may grow to 64 MiB (DefaultTCPBuf: this
	// path's 4 x BDP is less), in every namespace.
	for _, want := range []string{"testbed " + name + " is up", "measured: RTT direct", "congestion control: producer and consumer cubic", `tcp_rmem "4096 131072 67108864"`} {
		if !strings.Contains(out, want) {
			t.Errorf("up output lacks %q", want)
		}
	}
	if out, err := s2bench(t, bin, append([]string{"testbed", "up", "--rtt", "10ms"}, bed...)...); err == nil || !strings.Contains(out, "already up") {
		t.Errorf("second up: %v; want an already-up error", err)
	}

	// Two pairs: each producer dials from its own goroutine, which must
	// still connect from the producer's namespace. Two sizes: the plots
	// against size need two points.
	jsonPath, plots := filepath.Join(t.TempDir(), "out.json"), t.TempDir()
	for attempt := 1; ; attempt++ {
		out, err = s2bench(t, bin, append([]string{"testbed", "run", "--workload", "16KiB,64KiB", "--bytes", "4MiB", "--pairs", "2", "--engine", "buffer",
			"--json", jsonPath, "--plots", plots, "--progress", "off"}, bed...)...)
		if err == nil || attempt == 3 || !strings.Contains(out, "refusing to run") {
			break
		}
		t.Logf("attempt %d refused (busy machine: the emulated path was off its bounds), retrying", attempt)
	}
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "taken down") {
		t.Error("run took down a testbed it did not bring up")
	}
	for _, want := range []string{"measured: RTT direct", "congestion control", "gw/direct", "wrote 4 records"} {
		if !strings.Contains(out, want) {
			t.Errorf("run output lacks %q", want)
		}
	}
	for _, f := range []string{"goodput_vs_size.svg", "jitter_vs_size.svg"} {
		if st, err := os.Stat(filepath.Join(plots, f)); err != nil || st.Size() == 0 {
			t.Errorf("plot %s: %v", f, err)
		}
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
		pp, _ := r["per_pair"].([]any)
		if r["integrity_ok"] != true || r["bytes"] != float64(4<<20) || (r["size_bytes"] != float64(16<<10) && r["size_bytes"] != float64(64<<10)) || r["pairs"] != float64(2) || len(pp) != 2 ||
			r["workload"] != "size" || r["mode"] != "throughput" || r["rep"] != float64(1) ||
			r["preset"] != "custom" || r["engine"] != "buffer" || r["wan"] != "tls" || math.Abs(rtt-10) > 1 {
			t.Errorf("record %v", r)
		}
		if _, ok := r["gw_cpu_s_per_GB"]; ok != (p == "gateways") {
			t.Errorf("%s record: gw_cpu_s_per_GB present %v", p, ok)
		}
	}
	if len(recs) != 4 || !seen["direct"] || !seen["gateways"] {
		t.Fatalf("want a direct and a gateways record per size, got %s", b)
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
	t.Cleanup(func() {
		exec.Command(bin, "testbed", "down", "--name", name, "--state_root", root).Run()
		checkNoTestbed(t, root, name)
	})
	var (
		out         string
		interrupted bool
		err         error
	)
	for attempt := 1; ; attempt++ {
		out, interrupted, err = runInterrupted(t, bin, "testbed", "run", "--name", name, "--state_root", root, "--rtt", "10ms", "--wan_rate", "100mbit",
			"--workload", "64KiB,1MiB", "--bytes", "64MiB")
		t.Logf("output:\n%s", out)
		if interrupted || attempt == 3 || !strings.Contains(out, "refusing to run") {
			break
		}
		// The machine was too busy for the emulated path's bounds;
		// the refused run must have taken its testbed down all the same.
		checkNoTestbed(t, root, name)
		t.Logf("attempt %d refused (busy machine), retrying", attempt)
	}
	if !interrupted {
		t.Fatalf("the run never started its experiment: %v", err)
	}
	if err == nil {
		t.Fatal("interrupted run exited 0")
	}
	if !strings.Contains(out, "testbed "+name+" taken down") {
		t.Error("interrupted run did not report taking the testbed down")
	}
	checkNoTestbed(t, root, name)
	for _, p := range gatewayPIDs(t, out) {
		if err := syscall.Kill(p, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("s2cs pid %d still exists after the interrupted run (kill 0: %v)", p, err)
		}
	}
}

// runInterrupted runs bin with args and sends it SIGINT once it has
// started its experiment (printed its gateways); it returns the output,
// whether it was interrupted, and how it exited.
func runInterrupted(t *testing.T, bin string, args ...string) (string, bool, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	sc := bufio.NewScanner(pr)
	interrupted := false
	done := make(chan error, 1)
	go func() { done <- cmd.Wait(); pw.Close() }()
	for sc.Scan() {
		log.WriteString(sc.Text() + "\n")
		if !interrupted && strings.HasPrefix(sc.Text(), "gateways: inbound s2cs pid") {
			cmd.Process.Signal(syscall.SIGINT)
			interrupted = true
		}
	}
	return log.String(), interrupted, <-done
}

func TestTestbedFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--preset", "moon"}, "unknown preset"},
		{[]string{"run", "--name", "Bad-Name"}, "--name"},
		{[]string{"run", "--wan_rate", "fast"}, "--wan_rate"},
		{[]string{"up", "--wan-rate", "fast"}, "--wan_rate"},
		{[]string{"run", "--rate", "fast"}, "--rate"},
		{[]string{"run", "--mode", "sideways"}, "--mode"},
		{[]string{"run", "--pairs", "0"}, "--pairs"},
		{[]string{"run", "--bytes", "1MiB", "--duration", "1s"}, "not several"},
		{[]string{"run", "--workload", "lstream", "--size", "4KiB"}, "both given"},
		{[]string{"run", "--rtt", "1h"}, "out of range"},
		{[]string{"run", "--workload", "0"}, "--workload"},
		{[]string{"run", "--workload", "1MiB", "--bytes", "1MiB"}, "--bytes"},
		{[]string{"run", "--engine", "zero"}, "--engine"},
		{[]string{"run", "--wan", "pigeon"}, "--wan"},
		{[]string{"run", "--reps", "0"}, "--reps 0 out of range"},
		{[]string{"up", "--tcp_buf", "big"}, "--tcp_buf"},
		{[]string{"up", "--tcp_buf", "4KiB"}, "--tcp_buf 4KiB out of range"},
		{[]string{"run", "--tcp_buf", "2GiB"}, "--tcp_buf 2GiB out of range"},
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

// TestTestbedRunDefaults: testbed run takes compare's flags, with the
// sweep once as its default, and sizes its runs from the emulated path.
func TestTestbedRunDefaults(t *testing.T) {
	var out bytes.Buffer
	cfg, err := parseTestbedRun([]string{"--s2cs", s2csBin}, &out, &out)
	if err != nil {
		t.Fatal(err)
	}
	p := cfg.Compare.Plan
	if p.Name != workload.Sweep || cfg.Compare.Reps != 1 || cfg.Bed.Preset.Name != "shortwan" || len(cfg.Asked) != 1 {
		t.Errorf("defaults: workload %s, reps %d, preset %s, explicit %v", p.Name, cfg.Compare.Reps, cfg.Bed.Preset.Name, cfg.Asked)
	}
	if cfg.Bed.TCPBuf != 0 {
		t.Errorf("default --tcp_buf: %d, want 0 (auto)", cfg.Bed.TCPBuf)
	}
	if got, err := parseTestbedRun([]string{"--s2cs", s2csBin, "--tcp_buf", "6MiB"}, &out, &out); err != nil || got.Bed.TCPBuf != 6<<20 {
		t.Errorf("--tcp_buf 6MiB: %d, %v; want %d", got.Bed.TCPBuf, err, 6<<20)
	}
	lan, _ := netbed.LookupPreset("lan")
	lan.RateBps = 200e6
	p.Auto = testbed.Amount(lan, p)
	// 200 Mbit/s for 2 s is 50 MB, in whole 64 KiB messages, split by the pairs.
	for _, c := range []struct {
		size, pairs int
		want        int64
	}{{64 << 10, 1, 762 * (64 << 10)}, {64 << 10, 2, 381 * (64 << 10)}, {16 << 20, 1, 16 * (16 << 20)}} {
		if got, _ := p.PerPair(c.size, c.pairs); got != c.want {
			t.Errorf("size %d, %d pairs: %d bytes per pair, want %d", c.size, c.pairs, got, c.want)
		}
	}

	// An explicit amount wins; pacing lowers the default; rr sends one
	// message per RTT for 2 s (at most 2000).
	cfg, err = parseTestbedRun([]string{"--s2cs", s2csBin, "--workload", "1KiB", "--rate", "100msg/s", "--reps", "2"}, &out, &out)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Compare.Plan.Auto = testbed.Amount(lan, cfg.Compare.Plan)
	if got, _ := cfg.Compare.Plan.PerPair(1024, 1); got != 200*1024 || cfg.Compare.Reps != 2 {
		t.Errorf("paced at 100 msg/s: %d bytes per run (want 200 messages), reps %d", got, cfg.Compare.Reps)
	}
	for _, c := range []struct {
		args []string
		want int64
	}{
		{[]string{"--bytes", "3MiB"}, 3 << 20},
		{[]string{"--mode", "rr", "--preset", "lan"}, 2000 * 1024},   // 2 s / 0.44 ms = 4545
		{[]string{"--mode", "rr"}, 82 * 1024},                        // shortwan: 2 s / 24.3 ms
		{[]string{"--mode", "rr", "--preset", "longwan"}, 16 * 1024}, // 2 s / 144 ms = 13, at least 16
	} {
		cfg, err := parseTestbedRun(append([]string{"--s2cs", s2csBin, "--workload", "1KiB"}, c.args...), &out, &out)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Compare.Plan.Auto = testbed.Amount(cfg.Bed.Preset, cfg.Compare.Plan)
		if got, _ := cfg.Compare.Plan.PerPair(1024, 1); got != c.want {
			t.Errorf("%v: %d bytes per run, want %d", c.args, got, c.want)
		}
	}
}

// TestTestbedCalibrationFails (issue 27, finding 1): a testbed whose
// emulated path cannot hold its preset (a WAN rate past what the delay
// line carries) is refused with the calibration's error, and the run
// takes down what it brought up: no panic, no namespace left behind.
func TestTestbedCalibrationFails(t *testing.T) {
	bin := needTestbed(t)
	root, name := t.TempDir(), testbedName()
	t.Cleanup(func() {
		exec.Command(bin, "testbed", "down", "--name", name, "--state_root", root).Run()
	})
	out, err := s2bench(t, bin, "testbed", "run", "--name", name, "--state_root", root, "--rtt", "2ms", "--wan_rate", "10gbit",
		"--workload", "64KiB", "--bytes", "1MiB")
	if err == nil {
		t.Skip("this machine's delay line held 10 Gbit/s: nothing to refuse")
	}
	if strings.Contains(out, "panic:") || strings.Contains(out, "goroutine ") {
		t.Fatalf("the refused run panicked: %v", err)
	}
	if !strings.Contains(out, "refusing to run") || !strings.Contains(out, "testbed "+name+" taken down") {
		t.Errorf("exit %v: want the calibration's refusal and the testbed taken down", err)
	}
	checkNoTestbed(t, root, name)
}
