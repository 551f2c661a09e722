package etcdtest

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"scistream/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// TestStopRestart: a started etcd answers; Stop kills its process; Restart
// serves the same address with the data written before.
func TestStopRestart(t *testing.T) {
	e := Start(t, Options{})
	cli := client(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, Prefix+"k", "v"); err != nil {
		t.Fatal(err)
	}
	pid := e.PID()
	e.Stop()
	e.Stop() // a second Stop does nothing
	if err := syscall.Kill(pid, 0); err != syscall.ESRCH {
		t.Fatalf("etcd's process %d after Stop: kill(0) = %v, want ESRCH", pid, err)
	}
	if e.PID() != 0 {
		t.Fatal("PID of a stopped etcd is not 0")
	}
	e.Restart()
	resp, err := cli.Get(ctx, Prefix+"k")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("after Restart: %v, %v; want the value written before", resp, err)
	}
}

// TestTLSAuth: with TLS and authentication, the user reads and writes
// under Prefix and nowhere else, and the password file holds the
// password alone, private to its owner.
func TestTLSAuth(t *testing.T) {
	e := Start(t, Options{TLS: true, Auth: true})
	if !strings.HasPrefix(e.URL(), "https://") {
		t.Fatalf("URL %s of a TLS server", e.URL())
	}
	cli := client(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, Prefix+"k", "v"); err != nil {
		t.Fatalf("Put under %s: %v", Prefix, err)
	}
	if _, err := cli.Put(ctx, "/other", "v"); err == nil {
		t.Fatal("Put outside the prefix was allowed")
	}
	b, err := os.ReadFile(e.PasswordFile)
	if err != nil || string(b) != e.Password {
		t.Fatalf("password file holds %d bytes, %v; want the password", len(b), err)
	}
	if st, _ := os.Stat(e.PasswordFile); st.Mode().Perm() != 0o600 {
		t.Fatalf("password file mode %v", st.Mode().Perm())
	}
}

// TestMissingBinary: without etcd on PATH, Start fails the test and says
// how to install it; it never skips.
func TestMissingBinary(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Start(r, Options{})
	}()
	<-done
	if !strings.Contains(r.msg, "scripts/setup.sh") || !strings.Contains(r.msg, "etcd-server") {
		t.Fatalf("Start without etcd said %q; want it to name scripts/setup.sh and etcd-server", r.msg)
	}
}

// recorder is a testing.TB whose Fatalf records the message and ends the
// goroutine, as the real one does.
type recorder struct {
	testing.TB
	msg string
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func client(t *testing.T, e *Etcd) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{e.URL()}, TLS: e.ClientTLS(),
		Username: e.User, Password: e.Password, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}
