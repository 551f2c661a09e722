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
			{Name: "status", Summary: "one stream", ArgsFrom: []string{"completion", "uids"}},
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

// TestBashCompletionArgs: a command with ArgsFrom completes its first
// argument that is no flag with what the program, run with those
// arguments, prints (the program is COMP_WORDS[0], as typed: here echo,
// which prints its arguments); not a later argument, nor a flag's value
// (a file), wherever flags and values stand, HOST:PORT values (which
// bash splits at the colon) too. An ArgsFrom that is not plain words is
// not put in the script.
func TestBashCompletionArgs(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	c := cliflag.Completion{Program: "tool", Commands: []cliflag.CompletionCommand{
		{Name: "status", Flags: []cliflag.CompletionFlag{{Name: "s2cs", Value: true}, {Name: "all"}}, ArgsFrom: []string{"0f8e-a", "0f9d-b", "77aa-c"}},
		{Name: "bad", ArgsFrom: []string{"$(touch /tmp/x)"}},
	}}
	var b bytes.Buffer
	if err := c.Write(&b, "bash"); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "touch") {
		t.Errorf("the script holds an ArgsFrom that is not plain words:\n%s", b.String())
	}
	for _, c := range []struct {
		line  string   // as typed
		words []string // as bash splits it (COMP_WORDBREAKS), as an interactive bash was seen to
		want  string
	}{
		{"echo status ", []string{"echo", "status", ""}, "0f8e-a 0f9d-b 77aa-c"},
		{"echo status 0f", []string{"echo", "status", "0f"}, "0f8e-a 0f9d-b"},
		{"echo status --all 0f9", []string{"echo", "status", "--all", "0f9"}, "0f9d-b"},
		{"echo status --s2cs h:5000 7", []string{"echo", "status", "--s2cs", "h", ":", "5000", "7"}, "77aa-c"},
		{"echo status --s2cs=h:5000 7", []string{"echo", "status", "--s2cs", "=", "h", ":", "5000", "7"}, "77aa-c"},
		{"echo status 0f8e-a ", []string{"echo", "status", "0f8e-a", ""}, ""}, // the second argument
		{"echo status --s2cs ", []string{"echo", "status", "--s2cs", ""}, ""}, // a flag's value: files
		{"echo status --a", []string{"echo", "status", "--a"}, "--all"},       // flags still
		{"echo bad ", []string{"echo", "bad", ""}, ""},
		{"echo status --s2cs [::1]:5000 0f8", []string{"echo", "status", "--s2cs", "[", "::", "1]", ":", "5000", "0f8"}, "0f8e-a"},
		{"echo status --s2cs=[::1]:5000 0f8", []string{"echo", "status", "--s2cs", "=", "[", "::", "1]", ":", "5000", "0f8"}, "0f8e-a"},
		{"echo status --s2cs [::1]:5000 x ", []string{"echo", "status", "--s2cs", "[", "::", "1]", ":", "5000", "x", ""}, ""},
		{"echo status --s2cs=h:5000 x ", []string{"echo", "status", "--s2cs", "=", "h", ":", "5000", "x", ""}, ""},
	} {
		got := strings.Join(cliflagtest.Complete(t, b.String(), "_tool", c.words...), " ")
		if got != c.want {
			t.Errorf("%q: completed %q, want %q", c.line, got, c.want)
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
