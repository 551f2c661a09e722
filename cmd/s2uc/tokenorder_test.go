package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"scistream/internal/localgw"
)

// TestRecordTokenOrder: the commands about one stream reach the
// gateways its local record names with the token in the usual order,
// not only the record's own token file. A stream wired by s2uc with
// SCISTREAM_TOKEN (so its record names no token file) is then shown,
// updated, watched and released with the token only in --token_file,
// only in SCISTREAM_TOKEN_FILE, or only in the configuration file's
// token_file. (The same of a stream the Python library made:
// python/tests/test_agree.py.)
func TestRecordTokenOrder(t *testing.T) {
	isolate(t)
	tok := localgw.NewToken()
	in, out := startGatewayToken(t, tok), startGatewayToken(t, tok)
	home := os.Getenv("SCISTREAM_HOME")
	tokFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokFile, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close() // the application: never reached, the stream is wired all the same
	port := ln.Addr().(*net.TCPAddr).Port
	uidLine := regexp.MustCompile(`(?m)^uid: (\S+)$`)

	for _, c := range []struct {
		name  string
		flags []string          // on each command about the stream
		env   map[string]string // while they run
		cfg   string            // the configuration file, if any
	}{
		{name: "--token_file", flags: []string{"--token_file", tokFile}},
		{name: "SCISTREAM_TOKEN_FILE", env: map[string]string{"SCISTREAM_TOKEN_FILE": tokFile}},
		{name: "configuration file", cfg: "token_file: " + tokFile + "\n"},
		{name: "configuration file, a side's key", cfg: "inbound_token_file: " + tokFile + "\noutbound_token_file: " + tokFile + "\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := filepath.Join(home, "config.yaml")
			os.Remove(cfg)
			t.Setenv("SCISTREAM_TOKEN", tok)
			stdout, stderr, code := s2uc(t, "stream", "--inbound_s2cs", in.Addr, "--inbound_server_cert", in.CertFile,
				"--outbound_s2cs", out.Addr, "--outbound_server_cert", out.CertFile, "--remote_ip", "127.0.0.1", "--receiver_ports", fmt.Sprint(port))
			if code != 0 {
				t.Fatalf("stream: exit %d, %s", code, stderr)
			}
			uid := uidLine.FindStringSubmatch(stdout)[1]
			rec, err := os.ReadFile(filepath.Join(home, "streams", uid+".json"))
			if err != nil || strings.Contains(string(rec), "token_file") {
				t.Fatalf("the record of a stream wired with SCISTREAM_TOKEN names a token file (%v):\n%s", err, rec)
			}
			t.Setenv("SCISTREAM_TOKEN", "")
			if c.cfg != "" {
				if err := os.WriteFile(cfg, []byte(c.cfg), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			run := func(args ...string) (string, string, int) {
				return s2uc(t, append(args, c.flags...)...)
			}
			stdout, stderr, code = run("status", uid)
			if code != 0 || !strings.Contains(stdout, uid+" on "+in.Addr+": inbound ") || !strings.Contains(stdout, uid+" on "+out.Addr+": outbound ") {
				t.Errorf("status: exit %d, stdout:\n%s\nstderr: %s", code, stdout, stderr)
			}
			stdout, stderr, code = run("update", uid, "--lease", "2h")
			if code != 0 || strings.Count(stdout, "updated "+uid) != 2 {
				t.Errorf("update: exit %d, stdout:\n%s\nstderr: %s", code, stdout, stderr)
			}
			stdout, stderr, code = run("watch", uid, "--count", "1", "--interval", "100ms")
			if code != 0 || strings.Count(stdout, "uid="+uid) != 2 || strings.Contains(stdout, "error") {
				t.Errorf("watch: exit %d, stdout:\n%s\nstderr: %s", code, stdout, stderr)
			}
			stdout, stderr, code = run("release", uid)
			if code != 0 || !strings.Contains(stdout, "released "+uid+" on "+in.Addr+" (inbound)") || !strings.Contains(stdout, "released "+uid+" on "+out.Addr+" (outbound)") {
				t.Errorf("release: exit %d, stdout:\n%s\nstderr: %s", code, stdout, stderr)
			}
		})
	}
}
