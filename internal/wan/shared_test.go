package wan

import (
	"strings"
	"testing"
)

func TestValidServerName(t *testing.T) {
	for name, want := range map[string]bool{
		"a":                              true,
		"abc.scistream.invalid":          true,
		"x-1.y2.example.org":             true,
		"":                               false,
		"A.example.org":                  false, // callers lower-case first
		"-a.example.org":                 false,
		"a-.example.org":                 false,
		"a..b":                           false,
		"a.b.":                           false,
		"a b":                            false,
		"a_b.example":                    false,
		strings.Repeat("a", 63):          true,
		strings.Repeat("a", 64):          false,
		strings.Repeat("a.", 126) + "a":  true, // 253 bytes
		strings.Repeat("a.", 126) + "ab": false,
		"\xff.example":                   false,
		"xn--bcher-kva.example":          true,
		"127.0.0.1":                      true, // a valid label sequence; no stream is named so
	} {
		if got := ValidServerName(name); got != want {
			t.Errorf("ValidServerName(%.40q) = %v, want %v", name, got, want)
		}
	}
}

// FuzzServerName: whatever a ClientHello carries, the check neither
// panics nor admits a name that is not a lower-case DNS name.
func FuzzServerName(f *testing.F) {
	f.Add("abc.scistream.invalid")
	f.Add("a..b")
	f.Add("\x00")
	f.Fuzz(func(t *testing.T, name string) {
		if !ValidServerName(name) {
			return
		}
		if len(name) > 253 || strings.ToLower(name) != name || strings.Contains(name, "..") ||
			strings.HasPrefix(name, ".") || strings.HasSuffix(name, ".") || strings.ContainsAny(name, " _/\\:\x00") {
			t.Fatalf("admitted %q", name)
		}
	})
}
