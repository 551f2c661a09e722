package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"scistream/internal/cliflag"
	"scistream/internal/gateway"
	"scistream/internal/intake"
	"scistream/internal/localgw"
	"scistream/internal/version"
	"scistream/internal/waitfor"
)

// TestBadFlags: every refused command line gives exit status 2 and one
// line on stderr that names the flag, and touches nothing on disk.
func TestBadFlags(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	base := []string{"--state_dir", state, "--insecure_no_auth"}
	for _, c := range []struct {
		args    []string
		mention string
	}{
		{nil, "--listener_ip is required"},
		{[]string{"--listener_ip", "1.2.3"}, `--listener_ip "1.2.3" is not an IP address`},
		{[]string{"--listener_ip", "127.0.0.1", "--bind", "localhost"}, `--bind "localhost" is not an IP address`},
		{[]string{"--listener_ip", "127.0.0.1", "--type", "zerocopy"}, `--type "zerocopy" is not an engine`},
		{[]string{"--listener_ip", "127.0.0.1", "--buffer_size", "1KiB"}, "--buffer_size 1024 bytes out of range"},
		{[]string{"--listener_ip", "127.0.0.1", "--buffer_size", "lots"}, `--buffer_size "lots"`},
		{[]string{"--listener_ip", "127.0.0.1", "--port_range", "9-8"}, "--port_range"},
		{[]string{"--listener_ip", "127.0.0.1", "--pending_timeout", "0s"}, "--pending_timeout must be positive"},
		{[]string{"--listener_ip", "127.0.0.1", "--app_wait_default", "-1s"}, "--app_wait_default -1s is negative"},
		{[]string{"--listener_ip", "127.0.0.1", "--app_wait_default", "1500ms"}, "--app_wait_default 1.5s is not a whole number of seconds"},
		{[]string{"--listener_ip", "127.0.0.1", "--app_wait_max", "48h"}, "--app_wait_max 48h0m0s is longer than a day"},
		{[]string{"--listener_ip", "127.0.0.1", "--app_wait_default", "1h"}, "--app_wait_default 1h0m0s exceeds the longest wait a stream may have (10m0s)"},
		{[]string{"--listener_ip", "127.0.0.1", "--app_wait_max", "0s"}, "--app_wait_default 30s exceeds the longest wait a stream may have (0s)"},
		{[]string{"--listener_ip", "127.0.0.1", "--resume_window", "-5s"}, "--resume_window -5s is negative: give a duration such as 30s, or 0s for connections not to wait"},
		{[]string{"--listener_ip", "127.0.0.1", "--resume_window_max", "-1s"}, "--resume_window_max -1s is negative"},
		{[]string{"--listener_ip", "127.0.0.1", "--resume_window", "2500ms"}, "--resume_window 2.5s is not a whole number of seconds: give e.g. 30s"},
		{[]string{"--listener_ip", "127.0.0.1", "--resume_window_max", "90500ms"}, "--resume_window_max 1m30.5s is not a whole number of seconds"},
		{[]string{"--listener_ip", "127.0.0.1", "--resume_window_max", "25h"}, "--resume_window_max 25h0m0s is longer than a day: give at most 24h"},
		{[]string{"--listener_ip", "127.0.0.1", "--resume_window", "11m"}, "--resume_window 11m0s exceeds --resume_window_max 10m0s, the longest window a stream may have: lower it, or raise --resume_window_max"},
		{[]string{"--listener_ip", "127.0.0.1", "--resume_window_max", "0s"}, "--resume_window 30s exceeds --resume_window_max 0s"},
		{[]string{"--listener_ip", "127.0.0.1", "--resume_conn_buffer", "1KiB"}, "--resume_conn_buffer 1024 bytes is out of range: give 64KiB to 1GiB (the default is 16MiB)"},
		{[]string{"--listener_ip", "127.0.0.1", "--resume_conn_buffer", "2GiB"}, "--resume_conn_buffer 2147483648 bytes is out of range"},
		{[]string{"--listener_ip", "127.0.0.1", "--resume_conn_buffer", "0"}, "--resume_conn_buffer 0: give at least 64KiB (the default is 16MiB)"},
		{[]string{"--listener_ip", "127.0.0.1", "--resume_conn_buffer", "lots"}, `--resume_conn_buffer "lots"`},
		{[]string{"--listener_ip", "127.0.0.1", "--resume_buffer", "0B"}, "--resume_buffer 0: give at least --resume_conn_buffer (the default is 1GiB)"},
		{[]string{"--listener_ip", "127.0.0.1", "--resume_buffer", "8MiB"}, "--resume_buffer 8MiB is less than --resume_conn_buffer 16MiB, one connection's: raise it, or lower --resume_conn_buffer"},
		{[]string{"--listener_ip", "127.0.0.1", "--resume_buffer", "-1GiB"}, `--resume_buffer "-1GiB"`},
		{[]string{"--listener_ip", "127.0.0.1", "--quota_ports", "0"}, "--quota_ports 0: give at least 1"},
		{[]string{"--listener_ip", "127.0.0.1", "--quota_streams", "-3"}, "--quota_streams -3: give at least 1"},
		{[]string{"--listener_ip", "127.0.0.1", "--port", "5150"}, "--port 5150 lies inside --port_range"},
		{[]string{"--listener_ip", "127.0.0.1", "--port", "70000"}, "--port 70000 out of range"},
		{[]string{"--listener_ip", "127.0.0.1", "--server_crt", "x.pem"}, "give both --server_crt and --server_key"},
		{[]string{"--listener_ip", "127.0.0.1", "--log_format", "xml"}, `--log_format "xml"`},
		{[]string{"--listener_ip", "127.0.0.1", "--tokens", "t"}, "--insecure_no_auth and --tokens exclude each other"},
		{[]string{"--listener_ip", "127.0.0.1", "--max_active_conns", "-5"}, "--max_active_conns -5: give a positive count"},
		{[]string{"--listener_ip", "127.0.0.1", "--max_active_conns", "600000000"}, "--max_active_conns 600000000 needs 1200001736 open files"},
		{[]string{"--listener_ip", "127.0.0.1", "--capacity_rate", "10 Gigs"}, `--capacity_rate "10 Gigs": unknown unit`},
		{[]string{"--listener_ip", "127.0.0.1", "--capacity_rate", "-1G"}, `--capacity_rate "-1G": no number`},
		{[]string{"--listener_ip", "127.0.0.1", "--quota_rate", "20T"}, `--quota_rate "20T": more than 10 Tbit/s`},
		{[]string{"--listener_ip", "127.0.0.1", "--capacity_streams", "-1"}, "--capacity_streams -1 is negative"},
		{[]string{"--listener_ip", "127.0.0.1", "--capacity_conns", "-1"}, "--capacity_conns -1 is negative"},
		{[]string{"--listener_ip", "127.0.0.1", "--lease_default", "0s"}, "--lease_default 0s: give a positive duration"},
		{[]string{"--listener_ip", "127.0.0.1", "--lease_max", "90m", "--lease_default", "2h"}, "--lease_default 2h0m0s exceeds the longest lease (1h30m0s)"},
		{[]string{"--listener_ip", "127.0.0.1", "--lease_max", "1500ms"}, "--lease_max 1.5s is not a positive whole number of seconds"},
		{[]string{"--listener_ip", "127.0.0.1", "--allow_targets", "10.0.0.1/8"}, "--allow_targets: 10.0.0.1/8 has bits set past its length: did you mean 10.0.0.0/8?"},
		{[]string{"--listener_ip", "127.0.0.1", "--allow_targets", "10.0.0.0/8,"}, "--allow_targets \"10.0.0.0/8,\" holds an empty entry"},
		{[]string{"--listener_ip", "127.0.0.1", "--allow_peers", "gw.example.org"}, `--allow_peers: "gw.example.org" is neither a CIDR prefix nor an address`},
		{[]string{"--listener_ip", "127.0.0.1", "--wan_port", "8443", "--wan_proxy_protocol"}, "--wan_proxy_from is required with the PROXY protocol: list the addresses of the routers"},
		{[]string{"--listener_ip", "127.0.0.1", "--wan_port", "8443", "--wan_proxy_from", "10.0.0.1"}, "--wan_proxy_from applies to the PROXY protocol only"},
		{[]string{"--listener_ip", "127.0.0.1", "--frobnicate"}, "unknown flag --frobnicate (s2cs --help lists the flags)"},
		{[]string{"--listner_ip", "127.0.0.1"}, "unknown flag --listner_ip: did you mean --listener_ip? (s2cs --help lists the flags)"},
		{[]string{"--listener_ip", "127.0.0.1", "--port-rnage", "1-2"}, "did you mean --port_range?"},
		{[]string{"--listener_ip", "127.0.0.1", "stray"}, `unexpected argument "stray"`},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			refused(t, state, append(append([]string{}, base...), c.args...), c.mention)
		})
	}
}

// refused runs s2cs with args and checks that it refuses them as
// TestBadFlags says: exit status 2, one line naming mention, and no
// state directory.
func refused(t *testing.T, state string, args []string, mention string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), args, &stdout, &stderr)
	if err == nil {
		t.Fatal("run accepted the command line")
	}
	var msg bytes.Buffer
	if code := exitCode(err, &msg); code != 2 {
		t.Errorf("exit status %d, want 2", code)
	}
	line := msg.String()
	if !strings.HasPrefix(line, "s2cs: ") || strings.Count(line, "\n") != 1 || !strings.Contains(line, mention) {
		t.Errorf("message %q; want one line \"s2cs: ...\" mentioning %q", line, mention)
	}
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Errorf("a refused command line created the state directory (stat: %v)", err)
	}
}

// TestAppWaitFlags: on the command line 0s means "do not wait", which
// the gateway's Config spells negative (its zero is the default).
func TestAppWaitFlags(t *testing.T) {
	for _, c := range []struct {
		args      []string
		def, most time.Duration
	}{
		{nil, intake.DefaultAppWait, intake.DefaultAppWaitMax},
		{[]string{"--app_wait_default", "0s"}, -1, intake.DefaultAppWaitMax},
		{[]string{"--app-wait-default", "0s", "--app_wait_max", "0"}, -1, -1},
		{[]string{"--app_wait_default", "2m", "--app_wait_max", "1h"}, 2 * time.Minute, time.Hour},
	} {
		o, err := parseFlags(append([]string{"--listener_ip", "127.0.0.1"}, c.args...), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := o.config()
		if err != nil || cfg.AppWaitDefault != c.def || cfg.AppWaitMax != c.most {
			t.Errorf("%v: AppWaitDefault %s, AppWaitMax %s, %v; want %s, %s", c.args, cfg.AppWaitDefault, cfg.AppWaitMax, err, c.def, c.most)
		}
	}
}

// TestResumeFlags: the resume flags reach gateway.Config.Resume; on the
// command line 0s means "do not wait", which the gateway's Config spells
// negative (its zero is the default), and the byte sizes read as
// --buffer_size's do.
func TestResumeFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want gateway.Resume
	}{
		{nil, gateway.Resume{Window: 30 * time.Second, WindowMax: 10 * time.Minute, ConnBuffer: 16 << 20, Buffer: 1 << 30, MaxStripe: 8}},
		{[]string{"--resume_window", "0s"}, gateway.Resume{Window: -1, WindowMax: 10 * time.Minute, ConnBuffer: 16 << 20, Buffer: 1 << 30, MaxStripe: 8}},
		{[]string{"--resume-window", "0", "--resume_window_max", "0s"}, gateway.Resume{Window: -1, WindowMax: -1, ConnBuffer: 16 << 20, Buffer: 1 << 30, MaxStripe: 8}},
		{[]string{"--resume_window", "2m", "--resume_window_max", "1h", "--resume_conn_buffer", "64KiB", "--resume_buffer", "10 MB"},
			gateway.Resume{Window: 2 * time.Minute, WindowMax: time.Hour, ConnBuffer: 64 << 10, Buffer: 10e6, MaxStripe: 8}},
		{[]string{"--max_stripe", "1"}, gateway.Resume{Window: 30 * time.Second, WindowMax: 10 * time.Minute, ConnBuffer: 16 << 20, Buffer: 1 << 30, MaxStripe: 1}},
	} {
		o, err := parseFlags(append([]string{"--listener_ip", "127.0.0.1"}, c.args...), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := o.config()
		if err != nil || cfg.Resume != c.want {
			t.Errorf("%v: Resume %+v, %v; want %+v", c.args, cfg.Resume, err, c.want)
		}
	}
	for _, bad := range []string{"0", "17", "-1"} {
		o, err := parseFlags([]string{"--listener_ip", "127.0.0.1", "--max_stripe", bad}, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := o.config(); err == nil || !strings.Contains(err.Error(), "--max_stripe "+bad+" is out of range") {
			t.Errorf("--max_stripe %s: %v, want out of range", bad, err)
		}
	}
}

// TestHelp: --help, -h and -help print the usage on stdout (to be
// paged or grepped: s2cs --help | grep tls), nothing on stderr, and exit
// 0; the usage lists every flag once, under the heading of its group,
// without the kebab-case aliases, each default once and as the flag
// takes it.
func TestHelp(t *testing.T) {
	for _, arg := range []string{"--help", "-h", "-help"} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), []string{arg}, &stdout, &stderr)
		if !errors.Is(err, flag.ErrHelp) {
			t.Fatalf("%s: run = %v, want flag.ErrHelp", arg, err)
		}
		var msg bytes.Buffer
		if code := exitCode(err, &msg); code != 0 || msg.Len() != 0 {
			t.Fatalf("%s: exit status %d, message %q; want 0 and no error line", arg, code, msg.String())
		}
		if stderr.Len() != 0 {
			t.Fatalf("%s: wrote to stderr:\n%s", arg, stderr.String())
		}
		usage := stdout.String()
		if !strings.HasPrefix(usage, "usage: s2cs --listener_ip=IP") {
			t.Fatalf("%s: usage does not begin with the usage line:\n%s", arg, usage)
		}
		if strings.Contains(usage, "alias of") { // and checkHelpLayout finds no entry but the groups' flags
			t.Fatalf("%s: usage lists the kebab-case aliases:\n%s", arg, usage)
		}
		checkHelpLayout(t, usage)
	}
}

// checkHelpLayout checks s2cs's usage against flagGroups: each group's
// title a heading line, in order; under each, exactly its flags, in its
// order; every entry's default said at most once, never quoted when a
// number or duration, never a zero value.
func checkHelpLayout(t *testing.T, usage string) {
	t.Helper()
	type entry struct{ heading, text string }
	var headings, order []string
	entries := map[string]*entry{}
	var cur *entry
	heading := ""
	for _, line := range strings.Split(usage, "\n") {
		switch {
		case strings.HasPrefix(line, "  --"):
			name := strings.Fields(line)[0][2:]
			if entries[name] != nil {
				t.Errorf("--%s listed twice", name)
			}
			cur = &entry{heading: heading, text: line + "\n"}
			entries[name] = cur
			order = append(order, name)
		case strings.TrimLeft(line, " \t") != line && cur != nil: // the usage below the name
			cur.text += line + "\n"
		case strings.HasSuffix(line, ":") && !strings.HasPrefix(line, " "):
			heading = strings.TrimSuffix(line, ":")
			headings = append(headings, heading)
			cur = nil
		}
	}
	var titles, want []string
	for _, g := range flagGroups() {
		titles = append(titles, g.Title)
		want = append(want, g.Flags...)
		for _, name := range g.Flags {
			if e := entries[name]; e == nil || e.heading != g.Title {
				t.Errorf("--%s is not under the heading %q: %+v", name, g.Title, e)
			}
		}
	}
	if !slices.Equal(headings, titles) {
		t.Errorf("headings %q; want the groups' titles %q", headings, titles)
	}
	if !slices.Equal(order, want) {
		t.Errorf("flags listed in the order\n%v\nwant the groups'\n%v", order, want)
	}
	quoted := regexp.MustCompile(`\(default "[0-9]`)
	for name, e := range entries {
		switch text := e.text; {
		case strings.Count(text, "(default") > 1:
			t.Errorf("--%s says its default twice:\n%s", name, text)
		case quoted.MatchString(text):
			t.Errorf("--%s quotes a number or a duration:\n%s", name, text)
		case strings.Contains(text, "(default 0s)") || strings.Contains(text, "(default false)") || strings.Contains(text, `(default "")`):
			t.Errorf("--%s prints a zero default:\n%s", name, text)
		}
	}
	for name, want := range map[string]string{
		"port":           "(default 5000)",
		"lease_max":      "(default 168h)",
		"takeover":       "at least 4s\n        (default 10s)\n",
		"type":           "(default splice)",
		"capacity_conns": "(0: no bound but\n        the ports)\n",
	} {
		// The layout wraps at 80 columns: compare words, not lines.
		if e := entries[name]; e == nil || !strings.Contains(strings.Join(strings.Fields(e.text), " "), strings.Join(strings.Fields(want), " ")) {
			t.Errorf("--%s lacks %q: %+v", name, want, e)
		}
	}
}

// TestFlagGroups: every flag of s2cs is in exactly one group of
// flagGroups, which --help and --print_config are laid out by, and each
// group names flags only (no alias, no flag that went away).
func TestFlagGroups(t *testing.T) {
	if err := cliflag.CheckGroups(new(options).flagSet(), flagGroups()); err != nil {
		t.Fatal(err)
	}
}

// TestBadFlagIsShort: a flag s2cs does not have, or a value its flag
// refuses, is one line on stderr that says where the flags are listed
// (exit status 2), not the usage: the usage is for --help.
func TestBadFlagIsShort(t *testing.T) {
	for _, args := range [][]string{{"--frobnicate"}, {"--port", "http"}, {"--listener_ip"}} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), args, &stdout, &stderr)
		var msg bytes.Buffer
		if code := exitCode(err, &msg); code != 2 {
			t.Errorf("%v: exit status %d, want 2", args, code)
		}
		if stdout.Len() != 0 || stderr.Len() != 0 {
			t.Errorf("%v: printed more than the error:\nstdout:\n%s\nstderr:\n%s", args, stdout.String(), stderr.String())
		}
		if line := msg.String(); strings.Count(line, "\n") != 1 || !strings.HasSuffix(line, "(s2cs --help lists the flags)\n") {
			t.Errorf("%v: message %q; want one line that points to s2cs --help", args, line)
		}
	}
}

func TestVersion(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"--version"}, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	if out := stdout.String(); !strings.HasPrefix(out, "s2cs "+version.Version+" (commit ") || strings.Count(out, "\n") != 1 {
		t.Fatalf("--version printed %q", out)
	}
}

// TestServe runs the daemon in-process as a user would start it: it
// generates its certificate, answers /healthz over TLS, and stops cleanly
// when its context ends.
func TestServe(t *testing.T) {
	dir := t.TempDir()
	s := serve(t, []string{"--listener_ip", localgw.RandomLoopback(), "--port", "0", "--port_range", "5100-5101",
		"--state_dir", dir, "--insecure_no_auth", "--log_format", "json"})
	var certLine string
	for _, line := range s.stdout {
		if strings.Contains(line, "self-signed certificate") {
			certLine = line
		}
	}
	if !strings.Contains(certLine, filepath.Join(dir, "s2cs.crt")) {
		t.Errorf("certificate line %q does not name the generated file", certLine)
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	defer hc.CloseIdleConnections()
	waitfor.Must(t, 15*time.Second, "/healthz to answer ok", func() bool {
		resp, err := hc.Get("https://" + s.addr + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var health struct{ Status string }
		json.NewDecoder(resp.Body).Decode(&health)
		return resp.StatusCode == http.StatusOK && health.Status == "ok"
	})
	if err := s.stop(t); err != nil {
		t.Fatalf("run after its context ended = %v", err)
	}
	if !strings.Contains(s.stderr.String(), `"msg":"INSECURE: --insecure_no_auth is set`) {
		t.Errorf("no warning for --insecure_no_auth in the log:\n%s", s.stderr.String())
	}
}

// TestDaemonDependencies: the daemon, and every package it imports, stay
// free of the benchmark and test-harness packages; a facility's gateway
// must not carry (or break with) the tools that measure it.
func TestDaemonDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", "scistream/cmd/s2cs").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	if !slices.Contains(deps, "scistream/internal/gateway") {
		t.Fatalf("go list -deps of s2cs lacks internal/gateway: %v", deps)
	}
	for _, forbidden := range []string{"scistream/internal/bench", "scistream/internal/netbed", "scistream/internal/localgw", "scistream/internal/waitfor", "scistream/internal/oidctest"} {
		if slices.Contains(deps, forbidden) {
			t.Errorf("the daemon depends on %s", forbidden)
		}
	}
}

// TestFileLimitRaised: started with a soft limit of open files below its
// hard limit, s2cs runs with the soft limit raised to one below the hard
// one (the Go runtime does it at start, since Go 1.19: one below, so that
// it can tell a later prlimit from its own change), as /proc says, and
// plans its connections on that: the start-up line names it.
func TestFileLimitRaised(t *testing.T) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Max <= 1024 {
		t.Skipf("hard limit of open files %d: nothing to raise a soft 1024 to", lim.Max)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "s2cs")
	if out, err := exec.Command("go", "build", "-o", bin, "scistream/cmd/s2cs").CombinedOutput(); err != nil {
		t.Fatalf("go build s2cs: %v\n%s", err, out)
	}
	cmd := exec.Command("sh", "-c", `ulimit -Sn 1024 && exec "$0" "$@"`, bin, "--listener_ip", localgw.RandomLoopback(), "--port", "0",
		"--state_dir", filepath.Join(dir, "state"), "--insecure_no_auth")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}()
	var plan string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "s2cs: open files: ") {
			plan = sc.Text()
			break
		}
	}
	go io.Copy(io.Discard, out)
	if want := fmt.Sprintf("s2cs: open files: limit %d; ", lim.Max-1); !strings.HasPrefix(plan, want) {
		t.Fatalf("start-up line %q, want it to begin %q", plan, want)
	}
	limits, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	want := regexp.MustCompile(fmt.Sprintf(`(?m)^Max open files +%d +%d +files`, lim.Max-1, lim.Max))
	if !want.Match(limits) {
		t.Errorf("s2cs's /proc limits, want soft %d, hard %d open files:\n%s", lim.Max-1, lim.Max, limits)
	}
}
