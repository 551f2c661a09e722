// Package secretfile opens the files that hold a gateway's secrets
// (private keys, the etcd password, an introspection client secret) under
// one rule: a file other users may read or write, or its group may write,
// is refused, naming the chmod that fixes it. Its group may read it: a
// Kubernetes Secret volume gives the pod's fsGroup read access (mode
// 0440), and a service account's group is how operators share a key.
// A secret others can read is no secret; one others can write is not
// the operator's.
package secretfile

import (
	"fmt"
	"io/fs"
	"os"
)

// loose are the mode bits a secret file must not have: any for others,
// write for its group.
const loose fs.FileMode = 0o027

// CheckMode refuses the mode of secret file path (fi, from a stat of
// it) if it is loose. what names the file in the error ("private key",
// "password file"). Anything not a regular file after symlinks (a pipe,
// /dev/stdin, a process substitution) is left to the caller: its mode
// says nothing of who else reads it.
func CheckMode(what, path string, fi fs.FileInfo) error {
	if fi.Mode().IsRegular() && fi.Mode().Perm()&loose != 0 {
		return fmt.Errorf("%s %s can be read or written by other users (mode %04o): chmod 600 %s (or 640 for a group that must read it)", what, path, fi.Mode().Perm(), path)
	}
	return nil
}

// Check stats path and applies CheckMode.
func Check(what, path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	return CheckMode(what, path, fi)
}

// Open opens secret file path for reading and applies CheckMode to what
// it opened (not to what the path names a moment later). The caller
// closes the file.
func Open(what, path string) (*os.File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err == nil {
		err = CheckMode(what, path, fi)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}
