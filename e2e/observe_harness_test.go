package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"scistream/internal/localgw"
	"scistream/internal/metricstest"
	"scistream/internal/waitfor"
)

// What the observation tests (observe_test.go) drive: a paced transfer
// whose rate is known, a real headless Chromium, and a real terminal
// (tmux).

// pacedTransfer is a producer that writes at a fixed rate through a
// stream until stopped, and the consumer behind it, which times the
// bytes it reads: the known transfer the gateways' numbers are held to.
type pacedTransfer struct {
	ln      net.Listener
	stop    chan struct{}
	wg      sync.WaitGroup
	endOnce sync.Once

	// Set once both ends are done (wait).
	sent, got   int64
	first, last time.Time // the consumer's first and last read
	sendErr     error
	recvErr     error
}

// newConsumer listens on a fresh loopback address for the transfer's one
// connection.
func newConsumer(t *testing.T) *pacedTransfer {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(localgw.RandomLoopback(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return &pacedTransfer{ln: ln, stop: make(chan struct{})}
}

func (x *pacedTransfer) host() string { h, _, _ := net.SplitHostPort(x.ln.Addr().String()); return h }
func (x *pacedTransfer) port() string { _, p, _ := net.SplitHostPort(x.ln.Addr().String()); return p }

// start connects to listener (the stream's outbound listener) and sends
// rate bytes per second, as a schedule: every 10 ms it writes what the
// time since the start is due. It goes on for at least least, and then
// until end: a stall of the producer on a busy machine moves its bytes
// from one rate sample to the next, which a long steady state averages
// out.
func (x *pacedTransfer) start(t *testing.T, listener string, rate float64, least time.Duration) {
	t.Helper()
	c, err := net.Dial("tcp", listener)
	if err != nil {
		t.Fatal(err)
	}
	x.wg.Add(2)
	go func() { // the consumer
		defer x.wg.Done()
		a, err := x.ln.Accept()
		if err != nil {
			x.recvErr = err
			return
		}
		defer a.Close()
		buf := make([]byte, 256<<10)
		for {
			n, err := a.Read(buf)
			if n > 0 {
				now := time.Now()
				if x.got == 0 {
					x.first = now
				}
				x.got += int64(n)
				x.last = now
			}
			if errors.Is(err, io.EOF) {
				return
			}
			if err != nil {
				x.recvErr = err
				return
			}
		}
	}()
	go func() { // the producer
		defer x.wg.Done()
		defer c.Close()
		buf := make([]byte, 256<<10)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		start := time.Now()
		stop := x.stop
		for {
			select {
			case <-stop:
				stop = nil // stopping: at the next tick past least
				continue
			case <-tick.C:
			}
			if stop == nil && time.Since(start) >= least {
				c.(*net.TCPConn).CloseWrite()
				io.Copy(io.Discard, c) // until the consumer closes
				return
			}
			for due := int64(rate*time.Since(start).Seconds()) - x.sent; due > 0; {
				n, err := c.Write(buf[:min(due, int64(len(buf)))])
				x.sent += int64(n)
				due -= int64(n)
				if err != nil {
					x.sendErr = err
					return
				}
			}
		}
	}()
	t.Cleanup(x.end)
}

// end stops the producer and waits for both ends. Idempotent.
func (x *pacedTransfer) end() {
	x.endOnce.Do(func() { close(x.stop) })
	x.wg.Wait()
}

// rate is the consumer's goodput: bytes over the time from its first
// read to its last (seed 000's goodput).
func (x *pacedTransfer) rate() float64 { return float64(x.got) / x.last.Sub(x.first).Seconds() }

// scrapePlain scrapes g's plain metrics listener (no token) and checks
// the exposition with promtool.
func scrapePlain(t *testing.T, g *localgw.Gateway) metricstest.Metrics {
	t.Helper()
	if g.MetricsAddr == "" {
		t.Fatalf("gateway %s has no metrics listener (--metrics_listen)", g.Addr)
	}
	resp, err := http.Get("http://" + g.MetricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics on %s: %d %v", g.MetricsAddr, resp.StatusCode, err)
	}
	metricstest.Promtool(t, b)
	return metricstest.Parse(t, b)
}

// artifactsDir is where tests leave what a person may want to look at (a
// screenshot): $SCISTREAM_TEST_ARTIFACTS if set, else the test's
// temporary directory (gone after the test; the test logs the path).
func artifactsDir(t *testing.T) string {
	if d := os.Getenv("SCISTREAM_TEST_ARTIFACTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatalf("SCISTREAM_TEST_ARTIFACTS: %v", err)
		}
		return d
	}
	return t.TempDir()
}

// missing skips t when a tool the test drives is not installed, except
// under CI, where scripts/setup.sh installed it and its absence fails.
func missing(t *testing.T, what string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("%s (scripts/setup.sh installs it)", what)
	}
	t.Skipf("%s: run scripts/setup.sh, which installs it", what)
}

// newBrowser starts headless Chromium (it trusts any certificate: the
// gateways' are self-signed) and returns a context to drive a tab with.
// The browser lives until owner ends, and is stopped and waited for then.
// An error means Chromium is not installed or cannot start.
func newBrowser(owner *testing.T) (context.Context, error) {
	bin, err := exec.LookPath("chromium")
	if err != nil {
		return nil, errors.New("chromium not installed (the Debian package chromium)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.NoSandbox, // root in a container: Chromium's sandbox needs user namespaces
		chromedp.Flag("ignore-certificate-errors", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1600, 900),
		chromedp.UserDataDir(owner.TempDir()),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	owner.Cleanup(func() { cancel(); cancelAlloc() })
	// The first action starts the browser, which lives as long as this
	// context: no timeout on it.
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		return nil, fmt.Errorf("chromium cannot start: %w", err)
	}
	return ctx, nil
}

// tmux is a tmux server of the test's own (its own socket, -L), killed
// when the test ends.
type tmux struct {
	t      *testing.T
	socket string
}

func newTmux(t *testing.T) *tmux {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		missing(t, "tmux not installed (the Debian package tmux)")
	}
	b := make([]byte, 6)
	rand.Read(b)
	x := &tmux{t: t, socket: "scistream-e2e-" + hex.EncodeToString(b)}
	t.Cleanup(x.kill)
	return x
}

// run runs a tmux command on the test's server and returns its output.
func (x *tmux) run(args ...string) (string, error) {
	cmd := exec.Command("tmux", append([]string{"-L", x.socket, "-f", "/dev/null"}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (x *tmux) must(args ...string) string {
	x.t.Helper()
	out, err := x.run(args...)
	if err != nil {
		x.t.Fatalf("tmux %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return out
}

// kill stops the server: kill-server, then its process by PID if it is
// still there.
func (x *tmux) kill() {
	pid := 0
	if out, err := x.run("display-message", "-p", "#{pid}"); err == nil {
		fmt.Sscan(strings.TrimSpace(out), &pid)
	}
	x.run("kill-server")
	if pid > 0 && !waitfor.Cond(5*time.Second, func() bool { return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) }) {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	os.Remove(filepath.Join(fmt.Sprintf("/tmp/tmux-%d", os.Getuid()), x.socket))
}
