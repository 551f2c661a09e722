package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os/exec"
	"strings"
	"testing"

	"scistream/internal/cliflag/cliflagtest"
	"scistream/internal/version"
)

// TestHelp: --help on the tool and on every command prints the usage on
// stdout (to be paged or grepped) and exits 0, in process and as a real
// process.
func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), args, &stdout, &stderr)
		if code := exitCode(err); code != 0 {
			t.Errorf("%v: exit %d (%v)", args, code, err)
		}
		for _, c := range tool().Commands {
			if !strings.Contains(stdout.String(), "\n  "+c.Name+" ") {
				t.Errorf("%v: the listing lacks %s:\n%s", args, c.Name, stdout.String())
			}
		}
		if stderr.Len() > 0 {
			t.Errorf("%v: stderr %q, want nothing", args, stderr.String())
		}
	}
	for _, c := range tool().Commands {
		for _, args := range [][]string{{c.Name, "--help"}, {c.Name, "-h"}, {"help", c.Name}} {
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), args, &stdout, &stderr)
			if code := exitCode(err); code != 0 {
				t.Errorf("%v: exit %d (%v)", args, code, err)
			}
			if !strings.HasPrefix(stdout.String(), "usage: s2bench "+c.Name+" ") || stderr.Len() > 0 {
				t.Errorf("%v: stdout does not start with its usage, or stderr %q:\n%s", args, stderr.String(), stdout.String())
			}
		}
	}
	for _, args := range [][]string{{"--help"}, {"compare", "--help"}, {"testbed", "--help"}} {
		out, err := exec.Command(s2benchBin, args...).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "usage: s2bench") {
			t.Errorf("s2bench %v: %v\n%s", args, err, out)
		}
	}
}

func TestVersion(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"--version"}, &stdout, &stderr)
	if want := version.String("s2bench") + "\n"; err != nil || stdout.String() != want || stderr.Len() > 0 {
		t.Errorf("--version: %v, stdout %q (want %q), stderr %q", err, stdout.String(), want, stderr.String())
	}
	out, err := exec.Command(s2benchBin, "--version").Output()
	if err != nil || !strings.HasPrefix(string(out), "s2bench "+version.Version+" (commit ") {
		t.Errorf("s2bench --version: %v, %q", err, out)
	}
}

func TestExitCode(t *testing.T) {
	ctx := context.Background()
	var discard bytes.Buffer
	for _, c := range []struct {
		name string
		err  error
		want int
	}{
		{"success", nil, 0},
		{"help", flag.ErrHelp, 0},
		{"bad flag value", usagef("--size 0 out of range"), 2},
		{"no command", run(ctx, nil, &discard, &discard), 2},
		{"unknown command", run(ctx, []string{"frobnicate"}, &discard, &discard), 2},
		{"failed run", errors.New("run 1 FAILED"), 1},
	} {
		if got := exitCode(c.err); got != c.want {
			t.Errorf("%s (%v): exit %d, want %d", c.name, c.err, got, c.want)
		}
	}
}

// TestBinaryCommandLine runs the real s2bench: a mistyped flag is one
// line naming it, the nearest flag and --help, exit status 2; version
// is a command as well as --version; the bash completion script,
// loaded in bash, completes a command and a command's flag.
func TestBinaryCommandLine(t *testing.T) {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(s2benchBin, "compare", "--wrokload", "sweep")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Errorf("compare --wrokload: %v, want exit status 2", err)
	}
	if want := "s2bench: unknown flag --wrokload: did you mean --workload? (s2bench compare --help lists the flags)\n"; stderr.String() != want || stdout.Len() != 0 {
		t.Errorf("compare --wrokload: stderr %q, stdout %q; want stderr %q", stderr.String(), stdout.String(), want)
	}
	out, err := exec.Command(s2benchBin, "version").Output()
	if err != nil || !strings.HasPrefix(string(out), "s2bench "+version.Version+" (commit ") {
		t.Errorf("s2bench version: %v, %q", err, out)
	}
	script, err := exec.Command(s2benchBin, "completion", "bash").Output()
	if err != nil {
		t.Fatalf("completion bash: %v", err)
	}
	for _, c := range []struct{ words, want string }{
		{"s2bench comp", "compare completion"},
		{"s2bench compare --work", "--workload"},
		{"s2bench compare --json ", ""},
	} {
		if got := cliflagtest.Line(t, string(script), "_s2bench", c.words); got != c.want {
			t.Errorf("%q completes to %q, want %q", c.words, got, c.want)
		}
	}
}
