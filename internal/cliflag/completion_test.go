package cliflag_test

import (
	"bytes"
	"flag"
	"os/exec"
	"strings"
	"testing"

	"scistream/internal/cliflag"
	"scistream/internal/cliflag/cliflagtest"
)

func testCompletion() cliflag.Completion {
	fs := flag.NewFlagSet("list", flag.ContinueOnError)
	fs.String("server_cert", "", "")
	fs.Bool("all", false, "")
	cliflag.AddAliases(fs)
	return cliflag.Completion{
		Program: "tool",
		Flags:   []cliflag.CompletionFlag{{Name: "version"}},
		Commands: []cliflag.CompletionCommand{
			{Name: "inbound-request", Summary: "open the inbound side", Flags: []cliflag.CompletionFlag{{Name: "s2cs", Value: true}}},
			{Name: "list", Summary: "list your streams", Flags: cliflag.FlagsOf(fs)},
			{Name: "completion", Summary: "print the completion script"},
		},
	}
}

// TestBashCompletion loads the bash script in bash and completes a
// command, a flag of a command (the snake_case command name too), and
// nothing after a flag that takes a value (bash then completes files).
func TestBashCompletion(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	var b bytes.Buffer
	if err := testCompletion().Write(&b, "bash"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		words []string
		want  string
	}{
		{[]string{"tool", "inb"}, "inbound-request"},
		{[]string{"tool", "l"}, "list"},
		{[]string{"tool", "completion", "z"}, "zsh"},
		{[]string{"tool", "list", "n"}, ""},
		{[]string{"tool", "--ver"}, "--version"},
		{[]string{"tool", "list", "--ser"}, "--server_cert"},
		{[]string{"tool", "list", "--a"}, "--all"},
		{[]string{"tool", "inbound_request", "--s2"}, "--s2cs"},
		{[]string{"tool", "list", "--server_cert", ""}, ""},
		{[]string{"tool", "list", "--server-cert", "--"}, ""},
		{[]string{"tool", "frobnicate", "--"}, ""},
	} {
		got := strings.Join(cliflagtest.Complete(t, b.String(), "_tool", c.words...), " ")
		if got != c.want {
			t.Errorf("%q: completed %q, want %q", c.words, got, c.want)
		}
	}
}

// TestCompletionScripts: each shell's script is written and, where the
// shell is installed, parses.
func TestCompletionScripts(t *testing.T) {
	for _, sh := range cliflag.Shells {
		var b bytes.Buffer
		if err := testCompletion().Write(&b, sh); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), "inbound-request") || !strings.Contains(b.String(), "server_cert") {
			t.Errorf("%s script lacks a command or flag:\n%s", sh, b.String())
		}
		if _, err := exec.LookPath(sh); err != nil {
			continue
		}
		if out, err := exec.Command(sh, "-n", "-c", b.String()).CombinedOutput(); err != nil {
			t.Errorf("%s -n: %v\n%s", sh, err, out)
		}
	}
	if err := testCompletion().Write(&bytes.Buffer{}, "tcsh"); err == nil || !strings.Contains(err.Error(), "bash, zsh, fish") {
		t.Errorf("tcsh: %v", err)
	}
}

func TestFlagsOfUsage(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.String("server_cert", "", "PEM file\nsecond line")
	fs.Bool("all", false, "everything")
	cliflag.AddAliases(fs)
	var b bytes.Buffer
	fs.SetOutput(&b)
	cliflag.PrintDefaults(fs)
	got := cliflag.FlagsOfUsage(b.String())
	want := cliflag.FlagsOf(fs)
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("from the usage %v, from the flag set %v", got, want)
	}
	b.Reset()
	cliflag.PrintGroups(&b, fs, []cliflag.Group{{Title: "All", Flags: []string{"server_cert", "all"}}})
	if got := cliflag.FlagsOfUsage(b.String()); len(got) != 2 || got[0].Name != "server_cert" || !got[0].Value || got[1].Value {
		t.Errorf("from the grouped usage %v", got)
	}
}
