package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"runtime"
	"sort"
	"strings"

	"scistream/internal/cliflag"
	"scistream/internal/version"
)

// runVersion prints the version line, as --version does, or with
// --output json the same as one JSON object (versionJSON).
func runVersion(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cl := newLocalCmdline("version", "[--output json]   (the same as s2uc --version)", stdout, stderr)
	output := cl.fs.String("output", "text", `output format: text, or json: {"version", "commit", "commit_time", "modified", "go"}`)
	if _, err := cl.parse(args, 0, 0, ""); err != nil {
		return err
	}
	switch *output {
	case "text":
		return tool().Run(ctx, []string{"--version"}, stdout, stderr)
	case "json":
		b := version.Current()
		return printJSON(stdout, versionJSON{Version: b.Version, Commit: cmp.Or(b.Revision, "unknown"), CommitTime: b.Time, Modified: b.Modified, Go: runtime.Version()})
	}
	return usagef("--output %q: use text or json", *output)
}

// versionJSON is what version --output json prints: the release, the
// commit it was built from ("unknown" without VCS information), that
// commit's time and whether the checkout had changes, and the Go
// toolchain that built it.
type versionJSON struct {
	Version    string `json:"version"`
	Commit     string `json:"commit"`
	CommitTime string `json:"commit_time,omitempty"`
	Modified   bool   `json:"modified"`
	Go         string `json:"go"`
}

// runCompletion prints the completion script of a shell, each
// command's flags read from the usage its --help prints (its flag set
// is built as it runs); "completion uids" prints the UIDs the scripts
// complete.
func runCompletion(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	shells := strings.Join(cliflag.Shells, "|")
	cl := newLocalCmdline("completion", shells+"   (e.g. source <(s2uc completion bash)); completion uids lists the UIDs the scripts complete", stdout, stderr)
	pos, err := cl.parse(args, 1, 1, "give the shell: s2uc completion "+shells)
	if err != nil {
		return err
	}
	if pos[0] == "uids" {
		return printUIDs(stdout)
	}
	if !cliflag.HasShell(pos[0]) {
		return usagef("no completion for shell %q: give one of %s", pos[0], shells)
	}
	c := cliflag.Completion{Program: "s2uc", Flags: []cliflag.CompletionFlag{{Name: "help"}, {Name: "version"}}}
	return tool().Completion(ctx, c).Write(stdout, pos[0])
}

// printUIDs prints, one a line, the UIDs of the streams s2uc has a
// local record of and has not released: what status, release, update,
// watch and outbound-request take. A record that cannot be read (or
// that others could have written, trustfile) is left out; only UIDs
// (api.ValidUID, Sessions.UIDs) are printed, since the shell expands
// what it completes with.
func printUIDs(stdout io.Writer) error {
	ss, err := sessions()
	if err != nil {
		return err
	}
	uids, err := ss.UIDs()
	if err != nil {
		return err
	}
	sort.Strings(uids)
	for _, uid := range uids {
		if sess, err := ss.Load(uid); err == nil && sess.Released == nil {
			fmt.Fprintln(stdout, uid)
		}
	}
	return nil
}
