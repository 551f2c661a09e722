package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"scistream/internal/localgw"
)

// listenNotify is a service manager's notification socket at name.
func listenNotify(t *testing.T, name string) *net.UnixConn {
	t.Helper()
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// nextState reads one notification, waiting at most 15 s.
func nextState(t *testing.T, c *net.UnixConn) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(15 * time.Second))
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("no notification: %v", err)
	}
	return string(buf[:n])
}

// TestNotifyReady runs s2cs as systemd runs a Type=notify unit: it says
// READY=1 only once /healthz answers ok, and STOPPING=1 when told to
// stop.
func TestNotifyReady(t *testing.T) {
	dir := t.TempDir()
	sock := listenNotify(t, filepath.Join(dir, "notify"))
	t.Setenv("NOTIFY_SOCKET", filepath.Join(dir, "notify"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := run(ctx, []string{"--listener_ip", localgw.RandomLoopback(), "--port", "0", "--port_range", "5100-5101",
			"--state_dir", dir, "--insecure_no_auth"}, pw, io.Discard)
		pw.Close()
		done <- err
	}()
	go io.Copy(io.Discard, bufio.NewReader(pr))
	state := nextState(t, sock)
	addr, ok := strings.CutPrefix(state, "READY=1\nSTATUS=control API on https://")
	if !ok {
		t.Fatalf("first notification %q, want READY=1 and the control API's address", state)
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("https://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("ready, but /healthz: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("ready, but /healthz answers %d", resp.StatusCode)
	}
	cancel()
	if state := nextState(t, sock); state != "STOPPING=1" {
		t.Errorf("notification at stop %q, want STOPPING=1", state)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestNotifyAbstract: NOTIFY_SOCKET may name an abstract socket (@name);
// an absent one makes send fail, never block; none sends nothing.
func TestNotifyAbstract(t *testing.T) {
	name := "scistream-test-" + filepath.Base(t.TempDir())
	sock := listenNotify(t, "\x00"+name)
	if err := newNotifier("@" + name).send("READY=1"); err != nil {
		t.Fatal(err)
	}
	if got := nextState(t, sock); got != "READY=1" {
		t.Fatalf("got %q", got)
	}
	if err := newNotifier(filepath.Join(t.TempDir(), "absent")).send("READY=1"); err == nil {
		t.Error("send to an absent socket succeeded")
	}
	if n := newNotifier(""); n != nil || n.send("READY=1") != nil {
		t.Error("an empty NOTIFY_SOCKET gave a notifier")
	}
}
