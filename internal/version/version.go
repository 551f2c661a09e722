// Package version names the SciStream release and the source a binary was
// built from, for every tool's --version and the gateway's /v1/info.
//
// The release is the constant Version. The source comes from the build
// information the Go toolchain stamps into a binary built with go build in
// a version-controlled checkout (vcs.revision, vcs.time, vcs.modified);
// test binaries and builds with -buildvcs=false carry none, and the commit
// then reads "unknown".
package version

import (
	"runtime/debug"
	"strings"
)

// Version is the SciStream release.
const Version = "0.1.0"

// Build says where a binary came from.
type Build struct {
	// Version is the release, the constant Version.
	Version string
	// Revision is the commit hash; empty when the build has no VCS
	// information.
	Revision string
	// Time is the commit time as the toolchain wrote it (RFC 3339, UTC);
	// empty if unknown.
	Time string
	// Modified is true when the checkout had uncommitted changes.
	Modified bool
}

// Current describes the running binary.
func Current() Build {
	bi, _ := debug.ReadBuildInfo()
	return fromBuildInfo(bi)
}

// fromBuildInfo reads the VCS settings of bi, which may be nil.
func fromBuildInfo(bi *debug.BuildInfo) Build {
	b := Build{Version: Version}
	if bi == nil {
		return b
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.time":
			b.Time = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	return b
}

// String writes b as "0.1.0 (commit 1a2b3c4d5e6f, 2026-11-24T10:00:00Z,
// modified)": the commit shortened to 12 characters, the time and
// "modified" only when known and true, and "commit unknown" without VCS
// information.
func (b Build) String() string {
	if b.Revision == "" {
		return b.Version + " (commit unknown)"
	}
	rev := b.Revision
	if len(rev) > 12 {
		rev = rev[:12]
	}
	parts := []string{"commit " + rev}
	if b.Time != "" {
		parts = append(parts, b.Time)
	}
	if b.Modified {
		parts = append(parts, "modified")
	}
	return b.Version + " (" + strings.Join(parts, ", ") + ")"
}

// String returns the version line of program, for --version: for example
// "s2uc 0.1.0 (commit 1a2b3c4d5e6f, 2026-11-24T10:00:00Z, modified)".
func String(program string) string {
	return program + " " + Current().String()
}
