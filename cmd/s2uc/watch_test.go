package main

import (
	"strings"
	"testing"
	"time"

	"scistream/internal/api"
)

// TestWatchBadCommandLine: every refused watch command line is one line
// that names the flag and the fix.
func TestWatchBadCommandLine(t *testing.T) {
	isolate(t)
	const gw = "127.0.0.1:1" // never dialled: every case fails first
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"watch"}, "missing --s2cs HOST:PORT of the gateway to watch (or give a stream UID that s2uc wired, or a default gateway"},
		{[]string{"watch", "0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b6c"}, "no local record of stream 0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b6c: give the gateway with --s2cs"},
		{[]string{"watch", "--s2cs", gw, "--interval", "10ms"}, "--interval 10ms: give at least 100ms"},
		{[]string{"watch", "--s2cs", gw, "--count", "-1"}, "--count -1: give how many refreshes"},
		{[]string{"watch", "--s2cs", gw, "a", "b"}, `unexpected argument "b"`},
		{[]string{"watch", "--s2cs", gw, "--output", "yaml"}, `--output "yaml": use text or json`},
		{[]string{"watch", "--s2cs", gw, "--refresh", "1s"}, "unknown flag --refresh (s2uc watch --help lists the flags)"},
	} {
		stdout, stderr, code := s2uc(t, c.args...)
		checkOneLine(t, c.args, stdout, stderr, code, c.want)
	}
}

func watchedStream() api.Stream {
	return api.Stream{
		UID: "0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b6c", Role: api.RoleOutbound, State: api.StateConnected,
		Secret: "never-shown",
		Stats: &api.Stats{
			ActiveConns: 2, TotalConns: 5, BytesToWAN: 3 << 30, BytesFromWAN: 1 << 10, RateToWAN: 312.44e6, Peer: api.PeerUp,
			Rates: &api.Rates{IntervalS: 1, WindowS: 60, TrimSamples: 1, ToWAN: api.DirRate{
				Window: api.RateStat{Samples: 60, MeanBps: 300.06e6, StddevBps: 10.21e6, PeakBps: 330.5e6},
				Steady: api.RateStat{Samples: 40, MeanBps: 305e6, StddevBps: 3.1e6, PeakBps: 320e6},
			}},
		},
	}
}

// TestWatchFrame: the live view shows each stream's counters, its rates
// now, over the window and in steady state, and a sparkline of what
// watch saw; it fits the terminal it is given.
func TestWatchFrame(t *testing.T) {
	w := &watcher{hist: map[string]*sparks{}}
	s := watchedStream()
	sp := w.spark("gw:5000", &s)
	for _, r := range []float64{0, 100e6, 200e6, 312.44e6} {
		sp.add(r, 0)
	}
	v := &view{at: time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC), gws: []gatewayView{
		{Gateway: "gw:5000", Streams: []api.Stream{s}},
		{Gateway: "other:5000", Error: "unreachable"},
	}}
	frame := w.frame(v, time.Second, "q or Ctrl-C quits", 0, 0)
	for _, want := range []string{
		"\x1b[H", "15:04:05", "q or Ctrl-C quits",
		"gateway gw:5000: 1 stream(s)",
		"0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b6c  outbound connected, peer gateway up",
		"conns 2 active, 0 waiting, 5 total, 0 refused, 0 aborted; bytes 3.0 GiB to WAN, 1.0 KiB from WAN",
		"to WAN   now    312.4  window    300.1±10.2 (peak 330.5)  steady     305.0±3.1  ▁▃▅█",
		"from WAN now      0.0  window             - (peak -)  steady             -  ▁▁▁▁",
		"gateway other:5000: unreachable",
		"\x1b[J",
	} {
		if !strings.Contains(frame, want) {
			t.Errorf("frame lacks %q:\n%s", want, frame)
		}
	}
	if strings.Contains(frame, "never-shown") {
		t.Errorf("the frame shows the stream secret")
	}
	// A small terminal: every line clipped, the rest said in one line.
	small := w.frame(v, time.Second, "q", 30, 5)
	lines := strings.Split(small, "\n")
	if len(lines) != 5 || !strings.Contains(lines[4], "... 6 more lines") {
		t.Fatalf("frame for 30x5: %d lines:\n%s", len(lines), small)
	}
	for _, l := range lines {
		l = strings.NewReplacer("\x1b[H", "", "\x1b[K", "", "\x1b[J", "").Replace(l)
		if n := len([]rune(l)); n > 30 {
			t.Errorf("line of %d runes in a 30-column terminal: %q", n, l)
		}
	}
}

// TestWatchLines: on a pipe, one key=value line per stream per refresh,
// with exact byte counts.
func TestWatchLines(t *testing.T) {
	v := &view{at: time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC), gws: []gatewayView{
		{Gateway: "gw:5000", Streams: []api.Stream{watchedStream()}},
		{Gateway: "idle:5000"},
	}}
	l := v.lines()
	if len(l) != 2 {
		t.Fatalf("%d lines, want 2: %q", len(l), l)
	}
	for _, want := range []string{"time=2026-01-02T15:04:05Z gateway=gw:5000 uid=0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b6c role=outbound state=connected active=2 total=5",
		"bytes_to_wan=3221225472 bytes_from_wan=1024 rate_to_wan=312.4MB/s rate_from_wan=0.0MB/s",
		"window_to_wan=300.1±10.2MB/s window_from_wan=-MB/s steady_to_wan=305.0±3.1MB/s"} {
		if !strings.Contains(l[0], want) {
			t.Errorf("line lacks %q:\n%s", want, l[0])
		}
	}
	if l[1] != "time=2026-01-02T15:04:05Z gateway=idle:5000 streams=0" {
		t.Errorf("a gateway without streams: %q", l[1])
	}
}
