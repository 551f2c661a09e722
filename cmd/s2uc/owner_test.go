package main

import "testing"

// TestOwnerBadCommandLine: --owner and --all_owners, an operator's
// flags, are checked before any request.
func TestOwnerBadCommandLine(t *testing.T) {
	isolate(t)
	const gw = "127.0.0.1:1" // never dialled
	const uid = "0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b6c"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"release", uid, "--owner", "alice"}, "--owner needs --s2cs"},
		{[]string{"status", uid, "--owner", "alice"}, "--owner needs --s2cs"},
		{[]string{"release", uid, "--s2cs", gw, "--owner", "ali ce"}, `--owner "ali ce" is not an identity`},
		{[]string{"status", uid, "--s2cs", gw, "--owner", "-x"}, `--owner "-x" is not an identity`},
		{[]string{"list", "--s2cs", gw, "--owner", "alice", "--all_owners"}, "give --owner or --all_owners, not both"},
	} {
		stdout, stderr, code := s2uc(t, c.args...)
		checkOneLine(t, c.args, stdout, stderr, code, c.want)
	}
}
