package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"scistream/internal/subcmd"
	"scistream/internal/version"
)

// s2uc runs s2uc in process as main does and returns stdout, stderr (with
// main's error line) and the exit status.
func s2uc(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), args, &stdout, &stderr)
	subcmd.Report(&stderr, "s2uc", err)
	return stdout.String(), stderr.String(), exitCode(err)
}

// isolate keeps s2uc away from the user's stream records and token.
func isolate(t *testing.T) {
	t.Setenv("SCISTREAM_HOME", t.TempDir())
	t.Setenv("SCISTREAM_TOKEN", "")
}

// TestHelp: --help on the tool and on every command prints the usage
// and exits 0.
func TestHelp(t *testing.T) {
	isolate(t)
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		_, stderr, code := s2uc(t, args...)
		if code != 0 || !strings.HasPrefix(stderr, "usage: s2uc COMMAND") {
			t.Errorf("%v: exit %d, stderr:\n%s", args, code, stderr)
		}
		for _, c := range tool().Commands {
			if !strings.Contains(stderr, "\n  "+c.Name+" ") {
				t.Errorf("%v: the listing lacks %s:\n%s", args, c.Name, stderr)
			}
		}
	}
	for _, c := range tool().Commands {
		snake := strings.ReplaceAll(c.Name, "-", "_")
		for _, args := range [][]string{{c.Name, "--help"}, {c.Name, "-h"}, {"help", c.Name}, {snake, "--help"}} {
			stdout, stderr, code := s2uc(t, args...)
			if code != 0 || stdout != "" || !strings.HasPrefix(stderr, "usage: s2uc "+c.Name+" ") {
				t.Errorf("%v: exit %d, stdout %q, stderr:\n%s", args, code, stdout, stderr)
			}
			if c.Name != "hash-token" && !strings.Contains(stderr, "--timeout") {
				t.Errorf("%v: the usage lacks the common flags:\n%s", args, stderr)
			}
		}
	}
}

func TestVersion(t *testing.T) {
	stdout, stderr, code := s2uc(t, "--version")
	if want := "s2uc " + version.Version + " (commit "; code != 0 || !strings.HasPrefix(stdout, want) || stderr != "" {
		t.Errorf("--version: exit %d, stdout %q (want %q...), stderr %q", code, stdout, want, stderr)
	}
}
