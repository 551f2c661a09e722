// Package secretfile opens the files that hold a gateway's secrets
// (private keys, the etcd password, an introspection client secret) under
// one rule: a file other users may read or write, or its group may write,
// is refused, naming the chmod that fixes it. Its group may read it: a
// Kubernetes Secret volume gives the pod's fsGroup read access (mode
// 0440), and a service account's group is how operators share a key.
// A secret others can read is no secret; one others can write is not
// the operator's. A secret file is also a file the gateway trusts, so
// Open applies internal/trustfile's rule after this one: owned by the
// running user or root, in directories nobody else may write.
package secretfile

import (
	"fmt"
	"io/fs"
	"os"

	"scistream/internal/trustfile"
)

// loose are the mode bits a secret file must not have: any for others,
// write for its group.
const loose fs.FileMode = 0o027

// CheckMode refuses the mode of secret file path (fi, from a stat of
// it) if it is loose. what names the file in the error ("private key",
// "password file"). Anything not a regular file after symlinks (a pipe,
// /dev/stdin, a process substitution) is left to the caller: its mode
// says nothing of who else reads it. Open applies it and more: CheckMode
// alone is for a secret the program wrote itself where it keeps its
// state (s2cs's generated key in --state_dir).
func CheckMode(what, path string, fi fs.FileInfo) error {
	if fi.Mode().IsRegular() && fi.Mode().Perm()&loose != 0 {
		return fmt.Errorf("%s %s can be read or written by other users (mode %04o): chmod 600 %s (or 640 for a group that must read it)", what, path, fi.Mode().Perm(), path)
	}
	return nil
}

// Check opens path, applies Open's rules and closes it.
func Check(what, path string) error {
	f, err := Open(what, path)
	if err != nil {
		return err
	}
	return f.Close()
}

// Open opens secret file path for reading and applies CheckMode, then
// the rule of a trusted file (trustfile.Verify: its owner, the
// directories on the way to it), to what it opened (not to what the
// path names a moment later). The caller closes the file.
func Open(what, path string) (*os.File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err == nil {
		err = CheckMode(what, path, fi)
	}
	if err == nil {
		err = trustfile.Verify(what, path, f)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}
