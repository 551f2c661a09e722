package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"scistream/internal/api"
	"scistream/internal/waitfor"
)

// TestResumeWindowWired: --resume_window reaches both sides of a stream
// s2uc stream wires between two real gateways, and status says what the
// gateways say of it once a connection has passed: a stream that asks
// for 0 has resume off on both sides, one that asks for nothing resumes
// up to the gateways' default; inbound-request and outbound-request give
// each side its own; above the gateway's maximum is refused, naming the
// maximum and the operator's flag.
func TestResumeWindowWired(t *testing.T) {
	isolate(t)
	in := startGateway(t)
	out := startGatewayToken(t, in.token)
	tok := filepath.Join(t.TempDir(), "tok")
	if err := os.WriteFile(tok, []byte(in.token), 0o600); err != nil {
		t.Fatal(err)
	}
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				c.SetDeadline(time.Now().Add(time.Minute))
				io.Copy(c, c)
				c.Close()
			}()
		}
	}()
	defer func() { echo.Close(); wg.Wait() }()
	port := fmt.Sprint(echo.Addr().(*net.TCPAddr).Port)
	gws := []string{"--inbound_s2cs", in.Addr, "--inbound_server_cert", in.CertFile, "--outbound_s2cs", out.Addr, "--outbound_server_cert", out.CertFile,
		"--token_file", tok, "--remote_ip", "127.0.0.1", "--receiver_ports", port, "--allow", "127.0.0.0/8"}
	// through sends a line through listener and reads it back.
	through := func(listener string) {
		t.Helper()
		c, err := net.DialTimeout("tcp", listener, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(20 * time.Second))
		msg := []byte("hello over a framed leg\n")
		c.Write(msg)
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(c, got); err != nil || string(got) != string(msg) {
			t.Fatalf("echo through %s: %q, %v", listener, got, err)
		}
	}
	type wired struct {
		UID               string `json:"uid"`
		Listeners         []string
		Inbound, Outbound api.Stream
	}
	wire := func(extra ...string) wired {
		t.Helper()
		stdout, stderr, code := s2uc(t, append(append([]string{"stream", "--output", "json"}, gws...), extra...)...)
		if code != 0 {
			t.Fatalf("s2uc stream %v: exit %d, %s", extra, code, stderr)
		}
		var w wired
		if err := json.Unmarshal([]byte(stdout), &w); err != nil {
			t.Fatalf("s2uc stream --output json: %v\n%s", err, stdout)
		}
		return w
	}
	window := func(s api.Stream) string {
		if s.ResumeWindowS == nil {
			return "absent"
		}
		return fmt.Sprint(*s.ResumeWindowS)
	}
	// statusSays waits until s2uc status of uid says want on each side
	// (the resume mode comes with the first WAN leg).
	statusSays := func(uid, want string) {
		t.Helper()
		var stdout string
		if !waitfor.Cond(20*time.Second, func() bool {
			stdout, _, _ = s2uc(t, "status", uid)
			return strings.Count(stdout, "\n  "+want+"\n") == 2
		}) {
			t.Errorf("s2uc status of %s, want %q on both sides:\n%s", uid, want, stdout)
		}
	}

	off := wire("--resume_window", "0")
	if window(off.Inbound) != "0" || window(off.Outbound) != "0" {
		t.Errorf("--resume_window 0: the sides' resume_window_s %s and %s, want 0 and 0", window(off.Inbound), window(off.Outbound))
	}
	through(off.Listeners[0])
	statusSays(off.UID, "resume off (the stream's resume window is 0)")

	def := wire()
	if window(def.Inbound) != "30" || window(def.Outbound) != "30" {
		t.Errorf("no --resume_window: the sides' resume_window_s %s and %s, want the default, 30 and 30", window(def.Inbound), window(def.Outbound))
	}
	through(def.Listeners[0])
	statusSays(def.UID, "resume on (up to 30s)")

	// Each side its own, by the two-step commands.
	stdout, stderr, code := s2uc(t, "inbound-request", "--s2cs", in.Addr, "--server_cert", in.CertFile, "--token_file", tok,
		"--remote_ip", "127.0.0.1", "--receiver_ports", port, "--resume_window", "45s", "--output", "json")
	if code != 0 {
		t.Fatalf("inbound-request --resume_window 45s: exit %d, %s", code, stderr)
	}
	var inS api.Stream
	if err := json.Unmarshal([]byte(stdout), &inS); err != nil || window(inS) != "45" {
		t.Fatalf("inbound-request --resume_window 45s: resume_window_s %s (%v), want 45", window(inS), err)
	}
	stdout, stderr, code = s2uc(t, "outbound-request", "--s2cs", out.Addr, "--server_cert", out.CertFile, "--token_file", tok,
		"--allow", "127.0.0.0/8", "--resume_window", "2m", "--output", "json", inS.UID)
	var outS api.Stream
	if code != 0 || json.Unmarshal([]byte(stdout), &outS) != nil || window(outS) != "120" {
		t.Fatalf("outbound-request --resume_window 2m: exit %d, resume_window_s %s, %s; want 120", code, window(outS), stderr)
	}

	// Above the gateways' maximum (10m by default): refused by the
	// inbound gateway, nothing left behind.
	args := append(append([]string{"stream"}, gws...), "--resume_window", "11m")
	stdout, stderr, code = s2uc(t, args...)
	checkExit(t, args, stdout, stderr, code, exitUsage, "resume_window_s 660 exceeds this gateway's maximum of 600 seconds: give 0 to 600, or ask the operator to raise s2cs --resume_window_max")
	stdout, _, _ = s2uc(t, "list", "--s2cs", in.Addr, "--server_cert", in.CertFile, "--token_file", tok)
	if n := strings.Count(stdout, "\n") - 1; n != 3 { // a heading, and the three streams above
		t.Errorf("after the refused stream, the inbound gateway lists %d streams, want 3:\n%s", n, stdout)
	}
}
