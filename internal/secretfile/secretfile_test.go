package secretfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestModes: one rule for every secret file (issue 25, finding 7: a
// 0644 etcd password file was accepted where a 0644 client secret was
// refused).
func TestModes(t *testing.T) {
	dir := t.TempDir()
	for mode, ok := range map[os.FileMode]bool{
		0o600: true, 0o400: true, 0o640: true, 0o440: true, // a Kubernetes Secret for an fsGroup
		0o644: false, 0o604: false, 0o660: false, 0o620: false, 0o666: false, 0o602: false, 0o601: false,
	} {
		path := filepath.Join(dir, "secret")
		os.Remove(path)
		if err := os.WriteFile(path, []byte("s3cret\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		err := Check("password file", path)
		if (err == nil) != ok {
			t.Errorf("mode %04o: %v, want accepted %t", mode, err, ok)
		}
		f, oerr := Open("password file", path)
		if (oerr == nil) != ok {
			t.Errorf("Open, mode %04o: %v, want accepted %t", mode, oerr, ok)
		}
		if f != nil {
			f.Close()
		}
		if err != nil && (!strings.Contains(err.Error(), "chmod 600 "+path) || strings.Contains(err.Error(), "s3cret")) {
			t.Errorf("refusal %q does not name the fix, or shows the secret", err)
		}
	}
	if _, err := Open("password file", filepath.Join(dir, "absent")); !os.IsNotExist(err) {
		t.Errorf("Open of a missing file: %v", err)
	}
}

// TestOwnerAndDirectory: a secret file is also a trusted one (issue 35):
// its mode rule comes first (the chmod 600 a secret needs), then the
// owner and the directories of internal/trustfile.
func TestOwnerAndDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "d")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "secret")
	if err := os.WriteFile(path, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Check("password file", path); err != nil {
		t.Fatalf("a 0600 file in a 0700 directory: %v", err)
	}
	os.Chmod(dir, 0o777)
	err := Check("password file", path)
	if err == nil || !strings.Contains(err.Error(), "password file "+path+": directory "+dir+" can be written by other users (mode 0777)") || !strings.HasSuffix(err.Error(), "chmod go-w "+dir) {
		t.Errorf("in a 0777 directory: %v", err)
	}
	os.Chmod(path, 0o644)
	if err := Check("password file", path); err == nil || !strings.Contains(err.Error(), "chmod 600 "+path) {
		t.Errorf("a 0644 file in a 0777 directory: %v; want the secret's own rule first", err)
	}
	os.Chmod(dir, 0o700)
	os.Chmod(path, 0o600)
	if os.Geteuid() != 0 {
		return
	}
	if err := os.Chown(path, 65534, 0); err != nil {
		t.Fatal(err)
	}
	if err := Check("password file", path); err == nil || !strings.Contains(err.Error(), "is owned by uid 65534") {
		t.Errorf("another user's secret: %v", err)
	}
}
