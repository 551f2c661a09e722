package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"scistream/internal/cliflag/cliflagtest"
	"scistream/internal/localgw"
	"scistream/internal/version"
	"scistream/internal/waitfor"
)

// s2csBin and s2ucBin are built once by TestMain, for the tests that
// start real gateways or run s2uc as a process.
var s2csBin, s2ucBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "s2uc-test-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	s2csBin, s2ucBin = filepath.Join(dir, "s2cs"), filepath.Join(dir, "s2uc")
	if out, err := exec.Command("go", "build", "-o", dir+"/", "scistream/cmd/s2cs", "scistream/cmd/s2uc").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build s2cs s2uc: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// testGateway is a real s2cs on a loopback address of its own, with a
// token file that knows alice.
type testGateway struct {
	*localgw.Gateway
	token string // alice's
}

func startGateway(t *testing.T) *testGateway {
	t.Helper()
	return startGatewayToken(t, localgw.NewToken())
}

// startGatewayToken is startGateway with alice's token tok (the same on
// several gateways: one token file serves them all).
func startGatewayToken(t *testing.T, tok string) *testGateway {
	t.Helper()
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	if err := localgw.WriteTokens(tokens, map[string]string{"alice": tok}); err != nil {
		t.Fatal(err)
	}
	g, err := localgw.Start(context.Background(), localgw.Options{S2CS: s2csBin, ListenerIP: localgw.RandomLoopback(),
		StateDir: filepath.Join(dir, "state"), TokensFile: tokens, PortRange: "5100-5109"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Stop() })
	return &testGateway{Gateway: g, token: tok}
}

// s2ucProc runs the s2uc binary with args and env added to this
// process's environment, and returns stdout, stderr and exit status.
func s2ucProc(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(s2ucBin, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return stdout.String(), stderr.String(), 0
	case errors.As(err, &ee):
		return stdout.String(), stderr.String(), ee.ExitCode()
	}
	t.Fatalf("s2uc %v: %v", args, err)
	return "", "", -1
}

// TestExitStatuses runs the real s2uc against a real gateway: each kind
// of failure has its own exit status, as the help's footer lists them,
// and under --output json its error is one JSON object on stderr with
// the gateway's code, the message and the id of the refused request.
func TestExitStatuses(t *testing.T) {
	isolate(t)
	g := startGateway(t)
	home := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := ln.Addr().String()
	ln.Close()
	const unknownUID = "0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b6c"
	gw := []string{"--s2cs", g.Addr, "--server_cert", g.CertFile}
	for _, c := range []struct {
		name   string
		token  string
		args   []string
		status int
		code   string // of the JSON error
		reqID  bool   // a request id in it
	}{
		{"mistyped flag", g.token, []string{"list", "--servr_cert", "x"}, exitUsage, "invalid_argument", false},
		{"bad token", "not-a-token", append([]string{"list"}, gw...), exitDenied, "unauthenticated", true},
		{"unknown stream", g.token, append([]string{"status", unknownUID}, gw...), exitNotFound, "not_found", true},
		{"no local record", g.token, []string{"release", unknownUID}, exitNotFound, "not_found", false},
		{"gateway down", g.token, []string{"list", "--s2cs", down, "--server_cert", g.CertFile}, exitUnavailable, "unavailable", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := []string{"SCISTREAM_HOME=" + home, "SCISTREAM_TOKEN=" + c.token} // no config.yaml there
			args := c.args
			stdout, stderr, code := s2ucProc(t, env, args...)
			if code != c.status || stdout != "" || strings.Count(stderr, "\n") != 1 || !strings.HasPrefix(stderr, "s2uc: ") {
				t.Errorf("s2uc %v: exit %d (want %d), stdout %q, stderr %q", args, code, c.status, stdout, stderr)
			}
			text := strings.TrimPrefix(strings.TrimSpace(stderr), "s2uc: ")
			stdout, stderr, code = s2ucProc(t, env, append(args, "--output", "json")...)
			var je struct {
				Code, Message, RequestID string
				ExitCode                 int `json:"exit_code"`
			}
			dec := json.NewDecoder(strings.NewReader(stderr))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&struct {
				Code      *string `json:"code"`
				Message   *string `json:"message"`
				RequestID *string `json:"request_id"`
				ExitCode  *int    `json:"exit_code"`
			}{&je.Code, &je.Message, &je.RequestID, &je.ExitCode}); err != nil || strings.Count(stderr, "\n") != 1 {
				t.Fatalf("--output json: stderr %q is not one JSON object (%v)", stderr, err)
			}
			if code != c.status || je.ExitCode != c.status || je.Code != c.code || stdout != "" || (je.RequestID != "") != c.reqID {
				t.Errorf("--output json: exit %d, %+v, stdout %q; want exit %d, code %s, a request id: %v", code, je, stdout, c.status, c.code, c.reqID)
			}
			reqID := regexp.MustCompile(`request \S+`)
			if reqID.ReplaceAllString(je.Message, "") != reqID.ReplaceAllString(text, "") {
				t.Errorf("--output json: message %q, text %q", je.Message, text)
			}
		})
	}
	// The table is in the help's footer.
	stdout, _, code := s2ucProc(t, nil, "--help")
	if code != 0 || !strings.Contains(stdout, "Exit status: 0 done; 1 other failure; 2 wrong command line (usage);") {
		t.Errorf("--help: exit %d, footer lacks the exit statuses:\n%s", code, stdout)
	}
}

// TestBinaryCompletionAndVersion: the real s2uc's bash script, loaded
// in bash, completes a command and a command's flag; version is a
// command as well as --version.
func TestBinaryCompletionAndVersion(t *testing.T) {
	isolate(t)
	script, stderr, code := s2ucProc(t, nil, "completion", "bash")
	if code != 0 {
		t.Fatalf("completion bash: exit %d, %s", code, stderr)
	}
	for _, c := range []struct{ words, want string }{
		{"s2uc outb", "outbound-request"},
		{"s2uc list --server", "--server_cert"},
		{"s2uc inbound_request --num", "--num_conn"},
		{"s2uc status --prof", "--profile"},
		{"s2uc completion f", "fish"},
		{"s2uc list --server_cert ", ""}, // a file: bash's own completion
	} {
		if got := cliflagtest.Line(t, script, "_s2uc", c.words); got != c.want {
			t.Errorf("%q completes to %q, want %q", c.words, got, c.want)
		}
	}
	for _, sh := range []string{"zsh", "fish"} {
		out, _, code := s2ucProc(t, nil, "completion", sh)
		if code != 0 || !strings.Contains(out, "outbound-request") || !strings.Contains(out, "server_cert") {
			t.Errorf("completion %s: exit %d\n%s", sh, code, out)
		}
	}
	if _, stderr, code := s2ucProc(t, nil, "completion", "tcsh"); code != exitUsage || !strings.Contains(stderr, "bash|zsh|fish") {
		t.Errorf("completion tcsh: exit %d, %s", code, stderr)
	}
	for _, args := range [][]string{{"version"}, {"--version"}, {"version", "--output", "text"}} {
		out, _, code := s2ucProc(t, nil, args...)
		if code != 0 || !strings.HasPrefix(out, "s2uc "+version.Version+" (commit ") || strings.Count(out, "\n") != 1 {
			t.Errorf("%v: exit %d, %q", args, code, out)
		}
	}
	// In JSON, for a workflow engine that checks what it runs: the same
	// release and commit as the line.
	line, _, _ := s2ucProc(t, nil, "version")
	out, stderr, code := s2ucProc(t, nil, "version", "--output", "json")
	var v struct {
		Version, Commit, Go string
		Modified            *bool
	}
	if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil {
		t.Fatalf("version --output json: exit %d, %v, stdout %q, stderr %q", code, err, out, stderr)
	}
	short := regexp.MustCompile(`\(commit (\w+)`).FindStringSubmatch(line)
	if v.Version != version.Version || v.Go != runtime.Version() || v.Modified == nil || short == nil || v.Commit == "" || !strings.HasPrefix(v.Commit, short[1]) {
		t.Errorf("version --output json: %+v; want version %s, go %s, the commit of %q", v, version.Version, runtime.Version(), line)
	}
	_, stderr, code = s2ucProc(t, nil, "version", "--output", "yaml")
	if code != exitUsage || !strings.Contains(stderr, `--output "yaml": use text or json`) {
		t.Errorf("version --output yaml: exit %d, %s", code, stderr)
	}
}

// TestConfigDefaults: with a default gateway in the configuration file
// (its certificate relative to the file, the token in a file), s2uc
// list needs no flag; a profile, the environment and the command line
// override it in that order; a bad file is a usage error naming it.
func TestConfigDefaults(t *testing.T) {
	isolate(t)
	g := startGateway(t)
	dir := t.TempDir()
	cert, err := os.ReadFile(g.CertFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "gw.crt"), cert, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte(g.token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := ln.Addr().String()
	ln.Close()
	config := filepath.Join(dir, "config.yaml")
	write := func(text string) {
		t.Helper()
		if err := os.WriteFile(config, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(fmt.Sprintf("s2cs: %s\nserver_cert: gw.crt\ntoken_file: %s\nprofiles:\n  away:\n    s2cs: %s\n", g.Addr, filepath.Join(dir, "token"), down))
	t.Setenv("SCISTREAM_CONFIG", config)

	stdout, stderr, code := s2uc(t, "list")
	if code != 0 || !strings.HasPrefix(stdout, "UID") {
		t.Fatalf("list with a default gateway: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if _, _, code := s2uc(t, "list", "--profile", "away"); code != exitUnavailable {
		t.Errorf("list --profile away (a gateway that is down): exit %d, want %d", code, exitUnavailable)
	}
	t.Setenv("SCISTREAM_PROFILE", "away")
	if _, _, code := s2uc(t, "list"); code != exitUnavailable {
		t.Errorf("SCISTREAM_PROFILE=away: exit %d, want %d", code, exitUnavailable)
	}
	if _, stderr, code := s2uc(t, "list", "--s2cs", g.Addr); code != 0 {
		t.Errorf("--s2cs over the profile: exit %d, %s", code, stderr)
	}
	t.Setenv("SCISTREAM_S2CS", g.Addr)
	if _, stderr, code := s2uc(t, "list"); code != 0 {
		t.Errorf("SCISTREAM_S2CS over the profile: exit %d, %s", code, stderr)
	}
	t.Setenv("SCISTREAM_OUTPUT", "json")
	if stdout, stderr, code := s2uc(t, "list"); code != 0 || !json.Valid([]byte(stdout)) {
		t.Errorf("SCISTREAM_OUTPUT=json: exit %d, stdout %q, %s", code, stdout, stderr)
	}
	if stdout, _, code := s2uc(t, "list", "--output", "text"); code != 0 || !strings.HasPrefix(stdout, "UID") {
		t.Errorf("--output text over SCISTREAM_OUTPUT: exit %d, stdout %q", code, stdout)
	}
	t.Setenv("SCISTREAM_OUTPUT", "")
	_, stderr, code = s2uc(t, "list", "--profile", "ornl")
	checkExit(t, []string{"list", "--profile", "ornl"}, "", stderr, code, exitUsage, "configuration file "+config+`: unknown profile "ornl": give one of away`)

	write("s2cs: " + g.Addr + "\nserver_crt: gw.crt\n")
	_, stderr, code = s2uc(t, "list")
	checkExit(t, []string{"list"}, "", stderr, code, exitUsage, "configuration file "+config+": line 2: server_crt: unknown key; did you mean server_cert?")
	t.Setenv("SCISTREAM_CONFIG", config+".typo")
	_, stderr, code = s2uc(t, "list")
	checkExit(t, []string{"list"}, "", stderr, code, exitUsage, "SCISTREAM_CONFIG names "+config+".typo, which does not exist: correct it, or unset SCISTREAM_CONFIG")
	t.Setenv("SCISTREAM_CONFIG", config)
	write("s2cs: " + g.Addr + "\n")
	os.Chmod(config, 0o666)
	_, stderr, code = s2uc(t, "list")
	checkExit(t, []string{"list"}, "", stderr, code, exitUsage, "configuration file "+config+" can be written by other users (mode 0666): chmod go-w "+config)
}

var nextLine = regexp.MustCompile(`(?m)^next: s2uc (.*)$`)

// TestWiringChecked wires a stream of two channels between two real
// gateways with s2uc as a user would: a port the inbound side never
// gave is refused, naming both; the next: line of inbound-request, run
// as printed, works; data flows; status shows both sides and the peer;
// with the outbound gateway stopped, status still shows the inbound
// side and says what failed of the other; once released, the UID is
// "released at T by alice", and a mistyped one gets "did you mean".
func TestWiringChecked(t *testing.T) {
	isolate(t)
	in, out := startGateway(t), startGateway(t)
	inTok, outTok := filepath.Join(t.TempDir(), "in"), filepath.Join(t.TempDir(), "out")
	os.WriteFile(inTok, []byte(in.token), 0o600)
	os.WriteFile(outTok, []byte(out.token), 0o600)
	// The consumer: echoes what it reads.
	consumer, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	var echoes sync.WaitGroup // the accept loop and each echo
	echoes.Add(1)
	go func() {
		defer echoes.Done()
		for {
			c, err := consumer.Accept()
			if err != nil {
				return
			}
			echoes.Add(1)
			go func() {
				defer echoes.Done()
				c.SetDeadline(time.Now().Add(time.Minute))
				io.Copy(c, c)
				c.Close()
			}()
		}
	}()
	defer func() { consumer.Close(); echoes.Wait() }()
	cport := consumer.Addr().(*net.TCPAddr).Port

	stdout, stderr, code := s2uc(t, "inbound-request", "--s2cs", in.Addr, "--server_cert", in.CertFile, "--token_file", inTok,
		"--remote_ip", "127.0.0.1", "--receiver_ports", fmt.Sprint(cport), "--num_conn", "2")
	if code != 0 {
		t.Fatalf("inbound-request: exit %d, %s", code, stderr)
	}
	m := nextLine.FindStringSubmatch(stdout)
	if m == nil {
		t.Fatalf("inbound-request printed no next: line:\n%s", stdout)
	}
	next := strings.Fields(m[1])
	uid := regexp.MustCompile(`(?m)^uid: (\S+)$`).FindStringSubmatch(stdout)[1]
	listeners := strings.Fields(regexp.MustCompile(`(?m)^listeners: (.+)$`).FindStringSubmatch(stdout)[1])
	if len(listeners) != 2 {
		t.Fatalf("listeners %v, want 2", listeners)
	}

	// A port the inbound side never gave: refused before any request,
	// naming both.
	host, _, _ := net.SplitHostPort(listeners[0])
	wrong := net.JoinHostPort(host, "5109") + "," + listeners[1]
	_, stderr, code = s2uc(t, "outbound-request", "--s2cs", out.Addr, "--server_cert", out.CertFile, "--token_file", outTok, "--num_conn", "2", uid, wrong)
	checkExit(t, []string{"outbound-request", wrong}, "", stderr, code, exitConflict, "the inbound listeners given, "+wrong+", are not those the inbound side of "+uid+" gave, "+strings.Join(listeners, ","))

	// The next: line, as printed, with the outbound gateway filled in.
	var args []string
	for _, a := range next {
		switch a {
		case "PRODUCER_GATEWAY:PORT":
			a = out.Addr
		case "FILE":
			a = out.CertFile
		}
		args = append(args, a)
	}
	args = append(args, "--token_file", outTok)
	stdout, stderr, code = s2uc(t, args...)
	if code != 0 {
		t.Fatalf("the next: line, s2uc %v: exit %d, %s", args, code, stderr)
	}
	olisteners := strings.Fields(regexp.MustCompile(`(?m)^listeners: (.+)$`).FindStringSubmatch(stdout)[1])
	for _, l := range olisteners {
		c, err := net.DialTimeout("tcp", l, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(20 * time.Second))
		msg := []byte("through " + l)
		c.Write(msg)
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("echo through %s: %q, %v", l, got, err)
		}
		c.Close()
	}
	waitfor.Must(t, 30*time.Second, "status to show both sides with the peer up", func() bool {
		stdout, _, code = s2uc(t, "status", uid)
		return code == 0 && strings.Count(stdout, ", peer gateway up") == 2
	})
	if !strings.Contains(stdout, uid+" on "+in.Addr+": inbound ") || !strings.Contains(stdout, uid+" on "+out.Addr+": outbound ") {
		t.Errorf("status lacks a side:\n%s", stdout)
	}

	// Released: the UID is answered with when and by whom; a mistyped
	// one gets the nearest s2uc has a record of.
	stdout, stderr, code = s2uc(t, "inbound-request", "--s2cs", in.Addr, "--server_cert", in.CertFile, "--token_file", inTok,
		"--remote_ip", "127.0.0.1", "--receiver_ports", fmt.Sprint(cport))
	if code != 0 {
		t.Fatalf("inbound-request: exit %d, %s", code, stderr)
	}
	gone := regexp.MustCompile(`(?m)^uid: (\S+)$`).FindStringSubmatch(stdout)[1]
	if _, stderr, code := s2uc(t, "release", gone); code != 0 {
		t.Fatalf("release: exit %d, %s", code, stderr)
	}
	for _, cmd := range []string{"status", "update", "watch"} {
		args := []string{cmd, gone}
		if cmd == "update" {
			args = append(args, "--lease", "1h")
		}
		_, stderr, code = s2uc(t, args...)
		checkExit(t, args, "", stderr, code, exitNotFound, "stream "+gone+" was released at ")
		if !strings.Contains(stderr, " by alice;") {
			t.Errorf("%s of a released stream: %q does not say by whom", cmd, stderr)
		}
	}
	// Released again: success, said as such, in text and in JSON.
	stdout, stderr, code = s2uc(t, "release", gone)
	if code != 0 || stderr != "" || !regexp.MustCompile(`^stream `+gone+` already released \(at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d by alice\)\n$`).MatchString(stdout) {
		t.Errorf("release of a released stream: exit %d, stdout %q, stderr %q; want exit 0, stream %s already released (at T by alice)", code, stdout, stderr, gone)
	}
	stdout, stderr, code = s2uc(t, "release", gone, "--output", "json")
	var again struct {
		UID             string            `json:"uid"`
		Released        []json.RawMessage `json:"released"`
		AlreadyReleased bool              `json:"already_released"`
		ReleasedAt      time.Time         `json:"released_at"`
		ReleasedBy      string            `json:"released_by"`
	}
	if err := json.Unmarshal([]byte(stdout), &again); code != 0 || err != nil || again.UID != gone || again.Released == nil || len(again.Released) != 0 ||
		!again.AlreadyReleased || again.ReleasedBy != "alice" || time.Since(again.ReleasedAt) > time.Hour || time.Since(again.ReleasedAt) < 0 {
		t.Errorf("release --output json of a released stream: exit %d, %+v (%v), stdout %s, stderr %q", code, again, err, stdout, stderr)
	}
	// With --s2cs, the gateway still holds the ended stream: already
	// released, said by the gateway.
	stdout, stderr, code = s2uc(t, "release", gone, "--s2cs", in.Addr, "--server_cert", in.CertFile, "--token_file", inTok)
	if code != 0 || !strings.HasPrefix(stdout, "stream "+gone+" already released (at ") || !strings.HasSuffix(stdout, " by alice)\n") {
		t.Errorf("release --s2cs of a released stream: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	// A UID that was never the caller's stays not found.
	never := "0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b6c"
	_, stderr, code = s2uc(t, "release", never, "--s2cs", in.Addr, "--server_cert", in.CertFile, "--token_file", inTok)
	checkExit(t, []string{"release", never, "--s2cs"}, "", stderr, code, exitNotFound, "no stream "+never)
	_, stderr, code = s2uc(t, "outbound-request", "--s2cs", out.Addr, "--server_cert", out.CertFile, gone, listeners[0])
	checkExit(t, []string{"outbound-request", gone}, "", stderr, code, exitNotFound, "stream "+gone+" was released at ")

	// One side down: the other is still shown, and the failure said.
	out.Stop()
	stdout, stderr, code = s2uc(t, "status", uid)
	if code != exitUnavailable || !strings.Contains(stdout, uid+" on "+in.Addr+": inbound ") || strings.Contains(stdout, out.Addr) ||
		!strings.HasPrefix(stderr, "s2uc: status on "+out.Addr+": ") || strings.Count(stderr, "\n") != 1 {
		t.Errorf("status with the outbound gateway down: exit %d, stdout:\n%s\nstderr: %s", code, stdout, stderr)
	}
	// In JSON, the side that did not answer says why, beside the other.
	stdout, stderr, code = s2uc(t, "status", uid, "--output", "json")
	var st struct {
		UID      string `json:"uid"`
		Gateways []struct {
			UID  string `json:"uid"`
			Role string `json:"role"`
		} `json:"gateways"`
		Inbound, Outbound struct {
			Gateway string     `json:"gateway"`
			Error   *jsonError `json:"error"`
		}
	}
	if err := json.Unmarshal([]byte(stdout), &st); err != nil || code != exitUnavailable || st.UID != uid ||
		len(st.Gateways) != 1 || st.Gateways[0].Role != "inbound" ||
		st.Inbound.Gateway != in.Addr || st.Inbound.Error != nil || st.Outbound.Gateway != out.Addr || st.Outbound.Error == nil ||
		st.Outbound.Error.Code != "unavailable" || st.Outbound.Error.ExitCode != exitUnavailable ||
		!strings.HasPrefix(st.Outbound.Error.Message, "status on "+out.Addr+": ") || !strings.Contains(stderr, `"exit_code":5`) {
		t.Errorf("status --output json with the outbound gateway down: exit %d, %+v (%v)\nstdout:\n%s\nstderr: %s", code, st, err, stdout, stderr)
	}
	waitfor.Must(t, 30*time.Second, "the inbound side to see its peer go", func() bool {
		stdout, _, _ = s2uc(t, "status", uid)
		return strings.Contains(stdout, uid+" on "+in.Addr+": inbound ") && !strings.Contains(stdout, ", peer gateway up")
	})

	typo := uid[:len(uid)-1] + string("0123456789abcdef"[(strings.IndexByte("0123456789abcdef", uid[len(uid)-1])+1)%16])
	_, stderr, code = s2uc(t, "status", typo)
	checkExit(t, []string{"status", typo}, "", stderr, code, exitNotFound, "no local record of stream "+typo+": did you mean "+uid+"?")
}
