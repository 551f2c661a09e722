package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"scistream/internal/auth"
	"scistream/internal/certs"
	"scistream/internal/localgw"
)

// startBinary starts the s2cs binary bin with args (--log_format json
// among them) and returns it, its stderr and the control API's address
// once it says where that is. The test's end stops it by its PID.
func startBinary(t *testing.T, bin string, args ...string) (*exec.Cmd, *syncBuffer, string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	// It dies with the test binary, also when a timeout kills that.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		<-exited
	})
	addrc := make(chan string, 1)
	go func() {
		defer close(exited)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(announced(sc.Text()), "control API on https://"); ok {
				a, _, _ = strings.Cut(a, " ")
				addrc <- a
				break
			}
		}
		io.Copy(io.Discard, stdout)
		cmd.Wait()
	}()
	select {
	case addr := <-addrc:
		return cmd, logs, addr
	case <-exited:
		t.Fatalf("s2cs exited before it served; stderr:\n%s", logs)
	case <-time.After(30 * time.Second):
		t.Fatalf("s2cs never said where it serves; stderr:\n%s", logs)
	}
	return nil, nil, ""
}

// TestTrustFilesRefused runs the real s2cs with each file that decides
// whom it trusts (issue 35, finding 3) in each state that lets another
// user change it: writable by its group or by all, owned by another
// user, in a directory others can write, named by a link in such a
// directory. Each is refused at start, exit status 2, the message naming
// the file (or the directory) and the command that fixes it. The same
// files, kept right, start it, the tokens file as Kubernetes mounts a
// Secret (links in a sticky directory of root's).
func TestTrustFilesRefused(t *testing.T) {
	bin := buildS2CS(t)
	dir := t.TempDir()
	write := func(path, text string) string {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	caPEM, _, err := certs.SelfSigned([]string{"ca.example"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	tokensText := auth.HashToken("alice-token") + " alice\n"
	good := filepath.Join(dir, "good")
	tokens := write(filepath.Join(good, "tokens"), tokensText)
	secret := filepath.Join(good, "client-secret")
	if err := os.WriteFile(secret, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ip := localgw.RandomLoopback()
	base := func(state string) []string {
		return []string{"--listener_ip", ip, "--port", "0", "--port_range", "5100-5101", "--state_dir", state}
	}
	kinds := []struct {
		name, text string
		args       func(path string) []string
	}{
		{"tokens file", tokensText, func(p string) []string { return []string{"--tokens", p} }},
		{"roles file", "user any\noperator identity alice\n", func(p string) []string { return []string{"--tokens", tokens, "--roles", p} }},
		{"configuration file", "tokens: " + tokens + "\n", func(p string) []string { return []string{"--config", p} }},
		{"peer CA file", string(caPEM), func(p string) []string { return []string{"--tokens", tokens, "--control_grpc", "--peer_ca", p} }},
		{"JWKS file", `{"keys":[]}`, func(p string) []string {
			return []string{"--oidc_issuer", "https://idp.example", "--oidc_audience", "gw", "--oidc_jwks_file", p}
		}},
		{"CA file", string(caPEM), func(p string) []string {
			return []string{"--introspection_url", "https://127.0.0.1:1/introspect", "--introspection_client_id", "gw",
				"--introspection_secret_file", secret, "--oidc_ca", p}
		}},
		{"etcd CA file", string(caPEM), func(p string) []string {
			return []string{"--tokens", tokens, "--store", "etcd://127.0.0.1:1", "--store_facility", "f", "--etcd_ca", p}
		}},
	}
	type fault struct {
		name string
		// make lays the file out in d, as the fault has it, and returns
		// the path to give and what the refusal must say.
		make func(t *testing.T, d, text string) (path string, want []string)
	}
	faults := []fault{
		{"group-writable", func(t *testing.T, d, text string) (string, []string) {
			p := write(filepath.Join(d, "f"), text)
			os.Chmod(p, 0o664)
			return p, []string{p + " can be written by other users (mode 0664): chmod go-w " + p}
		}},
		{"world-writable", func(t *testing.T, d, text string) (string, []string) {
			p := write(filepath.Join(d, "f"), text)
			os.Chmod(p, 0o666)
			return p, []string{p + " can be written by other users (mode 0666): chmod go-w " + p}
		}},
		{"in a writable directory", func(t *testing.T, d, text string) (string, []string) {
			p := write(filepath.Join(d, "open", "f"), text)
			os.Chmod(filepath.Dir(p), 0o777)
			return p, []string{p + ": directory " + filepath.Dir(p) + " can be written by other users (mode 0777)", "chmod go-w " + filepath.Dir(p)}
		}},
		{"a link in a writable directory", func(t *testing.T, d, text string) (string, []string) {
			real := write(filepath.Join(d, "safe", "f"), text)
			open := filepath.Join(d, "open")
			os.MkdirAll(open, 0o777)
			os.Chmod(open, 0o777)
			p := filepath.Join(open, "f")
			if err := os.Symlink(real, p); err != nil {
				t.Fatal(err)
			}
			return p, []string{"directory " + open + " can be written by other users (mode 0777)", "chmod go-w " + open}
		}},
	}
	if os.Geteuid() == 0 {
		faults = append(faults, fault{"another user's", func(t *testing.T, d, text string) (string, []string) {
			p := write(filepath.Join(d, "f"), text)
			if err := os.Chown(p, 65534, 65534); err != nil {
				t.Fatal(err)
			}
			return p, []string{p + " is owned by uid 65534", "chown root " + p}
		}})
	} else {
		t.Log("not root: the case of a file owned by another user is skipped (it needs chown)")
	}
	for _, k := range kinds {
		for _, f := range faults {
			t.Run(k.name+", "+f.name, func(t *testing.T) {
				d := t.TempDir()
				path, want := f.make(t, d, k.text)
				// A gateway that takes the file serves until killed: the
				// deadline makes that a failure, not a hang.
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				cmd := exec.CommandContext(ctx, bin, append(base(filepath.Join(d, "state")), k.args(path)...)...)
				cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
				var stderr bytes.Buffer
				cmd.Stderr = &stderr
				err := cmd.Run()
				var ee *exec.ExitError
				if ctx.Err() != nil {
					t.Fatalf("s2cs took the %s and served; stderr:\n%s", k.name, stderr.String())
				}
				if !errors.As(err, &ee) || ee.ExitCode() != 2 {
					t.Fatalf("s2cs: %v, want exit status 2; stderr:\n%s", err, stderr.String())
				}
				msg := stderr.String()
				if !strings.Contains(msg, k.name+" ") {
					t.Errorf("the refusal does not name the %s:\n%s", k.name, msg)
				}
				for _, w := range want {
					if !strings.Contains(msg, w) {
						t.Errorf("the refusal lacks %q:\n%s", w, msg)
					}
				}
			})
		}
	}

	// Kept right, the same files start it: the tokens file through the
	// links of a Kubernetes Secret's volume (a sticky directory of the
	// running user's or root's, KEY -> ..data/KEY, ..data -> a dated
	// directory), the roles, configuration and peer CA files 0644.
	vol := filepath.Join(dir, "secret-volume")
	if err := os.Mkdir(vol, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(vol, 0o777|os.ModeSticky)
	write(filepath.Join(vol, "..2026_01_02_03_04_05.1", "tokens"), tokensText)
	os.Symlink("..2026_01_02_03_04_05.1", filepath.Join(vol, "..data"))
	os.Symlink("..data/tokens", filepath.Join(vol, "tokens"))
	roles := write(filepath.Join(good, "roles"), "user any\n")
	config := write(filepath.Join(good, "s2cs.yaml"), "tokens: "+filepath.Join(vol, "tokens")+"\nroles: "+roles+"\n")
	peerCA := write(filepath.Join(good, "peer-ca.pem"), string(caPEM))
	args := append(base(filepath.Join(dir, "state")), "--config", config, "--control_grpc", "--peer_ca", peerCA, "--log_format", "json")
	_, logs, _ := startBinary(t, bin, args...)
	if !strings.Contains(logs.String(), `"msg":"loaded tokens"`) {
		t.Errorf("s2cs served without saying it loaded the tokens:\n%s", logs)
	}
}

// logHas reports whether the JSON log holds a record whose message
// starts with msg and whose err holds every text of want.
func logHas(logs string, msg string, want ...string) bool {
	for _, line := range strings.Split(logs, "\n") {
		var rec struct{ Msg, Err string }
		if json.Unmarshal([]byte(line), &rec) != nil || !strings.HasPrefix(rec.Msg, msg) {
			continue
		}
		ok := true
		for _, w := range want {
			ok = ok && strings.Contains(rec.Err, w)
		}
		if ok {
			return true
		}
	}
	return false
}
