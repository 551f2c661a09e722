package client

import "testing"

// FuzzParseDefaults: no file makes the parser panic, and what it
// accepts resolves to an output of text, json or none.
func FuzzParseDefaults(f *testing.F) {
	for _, s := range []string{"", "s2cs: a:1\n", "profile: x\nprofiles:\n  x:\n    s2cs: b:1\n", "output: json\n", "profiles:\n  a: {}\n", "- x\n", "s2cs: [1]\n", "&a x: *a\n"} {
		f.Add([]byte(s), "")
	}
	f.Fuzz(func(t *testing.T, data []byte, profile string) {
		d, err := parseDefaults("/etc/c.yaml", data, profile, func(string) string { return "" })
		if err == nil && d.Output != "" && d.Output != "text" && d.Output != "json" {
			t.Fatalf("output %q accepted", d.Output)
		}
	})
}
