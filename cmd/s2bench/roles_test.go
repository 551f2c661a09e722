package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
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

	"scistream/internal/bench"
	"scistream/internal/exp/localpair"
	"scistream/internal/localgw"
	"scistream/internal/waitfor"
)

// proc is a real s2bench process whose output lines are collected.
type proc struct {
	cmd  *exec.Cmd
	mu   sync.Mutex // guards out
	out  strings.Builder
	line chan string // every stdout and stderr line, also kept in out
	done chan error
}

func startProc(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(s2benchBin, args...), line: make(chan string, 1024), done: make(chan error, 1)}
	p.cmd.Env = append(os.Environ(), env...)
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for _, r := range []io.Reader{stdout, stderr} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc := bufio.NewScanner(r)
			for sc.Scan() {
				p.mu.Lock()
				p.out.WriteString(sc.Text() + "\n")
				p.mu.Unlock()
				select {
				case p.line <- sc.Text():
				default: // nobody waits for lines now; they stay in out
				}
			}
		}()
	}
	go func() {
		wg.Wait()
		p.done <- p.cmd.Wait()
	}()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// waitLine waits for a line matching re and returns its submatches.
func (p *proc) waitLine(t *testing.T, re *regexp.Regexp, within time.Duration) []string {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case l := <-p.line:
			if m := re.FindStringSubmatch(l); m != nil {
				return m
			}
		case err := <-p.done:
			p.done <- err
			t.Fatalf("process ended (%v) before a line matching %q:\n%s", err, re, p.output())
		case <-deadline:
			t.Fatalf("no line matching %q within %s:\n%s", re, within, p.output())
		}
	}
}

// wait waits for the process to end and returns its exit code.
func (p *proc) wait(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(within):
		t.Fatalf("process did not end within %s:\n%s", within, p.output())
	}
	return -1
}

func readRecords(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var recs []map[string]any
	if err := json.Unmarshal(b, &recs); err != nil {
		t.Fatalf("%s: %v\n%s", path, err, b)
	}
	return recs
}

// The producer and consumer roles interoperate as two real processes
// through a real gateway pair (s2cs x2, wired as s2uc does): 2 pairs in
// request-reply mode, 2 sizes; both sides record every run.
func TestRolesThroughGateways(t *testing.T) {
	dir := t.TempDir()
	ip := localgw.RandomLoopback()
	cons := startProc(t, nil, "consumer", "--listen", net.JoinHostPort(ip, "0"), "--runs", "2", "--json", filepath.Join(dir, "c.json"))
	m := cons.waitLine(t, regexp.MustCompile(`listening on (\S+)`), 30*time.Second)
	addr, err := net.ResolveTCPAddr("tcp", m[1])
	if err != nil {
		t.Fatal(err)
	}
	lp, err := localpair.Start(context.Background(), localpair.Config{S2CS: s2csBin, Engine: "splice", WAN: "tls", Consumer: addr})
	if err != nil {
		t.Fatal(err)
	}
	defer lp.Close()

	prod := startProc(t, nil, "producer", "--connect", lp.Target(), "--path", "gateways", "--workload", "4KiB,64KiB",
		"--bytes", "2MiB", "--pairs", "2", "--mode", "rr", "--json", filepath.Join(dir, "p.json"))
	if code := prod.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("producer exit %d:\n%s", code, prod.output())
	}
	if code := cons.wait(t, time.Minute); code != 0 {
		t.Fatalf("consumer exit %d:\n%s", code, cons.output())
	}
	t.Logf("producer:\n%s\nconsumer:\n%s", prod.output(), cons.output())
	for _, side := range []string{"c.json", "p.json"} {
		recs := readRecords(t, filepath.Join(dir, side))
		if len(recs) != 2 {
			t.Fatalf("%s: %d records, want 2", side, len(recs))
		}
		for i, r := range recs {
			size := []float64{4 << 10, 64 << 10}[i]
			if r["path"] != "gateways" || r["integrity_ok"] != true || r["pairs"] != float64(2) || r["size_bytes"] != size ||
				r["bytes"] != float64(2<<20) || r["mode"] != "rr" || r["messages"] != float64(2<<20)/size {
				t.Errorf("%s: record %v", side, r)
			}
			if pp, _ := r["per_pair"].([]any); len(pp) != 2 {
				t.Errorf("%s: per_pair %v", side, r["per_pair"])
			}
			if side == "c.json" {
				if g, _ := r["goodput_MBps"].(float64); g <= 0 || r["side"] != "consumer" {
					t.Errorf("consumer record %v", r)
				}
			} else if p50, _ := r["rtt_p50_us"].(float64); p50 <= 0 || r["rtt_p99_us"].(float64) < p50 || r["rtt_samples"] != r["messages"] {
				t.Errorf("producer record without RTTs: %v", r)
			}
		}
	}
}

// A real Ctrl-C (SIGINT to the s2bench process) in the middle of a run
// through the gateways stops the run, releases the stream, stops both
// gateways, frees their ports and the consumer's, and removes the
// temporary state; the progress display was running until then.
func TestCompareSIGINT(t *testing.T) {
	tmp := t.TempDir()
	// Paced, so the test loads the shared machine lightly: at 200 MB/s
	// a run lasts 20 s, far longer than the wait for a progress line.
	p := startProc(t, []string{"TMPDIR=" + tmp}, "compare", "--bytes", "4GiB", "--rate", "200MB/s", "--reps", "2", "--progress", "on", "--s2cs", s2csBin)
	m := p.waitLine(t, regexp.MustCompile(`consumer listens on (\S+)`), 30*time.Second)
	consumerAddr := m[1]
	m = p.waitLine(t, regexp.MustCompile(`producer connects to (\S+)`), 30*time.Second)
	listener := m[1]
	pids := gatewayPIDs(t, p.output())
	// A progress line of the first run: data is flowing.
	p.waitLine(t, regexp.MustCompile(`run [12]/4 .* MB verified`), time.Minute)
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, time.Minute); code != 1 {
		t.Fatalf("exit code %d after SIGINT, want 1:\n%s", code, p.output())
	}
	out := p.output()
	if !strings.Contains(out, "interrupted") || strings.Contains(out, "clean up:") {
		t.Errorf("output after SIGINT:\n%s", out)
	}
	checkGone(t, pids, tmp)
	for _, a := range []string{consumerAddr, listener} {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			t.Errorf("port %s still taken after the interrupted run: %v", a, err)
			continue
		}
		ln.Close()
	}
}

// A SIGKILL of s2bench (no chance to clean up) still stops both
// gateways: the kernel signals them when their parent dies, so none is
// left holding its ports.
func TestCompareSIGKILL(t *testing.T) {
	tmp := t.TempDir()
	p := startProc(t, []string{"TMPDIR=" + tmp}, "compare", "--bytes", "4GiB", "--rate", "200MB/s", "--reps", "2", "--progress", "on", "--s2cs", s2csBin)
	p.waitLine(t, regexp.MustCompile(`producer connects to \S+`), 30*time.Second)
	pids := gatewayPIDs(t, p.output())
	if len(pids) != 2 {
		t.Fatalf("gateway pids %v, want 2:\n%s", pids, p.output())
	}
	t.Cleanup(func() { // if the test fails: leave no gateway behind
		for _, pid := range pids {
			if !processGone(pid) {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	p.waitLine(t, regexp.MustCompile(`run [12]/4 .* MB verified`), time.Minute)
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	p.wait(t, time.Minute)
	for _, pid := range pids {
		waitfor.Must(t, 20*time.Second, fmt.Sprintf("s2cs pid %d to end after s2bench was killed", pid), func() bool { return processGone(pid) })
	}
}

// processGone reports that pid no longer runs: it does not exist, or it
// is a zombie waiting for whoever adopted it to reap it.
func processGone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// The state follows the command name in parentheses.
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] == 'Z'
}

// Every workload shape in one short compare: two sizes, 1 and 2 pairs,
// request-reply, plots written; then a paced open-ended run.
func TestCompareWorkloads(t *testing.T) {
	dir := t.TempDir()
	jsonPath := filepath.Join(dir, "rr.json")
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"compare", "--workload", "1KiB,16KiB", "--messages", "200", "--pairs", "1,2",
		"--mode", "rr", "--reps", "1", "--wan", "tcp", "--engine", "buffer", "--json", jsonPath, "--plots", dir, "--s2cs", s2csBin}, &stdout, &stderr)
	t.Logf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	if err != nil {
		t.Fatal(err)
	}
	recs := readRecords(t, jsonPath)
	if len(recs) != 8 {
		t.Fatalf("%d records, want 2 sizes x 2 pair counts x 2 paths", len(recs))
	}
	for _, r := range recs {
		if r["integrity_ok"] != true || r["messages"] != float64(200) || r["rtt_samples"] != float64(200) || r["mode"] != "rr" {
			t.Errorf("record %v", r)
		}
		if p50, _ := r["rtt_p50_us"].(float64); p50 <= 0 || r["rtt_p90_us"].(float64) < p50 || r["rtt_max_us"].(float64) < r["rtt_p99_us"].(float64) {
			t.Errorf("RTT fields %v", r)
		}
	}
	for _, f := range []string{"goodput_vs_size.svg", "jitter_vs_size.svg", "goodput_vs_pairs.svg", "rtt_cdf_1KiB.svg", "rtt_cdf_16KiB.svg"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil || !bytes.Contains(b, []byte("<svg")) || !bytes.Contains(b, []byte("gateways")) {
			t.Errorf("plot %s: %v (%d bytes)", f, err, len(b))
		}
	}

	jsonPath = filepath.Join(dir, "paced.json")
	stdout.Reset()
	err = run(context.Background(), []string{"compare", "--size", "1KiB", "--duration", "300ms", "--rate", "1000msg/s",
		"--reps", "1", "--json", jsonPath, "--s2cs", s2csBin}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("%v\n%s", err, stdout.String())
	}
	for _, r := range readRecords(t, jsonPath) {
		// 300 ms at 1000 msg/s: at most 301 messages (seq 0 at t=0).
		if n, _ := r["messages"].(float64); n < 2 || n > 301 || r["rate_msgs_per_s"] != float64(1000) || r["duration_s"] != 0.3 || r["integrity_ok"] != true {
			t.Errorf("paced record %v", r)
		}
	}
}

// sendRaw connects to addr, sends a run header and the given messages of
// its run (corrupting message bad, if bad >= 0), and half-closes.
func sendRaw(t *testing.T, addr string, h bench.Hello, msgs, bad int) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b, err := bench.AppendHello(nil, h)
	if err != nil {
		t.Fatal(err)
	}
	g, err := bench.NewGenerator(h.Spec)
	if err != nil {
		t.Fatal(err)
	}
	for i := range msgs {
		m := bytes.Clone(g.Message(uint64(i)))
		if i == bad {
			m[len(m)-1] ^= 0x40
		}
		b = append(b, m...)
	}
	c.Write(b)
	c.(*net.TCPConn).CloseWrite()
	io.Copy(io.Discard, c) // until the consumer closes or resets
}

// The consumer process fails a run loudly when a message is corrupted,
// and when a pair's connection never comes (a producer that died), and
// exits non-zero after --runs runs.
func TestConsumerFailsLoudly(t *testing.T) {
	dir := t.TempDir()
	ip := localgw.RandomLoopback()
	cons := startProc(t, nil, "consumer", "--listen", net.JoinHostPort(ip, "0"), "--runs", "2", "--idle_timeout", "1s", "--json", filepath.Join(dir, "c.json"))
	addr := cons.waitLine(t, regexp.MustCompile(`listening on (\S+)`), 30*time.Second)[1]
	spec := bench.Spec{Size: 1000, Bytes: 10_000, Seed: 5, Run: 1}
	sendRaw(t, addr, bench.Hello{Spec: spec, Pairs: 1, Group: 1, Path: "gateways"}, 10, 4)
	spec.Run = 2
	sendRaw(t, addr, bench.Hello{Spec: spec, Pairs: 2, Group: 2, Path: "gateways"}, 10, -1) // pair 1 never comes
	if code := cons.wait(t, time.Minute); code != 1 {
		t.Fatalf("consumer exit %d, want 1:\n%s", code, cons.output())
	}
	out := cons.output()
	for _, want := range []string{"INTEGRITY FAILED", "payload corrupted", "only 1 of 2 connections arrived", "2 of 2 runs FAILED"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	recs := readRecords(t, filepath.Join(dir, "c.json"))
	if len(recs) != 2 || recs[0]["integrity_ok"] != false || recs[1]["integrity_ok"] != false || recs[0]["messages"] != float64(4) {
		t.Errorf("records %v", recs)
	}
}

// The driver across hosts: a consumer process, a gateway pair wired to
// it, and s2bench run (another real process) measuring direct and
// through the gateways, interleaved, with the consumer's numbers returned
// over each connection. Then a SIGINT stops the serving consumer cleanly.
func TestRunDriverAcrossProcesses(t *testing.T) {
	dir := t.TempDir()
	ip := localgw.RandomLoopback()
	cons := startProc(t, nil, "consumer", "--listen", net.JoinHostPort(ip, "0"))
	m := cons.waitLine(t, regexp.MustCompile(`listening on (\S+)`), 30*time.Second)
	addr, err := net.ResolveTCPAddr("tcp", m[1])
	if err != nil {
		t.Fatal(err)
	}
	lp, err := localpair.Start(context.Background(), localpair.Config{S2CS: s2csBin, Engine: "buffer", WAN: "tcp", Consumer: addr})
	if err != nil {
		t.Fatal(err)
	}
	defer lp.Close()
	drv := startProc(t, nil, "run", "--direct", addr.String(), "--gateways", lp.Target(), "--workload", "4KiB,64KiB",
		"--bytes", "2MiB", "--pairs", "1,2", "--reps", "1", "--engine", "buffer", "--wan", "tcp", "--json", filepath.Join(dir, "run.json"))
	if code := drv.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("run exit %d:\n%s\nconsumer:\n%s", code, drv.output(), cons.output())
	}
	recs := readRecords(t, filepath.Join(dir, "run.json"))
	if len(recs) != 8 {
		t.Fatalf("%d records, want 2 sizes x 2 pair counts x 2 paths:\n%s", len(recs), drv.output())
	}
	for i, r := range recs {
		want := []string{"direct", "gateways"}[i%2] // interleaved
		if r["path"] != want || r["integrity_ok"] != true || r["bytes"] != float64(2<<20) || r["engine"] != "buffer" {
			t.Errorf("record %d: %v", i, r)
		}
		if g, _ := r["goodput_MBps"].(float64); g <= 0 {
			t.Errorf("record %d without the consumer's goodput: %v", i, r)
		}
	}
	if !strings.Contains(drv.output(), "gw/direct") {
		t.Errorf("no table:\n%s", drv.output())
	}
	if err := cons.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := cons.wait(t, 30*time.Second); code != 0 || !strings.Contains(cons.output(), "8 run(s), all verified") {
		t.Fatalf("consumer exit %d after SIGINT:\n%s", code, cons.output())
	}
	if ln, err := net.Listen("tcp", addr.String()); err != nil {
		t.Errorf("consumer port still taken after SIGINT: %v", err)
	} else {
		ln.Close()
	}
}

// compare --baseline runs a third path through the naive proxy pair over
// each WAN transport: every message verified, its proxies' CPU measured,
// the proxies gone afterwards.
func TestCompareBaseline(t *testing.T) {
	for _, wan := range []string{"tcp", "tls", "quic"} {
		t.Run(wan, func(t *testing.T) {
			jsonPath := filepath.Join(t.TempDir(), "out.json")
			p := startProc(t, nil, "compare", "--bytes", "8MiB", "--size", "64KiB", "--reps", "1", "--wan", wan,
				"--baseline", "--progress", "off", "--json", jsonPath, "--s2cs", s2csBin)
			if code := p.wait(t, 2*time.Minute); code != 0 {
				t.Fatalf("exit code %d:\n%s", code, p.output())
			}
			m := regexp.MustCompile(`naive baseline \(io.Copy over \w+\): pids \[(\d+) (\d+)\]`).FindStringSubmatch(p.output())
			if m == nil {
				t.Fatalf("no naive baseline line:\n%s", p.output())
			}
			for _, s := range m[1:] {
				pid, _ := strconv.Atoi(s)
				if !processGone(pid) {
					t.Errorf("naive proxy pid %d still runs after compare ended", pid)
				}
			}
			var naive int
			for _, r := range readRecords(t, jsonPath) {
				if r["path"] != "naive" {
					continue
				}
				naive++
				if r["integrity_ok"] != true || r["bytes"] != float64(8<<20) {
					t.Errorf("naive record %v", r)
				}
				if c, ok := r["gw_cpu_s_per_GB"].(float64); !ok || c < 0 {
					t.Errorf("naive record without the proxies' CPU: %v", r)
				}
			}
			if naive != 1 {
				t.Fatalf("%d naive records, want 1:\n%s", naive, p.output())
			}
			if !regexp.MustCompile(`(?m)^\s+1\s+64KiB\s+naive\s+1\s`).MatchString(p.output()) {
				t.Errorf("the table has no naive row:\n%s", p.output())
			}
		})
	}
}

// Echo mode through the gateways and the naive pair over plaintext TCP,
// as the latency comparison runs it (docs/performance.md): every path
// carries each message both ways and reports its round trips; a run
// whose echo differed would have failed.
func TestCompareEcho(t *testing.T) {
	jsonPath := filepath.Join(t.TempDir(), "out.json")
	p := startProc(t, nil, "compare", "--mode", "echo", "--wan", "tcp", "--baseline", "--size", "16KiB",
		"--messages", "200", "--reps", "1", "--progress", "off", "--json", jsonPath, "--s2cs", s2csBin)
	if code := p.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("exit code %d:\n%s", code, p.output())
	}
	seen := map[any]bool{}
	for _, r := range readRecords(t, jsonPath) {
		seen[r["path"]] = true
		p50, _ := r["rtt_p50_us"].(float64)
		p99, _ := r["rtt_p99_us"].(float64)
		if r["mode"] != "echo" || r["integrity_ok"] != true || r["messages"] != float64(200) || !(p50 > 0 && p50 <= p99) {
			t.Errorf("record %v", r)
		}
	}
	if len(seen) != 3 || !seen["direct"] || !seen["gateways"] || !seen["naive"] {
		t.Fatalf("want direct, gateways and naive records:\n%s", p.output())
	}
}
