package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// FuzzPrintable: whatever a gateway sends, printable leaves nothing a
// terminal acts on and keeps printable text as it is; writeJSON leaves
// nothing either but its own newline, and decodes to what it was given.
func FuzzPrintable(f *testing.F) {
	for _, s := range []string{"plain", "x\x1b]0;pwned\x07\x1b[2J", "\u009b31m\u202egnp.exe\x7f", "a\tb\nc", "\xff\xfe", "é😀", "\u2028\ufeff\U000e0041"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p := printable(s)
		for _, r := range p {
			if !unicode.IsPrint(r) {
				t.Fatalf("printable(%q) = %q holds %U", s, p, r)
			}
		}
		if utf8.ValidString(s) && strings.IndexFunc(s, notPrint) < 0 && p != s {
			t.Fatalf("printable(%q) = %q, want it unchanged", s, p)
		}
		var b bytes.Buffer
		if err := writeJSON(&b, map[string]string{"k": s}, "  "); err != nil {
			t.Fatal(err)
		}
		for _, r := range strings.TrimSuffix(b.String(), "\n") {
			if r != '\n' && !unicode.IsPrint(r) {
				t.Fatalf("writeJSON of %q: %q holds %U", s, b.String(), r)
			}
		}
		var back map[string]string
		if err := json.Unmarshal(b.Bytes(), &back); err != nil {
			t.Fatalf("writeJSON of %q: %v: %s", s, err, b.String())
		}
		if want := string([]rune(s)); back["k"] != want { // each invalid byte U+FFFD, as encoding/json does
			t.Fatalf("writeJSON of %q decodes to %q", s, back["k"])
		}
	})
}
