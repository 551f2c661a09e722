package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"scistream/internal/api"
	"scistream/internal/bytesize"
	"scistream/internal/client"
)

// s2uc watch: a live view of one stream, or of every stream of the
// caller, on one gateway or on both gateways of a stream s2uc wired.
//
// On a terminal it draws the view in the terminal's alternate screen and
// redraws it in place every --interval (ANSI: cursor home, each line
// cleared to its end), with a sparkline of each direction's rate as
// watch saw it; q quits (stdin is put in cbreak mode: no echo, keys
// without Enter, Ctrl-C still a signal), and so does Ctrl-C; the
// terminal is given back as it was. On anything else (a pipe, a file) it
// prints one line per stream per refresh, fields as key=value (with
// --output json, one JSON object per refresh), until --count refreshes
// or Ctrl-C.

const watchHistory = 60 // sparkline samples kept per stream and direction

func runWatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cl := newCmdline("watch", "[UID] [--s2cs HOST:PORT --server_cert FILE] [--interval 1s] [--count N]", stdout, stderr)
	gw := cl.recordGateway("with a UID, every gateway s2uc wired for it")
	interval := cl.fs.Duration("interval", time.Second, "time between refreshes, at least 100ms")
	count := cl.fs.Int("count", 0, "stop after this many refreshes (0: until q or Ctrl-C)")
	pos, err := cl.parse(args, 0, 1, "")
	if err != nil {
		return err
	}
	switch {
	case *interval < 100*time.Millisecond:
		return usagef("--interval %s: give at least 100ms, e.g. 1s", *interval)
	case *count < 0:
		return usagef("--count %d: give how many refreshes, or 0 until q or Ctrl-C", *count)
	}
	w := &watcher{out: stdout, json: cl.output == "json", hist: map[string]*sparks{}}
	if len(pos) == 1 {
		w.uid = pos[0]
	}
	gws := []gatewayFlags{*gw}
	if gw.s2cs == "" {
		if w.uid == "" {
			if !gw.useDefault() {
				return usagef("missing --s2cs HOST:PORT of the gateway to watch (or give a stream UID that s2uc wired, or a default gateway: docs/client.md)")
			}
			gws = []gatewayFlags{*gw}
		} else if gws, err = sessionGateways(cl, w.uid, gw.tokenFile); err != nil {
			var nf *classified
			if !errors.As(err, &nf) || nf.status != exitNotFound || errors.Is(err, errReleased) || !gw.useDefault() {
				return err
			}
			gws = []gatewayFlags{*gw}
		}
	}
	for _, g := range gws {
		c, err := g.client(cl.timeout)
		if err != nil {
			return err
		}
		defer c.Close()
		w.gws = append(w.gws, watchGateway{addr: g.s2cs, c: c})
	}
	if f, ok := stdout.(*os.File); ok && isTerminal(f) && !w.json {
		return w.live(ctx, *interval, *count)
	}
	return w.lines(ctx, *interval, *count)
}

// sessionGateways returns the gateways of the local record of stream
// uid, with the token file of --token_file if given (cmdline.recordSide).
func sessionGateways(cl *cmdline, uid, tokenFile string) ([]gatewayFlags, error) {
	ss, err := sessions()
	if err != nil {
		return nil, err
	}
	sess, err := loadRecord(ss, uid, "give the gateway with --s2cs HOST:PORT")
	if err != nil {
		return nil, err
	}
	var gws []gatewayFlags
	if e := sess.Inbound; e != nil {
		gws = append(gws, cl.recordSide(uid, "inbound", e, "token_file", tokenFile))
	}
	if e := sess.Outbound; e != nil {
		gws = append(gws, cl.recordSide(uid, "outbound", e, "token_file", tokenFile))
	}
	return gws, nil
}

type watchGateway struct {
	addr string
	c    *client.Client
}

// watcher fetches and shows the streams.
type watcher struct {
	out  io.Writer
	json bool
	uid  string // "" for all of the caller's streams
	gws  []watchGateway
	hist map[string]*sparks // by gateway and uid
}

// view is one refresh: every gateway's streams, or the error of asking.
type view struct {
	at  time.Time
	gws []gatewayView
}

type gatewayView struct {
	Gateway string       `json:"gateway"`
	Streams []api.Stream `json:"streams"`
	Error   string       `json:"error,omitempty"`
}

// fetch asks every gateway. The first refresh fails on any error (a
// wrong UID or flag is the user's to fix); later ones show it and go on.
func (w *watcher) fetch(ctx context.Context, first bool) (*view, error) {
	v := &view{at: time.Now()}
	for _, g := range w.gws {
		gv := gatewayView{Gateway: g.addr}
		var err error
		if w.uid != "" {
			var s *api.Stream
			if s, err = g.c.Get(ctx, w.uid); err == nil {
				gv.Streams = []api.Stream{*public(s)}
			}
		} else {
			gv.Streams, err = g.c.List(ctx, false)
		}
		if err != nil {
			if first || ctx.Err() != nil {
				return nil, fmt.Errorf("watch on %s: %w", g.addr, err)
			}
			gv.Error = err.Error()
		}
		for i := range gv.Streams {
			s := &gv.Streams[i]
			s.Secret, s.WANCert = "", ""
			if s.Stats != nil {
				w.spark(g.addr, s).add(s.Stats.RateToWAN, s.Stats.RateFromWAN)
			}
		}
		v.gws = append(v.gws, gv)
	}
	return v, nil
}

func (w *watcher) spark(gw string, s *api.Stream) *sparks {
	k := gw + " " + s.UID
	sp := w.hist[k]
	if sp == nil {
		sp = &sparks{}
		w.hist[k] = sp
	}
	return sp
}

// lines prints one line per stream per refresh (or a JSON object).
func (w *watcher) lines(ctx context.Context, interval time.Duration, count int) error {
	return w.loop(ctx, interval, count, nil, func(v *view) error {
		if w.json {
			return writeJSON(w.out, map[string]any{"time": v.at, "gateways": v.gws}, "")
		}
		for _, l := range v.lines() {
			if _, err := fmt.Fprintln(w.out, l); err != nil {
				return err
			}
		}
		return nil
	})
}

// loop fetches a view and shows it every interval until count refreshes
// (0: no end), ctx ends, or q comes on keys (nil: none come); any other
// key refreshes at once.
func (w *watcher) loop(ctx context.Context, interval time.Duration, count int, keys <-chan byte, show func(*view) error) error {
	for n := 1; ; n++ {
		v, err := w.fetch(ctx, n == 1)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if err := show(v); err != nil {
			return err
		}
		if count > 0 && n >= count {
			return nil
		}
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case k := <-keys:
			t.Stop()
			if k == 'q' || k == 'Q' {
				return nil
			}
			n-- // not a refresh of its own
		case <-t.C:
		}
	}
}

// lines are the key=value lines of a refresh.
func (v *view) lines() []string {
	at := v.at.Format(time.RFC3339)
	var out []string
	for _, g := range v.gws {
		if g.Error != "" {
			out = append(out, fmt.Sprintf("time=%s gateway=%s error=%q", at, g.Gateway, g.Error))
			continue
		}
		if len(g.Streams) == 0 {
			out = append(out, fmt.Sprintf("time=%s gateway=%s streams=0", at, g.Gateway))
		}
		for _, s := range g.Streams {
			st := statsOf(&s)
			var r api.Rates
			if st.Rates != nil {
				r = *st.Rates
			}
			resume := st.Resume
			if resume == "" {
				resume = "unknown"
			}
			out = append(out, fmt.Sprintf("time=%s gateway=%s uid=%s role=%s state=%s active=%d total=%d waiting=%d refused=%d aborted=%d"+
				" resume=%s parked=%d resumed_legs=%d resume_expired=%d"+
				" bytes_to_wan=%d bytes_from_wan=%d rate_to_wan=%.1fMB/s rate_from_wan=%.1fMB/s"+
				" window_to_wan=%sMB/s window_from_wan=%sMB/s steady_to_wan=%sMB/s steady_from_wan=%sMB/s",
				at, g.Gateway, s.UID, printable(string(s.Role)), printable(string(s.State)), st.ActiveConns, st.TotalConns, st.WaitingConns, st.RejectedConns, st.AbortedConns,
				printable(resume), st.ParkedConns, st.ResumedLegs, st.ResumeExpired,
				st.BytesToWAN, st.BytesFromWAN, st.RateToWAN/1e6, st.RateFromWAN/1e6,
				fmtMeanSD(r.ToWAN.Window), fmtMeanSD(r.FromWAN.Window), fmtMeanSD(r.ToWAN.Steady), fmtMeanSD(r.FromWAN.Steady)))
		}
	}
	return out
}

func statsOf(s *api.Stream) *api.Stats {
	if s.Stats == nil {
		return &api.Stats{}
	}
	return s.Stats
}

// live draws the view in place on the terminal until q, Ctrl-C or count
// refreshes.
func (w *watcher) live(ctx context.Context, interval time.Duration, count int) error {
	f := w.out.(*os.File)
	keys := make(chan byte, 8)
	kctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	hint := "Ctrl-C quits"
	if restore, err := cbreak(os.Stdin); err == nil {
		defer restore()
		hint = "q or Ctrl-C quits"
		wg.Add(1)
		go func() {
			defer wg.Done()
			readKeys(kctx, os.Stdin, keys)
		}()
	}
	defer wg.Wait()
	defer stop()
	fmt.Fprint(f, "\x1b[?1049h\x1b[?25l") // the alternate screen, no cursor
	defer fmt.Fprint(f, "\x1b[?25h\x1b[?1049l")
	return w.loop(ctx, interval, count, keys, func(v *view) error {
		cols, rows := termSize(f)
		_, err := fmt.Fprint(f, w.frame(v, interval, hint, cols, rows))
		return err
	})
}

// frame is one screen of the view, cols wide and at most rows high,
// drawn from the top left, each line cleared to its end.
func (w *watcher) frame(v *view, interval time.Duration, hint string, cols, rows int) string {
	what := "your streams"
	if w.uid != "" {
		what = "stream " + w.uid
	}
	lines := []string{
		fmt.Sprintf("s2uc watch: %s, %s, every %s (%s)", what, v.at.Format("15:04:05"), interval, hint),
		"rates in MB/s: now (last sample), window mean±sd (peak), steady mean±sd (ramp-up and tail left out)",
	}
	for _, g := range v.gws {
		lines = append(lines, "")
		switch {
		case g.Error != "":
			lines = append(lines, fmt.Sprintf("gateway %s: %s", g.Gateway, printable(g.Error)))
			continue
		case len(g.Streams) == 0:
			lines = append(lines, fmt.Sprintf("gateway %s: no live stream", g.Gateway))
			continue
		}
		lines = append(lines, fmt.Sprintf("gateway %s: %d stream(s)", g.Gateway, len(g.Streams)))
		for _, s := range g.Streams {
			lines = append(lines, streamLines(&s, w.spark(g.Gateway, &s))...)
		}
	}
	var b strings.Builder
	b.WriteString("\x1b[H")
	for i, l := range lines {
		if rows > 0 && i == rows-1 && len(lines) > rows {
			l = fmt.Sprintf("... %d more lines: make the terminal taller, or watch one UID", len(lines)-i)
		}
		b.WriteString(clip(l, cols))
		b.WriteString("\x1b[K")
		if rows > 0 && i >= rows-1 {
			break
		}
		b.WriteString("\n")
	}
	b.WriteString("\x1b[J")
	return b.String()
}

// streamLines are the lines of one stream in the live view.
func streamLines(s *api.Stream, sp *sparks) []string {
	st := statsOf(s)
	var r api.Rates
	if st.Rates != nil {
		r = *st.Rates
	}
	dir := func(name string, now float64, d api.DirRate, spark string) string {
		peak := "-"
		if d.Window.Samples > 0 {
			peak = fmt.Sprintf("%.1f", d.Window.PeakBps/1e6)
		}
		return fmt.Sprintf("    %-8s now %8.1f  window %s (peak %s)  steady %s  %s", name, now/1e6, padLeft(fmtMeanSD(d.Window), 13), peak, padLeft(fmtMeanSD(d.Steady), 13), spark)
	}
	peer := ""
	if st.Peer != "" {
		peer = ", peer gateway " + printable(st.Peer)
	}
	return []string{
		fmt.Sprintf("  %s  %s %s%s", s.UID, printable(string(s.Role)), stateText(s, false), peer),
		fmt.Sprintf("    conns %d active, %d waiting, %d total, %d refused, %d aborted; bytes %s to WAN, %s from WAN",
			st.ActiveConns, st.WaitingConns, st.TotalConns, st.RejectedConns, st.AbortedConns, bytesize.Human(st.BytesToWAN), bytesize.Human(st.BytesFromWAN)),
		dir("to WAN", st.RateToWAN, r.ToWAN, sp.line(0)),
		dir("from WAN", st.RateFromWAN, r.FromWAN, sp.line(1)),
	}
}

// padLeft pads s with spaces to n runes (fmt pads to bytes, and ± takes
// two).
func padLeft(s string, n int) string {
	return strings.Repeat(" ", max(0, n-len([]rune(s)))) + s
}

// clip cuts l to cols runes (0: no cut).
func clip(l string, cols int) string {
	if cols <= 0 {
		return l
	}
	r := []rune(l)
	if len(r) <= cols {
		return l
	}
	return string(r[:cols])
}

// sparks are the rates watch saw of one stream, each direction's.
type sparks struct {
	v [2][]float64
}

func (s *sparks) add(to, from float64) {
	for i, x := range []float64{to, from} {
		s.v[i] = append(s.v[i], x)
		if len(s.v[i]) > watchHistory {
			s.v[i] = s.v[i][len(s.v[i])-watchHistory:]
		}
	}
}

// line draws direction i as a sparkline scaled to the higher of both
// directions' peaks, so the two lines compare.
func (s *sparks) line(i int) string {
	const bars = "▁▂▃▄▅▆▇█"
	top := 0.0
	for _, d := range s.v {
		for _, x := range d {
			top = max(top, x)
		}
	}
	var b strings.Builder
	levels := []rune(bars)
	for _, x := range s.v[i] {
		k := 0
		if top > 0 {
			k = min(len(levels)-1, int(x/top*float64(len(levels)-1)+0.5))
		}
		b.WriteRune(levels[k])
	}
	return b.String()
}

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// termSize returns f's columns and rows, or 0, 0 if it cannot tell.
func termSize(f *os.File) (int, int) {
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return 0, 0
	}
	return int(ws.Col), int(ws.Row)
}

// cbreak puts terminal f in cbreak mode (keys arrive one by one, not
// echoed; Ctrl-C still sends SIGINT) and returns what restores it.
func cbreak(f *os.File) (restore func(), err error) {
	fd := int(f.Fd())
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, err
	}
	t := *old
	t.Lflag &^= unix.ICANON | unix.ECHO
	t.Cc[unix.VMIN], t.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &t); err != nil {
		return nil, err
	}
	return func() { unix.IoctlSetTermios(fd, unix.TCSETS, old) }, nil
}

// readKeys sends the bytes typed on f to keys until ctx ends, polling so
// that it never blocks past ctx.
func readKeys(ctx context.Context, f *os.File, keys chan<- byte) {
	fd := int(f.Fd())
	buf := make([]byte, 16)
	for ctx.Err() == nil {
		p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(p, 100)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return
		}
		if n == 0 || p[0].Revents&unix.POLLIN == 0 {
			if p[0].Revents&(unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0 {
				return
			}
			continue
		}
		k, err := unix.Read(fd, buf)
		if err != nil || k == 0 {
			return
		}
		for _, c := range buf[:k] {
			select {
			case keys <- c:
			case <-ctx.Done():
				return
			}
		}
	}
}
