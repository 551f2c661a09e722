// Package trustfile opens the files that decide whom a program trusts
// under one rule: s2cs's tokens, roles, configuration, peer CA and its
// identity providers' keys and CA; s2uc's configuration file, stream
// records and pinned certificates. Whoever can change such a file
// chooses whom the program trusts, so the file, and every directory its
// name is looked up in on the way to it (along every symbolic link),
// must be owned by the user the program runs as or by root, and
// writable by nobody else. Anyone may read it: a trust file holds no
// secret (internal/secretfile adds that rule for the files that do).
//
// The file is judged as opened (fstat of the open descriptor), so a
// name swapped between check and use changes nothing; the directories
// are judged by name on the resolved path, and the file found at the
// end of that path must be the one opened. A refusal names the file,
// what is wrong and the command that fixes it ("chmod go-w PATH").
//
// Three cases pass although a mode bit says "writable by others":
//   - a directory with the sticky bit (/tmp, a Kubernetes Secret's
//     tmpfs): others may add names to it but not remove or rename
//     another's, so a name in it owned by the running user or root
//     cannot be replaced (the sticky directory itself must be owned by
//     one of them: its owner may remove any name). A symbolic link in
//     one must be owned by one of them too, or its owner could replace
//     it.
//   - a directory on a read-only mount: nobody can change its names
//     through it. Kubernetes mounts a ConfigMap read-only in a
//     directory of mode 0777 whatever the pod asks for; what is under
//     such a mount on the host is the host's to keep. A file's own mode
//     counts even there: it is what its owner chose (a chmod on the
//     host, a volume's defaultMode) and says who may write it where it
//     comes from.
//   - anything not a regular file once opened (a pipe, /dev/stdin, a
//     process substitution): its mode says nothing of who else writes
//     it, and it is read once; it is left to the caller.
package trustfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// writable are the mode bits a trust file or a directory on the way to
// it must not have: write for its group or for others.
const writable fs.FileMode = 0o022

// maxLinks bounds the symbolic links followed on one path, as the
// kernel does (MAXSYMLINKS).
const maxLinks = 40

// Error is a refusal under the rule: its text names the file, what is
// wrong and the command that fixes it.
type Error struct{ msg string }

func (e *Error) Error() string { return e.msg }

// refusef is an *Error.
func refusef(format string, args ...any) error { return &Error{fmt.Sprintf(format, args...)} }

// Open opens trust file path for reading and applies the rule to what
// it opened, path naming it in errors as what ("tokens file"). The
// caller closes the file.
func Open(what, path string) (*os.File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	if err := Verify(what, path, f); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// ReadFile reads trust file path whole, as os.ReadFile, under the rule.
func ReadFile(what, path string) ([]byte, error) {
	f, err := Open(what, path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// Verify applies the rule to f, just opened from path: for a caller
// that checks more of the file first (internal/secretfile).
func Verify(what, path string, f *os.File) error {
	return running().verify(what, path, f)
}

// CheckDir applies the rule of the directories on the way to a trust
// file to dir and to those on the way to it: for a directory trust files
// are kept in (s2uc's stream records), before one is written there.
func CheckDir(what, dir string) error {
	return running().checkDir(what, dir)
}

// rule is the rule for one running user.
type rule struct {
	uid uint32 // the effective uid; root (0) is trusted besides it
}

func running() rule { return rule{uid: uint32(os.Geteuid())} }

// trusted reports whether a file owned by uid is trusted.
func (r rule) trusted(uid uint32) bool { return uid == 0 || uid == r.uid }

// verify is Verify for r.
func (r rule) verify(what, path string, f *os.File) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return nil
	}
	st := fi.Sys().(*syscall.Stat_t)
	if !r.trusted(st.Uid) {
		return refusef("%s %s is owned by %s, not by %s, and its owner can change it: %s", what, path, userName(st.Uid), r.owners(), r.chownFix(path, "use a copy of your own"))
	}
	if fi.Mode().Perm()&writable != 0 {
		return refusef("%s %s can be written by other users (mode %04o): chmod go-w %s", what, path, fi.Mode().Perm(), path)
	}
	final, err := r.walk(what, path)
	if err != nil {
		return err
	}
	// The name, resolved, must still name what was opened: a name
	// changed between the open and the walk is not trusted.
	var ls unix.Stat_t
	if err := unix.Lstat(final, &ls); err != nil || ls.Dev != st.Dev || ls.Ino != st.Ino {
		return refusef("%s %s changed while it was being checked (it now resolves to %s, another file): check who else writes there, and start again", what, path, final)
	}
	return nil
}

// checkDir is CheckDir for r.
func (r rule) checkDir(what, dir string) error {
	final, err := r.walk(what, dir)
	if err != nil {
		return err
	}
	_, err = r.lookupDir(what, dir, final)
	return err
}

// walk resolves path as the kernel would, applying the rule to every
// directory a name is looked up in (lookupDir) and to every symbolic
// link found in a sticky one, and returns the resolved path (no
// symbolic link in it). A name that does not resolve is no refusal
// here: the open that came before, or comes after, says why.
func (r rule) walk(what, path string) (string, error) {
	todo := path
	if !filepath.IsAbs(todo) {
		wd, err := os.Getwd()
		if err != nil {
			return "", err
		}
		todo = filepath.Join(wd, todo)
	}
	rest := strings.Split(todo, "/")
	dir := "/"
	checked := map[string]bool{} // the directories checked: whether others may add names to them
	links := 0
	for len(rest) > 0 {
		name := rest[0]
		rest = rest[1:]
		switch name {
		case "", ".":
			continue
		case "..":
			dir = filepath.Dir(dir)
			continue
		}
		open, ok := checked[dir]
		if !ok {
			var err error
			if open, err = r.lookupDir(what, path, dir); err != nil {
				return "", err
			}
			checked[dir] = open
		}
		p := filepath.Join(dir, name)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return p, nil
		}
		if st.Mode&unix.S_IFMT != unix.S_IFLNK {
			dir = p
			continue
		}
		// A link in a sticky directory others may write: its owner
		// may replace it, as any name there.
		if open && !r.trusted(st.Uid) {
			return "", refusef("%s %s: the symbolic link %s, in directory %s, which others may write (sticky: each name there is its owner's), is owned by %s, who could point it elsewhere: name the file itself, or make the link yourself", what, path, p, dir, userName(st.Uid))
		}
		if links++; links > maxLinks {
			return "", refusef("%s %s: more than %d symbolic links on the way to it", what, path, maxLinks)
		}
		target, err := os.Readlink(p)
		if err != nil {
			return "", err
		}
		if filepath.IsAbs(target) {
			dir = "/"
		}
		rest = append(strings.Split(target, "/"), rest...)
	}
	return dir, nil
}

// lookupDir applies the rule to dir, a directory a name on the way to
// trust file path is looked up in: its owner, and anyone who can write
// it, could put another file in place of the name. It reports whether
// others may add names to dir, which its sticky bit allows: a name in
// it is then trusted only if its owner is.
func (r rule) lookupDir(what, path, dir string) (sticky bool, err error) {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return false, err
	}
	subject := fmt.Sprintf("%s %s: directory %s", what, path, dir)
	if dir == path {
		subject = what + " " + dir // CheckDir's own
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return false, refusef("%s is not a directory", subject)
	}
	if !r.trusted(st.Uid) {
		return false, refusef("%s is owned by %s, not by %s, who could put another file in place of what is in it: %s", subject, userName(st.Uid), r.owners(), r.chownFix(dir, "keep the file in a directory of your own"))
	}
	switch {
	case fs.FileMode(st.Mode)&writable == 0:
		return false, nil
	case readOnly(dir):
		return false, nil // nobody changes a name in it through this mount
	case st.Mode&unix.S_ISVTX != 0:
		return true, nil
	}
	return false, refusef("%s can be written by other users (mode %04o), who could put another file in place of what is in it: chmod go-w %s", subject, st.Mode&0o7777, dir)
}

// readOnly reports whether dir is on a read-only mount.
func readOnly(dir string) bool {
	var sf unix.Statfs_t
	return unix.Statfs(dir, &sf) == nil && sf.Flags&unix.ST_RDONLY != 0
}

// owners says who may own a trust file.
func (r rule) owners() string {
	if r.uid == 0 {
		return "root, the running user"
	}
	return "the running user, " + userName(r.uid) + ", or root"
}

// chownFix is the command that gives path to the running user, or
// else, if that is not in the user's power, the other way.
func (r rule) chownFix(path, other string) string {
	who := strconv.FormatUint(uint64(r.uid), 10)
	if u, err := user.LookupId(who); err == nil {
		who = u.Username
	}
	return fmt.Sprintf("chown %s %s, or %s", who, path, other)
}

// userName names uid: "uid 1000 (alice)", or "uid 1000" if it has no
// name here.
func userName(uid uint32) string {
	id := strconv.FormatUint(uint64(uid), 10)
	if u, err := user.LookupId(id); err == nil && u.Username != "" {
		return "uid " + id + " (" + u.Username + ")"
	}
	return "uid " + id
}

// IsRefusal reports whether err is a refusal under the rule (an
// *Error), not a file that could not be read.
func IsRefusal(err error) bool {
	var e *Error
	return errors.As(err, &e)
}
