package version

import (
	"runtime/debug"
	"testing"
)

func TestBuildString(t *testing.T) {
	const rev = "1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b"
	for _, c := range []struct {
		name     string
		settings []debug.BuildSetting
		want     string
	}{
		{"no VCS information", nil, "0.1.0 (commit unknown)"},
		{"modified checkout", []debug.BuildSetting{
			{Key: "-compiler", Value: "gc"},
			{Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: rev},
			{Key: "vcs.time", Value: "2026-11-24T10:00:00Z"},
			{Key: "vcs.modified", Value: "true"},
		}, "0.1.0 (commit 1a2b3c4d5e6f, 2026-11-24T10:00:00Z, modified)"},
		{"clean checkout", []debug.BuildSetting{
			{Key: "vcs.revision", Value: rev},
			{Key: "vcs.time", Value: "2026-11-24T10:00:00Z"},
			{Key: "vcs.modified", Value: "false"},
		}, "0.1.0 (commit 1a2b3c4d5e6f, 2026-11-24T10:00:00Z)"},
		{"short revision, no time", []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}}, "0.1.0 (commit abc123)"},
	} {
		b := fromBuildInfo(&debug.BuildInfo{Settings: c.settings})
		if got := b.String(); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
	if got := fromBuildInfo(nil).String(); got != "0.1.0 (commit unknown)" {
		t.Errorf("nil build information: %q", got)
	}
}

// A test binary carries no VCS information, so the commit is unknown.
func TestStringInTestBinary(t *testing.T) {
	if got, want := String("s2uc"), "s2uc "+Version+" (commit unknown)"; got != want {
		t.Errorf("String(s2uc) = %q, want %q", got, want)
	}
	if b := Current(); b.Version != Version || b.Revision != "" {
		t.Errorf("Current() = %+v", b)
	}
}
