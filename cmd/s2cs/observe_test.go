package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestObserveFlags: a refused --metrics_listen, --rate_interval or
// --rate_window is one line naming the flag and the fix, with exit
// status 2 and nothing opened or written.
func TestObserveFlags(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	for _, c := range []struct {
		args    []string
		mention string
	}{
		{[]string{"--rate_interval", "0s"}, "--rate_interval 0s: give a positive duration"},
		{[]string{"--rate_window", "-1m"}, "--rate_window -1m0s: give a positive duration"},
		{[]string{"--rate_interval", "1ms"}, "--rate_interval 1ms is too short: give 10ms to 1m0s"},
		{[]string{"--rate_interval", "2m"}, "--rate_interval 2m0s is too long"},
		{[]string{"--rate_interval", "10ms", "--rate_window", "1h"}, "--rate_window 1h0m0s holds 360000 samples of 10ms, more than 3600"},
		{[]string{"--rate_interval", "5s", "--rate_window", "1s"}, "--rate_window 1s is shorter than the sampling interval (5s)"},
		{[]string{"--metrics_listen", "localhost:9464"}, `--metrics_listen "localhost:9464": "localhost" is not an IP address`},
		{[]string{"--metrics_listen", "9464"}, `--metrics_listen "9464": not HOST:PORT`},
		{[]string{"--metrics_listen", "127.0.0.1:99999"}, `--metrics_listen "127.0.0.1:99999": port "99999" is not 0-65535`},
	} {
		args := append([]string{"--state_dir", state, "--insecure_no_auth", "--listener_ip", "127.0.0.1"}, c.args...)
		var stdout, stderr, msg bytes.Buffer
		err := run(context.Background(), args, &stdout, &stderr)
		if code := exitCode(err, &msg); code != 2 || strings.Count(msg.String(), "\n") != 1 || !strings.Contains(msg.String(), c.mention) {
			t.Errorf("%v: exit %d, %q; want 2 and one line mentioning %q", c.args, code, msg.String(), c.mention)
		}
		if _, err := os.Stat(state); !os.IsNotExist(err) {
			t.Errorf("%v: a refused command line created the state directory", c.args)
		}
	}
}
