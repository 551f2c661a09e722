package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"scistream/internal/api"
	"scistream/internal/localgw"
	"scistream/internal/metricstest"
	"scistream/internal/waitfor"
)

// TestObserve runs one paced transfer of known rate (20 MB/s, 8 s or
// more) through two gateways that sample their rates every 200 ms (a
// steady state of 6 s or more, 30 samples), and looks at it the way
// an operator does: while it runs, the status page in a real headless
// Chromium and s2uc watch in a real terminal (tmux) must show the stream
// moving; once it ended, the Prometheus metrics, the status page and s2uc
// watch must show the same numbers, the bytes the producer sent and a
// steady-state rate within 5% of the rate the consumer measured.
func TestObserve(t *testing.T) {
	const rate = 20e6
	// alice streams and reads the operators' views: the reader role.
	roles := filepath.Join(t.TempDir(), "roles")
	if err := os.WriteFile(roles, []byte("user any\nreader identity alice\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := newPair(t, pairOpts{args: []string{"--rate_interval", "200ms", "--metrics_listen", "127.0.0.1:0", "--roles", roles}})
	x := newConsumer(t)
	so := p.wire("alice", x.host(), x.port(), 1)
	x.start(t, so.Listeners[0], rate, 8*time.Second)
	page := &statusPage{gw: p.prod, token: p.tokens["alice"], uid: so.UID}
	owner := t // the browser lives until the last subtest has looked

	t.Run("status page in a browser during the transfer", func(t *testing.T) {
		page.open(t, owner)
		page.login(t, "not-a-token")
		page.waitFor(t, "the page to say the gateway refused the token",
			`document.getElementById("message").textContent.includes("refused the token") && !document.getElementById("login").hidden`)
		page.login(t, page.token)
		page.waitFor(t, "the stream's row with a rate to the WAN above zero", page.row(`Number(r.querySelector("td.rate").dataset.rateToWan) > 0`))
		page.waitFor(t, "the rate chart drawn", page.row(`r.querySelectorAll("svg.chart polyline").length == 2`))
		page.screenshot(t, "status-page-during-transfer.png")
		loc := page.eval(t, "location.href")
		if strings.Contains(loc, page.token) {
			t.Errorf("the token is in the page's address %s", loc)
		}
		if got := page.eval(t, `document.getElementById("health").textContent`); !strings.Contains(got, "1 connected") || !strings.Contains(got, "1 relaying") {
			t.Errorf("health shows %q; want 1 connected stream and 1 relaying WAN connection", got)
		}
	})

	t.Run("s2uc watch in tmux during the transfer", func(t *testing.T) {
		tm := newTmux(t)
		// The shell around watch says how it exited, on the terminal's
		// normal screen, which watch gives back when it quits.
		cmd := fmt.Sprintf(`%s watch %s --s2cs %s --server_cert %s --interval 500ms; echo "watch exited $?"`, bins.s2uc, so.UID, p.prod.Addr, p.prod.CertFile)
		tm.must("new-session", "-d", "-s", "w", "-x", "150", "-y", "40",
			"-e", "SCISTREAM_TOKEN="+p.tokens["alice"], "-e", "SCISTREAM_HOME="+filepath.Join(p.home, "alice"), cmd,
			";", "set-option", "-t", "w", "remain-on-exit", "on")
		nowRE := regexp.MustCompile(`to WAN\s+now\s+([0-9.]+)`)
		var screen string
		if !waitfor.Cond(20*time.Second, func() bool {
			screen, _ = tm.run("capture-pane", "-p", "-t", "w")
			m := nowRE.FindStringSubmatch(screen)
			r, _ := strconv.ParseFloat(valueOf(m), 64)
			return strings.Contains(screen, so.UID) && r > 0
		}) {
			t.Fatalf("the watch pane never showed stream %s with a rate to the WAN above zero:\n%s", so.UID, screen)
		}
		t.Logf("the watch pane:\n%s", screen)
		tm.must("send-keys", "-t", "w", "q")
		// Once the shell ended too, tmux says so on the pane ("Pane is
		// dead (status N, ...)"), which may overwrite the shell's line.
		exitRE := regexp.MustCompile(`watch exited (\d+)|Pane is dead \(status (\d+)`)
		var after string
		var m []string
		if !waitfor.Cond(10*time.Second, func() bool {
			after, _ = tm.run("capture-pane", "-p", "-t", "w")
			m = exitRE.FindStringSubmatch(after)
			return m != nil
		}) {
			t.Fatalf("s2uc watch did not exit on q; the pane:\n%s", after)
		}
		if m[1]+m[2] != "0" {
			t.Errorf("s2uc watch did not exit with status 0 on q; the pane:\n%s", after)
		}
		if strings.Contains(after, "s2uc watch:") {
			t.Errorf("the terminal still shows the view after watch quit (alternate screen not left):\n%s", after)
		}
	})

	// The transfer ends; both gateways close its run of samples.
	x.end()
	if x.sendErr != nil || x.recvErr != nil || x.got != x.sent || x.sent == 0 {
		t.Fatalf("transfer: sent %d (%v), received %d (%v)", x.sent, x.sendErr, x.got, x.recvErr)
	}
	known := x.rate()
	t.Logf("known transfer: %d bytes at %.2f MB/s over %s", x.sent, known/1e6, x.last.Sub(x.first).Round(time.Millisecond))
	for _, g := range []*localgw.Gateway{p.prod, p.cons} {
		c, err := g.Client(p.tokens["alice"])
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		waitfor.Must(t, 10*time.Second, "the gateway to close the transfer's run of samples", func() bool {
			s, err := c.Get(context.Background(), so.UID)
			if err != nil || s.Stats == nil || s.Stats.Rates == nil {
				return false
			}
			// A stall of a whole sampling interval (two cores shared
			// with a browser starting) splits the transfer into runs of
			// samples: the last one must have ended, and every byte be
			// counted.
			r, n := s.Stats.Rates.ToWAN.LastRun, s.Stats.BytesToWAN
			if s.Role == api.RoleInbound {
				r, n = s.Stats.Rates.FromWAN.LastRun, s.Stats.BytesFromWAN
			}
			return r != nil && r.Ended && n == x.sent
		})
	}

	t.Run("metrics, status page and watch agree with the transfer", func(t *testing.T) {
		// Metrics: bytes exact, the steady state within 5% of the known
		// rate, on both gateways.
		out, in := scrapePlain(t, p.prod), scrapePlain(t, p.cons)
		ol := metricstest.Labels{"uid": so.UID, "role": "outbound", "owner": "alice"}
		il := metricstest.Labels{"uid": so.UID, "role": "inbound", "owner": "alice"}
		lab := func(l metricstest.Labels, dir string, span ...string) metricstest.Labels {
			c := metricstest.Labels{"direction": dir}
			for k, v := range l {
				c[k] = v
			}
			if len(span) > 0 {
				c["span"] = span[0]
			}
			return c
		}
		if b := out.Value(t, "scistream_stream_bytes_total", lab(ol, "to_wan")); b != float64(x.sent) {
			t.Errorf("outbound gateway's metric: %g bytes to the WAN, the producer sent %d", b, x.sent)
		}
		if b := in.Value(t, "scistream_stream_bytes_total", lab(il, "from_wan")); b != float64(x.sent) {
			t.Errorf("inbound gateway's metric: %g bytes from the WAN, the producer sent %d", b, x.sent)
		}
		steadyOut := out.Value(t, "scistream_stream_rate_mean_bytes_per_second", lab(ol, "to_wan", "steady"))
		steadyIn := in.Value(t, "scistream_stream_rate_mean_bytes_per_second", lab(il, "from_wan", "steady"))
		for _, g := range []struct {
			name string
			v    float64
		}{{"outbound", steadyOut}, {"inbound", steadyIn}} {
			if math.Abs(g.v/known-1) > 0.05 {
				t.Errorf("%s gateway's steady rate %.3f MB/s, the consumer measured %.3f MB/s: more than 5%% apart", g.name, g.v/1e6, known/1e6)
			}
		}
		t.Logf("steady rate: outbound %.3f MB/s, inbound %.3f MB/s; known %.3f MB/s", steadyOut/1e6, steadyIn/1e6, known/1e6)

		// The status page shows the same bytes and steady rate.
		if page.ctx == nil {
			t.Log("no browser (the status page subtest did not run): metrics and watch only")
		} else {
			// It refreshes every second: within a few it must show the
			// very numbers of the metrics.
			cond := fmt.Sprintf(`r.querySelector("td.bytes").dataset.bytesToWan == "%d" && Number(r.querySelector("td.steady").dataset.steadyToWan) == %s`,
				x.sent, strconv.FormatFloat(steadyOut, 'g', -1, 64))
			if err := page.poll(page.row(cond)); err != nil {
				t.Errorf("the status page never showed %d bytes and a steady rate of %v, the metrics' numbers (%v); it shows %s bytes and %s",
					x.sent, steadyOut, err, page.eval(t, page.rowExpr(`r.querySelector("td.bytes").dataset.bytesToWan`)),
					page.eval(t, page.rowExpr(`r.querySelector("td.steady").dataset.steadyToWan`)))
			}
			page.screenshot(t, "status-page-after-transfer.png")
		}

		// s2uc watch on a pipe: one line per stream per refresh, on each
		// gateway of the stream (its local record).
		stdout := p.mustS2UC("alice", "watch", so.UID, "--count", "1")
		lines := strings.Split(strings.TrimSpace(stdout), "\n")
		if len(lines) != 2 {
			t.Fatalf("s2uc watch --count 1 printed %d lines, want one per gateway:\n%s", len(lines), stdout)
		}
		for _, want := range []string{
			fmt.Sprintf("gateway=%s uid=%s role=outbound", p.prod.Addr, so.UID),
			fmt.Sprintf("bytes_to_wan=%d", x.sent),
			fmt.Sprintf("steady_to_wan=%.1f±", steadyOut/1e6),
			fmt.Sprintf("gateway=%s uid=%s role=inbound", p.cons.Addr, so.UID),
			fmt.Sprintf("bytes_from_wan=%d", x.sent),
			fmt.Sprintf("steady_from_wan=%.1f±", steadyIn/1e6),
		} {
			if !strings.Contains(stdout, want) {
				t.Errorf("s2uc watch lacks %q:\n%s", want, stdout)
			}
		}
	})
}

func valueOf(m []string) string {
	if len(m) < 2 {
		return ""
	}
	return m[1]
}

// statusPage drives a gateway's status page in a headless Chromium tab.
type statusPage struct {
	gw    *localgw.Gateway
	token string
	uid   string
	ctx   context.Context // the tab; nil until open
}

// open starts a browser that lives as long as owner and loads the page.
func (s *statusPage) open(t, owner *testing.T) {
	t.Helper()
	ctx, err := newBrowser(owner)
	if err != nil {
		missing(t, err.Error())
	}
	s.ctx = ctx
	if err := s.do(chromedp.Navigate("https://"+s.gw.Addr+"/status"), chromedp.WaitVisible(chromedp.CSS("#token"))); err != nil {
		t.Fatalf("load the status page: %v", err)
	}
}

func (s *statusPage) do(steps ...chromedp.Action[chromedp.Void]) error {
	ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
	defer cancel()
	return chromedp.Do(ctx, steps...)
}

// login types tok into the page's form and submits it.
func (s *statusPage) login(t *testing.T, tok string) {
	t.Helper()
	if err := s.do(chromedp.WaitVisible(chromedp.CSS("#token")), chromedp.SendKeys(chromedp.CSS("#token"), tok), chromedp.Click(chromedp.CSS("#connect"))); err != nil {
		t.Fatalf("log in to the status page: %v", err)
	}
}

// rowExpr is a JavaScript expression of the stream's row r.
func (s *statusPage) rowExpr(expr string) string {
	return fmt.Sprintf(`(() => { const r = document.querySelector('tr[data-uid="%s"]'); return r ? String(%s) : ""; })()`, s.uid, expr)
}

// row is a JavaScript condition on the stream's row r.
func (s *statusPage) row(cond string) string {
	return fmt.Sprintf(`(() => { const r = document.querySelector('tr[data-uid="%s"]'); return !!r && (%s); })()`, s.uid, cond)
}

// waitFor waits until the JavaScript condition holds in the page (the
// page refreshes itself every second).
func (s *statusPage) waitFor(t *testing.T, what, cond string) {
	t.Helper()
	if err := s.poll(cond); err != nil {
		t.Fatalf("waiting for %s: %v\npage text:\n%s", what, err, s.eval(t, "document.body.innerText"))
	}
}

// poll waits up to 20 s for the JavaScript condition to hold in the page.
func (s *statusPage) poll(cond string) error {
	ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](cond, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(20*time.Second)))
	return err
}

func (s *statusPage) eval(t *testing.T, expr string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// screenshot saves the page as name in the artifacts directory and
// returns it.
func (s *statusPage) screenshot(t *testing.T, name string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	path := filepath.Join(artifactsDir(t), name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot of the status page: %s", path)
	return png
}

// TestWatchMisuse: s2uc watch told a stream that is not there says so
// and exits 4 (not found); with no stream it says there is none; and when the
// gateway is killed under a running watch it reports the error on each
// refresh instead of dying, and stops on Ctrl-C (SIGINT) with status 0.
func TestWatchMisuse(t *testing.T) {
	p := newPair(t, pairOpts{})
	gw := []string{"--s2cs", p.cons.Addr, "--server_cert", p.cons.CertFile}
	_, stderr, code := p.s2uc("alice", append([]string{"watch", "0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b6c", "--count", "1"}, gw...)...)
	if code != 4 || !strings.Contains(stderr, "not_found") || strings.Count(stderr, "\n") != 1 {
		t.Errorf("watch of an unknown stream: exit %d, stderr %q; want 4 and one line saying not_found", code, stderr)
	}
	if out := p.mustS2UC("bob", append([]string{"watch", "--count", "1"}, gw...)...); !strings.HasSuffix(strings.TrimSpace(out), "gateway="+p.cons.Addr+" streams=0") {
		t.Errorf("watch with no stream: %q", out)
	}

	cmd := exec.Command(bins.s2uc, append([]string{"watch", "--interval", "100ms"}, gw...)...)
	cmd.Env = append(os.Environ(), "SCISTREAM_HOME="+filepath.Join(p.home, "bob"), "SCISTREAM_TOKEN="+p.tokens["bob"])
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := bufio.NewScanner(out)
	next := func() string {
		if !lines.Scan() {
			t.Fatalf("watch's output ended: %v", lines.Err())
		}
		return lines.Text()
	}
	if l := next(); !strings.Contains(l, "streams=0") {
		t.Fatalf("first line %q", l)
	}
	p.cons.Kill()
	for l := next(); !strings.Contains(l, "error="); l = next() {
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, out)
	if err := cmd.Wait(); err != nil {
		t.Errorf("watch after Ctrl-C: %v, want exit 0", err)
	}
}
