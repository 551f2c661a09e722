package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"scistream/internal/client"
)

// TestReleaseForgotten: a stream whose gateways no longer know it (its
// record names them, they answer not found: it expired and was pruned)
// is released already: exit 0, said on stdout, each gateway's answer on
// stderr; released once more, the record answers, when s2uc noted it.
func TestReleaseForgotten(t *testing.T) {
	isolate(t)
	g := startGateway(t)
	t.Setenv("SCISTREAM_TOKEN", g.token)
	const uid = "0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b6c"
	ss := client.Sessions{Dir: filepath.Join(os.Getenv("SCISTREAM_HOME"), "streams")}
	e := &client.Endpoint{S2CS: g.Addr, ServerCert: g.CertFile, Listeners: []string{"127.0.0.1:5100"}}
	if err := ss.Save(&client.Session{UID: uid, WAN: "tls", Secret: "s", Inbound: e, Outbound: e}); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := s2uc(t, "release", uid)
	if code != 0 || stdout != "stream "+uid+" already released (its gateways no longer know it)\n" ||
		strings.Count(stderr, " no longer knows "+uid+"\n") != 2 || !strings.HasPrefix(stderr, "s2uc: outbound gateway "+g.Addr+" no longer knows") {
		t.Errorf("release of a stream its gateways forgot: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	stdout, stderr, code = s2uc(t, "release", uid, "--output", "json")
	var j map[string]any
	if err := json.Unmarshal([]byte(stdout), &j); code != 0 || err != nil || j["already_released"] != true || j["released_at"] == nil || stderr != "" {
		t.Errorf("release again --output json: exit %d, %v (%v), stderr %q", code, j, err, stderr)
	}
	stdout, _, code = s2uc(t, "release", uid)
	if !regexp.MustCompile(`^stream `+uid+` already released \(at [-0-9]+ [:0-9]+\)\n$`).MatchString(stdout) || code != 0 {
		t.Errorf("release again: exit %d, stdout %q", code, stdout)
	}
}
