package subcmd_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"testing"

	"scistream/internal/subcmd"
	"scistream/internal/version"
)

// newTool returns a tool whose commands record how they were called.
func newTool(calls *[]string) *subcmd.Tool {
	cmd := func(name string) subcmd.Func {
		return func(_ context.Context, args []string, stdout, stderr io.Writer) error {
			*calls = append(*calls, name+" "+strings.Join(args, " "))
			fs := flag.NewFlagSet(name, flag.ContinueOnError)
			fs.SetOutput(stderr)
			fs.Usage = func() { fmt.Fprintln(stderr, "usage: tool "+name) }
			return fs.Parse(args)
		}
	}
	return &subcmd.Tool{
		Name: "tool",
		Commands: []subcmd.Command{
			{Name: "inbound-request", Summary: "open the inbound side", Run: cmd("inbound-request")},
			{Name: "list", Summary: "list streams", Run: cmd("list")},
		},
		Footer: "The token comes from TOKEN.",
	}
}

func TestRun(t *testing.T) {
	for _, c := range []struct {
		name   string
		args   []string
		call   string // the command call recorded, if any
		err    string // "" for nil; else a substring
		usage  bool   // ErrUsage expected
		stdout string // substring of stdout
		stderr string // substring of stderr
	}{
		{name: "no command", args: nil, err: "no command given", usage: true, stderr: "usage: tool COMMAND"},
		{name: "unknown", args: []string{"frobnicate"}, err: `unknown command "frobnicate"; run tool --help for the list`, usage: true},
		{name: "dispatch", args: []string{"list", "-x"}, call: "list -x", err: "flag provided but not defined", stderr: "usage: tool list"},
		{name: "snake_case alias", args: []string{"inbound_request"}, call: "inbound-request "},
		{name: "kebab only", args: []string{"in-bound-request"}, err: `unknown command "in-bound-request": did you mean inbound-request? (tool --help lists the commands)`, usage: true},
		{name: "mistyped", args: []string{"lsit"}, err: `unknown command "lsit": did you mean list? (tool --help lists the commands)`, usage: true},
		{name: "mistyped snake_case", args: []string{"inbound_requst"}, err: `did you mean inbound-request?`, usage: true},
		{name: "nothing near", args: []string{"frobnicate"}, err: `unknown command "frobnicate"; run tool --help for the list`, usage: true},
		{name: "--help", args: []string{"--help"}, stdout: "  inbound-request  open the inbound side\n  list             list streams\n\nThe token comes from TOKEN.\n"},
		{name: "-h", args: []string{"-h"}, stdout: "usage: tool COMMAND [flags]"},
		{name: "help", args: []string{"help"}, stdout: "usage: tool COMMAND [flags]"},
		{name: "help COMMAND", args: []string{"help", "list"}, call: "list --help", err: flag.ErrHelp.Error(), stderr: "usage: tool list"},
		{name: "command --help", args: []string{"list", "--help"}, call: "list --help", err: flag.ErrHelp.Error(), stderr: "usage: tool list"},
		{name: "--version", args: []string{"--version"}, stdout: "tool " + version.Version + " (commit "},
		{name: "-version", args: []string{"-version"}, stdout: "tool " + version.Version},
	} {
		t.Run(c.name, func(t *testing.T) {
			var calls []string
			var stdout, stderr bytes.Buffer
			err := newTool(&calls).Run(context.Background(), c.args, &stdout, &stderr)
			if c.err == "" && err != nil || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
				t.Errorf("error %v, want %q", err, c.err)
			}
			if errors.Is(err, subcmd.ErrUsage) != c.usage {
				t.Errorf("errors.Is(%v, ErrUsage) = %v", err, !c.usage)
			}
			if got := strings.Join(calls, "|"); got != c.call {
				t.Errorf("calls %q, want %q", got, c.call)
			}
			if !strings.Contains(stdout.String(), c.stdout) || c.stdout == "" && stdout.Len() > 0 {
				t.Errorf("stdout %q, want %q", stdout.String(), c.stdout)
			}
			if !strings.Contains(stderr.String(), c.stderr) || c.stderr == "" && stderr.Len() > 0 {
				t.Errorf("stderr %q, want %q", stderr.String(), c.stderr)
			}
		})
	}
}

func TestReport(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{flag.ErrHelp, ""},
		{fmt.Errorf("list: %w", flag.ErrHelp), ""},
		{errors.New("bad --timeout"), "tool: bad --timeout\n"},
		{errors.Join(errors.New("release on a: gone"), errors.New("release on b: gone")), "tool: release on a: gone; release on b: gone\n"},
	} {
		var w bytes.Buffer
		subcmd.Report(&w, "tool", c.err)
		if w.String() != c.want {
			t.Errorf("Report(%v) wrote %q, want %q", c.err, w.String(), c.want)
		}
	}
}
