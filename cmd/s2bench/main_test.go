package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// s2csBin and s2benchBin are built once by TestMain.
var s2csBin, s2benchBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "s2bench-test-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	s2csBin, s2benchBin = filepath.Join(dir, "s2cs"), filepath.Join(dir, "s2bench")
	out, err := exec.Command("go", "build", "-o", dir+"/", "scistream/cmd/s2cs", "scistream/cmd/s2bench").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "go build s2cs s2bench: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

var pidRE = regexp.MustCompile(`inbound s2cs pid (\d+) .*outbound s2cs pid (\d+) `)

// gatewayPIDs reads the gateways' PIDs from compare's output.
func gatewayPIDs(t *testing.T, out string) []int {
	t.Helper()
	m := pidRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no gateway PIDs in the output:\n%s", out)
	}
	var pids []int
	for _, s := range m[1:] {
		p, _ := strconv.Atoi(s)
		pids = append(pids, p)
	}
	return pids
}

func checkGone(t *testing.T, pids []int, tmp string) {
	t.Helper()
	for _, p := range pids {
		if err := syscall.Kill(p, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("s2cs pid %d still exists after compare returned (kill 0: %v)", p, err)
		}
	}
	left, _ := filepath.Glob(filepath.Join(tmp, "s2bench-*"))
	if len(left) > 0 {
		t.Errorf("temporary directories left behind: %v", left)
	}
}

func TestCompare(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp) // compare's state directory goes here
	jsonPath := filepath.Join(t.TempDir(), "out.json")
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"compare", "--bytes", "16MiB", "--size", "64KiB", "--reps", "1",
		"--json", jsonPath, "--s2cs", s2csBin}, &stdout, &stderr)
	t.Logf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	if err != nil {
		t.Fatal(err)
	}
	checkGone(t, gatewayPIDs(t, stdout.String()), tmp)

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
		path, _ := r["path"].(string)
		seen[path] = true
		if r["integrity_ok"] != true || r["bytes"] != float64(16<<20) || r["size_bytes"] != float64(64<<10) ||
			r["messages"] != float64(256) || r["pairs"] != float64(1) || r["rep"] != float64(1) ||
			r["mode"] != "throughput" || r["workload"] != "size" || r["engine"] != "splice" || r["wan"] != "tls" {
			t.Errorf("record %v", r)
		}
		if _, ok := r["rtt_p50_us"]; ok {
			t.Errorf("%s: RTT fields in throughput mode: %v", path, r)
		}
		if cpu, ok := r["gw_cpu_s_per_GB"].(float64); (path == "gateways") != ok || ok && cpu < 0 {
			t.Errorf("%s: gw_cpu_s_per_GB = %v", path, r["gw_cpu_s_per_GB"])
		}
		for _, k := range []string{"goodput_MBps", "latency_us", "jitter_us"} {
			if v, ok := r[k].(float64); !ok || v <= 0 {
				t.Errorf("%s: %s = %v", path, k, r[k])
			}
		}
	}
	if len(recs) != 2 || !seen["direct"] || !seen["gateways"] {
		t.Fatalf("want one direct and one gateways record, got %s", b)
	}
	for _, want := range []string{"gw/direct", "stream setup (client.Wire):", "goodput MB/s", "gw_cpu_s/GB"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

// cancelWriter cancels when a line containing trigger has been written.
type cancelWriter struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	trigger string
	cancel  context.CancelFunc
}

func (w *cancelWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.trigger) {
		w.cancel()
	}
	return len(p), nil
}

// An interrupt (the context main cancels on Ctrl-C) after the stream is
// wired, and one after a first run, still release the stream, stop both
// gateways and remove the temporary directory.
func TestCompareInterrupted(t *testing.T) {
	for _, trigger := range []string{"producer connects to", "run 1/4 direct"} {
		t.Run(strings.ReplaceAll(trigger, " ", "_"), func(t *testing.T) {
			tmp := t.TempDir()
			t.Setenv("TMPDIR", tmp)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			w := &cancelWriter{trigger: trigger, cancel: cancel}
			var stderr bytes.Buffer
			jsonPath := filepath.Join(t.TempDir(), "out.json")
			err := run(ctx, []string{"compare", "--bytes", "64MiB", "--reps", "2", "--engine", "buffer", "--wan", "tcp", "--json", jsonPath, "--s2cs", s2csBin}, w, &stderr)
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("got %v, want context.Canceled\nstdout:\n%s\nstderr:\n%s", err, w.buf.String(), stderr.String())
			}
			checkGone(t, gatewayPIDs(t, w.buf.String()), tmp)
			// Interrupted in a run: the runs so far, the interrupted one
			// marked as not verified, are in the JSON file.
			if strings.HasPrefix(trigger, "run") {
				b, err := os.ReadFile(jsonPath)
				var recs []map[string]any
				if err != nil || json.Unmarshal(b, &recs) != nil || len(recs) < 2 || recs[len(recs)-1]["integrity_ok"] != false || recs[0]["integrity_ok"] != true {
					t.Errorf("JSON after the interrupt (%v):\n%s", err, b)
				}
			}
		})
	}
}

func TestCompareFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--bytes", "1XB"}, `--bytes "1XB": unknown unit`},
		{[]string{"--bytes", "lots"}, "--bytes"},
		{[]string{"--size", "0"}, "--size 0 out of range"},
		{[]string{"--size", "1GiB", "--bytes", "4GiB"}, "--size 1GiB out of range"},
		{[]string{"--bytes", "64KiB", "--size", "64KiB"}, "raise --bytes or lower the size"},
		{[]string{"--bytes", "1MiB", "--pairs", "64", "--size", "64KiB"}, "raise --bytes"},
		{[]string{"--workload", "bogus"}, "or give sweep, dstream or lstream"},
		{[]string{"--workload", "sweep", "--size", "1KiB"}, "--workload and --size both given"},
		{[]string{"--workload", "4KiB,0"}, "--workload 0 out of range"},
		{[]string{"--bytes", "1GiB", "--duration", "1s"}, "give one of --bytes, --messages and --duration"},
		{[]string{"--messages", "0"}, "--messages \"0\": give a whole number"},
		{[]string{"--messages", "1"}, "raise --messages"},
		{[]string{"--duration", "-1s"}, "--duration -1s out of range"},
		{[]string{"--duration", "10m"}, "lower --duration or raise --run_timeout"},
		{[]string{"--rate", "100"}, "ambiguous"},
		{[]string{"--rate", "fast"}, "--rate"},
		{[]string{"--mode", "pingpong"}, "use throughput, rr (request-reply) or echo"},
		{[]string{"--mode", "echo", "--size", "8MiB"}, "--mode echo with 8MiB messages: give sizes up to 4MiB"},
		{[]string{"--pairs", "0"}, "give counts from 1 to 64"},
		{[]string{"--pairs", "1,128"}, "give counts from 1 to 64"},
		{[]string{"--plots", "/nonexistent-dir"}, "mkdir -p"},
		{[]string{"--plot_format", "gif"}, "use svg or png"},
		{[]string{"--progress", "maybe"}, "use auto, on or off"},
		{[]string{"--bytes", "2TiB"}, "--bytes 2TiB exceeds"},
		{[]string{"--reps", "0"}, "--reps 0 out of range"},
		{[]string{"--reps", "1000"}, "--reps 1000 out of range"},
		{[]string{"--engine", "zero-copy"}, `--engine "zero-copy": use one of splice`},
		{[]string{"--wan", "udp"}, "use one of tls, tcp, quic"},
		{[]string{"--json", "/nonexistent-dir/x.json"}, "does not exist"},
		{[]string{"--json", os.TempDir()}, "is a directory"},
		{[]string{"--run_timeout", "0s"}, "--run_timeout must be positive"},
		{[]string{"--idle-timeout", "-1s"}, "--idle_timeout must be positive"},
		{[]string{"--rate_interval", "1ms"}, "--rate_interval 1ms out of range: give 10ms to 1m"},
		{[]string{"extra"}, `unexpected argument "extra"`},
		{[]string{"--nope"}, "unknown flag --nope: did you mean --mode? (s2bench compare --help lists the flags)"},
	} {
		args := append([]string{"compare", "--s2cs", s2csBin}, c.args...)
		var stderr bytes.Buffer
		err := run(context.Background(), args, &stderr, &stderr)
		var ue usageError
		if err == nil || !errors.As(err, &ue) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: got %v, want a usage error containing %q", c.args, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "\n") {
			t.Errorf("%v: error is not one line: %q", c.args, err)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"producer"}, "--connect is required"},
		{[]string{"producer", "--connect", "nohost"}, "give HOST:PORT"},
		{[]string{"producer", "--connect", "127.0.0.1:1", "--path", "two words"}, "--path"},
		{[]string{"producer", "--connect", "127.0.0.1:1", "--pairs", "65"}, "--pairs 65 out of range"},
		{[]string{"producer", "--connect", "127.0.0.1:1", "--workload", "lstream", "--bytes", "1MiB"}, "raise --bytes"},
		{[]string{"producer", "--connect", "127.0.0.1:1", "--reps", "0"}, "--reps 0 out of range"},
		{[]string{"run"}, "give --direct"},
		{[]string{"run", "--direct", "nohost"}, "give HOST:PORT"},
		{[]string{"run", "--gateways", "127.0.0.1:1", "--pairs", "0"}, "give counts from 1 to 64"},
		{[]string{"run", "--gateways", "127.0.0.1:1", "--plot_format", "pdf"}, "use svg or png"},
		{[]string{"consumer"}, "--listen is required"},
		{[]string{"consumer", "--listen", "127.0.0.1"}, "give HOST:PORT"},
		{[]string{"consumer", "--listen", "127.0.0.1:0", "--runs", "-1"}, "--runs -1"},
		{[]string{"consumer", "--listen", "127.0.0.1:0", "--json", "/nonexistent-dir/x.json"}, "does not exist"},
		{[]string{"naiveproxy", "--role", "in", "--wan", "tcp", "--listen", "0.0.0.0:0", "--to", "127.0.0.1:1"}, "give a loopback HOST:PORT"},
		{[]string{"naiveproxy", "--role", "in", "--wan", "tcp", "--listen", "127.0.0.1:0", "--to", "nohost"}, "--to \"nohost\": give HOST:PORT"},
		{[]string{"naiveproxy", "--role", "middle", "--wan", "tcp", "--listen", "127.0.0.1:0", "--to", "127.0.0.1:1"}, "use in or out"},
		{[]string{"naiveproxy", "--role", "in", "--wan", "udp", "--listen", "127.0.0.1:0", "--to", "127.0.0.1:1"}, "use tcp, tls or quic"},
		{[]string{"naiveproxy", "--role", "out", "--wan", "tls", "--listen", "127.0.0.1:0", "--to", "127.0.0.1:1"}, "needs --cert and --key"},
		{[]string{"naiveproxy", "--role", "in", "--wan", "quic", "--listen", "127.0.0.1:0", "--to", "127.0.0.1:1", "--pin", "abc"}, "needs --pin"},
	} {
		var stderr bytes.Buffer
		err := run(context.Background(), c.args, &stderr, &stderr)
		var ue usageError
		if err == nil || !errors.As(err, &ue) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: got %v, want a usage error containing %q", c.args, err, c.want)
		}
	}
	var stderr bytes.Buffer
	if err := run(context.Background(), []string{"compare", "--s2cs", filepath.Join(t.TempDir(), "none")}, &stderr, &stderr); err == nil || !strings.Contains(err.Error(), "not an executable") {
		t.Errorf("missing --s2cs binary: %v", err)
	}
	if err := run(context.Background(), []string{"frobnicate"}, &stderr, &stderr); err == nil || !strings.Contains(err.Error(), "unknown command") {
		t.Errorf("unknown command: %v", err)
	}
	if err := run(context.Background(), nil, &stderr, &stderr); err == nil {
		t.Error("no command: no error")
	}
}

// With --engine sockmap, compare says after the run how each gateway's
// sockmap engine moved the bytes, or that it could not load the program.
func TestCompareSockmapReport(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the sockmap engine loads an eBPF program: root only")
	}
	noSockmap := filepath.Join(t.TempDir(), "s2cs-no-sockmap")
	if err := os.WriteFile(noSockmap, []byte("#!/bin/sh\nexec "+s2csBin+" \"$@\" --no_sockmap\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		s2cs string
		want *regexp.Regexp
	}{
		{s2csBin, regexp.MustCompile(`(?m)^sockmap, (inbound|outbound) gateway: directions_redirected=\d+ .*kernel_bytes=\d+ user_bytes=\d+`)},
		{noSockmap, regexp.MustCompile(`(?m)^sockmap, (inbound|outbound) gateway: not loaded, the gateway used splice: .*disabled by configuration`)},
	} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), []string{"compare", "--bytes", "8MiB", "--size", "64KiB", "--reps", "1",
			"--engine", "sockmap", "--wan", "tcp", "--progress", "off", "--s2cs", tc.s2cs}, &stdout, &stderr)
		if err != nil {
			t.Fatalf("%v\n%s\n%s", err, stdout.String(), stderr.String())
		}
		if n := len(tc.want.FindAllString(stdout.String(), -1)); n != 2 {
			t.Errorf("%d lines matching %q, want one per gateway:\n%s", n, tc.want, stdout.String())
		}
	}
}

// TestFlood runs s2bench flood small: the stream is measured alone and
// under a flood, both verified, and the report says how the inbound
// gateway's memory went; everything it started is stopped.
func TestFlood(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"flood", "--conns", "2000", "--sources", "2", "--duration", "1s",
		"--settle", "20s", "--s2cs", s2csBin}, &stdout, &stderr)
	out := stdout.String()
	t.Logf("stdout:\n%s\nstderr:\n%s", out, stderr.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, re := range []string{
		`(?m)^  alone +[0-9.]+ MB/s, every message verified$`,
		`(?m)^  under flood +[0-9.]+ MB/s, every message verified$`,
		`(?m)^goodput under the flood: [0-9.]+ of alone`,
		`(?m)^flood: [0-9]+ connections reached the gateway, [0-9]+ reset or closed by it \(during the connect or after\), [0-9]+ still open when it ended; [0-9]+ dials failed otherwise$`,
		`(?m)^inbound gateway memory \(VmRSS\): [0-9.]+ MB at start, [0-9.]+ MB before the flood \(after the first run\), [0-9.]+ MB at the flood's peak$`,
		`(?m)^memory back within 2 MB \(or 5%\) of its level before the flood [0-9.]+ s after the flood ended$`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("output lacks %s", re)
		}
	}
	checkGone(t, gatewayPIDs(t, out), tmp)
}

// TestConns runs the many-connections experiment small: 200 connections
// over TLS, every byte verified by a consumer process, and checks that
// it reports each measure and leaves no gateway behind.
func TestConns(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"conns", "--conns", "200", "--bytes", "32MiB", "--timeout", "1m",
		"--s2cs", s2csBin, "--s2bench", s2benchBin}, &stdout, &stderr)
	out := stdout.String()
	t.Logf("stdout:\n%s\nstderr:\n%s", out, stderr.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, re := range []string{
		`(?m)^established: 200 connections through both gateways in [0-9.]+ s: [0-9]+ connections/s$`,
		`(?m)^  outbound gateway RSS [0-9.]+ MB before, [0-9.]+ MB with all open: -?[0-9.]+ KiB per connection$`,
		`(?m)^  inbound  gateway RSS peak [0-9.]+ MB during the transfer: -?[0-9.]+ KiB per connection$`,
		`(?m)^transfer: 31.2 MiB verified on 200 connections, aggregate goodput [0-9.]+ MB/s, gateways' CPU [0-9.]+ s/GB$`,
		`(?m)^consumer: s2bench consumer: 1 run\(s\), all verified$`,
		`(?m)^direct: the same workload straight to a consumer process, aggregate goodput [0-9.]+ MB/s; gateways/direct [0-9.]+$`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("output lacks %s", re)
		}
	}
	checkGone(t, gatewayPIDs(t, out), tmp)
}
