package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"scistream/internal/observe"
	"scistream/internal/waitfor"
)

// statusScreenshot is the status page's picture in docs/operations.md,
// rewritten by TestStatusPageReadable under -update_docs.
const statusScreenshot = "../docs/img/status-page.png"

// TestStatusPageReadable loads a gateway's status page in headless
// Chromium with two streams, one moving (a paced transfer) and one idle,
// and reads it as a person would: the title names the gateway's
// host:port; every rate has its unit; the idle stream says "idle"
// instead of zero means with zero spreads, and no "± 0" appears
// anywhere; each UID is a short form on one line with the whole UID in
// its title; the chart has two axes with a rate scale in units and a
// time scale in seconds. The page's own style sheet applies (the
// no-wrap of the UIDs comes from it), so its Content-Security-Policy
// admits the inline style it hashes. The idle stream, which never
// carried data, is wired, said apart from the moving one (connected)
// with a tooltip. The screenshot goes to the artifacts directory, and
// with -update_docs to docs/img.
func TestStatusPageReadable(t *testing.T) {
	roles := filepath.Join(t.TempDir(), "roles")
	if err := os.WriteFile(roles, []byte("user any\nreader identity alice\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := newPair(t, pairOpts{args: []string{"--rate_interval", "200ms", "--roles", roles}})
	idleSink := newSink(t, "127.0.0.1", nil)
	idle := p.wire("alice", idleSink.host(), idleSink.port(), 1)
	x := newConsumer(t)
	moving := p.wire("alice", x.host(), x.port(), 1)
	x.start(t, moving.Listeners[0], 4e6, 0)
	defer x.end()

	page := &statusPage{gw: p.prod, token: p.tokens["alice"], uid: moving.UID}
	page.open(t, t)
	if got := page.eval(t, "document.title"); !strings.Contains(got, p.prod.Addr) {
		t.Errorf("the page's title %q does not name the gateway %s", got, p.prod.Addr)
	}
	page.login(t, page.token)
	page.waitFor(t, "the moving stream's chart with a rate above zero",
		page.row(`Number(r.querySelector("td.rate").dataset.rateToWan) > 0 && r.querySelectorAll("svg.chart polyline").length == 2`))
	idleRow := func(expr string) string {
		return fmt.Sprintf(`(() => { const r = document.querySelector('tr[data-uid="%s"]'); return r ? String(%s) : "no row"; })()`, idle.UID, expr)
	}
	// The idle stream's window has samples (it was wired before the
	// other): its recent rates say idle, as does its rate now.
	if !waitfor.Cond(20*time.Second, func() bool {
		return page.eval(t, idleRow(`(r.querySelector("td.window") || {}).textContent`)) == "idle"
	}) {
		t.Errorf("the idle stream's recent rates read %q, want \"idle\"", page.eval(t, idleRow(`(r.querySelector("td.window") || {}).textContent`)))
	}
	if got := page.eval(t, idleRow(`(r.querySelector("td.rate") || {}).textContent`)); got != "idle" {
		t.Errorf("the idle stream's rate now reads %q, want \"idle\"", got)
	}
	// The idle stream never carried data: wired, said apart from the
	// connected one, with a tooltip that says what it means.
	if got := page.eval(t, idleRow(`(c => c ? [c.firstChild.textContent, c.innerText.includes("no data yet"), c.title].join("|") : "no wired cell")(r.querySelector("td.wired"))`)); !strings.HasPrefix(got, "wired|true|Wired: both gateways know each other, but no data has passed on this gateway yet.") {
		t.Errorf("the idle stream's state cell (text|says no data|title): %q; want wired, \"no data yet\" and a tooltip saying what wired means", got)
	}
	if got := page.eval(t, page.rowExpr(`(c => c ? c.firstChild.textContent : "no ok cell")(r.querySelector("td.ok"))`)); got != "connected" {
		t.Errorf("the moving stream's state cell reads %q, want connected", got)
	}
	if got := page.eval(t, `document.getElementById("health").textContent`); !strings.Contains(got, "1 connected, 1 wired (no data yet)") {
		t.Errorf("health shows %q; want 1 connected and 1 wired stream", got)
	}
	page.waitFor(t, "the moving stream's steady state", page.row(`Number(r.querySelector("td.steady").dataset.steadyToWan) > 0`))
	shot := page.screenshot(t, "status-page.png")

	if got := page.eval(t, `document.querySelector("h1").textContent`); !strings.Contains(got, p.prod.Addr) {
		t.Errorf("the heading %q does not name the gateway %s", got, p.prod.Addr)
	}
	// The column headings are words, not flag names; the recent
	// rates' heading says how recent.
	heads := page.eval(t, `Array.from(document.querySelectorAll("#streams th")).map(h => h.textContent).join("|")`)
	if strings.Contains(heads, "--") || !strings.Contains(heads, fmt.Sprintf("|last %d s: mean ± sd, peak|", int(observe.DefaultRateWindow.Seconds()))) {
		t.Errorf("the streams table's headings %q: want no flag name, and the recent rates' heading naming the window (last %s)", heads, observe.DefaultRateWindow)
	}
	text := page.eval(t, `document.getElementById("streams").innerText`)
	if m := regexp.MustCompile(`± 0(\.0+)? [kMG]?B/s`).FindString(text); m != "" {
		t.Errorf("the streams table shows a zero spread %q:\n%s", m, text)
	}
	// Every rate the table states carries a unit.
	for _, sel := range []string{"td.rate", "td.window", "td.steady"} {
		cells := page.eval(t, fmt.Sprintf(`Array.from(document.querySelectorAll(%q)).map(c => c.innerText).join("\n")`, sel))
		for _, line := range strings.Split(cells, "\n") {
			if line == "" || line == "idle" || line == "none yet" {
				continue
			}
			if n := regexp.MustCompile(`[0-9.]+(?: ([kMGT]?B/s))?`).FindAllStringSubmatch(line, -1); len(n) == 0 || slices.ContainsFunc(n, func(m []string) bool { return m[1] == "" }) {
				t.Errorf("%s: %q has a number without a unit", sel, line)
			}
		}
	}
	for _, uid := range []string{idle.UID, moving.UID} {
		got := page.eval(t, fmt.Sprintf(`(() => { const c = document.querySelector('tr[data-uid="%s"] td.uid code'); if (!c) return "no code";
			return [c.textContent, c.title, getComputedStyle(c).whiteSpace, c.getClientRects().length].join("|"); })()`, uid))
		f := strings.Split(got, "|")
		if len(f) != 4 || !strings.HasPrefix(uid, strings.TrimSuffix(f[0], "…")) || len(f[0]) >= len(uid) || f[1] != uid || f[2] != "nowrap" || f[3] != "1" {
			t.Errorf("stream %s's UID cell: text|title|white-space|lines = %q; want a short prefix, the whole UID as title, nowrap, one line", uid, got)
		}
	}
	axes := page.eval(t, page.rowExpr(`r.querySelectorAll("svg.chart line.axis").length + "|" + Array.from(r.querySelectorAll("svg.chart text.tick")).map(e => e.textContent).join(",")`))
	f := strings.SplitN(axes, "|", 2)
	if len(f) != 2 || f[0] != "2" || !regexp.MustCompile(`(^|,)0 B/s,`).MatchString(f[1]) || !regexp.MustCompile(`[0-9.]+ [kMG]B/s`).MatchString(f[1]) ||
		!regexp.MustCompile(`-[0-9]+ s`).MatchString(f[1]) || !strings.Contains(f[1], "now") {
		t.Errorf("the chart's axes and ticks: %q; want 2 axes, a rate scale from 0 B/s with units and a time scale in s up to now", axes)
	}

	if *updateDocs {
		if err := os.MkdirAll(filepath.Dir(statusScreenshot), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(statusScreenshot, shot, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestStatusPageResuming: in headless Chromium, a stream whose
// connection lost its WAN leg says so while the connection waits: the
// consumer's gateway is killed (SIGKILL) under a moving transfer, and the
// producer's gateway's page shows the stream resuming, how many
// connections wait, and the gateway's parked connections and resume
// buffer; once the stream's resume window (10s, asked with s2uc stream
// --resume_window) runs out, the connection is reset and counted, and
// the stream no longer says resuming. Before, it says it resumes, and up
// to when.
func TestStatusPageResuming(t *testing.T) {
	p := newPair(t, pairOpts{args: []string{"--rate_interval", "200ms"}})
	x := newConsumer(t)
	moving := p.wire("alice", x.host(), x.port(), 1, "--resume_window", "10s")
	x.start(t, moving.Listeners[0], 2e6, 0)
	defer x.end()

	page := &statusPage{gw: p.prod, token: p.tokens["alice"], uid: moving.UID}
	page.open(t, t)
	page.login(t, page.token)
	page.waitFor(t, "the moving stream, resumable", page.row(`Number(r.querySelector("td.rate").dataset.rateToWan) > 0 && (r.querySelector(".resume") || {}).dataset.resume == "on"`))
	if got := page.eval(t, page.rowExpr(`r.querySelector(".resume").textContent`)); got != "resume on (up to 10 s)" {
		t.Errorf("the stream's resume line reads %q, want \"resume on (up to 10 s)\"", got)
	}

	p.cons.Kill()
	page.waitFor(t, "the stream resuming", page.row(`(c => !!c && c.dataset.parked == "1")(r.querySelector("td.resuming"))`))
	state := page.eval(t, page.rowExpr(`(c => [c.firstChild.textContent, c.querySelector(".sub").textContent, c.title].join("|"))(r.querySelector("td.resuming"))`))
	if f := strings.Split(state, "|"); len(f) != 3 || f[0] != "resuming" || f[1] != "1 connection waits for a new WAN leg" ||
		!strings.HasPrefix(f[2], "Resuming: 1 connection lost its WAN leg and waits, parked, for a new one within the resume window (10 s)") {
		t.Errorf("the resuming stream's state cell (text|line below|title): %q", state)
	}
	health := page.eval(t, `document.getElementById("health").innerText`)
	if !strings.Contains(health, "1 waiting, parked, for a new WAN leg") || !regexp.MustCompile(`[0-9.]+ [KMG]i?B held of 1\.0 GiB \(peak [0-9.]+ [KMG]i?B\)`).MatchString(health) {
		t.Errorf("the health while a connection is parked, want 1 waiting and a resume buffer held of 1.0 GiB:\n%s", health)
	}
	page.screenshot(t, "status-page-resuming.png")

	// Past the window: reset at the producer, counted, no longer
	// resuming.
	expired := page.row(`!r.querySelector("td.resuming") && (r.querySelector(".resumes") || {}).textContent == "1 reset after the window"`)
	if !waitfor.Cond(time.Minute, func() bool { return page.poll(expired) == nil }) {
		t.Fatalf("the stream never said its connection was reset after the window:\n%s", page.eval(t, "document.body.innerText"))
	}
	if got := page.eval(t, `document.getElementById("health").innerText`); !strings.Contains(got, "0 waiting, parked, for a new WAN leg") {
		t.Errorf("the health once the window ran out, want none waiting:\n%s", got)
	}
	x.end()
	if x.sendErr == nil {
		t.Errorf("the producer's writes never failed, though its connection was reset after the window")
	}
}

// TestStatusPagePlainUser: with no roles file, a plain user's token opens
// the status page on that user's own streams, in headless Chromium: bob
// sees his stream and not alice's, and the page says whose streams it
// shows; s2uc watch, on a pipe, shows him the same. Before, a token the
// gateway refuses: the page asks for the token the user gives s2uc.
func TestStatusPagePlainUser(t *testing.T) {
	p := newPair(t, pairOpts{})
	aliceSink, bobSink := newSink(t, "127.0.0.1", nil), newSink(t, "127.0.0.1", nil)
	alices := p.wire("alice", aliceSink.host(), aliceSink.port(), 1)
	bobs := p.wire("bob", bobSink.host(), bobSink.port(), 1)

	page := &statusPage{gw: p.prod, token: p.tokens["bob"], uid: bobs.UID}
	page.open(t, t)
	// A refused token: the page says so and asks for the token the
	// user gives s2uc, not for the gateway's token file (which holds
	// only hashes).
	page.login(t, "not-a-token-of-this-gateway")
	page.waitFor(t, "the page to refuse a wrong token", `document.getElementById("message").textContent.includes("refused the token")`)
	// The page's own advice is its last sentence, after the API's
	// message.
	got := page.eval(t, `document.getElementById("message").textContent`)
	if advice := got[strings.LastIndex(got, ". ")+2:]; strings.Contains(advice, "file") || !strings.Contains(advice, "s2uc") {
		t.Errorf("the page refusing a wrong token advises %q (all: %q); want it to ask for the token used with s2uc, not for one from a file", advice, got)
	}
	page.login(t, page.token)
	page.waitFor(t, "bob's stream on the page", page.row("true"))
	if got := page.eval(t, fmt.Sprintf(`String(document.querySelector('tr[data-uid="%s"]') !== null)`, alices.UID)); got != "false" {
		t.Errorf("bob's page shows alice's stream %s", alices.UID)
	}
	if got := page.eval(t, `document.getElementById("scope").textContent`); !strings.Contains(got, "bob only") {
		t.Errorf("the page says %q of whose streams it shows; want bob's only", got)
	}
	page.screenshot(t, "status-page-user.png")

	out := p.mustS2UC("bob", "watch", "--count", "1", "--s2cs", p.prod.Addr, "--server_cert", p.prod.CertFile)
	if !strings.Contains(out, "uid="+bobs.UID) || strings.Contains(out, alices.UID) {
		t.Errorf("bob's s2uc watch, want his stream only:\n%s", out)
	}
}
