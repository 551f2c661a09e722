package reqlog

import (
	"strings"
	"testing"
)

// FuzzRequestID: a caller's id is kept only if it is short and made of
// safe bytes, and then unchanged.
func FuzzRequestID(f *testing.F) {
	for _, s := range []string{"", "abc", "0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b6c", "a b", "a\r\nX-Evil: 1", strings.Repeat("z", 65), "ï", "%00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		got := callerRequestID(v)
		if got == "" {
			return
		}
		if got != v || len(got) > maxRequestID {
			t.Fatalf("callerRequestID(%q) = %q", v, got)
		}
		for _, c := range []byte(got) {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("._:-", c) >= 0) {
				t.Fatalf("kept %q with byte %q", got, c)
			}
		}
	})
}
