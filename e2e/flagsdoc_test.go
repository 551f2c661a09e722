package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// flagsDoc is docs/flags.md, generated from the binaries.
const flagsDoc = "../docs/flags.md"

// commandLine matches a command of a tool's --help table: two spaces,
// a lower-case name, two or more spaces, its summary.
var commandLine = regexp.MustCompile(`(?m)^  ([a-z][a-z0-9-]*)  +\S`)

// helpOf runs bin with args and returns what it printed on stdout and
// stderr (s2cs prints its usage on stdout, s2uc and s2bench on stderr),
// failing unless it exited 0.
func helpOf(t *testing.T, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	// No setting of this machine's may show in the reference: no
	// configuration file, profile or environment default.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SCISTREAM_") && !strings.HasPrefix(kv, "XDG_") && !strings.HasPrefix(kv, "HOME=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "HOME=/nonexistent", "COLUMNS=80")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, out.String())
	}
	return strings.TrimRight(out.String(), "\n") + "\n"
}

// genFlagsDoc writes the flag reference: each tool's --help, then each
// of its commands' --help, as the binaries print them.
func genFlagsDoc(t *testing.T, s2cs, s2uc, s2bench string) []byte {
	var b strings.Builder
	b.WriteString(`# Flags of s2cs, s2uc and s2bench

Generated from the binaries' ` + "`--help`" + ` by e2e/flagsdoc_test.go; do not edit.
TestFlagsDoc fails when this file differs from what they print; after a
change of a flag, regenerate it:

    go test ./e2e -run TestFlagsDoc -update_docs

Every flag answers to its ` + "`--snake_case`" + ` and ` + "`--kebab-case`" + ` spelling; every
s2cs flag is also a key of its ` + "`--config`" + ` file (docs/deploy.md).
`)
	section := func(level, title, text string) {
		b.WriteString("\n" + level + " " + title + "\n\n```text\n" + text + "```\n")
	}
	section("##", "s2cs", helpOf(t, s2cs, "--help"))
	for _, tool := range []struct{ name, bin string }{{"s2uc", s2uc}, {"s2bench", s2bench}} {
		top := helpOf(t, tool.bin, "--help")
		section("##", tool.name, top)
		for _, m := range commandLine.FindAllStringSubmatch(top, -1) {
			section("###", tool.name+" "+m[1], helpOf(t, tool.bin, m[1], "--help"))
		}
	}
	return []byte(b.String())
}

// TestFlagsDoc checks that docs/flags.md is what the binaries print
// (with -update_docs, rewrites it), so the flag reference cannot drift
// from the flag sets.
func TestFlagsDoc(t *testing.T) {
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", dir+"/", "scistream/cmd/s2bench")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build s2bench: %v\n%s", err, out)
	}
	got := genFlagsDoc(t, bins.s2cs, bins.s2uc, filepath.Join(dir, "s2bench"))
	if n := len(commandLine.FindAllString(string(got), -1)); n < 10 {
		t.Fatalf("found %d commands in the tools' --help; the table's layout changed? (commandLine in e2e/flagsdoc_test.go)", n)
	}
	if *updateDocs {
		if err := os.WriteFile(flagsDoc, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(flagsDoc)
	if err != nil {
		t.Fatalf("%v: generate it with go test ./e2e -run TestFlagsDoc -update_docs", err)
	}
	if !bytes.Equal(got, want) {
		gl, wl := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
		i := 0
		for i < len(gl) && i < len(wl) && gl[i] == wl[i] {
			i++
		}
		line := func(l []string) string {
			if i < len(l) {
				return l[i]
			}
			return "(end of file)"
		}
		t.Fatalf("docs/flags.md is stale from line %d:\n  file:     %q\n  binaries: %q\nregenerate it: go test ./e2e -run TestFlagsDoc -update_docs", i+1, line(wl), line(gl))
	}
}
