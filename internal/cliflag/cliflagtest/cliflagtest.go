// Package cliflagtest is a test helper for the completion scripts of
// cliflag.Completion: it loads a script into a real bash and asks its
// completion function what it offers for a command line, as bash does
// at a Tab. Errors fail the test.
package cliflagtest

import (
	"os/exec"
	"strings"
	"testing"
)

// Complete loads script into bash, sets the command line to words (the
// last being the word completed, "" for a new one) and runs fn, the
// script's completion function; it returns what fn offers.
func Complete(t testing.TB, script, fn string, words ...string) []string {
	t.Helper()
	var quoted []string
	for _, w := range words {
		quoted = append(quoted, "'"+strings.ReplaceAll(w, "'", `'\''`)+"'")
	}
	prog := script + "\nCOMP_WORDS=(" + strings.Join(quoted, " ") + ")\nCOMP_CWORD=$((${#COMP_WORDS[@]}-1))\n" +
		fn + "\nprintf '%s\\n' \"${COMPREPLY[@]}\"\n"
	out, err := exec.Command("bash", "--norc", "--noprofile", "-c", prog).CombinedOutput()
	if err != nil {
		t.Fatalf("bash: %v\n%s", err, out)
	}
	return strings.Fields(string(out))
}

// Line is Complete for a command line as typed: its words, and an empty
// last one when line ends in a space. It returns the offers
// space-separated.
func Line(t testing.TB, script, fn, line string) string {
	t.Helper()
	words := strings.Fields(line)
	if strings.HasSuffix(line, " ") {
		words = append(words, "")
	}
	return strings.Join(Complete(t, script, fn, words...), " ")
}
