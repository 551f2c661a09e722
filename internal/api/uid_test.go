package api_test

import (
	"net/url"
	"path/filepath"
	"regexp"
	"testing"

	"scistream/internal/api"
)

// uidPattern is ValidUID said another way, as the oracle of its tests.
var uidPattern = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// TestValidUID: what a gateway answering uid "../../pwned" (or any
// other non-UID) could make a client do with it as a file name or a URL
// path is refused.
func TestValidUID(t *testing.T) {
	for _, c := range []struct {
		uid  string
		want bool
	}{
		{"0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b6c", true},
		{"00000000-0000-0000-0000-000000000000", true},
		{"", false},
		{"0F8E3C5A-4B1D-4C2E-9A7F-1D2E3F4A5B6C", false}, // upper case: one stream, one spelling
		{"0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b6", false},
		{"0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b6c7", false},
		{"0f8e3c5a4b1d-4c2e-9a7f-1d2e3f4a5b6c-", false},
		{"../../pwned-by-gateway", false},                      // a file outside the records
		{"../../../../../../../../../../../../../../x", false}, // 36 characters of traversal
		{"0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b/c", false},        // another URL path
		{"0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b?c", false},        // a query
		{"0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b%c", false},
		{"0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5\x1b[", false}, // a terminal escape
		{"0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5bé", false},    // 36 bytes, 35 runes
	} {
		if got := api.ValidUID(c.uid); got != c.want {
			t.Errorf("ValidUID(%q) = %v, want %v", c.uid, got, c.want)
		}
	}
}

// FuzzValidUID: ValidUID agrees with the UUID pattern, and what it
// accepts names one file and one URL path segment as it is.
func FuzzValidUID(f *testing.F) {
	for _, s := range []string{"0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b6c", "../../pwned-by-gateway", "", "0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b/c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ok := api.ValidUID(s)
		if ok != uidPattern.MatchString(s) {
			t.Fatalf("ValidUID(%q) = %v, the pattern says otherwise", s, ok)
		}
		if ok && (filepath.Base(s) != s || url.PathEscape(s) != s) {
			t.Fatalf("ValidUID(%q) but it is not one file name and URL path segment as it is", s)
		}
	})
}
