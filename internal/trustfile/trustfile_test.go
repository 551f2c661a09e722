package trustfile

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// The rule is tested for a running user of uid 1000 (rule{uid: 1000}),
// with files made as root and given away with chown: so every owner a
// file may have (the user, root, another) is a real file's. The tests
// that need chown skip when not root.

const (
	me    = 1000  // the running user of the rule under test
	other = 65534 // nobody
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root, to give files to other users (chown)")
	}
}

// mk makes a file or directory at p (a directory if p ends in "/"),
// its mode and owner set as given.
func mk(t *testing.T, p string, mode os.FileMode, uid int) string {
	t.Helper()
	if strings.HasSuffix(p, "/") {
		p = strings.TrimSuffix(p, "/")
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
	} else if err := os.WriteFile(p, []byte("x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p, uid, 0); err != nil {
		t.Fatal(err)
	}
	// After chown, which clears set-id bits; os.Chmod takes Go's mode
	// bits (os.ModeSticky), not the octal 01000.
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// link makes a symbolic link at p to target, owned by uid.
func link(t *testing.T, target, p string, uid int) string {
	t.Helper()
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(p, uid, 0); err != nil {
		t.Fatal(err)
	}
	return p
}

// check applies rule r to the file at path as Verify does: opened, then
// verified.
func (r rule) check(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return r.verify("tokens file", path, f)
}

// wants checks err against want: "" for accepted, else text the refusal
// must hold.
func wants(t *testing.T, name string, err error, want ...string) {
	t.Helper()
	if len(want) == 0 {
		if err != nil {
			t.Errorf("%s: refused (%v), want accepted", name, err)
		}
		return
	}
	if err == nil {
		t.Errorf("%s: accepted, want refused with %q", name, want)
		return
	}
	if !IsRefusal(err) {
		t.Errorf("%s: %v is not a refusal (*Error)", name, err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: %q lacks %q", name, err, w)
		}
	}
}

// TestFileModes and owners: a trust file may be read by all, written by
// its owner only, and owned by the running user or root.
func TestFileModes(t *testing.T) {
	needRoot(t)
	r := rule{uid: me}
	for _, c := range []struct {
		mode os.FileMode
		uid  int
		want []string
	}{
		{0o644, me, nil}, {0o600, me, nil}, {0o444, me, nil}, {0o400, me, nil}, {0o755, me, nil},
		{0o644, 0, nil}, {0o444, 0, nil}, // root's: a package's file, a Kubernetes volume's
		{0o664, me, []string{"can be written by other users (mode 0664): chmod go-w "}},
		{0o666, me, []string{"(mode 0666): chmod go-w "}},
		{0o646, me, []string{"(mode 0646): chmod go-w "}},
		{0o620, me, []string{"(mode 0620): chmod go-w "}},
		{0o602, 0, []string{"(mode 0602): chmod go-w "}},
		{0o644, other, []string{"is owned by uid 65534", "not by the running user, uid 1000", "chown "}},
		{0o600, other, []string{"is owned by uid 65534"}},
	} {
		dir := t.TempDir()
		p := mk(t, filepath.Join(dir, "tokens"), c.mode, c.uid)
		err := r.check(p)
		wants(t, p, err, c.want...)
		if err != nil && !strings.HasPrefix(err.Error(), "tokens file "+p+" ") {
			t.Errorf("%q does not begin by naming the file", err)
		}
		if err != nil && strings.Contains(err.Error(), "chmod") && !strings.HasSuffix(err.Error(), "chmod go-w "+p) {
			t.Errorf("%q does not end with the command that fixes it", err)
		}
	}
	// The running user root: root's files and only them.
	root := rule{uid: 0}
	dir := t.TempDir()
	wants(t, "root, root's file", root.check(mk(t, filepath.Join(dir, "a"), 0o644, 0)))
	wants(t, "root, another's file", root.check(mk(t, filepath.Join(dir, "b"), 0o644, other)), "is owned by uid 65534", "not by root, the running user", "chown root ")
	wants(t, "root, user 1000's file", root.check(mk(t, filepath.Join(dir, "c"), 0o644, me)), "is owned by")
}

// TestDirectories: every directory a name is looked up in must be
// owned by the user or root and written by nobody else, but a sticky
// one (/tmp) for a name that is the user's or root's.
func TestDirectories(t *testing.T) {
	needRoot(t)
	r := rule{uid: me}
	for _, c := range []struct {
		name      string
		dirMode   os.FileMode
		dirUID    int
		fileUID   int
		want      []string
		sticky    bool
		wantInDir bool // the refusal names the directory and its chmod
	}{
		{"mine 0755", 0o755, me, me, nil, false, false},
		{"mine 0700", 0o700, me, me, nil, false, false},
		{"root's 0755", 0o755, 0, me, nil, false, false},
		{"group-writable", 0o775, me, me, []string{"can be written by other users (mode 0775)", "chmod go-w "}, false, true},
		{"world-writable", 0o777, 0, me, []string{"(mode 0777)", "chmod go-w "}, false, true},
		{"another's", 0o755, other, me, []string{"is owned by uid 65534", "chown "}, false, true},
		// Sticky: others may add names, not replace the user's or root's.
		{"sticky root's, my file", 0o777, 0, me, nil, true, false},
		{"sticky root's, root's file", 0o777, 0, 0, nil, true, false},
		{"sticky root's, another's file", 0o777, 0, other, []string{"is owned by uid 65534"}, true, false},
		{"sticky, another's", 0o777, other, me, []string{"directory", "is owned by uid 65534"}, true, true},
	} {
		base := t.TempDir()
		mode := c.dirMode
		if c.sticky {
			mode |= os.ModeSticky
		}
		d := mk(t, filepath.Join(base, "d")+"/", mode, c.dirUID)
		p := mk(t, filepath.Join(d, "tokens"), 0o644, c.fileUID)
		err := r.check(p)
		wants(t, c.name, err, c.want...)
		if c.wantInDir && err != nil && (!strings.Contains(err.Error(), "directory "+d+" ") || !strings.HasPrefix(err.Error(), "tokens file "+p+": ")) {
			t.Errorf("%s: %q does not name the file and the directory", c.name, err)
		}
		if c.wantInDir && err != nil && strings.Contains(err.Error(), "chmod") && !strings.HasSuffix(err.Error(), "chmod go-w "+d) {
			t.Errorf("%s: %q does not end with the chmod of the directory", c.name, err)
		}
		// A directory above it counts as well.
		if c.wantInDir {
			up := filepath.Join(d, "sub")
			mk(t, up+"/", 0o755, me)
			wants(t, c.name+", a level above", r.check(mk(t, filepath.Join(up, "tokens"), 0o644, me)), c.want...)
		}
	}
}

// TestSymlinks: the chain of links is followed as the kernel does, and
// every directory a name is looked up in on the way counts, that of
// each link too (a writable one lets others replace the link).
func TestSymlinks(t *testing.T) {
	needRoot(t)
	r := rule{uid: me}
	base := t.TempDir()
	safe := mk(t, filepath.Join(base, "safe")+"/", 0o755, me)
	open := mk(t, filepath.Join(base, "open")+"/", 0o777, me)
	tmp := mk(t, filepath.Join(base, "tmp")+"/", 0o777|os.ModeSticky, 0)
	target := mk(t, filepath.Join(safe, "tokens"), 0o644, me)

	wants(t, "a link in a safe directory", r.check(link(t, target, filepath.Join(safe, "abs"), me)))
	wants(t, "a relative link", r.check(link(t, "tokens", filepath.Join(safe, "rel"), me)))
	wants(t, "a link through ..", r.check(link(t, "../safe/./tokens", filepath.Join(safe, "dotdot"), me)))
	wants(t, "a link of root's", r.check(link(t, target, filepath.Join(safe, "roots"), 0)))
	wants(t, "a link of another's in a safe directory (only its directory's writers can replace it)", r.check(link(t, target, filepath.Join(safe, "others"), other)))
	wants(t, "a chain of links", r.check(link(t, "abs", filepath.Join(safe, "chain"), me)))

	err := r.check(link(t, target, filepath.Join(open, "tokens"), me))
	wants(t, "a link in a writable directory", err, "directory "+open+" can be written by other users (mode 0777)", "chmod go-w "+open)
	wants(t, "a link through a writable directory's link",
		r.check(link(t, filepath.Join(open, "tokens"), filepath.Join(safe, "via-open"), me)), "directory "+open+" ")
	inOpen := mk(t, filepath.Join(open, "real"), 0o644, me)
	wants(t, "a link to a file in a writable directory", r.check(link(t, inOpen, filepath.Join(safe, "to-open"), me)), "directory "+open+" ")

	wants(t, "my link in a sticky directory", r.check(link(t, target, filepath.Join(tmp, "mine"), me)))
	wants(t, "root's link in a sticky directory", r.check(link(t, target, filepath.Join(tmp, "roots"), 0)))
	wants(t, "another's link in a sticky directory", r.check(link(t, target, filepath.Join(tmp, "theirs"), other)),
		"the symbolic link "+filepath.Join(tmp, "theirs")+", in directory "+tmp, "owned by uid 65534")

	// A loop is the open's refusal; walk bounds it too.
	link(t, "loop-b", filepath.Join(safe, "loop-a"), me)
	link(t, "loop-a", filepath.Join(safe, "loop-b"), me)
	if _, err := r.walk("tokens file", filepath.Join(safe, "loop-a")); err == nil || !strings.Contains(err.Error(), "more than 40 symbolic links") {
		t.Errorf("a loop: %v", err)
	}
}

// TestKubernetesVolume: a ConfigMap or Secret as the kubelet lays it
// out, in a directory of root's: the key a link to ..data/KEY, ..data a
// link to a timestamped directory. A Secret's tmpfs is mode 1777 and
// passes as any sticky directory of root's; a ConfigMap's directory is
// 0777, not sticky, on a read-only mount, and passes only there.
func TestKubernetesVolume(t *testing.T) {
	needRoot(t)
	r := rule{uid: me} // the pod's user: not the files' owner
	layout := func(vol string) string {
		ts := mk(t, filepath.Join(vol, "..2026_01_02_03_04_05.123456789")+"/", 0o755, 0)
		mk(t, filepath.Join(ts, "tokens"), 0o644, 0)
		link(t, filepath.Base(ts), filepath.Join(vol, "..data"), 0)
		return link(t, "..data/tokens", filepath.Join(vol, "tokens"), 0)
	}
	secret := layout(mk(t, filepath.Join(t.TempDir(), "secret")+"/", 0o777|os.ModeSticky, 0))
	wants(t, "a Secret's volume (sticky)", r.check(secret))

	vol := mk(t, filepath.Join(t.TempDir(), "configmap")+"/", 0o777, 0)
	cm := layout(vol)
	wants(t, "a ConfigMap's directory, writable", r.check(cm), "directory "+vol+" can be written by other users")
	inMountNS(t, func() {
		readOnlyBind(t, vol)
		wants(t, "a ConfigMap's directory, read-only", r.check(cm))
		// The file's own mode counts even there (a defaultMode 0666).
		f := filepath.Join(vol, "..2026_01_02_03_04_05.123456789", "tokens")
		if err := unix.Mount("", vol, "", unix.MS_BIND|unix.MS_REMOUNT, ""); err != nil {
			t.Errorf("remount read-write: %v", err)
			return
		}
		os.Chmod(f, 0o666)
		readOnlyBind(t, vol)
		wants(t, "a file of mode 0666 on a read-only mount", r.check(cm), "(mode 0666): chmod go-w "+cm)
	})
}

// readOnlyBind mounts dir read-only over itself (in the mount namespace
// of inMountNS).
func readOnlyBind(t *testing.T, dir string) {
	t.Helper()
	if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
		t.Errorf("bind %s: %v", dir, err)
	}
	if err := unix.Mount("", dir, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		t.Errorf("remount %s read-only: %v", dir, err)
	}
}

// inMountNS runs f on a thread of its own in a mount namespace of its
// own: the thread is never unlocked, so it ends with f, and the
// namespace with it; no mount is seen outside it.
func inMountNS(t *testing.T, f func()) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			errc <- err
			return
		}
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			errc <- err
			return
		}
		f()
		errc <- nil
	}()
	if err := <-errc; err != nil {
		t.Skipf("no mount namespace of the test's own: %v", err)
	}
}

// TestRelativePath: a relative name is looked up from the working
// directory, whose own directories count.
func TestRelativePath(t *testing.T) {
	needRoot(t)
	r := rule{uid: me}
	base := t.TempDir()
	safe := mk(t, filepath.Join(base, "safe")+"/", 0o755, me)
	mk(t, filepath.Join(safe, "tokens"), 0o644, me)
	open := mk(t, filepath.Join(base, "open")+"/", 0o777, me)
	mk(t, filepath.Join(open, "tokens"), 0o644, me)
	t.Chdir(safe)
	wants(t, "tokens in a safe working directory", r.check("tokens"))
	wants(t, "../open/tokens", r.check("../open/tokens"), "directory "+open+" ")
	t.Chdir(open)
	wants(t, "tokens in a writable working directory", r.check("tokens"), "directory "+open+" ")
}

// TestNotRegular: a pipe, /dev/stdin, a process substitution are left
// alone, whatever the name.
func TestNotRegular(t *testing.T) {
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	if err := (rule{uid: me}).verify("tokens file", "/dev/stdin", pr); err != nil {
		t.Errorf("a pipe: %v", err)
	}
}

// TestSwapped: the name must still name what was opened when the
// directories have been checked.
func TestSwapped(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "tokens")
	if err := os.WriteFile(p, []byte("old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := os.WriteFile(p+".new", []byte("new\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(p+".new", p); err != nil {
		t.Fatal(err)
	}
	wants(t, "a file replaced after its open", Verify("tokens file", p, f), "changed while it was being checked")
}

// TestCheckDir: a directory trust files are kept in, and those on the
// way to it.
func TestCheckDir(t *testing.T) {
	needRoot(t)
	r := rule{uid: me}
	base := t.TempDir()
	home := mk(t, filepath.Join(base, "home")+"/", 0o755, me)
	streams := mk(t, filepath.Join(home, "streams")+"/", 0o700, me)
	wants(t, "records 0700 in home 0755", r.checkDir("records directory", streams))
	os.Chmod(streams, 0o777)
	wants(t, "records 0777", r.checkDir("records directory", streams), "records directory "+streams+" can be written", "chmod go-w "+streams)
	os.Chmod(streams, 0o700)
	os.Chmod(home, 0o770)
	wants(t, "home 0770", r.checkDir("records directory", streams), "records directory "+streams+": directory "+home+" can be written", "chmod go-w "+home)
	os.Chmod(home, 0o755)
	os.Chown(streams, other, 0)
	wants(t, "records of another's", r.checkDir("records directory", streams), "is owned by uid 65534")
	if err := r.checkDir("records directory", filepath.Join(home, "absent")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing directory: %v", err)
	}
}

// TestExported: Open, ReadFile, Verify and CheckDir apply the rule for
// the user running the test.
func TestExported(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "roles")
	if err := os.WriteFile(p, []byte("user any\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadFile("roles file", p); err != nil || string(b) != "user any\n" {
		t.Errorf("ReadFile of a 0644 file: %q, %v", b, err)
	}
	if err := CheckDir("records directory", dir); err != nil {
		t.Errorf("CheckDir of a test's directory: %v", err)
	}
	os.Chmod(p, 0o666)
	if f, err := Open("roles file", p); f != nil || !IsRefusal(err) || !strings.Contains(err.Error(), "roles file "+p+" can be written by other users (mode 0666): chmod go-w "+p) {
		t.Errorf("Open of a 0666 file: %v", err)
	}
	if _, err := ReadFile("roles file", filepath.Join(dir, "absent")); !errors.Is(err, os.ErrNotExist) || IsRefusal(err) {
		t.Errorf("ReadFile of a missing file: %v", err)
	}
}
