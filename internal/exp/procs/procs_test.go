package procs

import (
	"os"
	"strings"
	"testing"
)

// TestLimitWriter: the first n bytes pass, in order, over several
// writes; every write reports itself whole, the ones past n too.
func TestLimitWriter(t *testing.T) {
	var sb strings.Builder
	w := LimitWriter(&sb, 5)
	for _, s := range []string{"abc", "defg", "hij"} {
		if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
			t.Errorf("Write(%q) = %d, %v; want %d, nil", s, n, err, len(s))
		}
	}
	if sb.String() != "abcde" {
		t.Errorf("passed on %q, want %q", sb.String(), "abcde")
	}
}

// TestWatchRSS: the watch of this process sees its memory, and the
// peak is at least what it sees now.
func TestWatchRSS(t *testing.T) {
	w := WatchRSS(os.Getpid())
	defer w.Stop()
	now := w.Now()
	if now <= 0 {
		t.Fatalf("RSS of this process %d, want > 0", now)
	}
	if p := w.Peak(); p < now {
		t.Errorf("peak %d below a sample %d", p, now)
	}
}

// TestNoFileLimit: the hard limit is read, and RaiseNoFile below the
// soft limit succeeds without a change.
func TestNoFileLimit(t *testing.T) {
	hard, err := NoFileLimit()
	if err != nil || hard < 1 {
		t.Fatalf("NoFileLimit = %d, %v", hard, err)
	}
	if err := RaiseNoFile(1); err != nil {
		t.Errorf("RaiseNoFile(1), below the soft limit: %v", err)
	}
}
