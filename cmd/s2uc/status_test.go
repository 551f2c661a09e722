package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"scistream/internal/api"
)

// TestPrintStatus: a status says how connections ended by kind, keeps an
// application's resets apart from the errors, and gives the last reason
// of each kind.
func TestPrintStatus(t *testing.T) {
	at := time.Date(2026, 11, 24, 12, 0, 0, 0, time.Local)
	wait := 90
	s := &api.Stream{
		UID: "0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b6c", Role: api.RoleInbound, State: api.StateConnected,
		Listeners: []string{"127.0.0.3:5100"}, Targets: []string{"127.0.0.1:5672"}, WAN: "tls", Engine: "splice", AppWaitS: &wait,
		Stats: &api.Stats{
			ActiveConns: 2, WaitingConns: 5, TotalConns: 370, AbortedConns: 369, Errors: 1,
			AbortedByKind: map[string]int64{api.EndAppReset: 368, api.EndWANLost: 1},
			LastErrors: map[string]api.LastError{
				api.EndAppReset: {Reason: "read a: connection reset by peer", Time: at},
				api.EndWANLost:  {Reason: "read b: WAN leg ended without TLS close_notify (truncated)", Time: at.Add(time.Minute)},
			},
			BytesToWAN: 3 << 20,
		},
	}
	var b bytes.Buffer
	printStatus(&b, "127.0.0.3:5000", s)
	out := b.String()
	for _, want := range []string{
		"0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b6c on 127.0.0.3:5000: inbound connected\n",
		"wan tls, engine splice, app wait 1m30s\n",
		"connections 2 active, 5 waiting for the application, 370 total, 0 refused, 369 aborted (368 application reset, 1 WAN leg lost), 1 errors\n",
		"last application reset 2026-11-24 12:00:00: read a: connection reset by peer\n",
		"last WAN leg lost 2026-11-24 12:01:00: read b: WAN leg ended without TLS close_notify (truncated)\n",
		"bytes 3.0 MiB to WAN",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	if strings.Index(out, "last application reset") > strings.Index(out, "last WAN leg lost") {
		t.Errorf("last errors not in the order of api.EndKinds:\n%s", out)
	}
	b.Reset()
	s.MaxActiveConns = 100
	s.Stats = &api.Stats{ActiveConns: 100, TotalConns: 107, RejectedConns: 7, OverCapConns: 7}
	printStatus(&b, "gw", s)
	if !strings.Contains(b.String(), "connections 100 active of at most 100, 107 total, 7 refused (7 over the cap), 0 aborted") {
		t.Errorf("a stream at its cap:\n%s", b.String())
	}
	b.Reset()
	s.MaxActiveConns = 0
	s.Stats = &api.Stats{TotalConns: 3}
	printStatus(&b, "gw", s)
	if !strings.Contains(b.String(), "3 total, 0 refused, 0 aborted, 0 errors\n") || strings.Contains(b.String(), "last ") {
		t.Errorf("a stream without aborts:\n%s", b.String())
	}
}

// TestPrintStatusWired: a wired stream says that no data has passed,
// with the latest failed connection beside it (a wrong peer listener
// shows there, not as "connected"); a connected one says neither.
func TestPrintStatusWired(t *testing.T) {
	at := time.Date(2026, 11, 24, 12, 0, 0, 0, time.Local)
	s := &api.Stream{UID: "0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b6c", Role: api.RoleOutbound, State: api.StateWired, WAN: "tls",
		Stats: &api.Stats{AbortedConns: 2, AbortedByKind: map[string]int64{api.EndDialFailed: 1, api.EndTimeout: 1},
			LastErrors: map[string]api.LastError{
				api.EndTimeout:    {Reason: "dial tcp 127.0.0.3:5109: i/o timeout", Time: at},
				api.EndDialFailed: {Reason: "dial tcp 127.0.0.3:5109: connect: connection refused", Time: at.Add(time.Minute)},
			}}}
	var b bytes.Buffer
	printStatus(&b, "127.0.0.3:5000", s)
	if want := "on 127.0.0.3:5000: outbound wired (no data has passed yet; last failed dial 2026-11-24 12:01:00: dial tcp 127.0.0.3:5109: connect: connection refused)\n"; !strings.Contains(b.String(), want) {
		t.Errorf("a wired stream with failed dials:\n%s\nwant %q", b.String(), want)
	}
	b.Reset()
	s.Stats = nil
	printStatus(&b, "gw", s)
	if !strings.Contains(b.String(), ": outbound wired (no data has passed yet)\n") {
		t.Errorf("a wired stream without errors:\n%s", b.String())
	}
	if got := streamLines(s, &sparks{})[0]; !strings.HasSuffix(got, "outbound wired (no data has passed yet)") {
		t.Errorf("watch line of a wired stream: %q", got)
	}
	b.Reset()
	s.State = api.StateConnected
	printStatus(&b, "gw", s)
	if strings.Contains(b.String(), "no data") {
		t.Errorf("a connected stream:\n%s", b.String())
	}
}

// TestPrintStatusPooled: an outbound stream's pooled legs and dials
// dialled again, and an inbound stream's server name on the shared WAN
// port are said.
func TestPrintStatusPooled(t *testing.T) {
	out := &api.Stream{UID: "0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b6c", Role: api.RoleOutbound, State: api.StateConnected, WAN: "tls", WANPool: 2,
		Stats: &api.Stats{LegsIdle: 2, LegsCreated: 7, LegsReused: 40, LegsTornDown: 3, WANRedials: 5}}
	in := &api.Stream{UID: "0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b6c", Role: api.RoleInbound, State: api.StateConnected, WAN: "tls",
		WANServerName: "abc.wan.example.org", Stats: &api.Stats{}}
	var b bytes.Buffer
	printStatus(&b, "127.0.0.3:5000", out)
	printStatus(&b, "127.0.0.4:5000", in)
	for _, want := range []string{
		"pooled WAN legs (2 warm per channel): 2 idle, 7 dialed, 40 reused, 3 torn down at the gateway's cap\n",
		"on the shared WAN port as abc.wan.example.org\n",
		"5 WAN dials the peer gateway reset in its handshake cap, dialled again\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, b.String())
		}
	}
}

// TestPrintStatusResume: status says per side whether its connections
// outlive a lost WAN leg, and why not, and what they did; while a
// connection waits for a new leg, the state line says resuming instead
// of connected. watch's live view says resuming too, and its lines carry
// the counts.
func TestPrintStatusResume(t *testing.T) {
	window := func(s int) *int { return &s }
	const uid = "0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b6c"
	for _, c := range []struct {
		name  string
		s     api.Stream
		state string // the end of the first line
		says  string // the resume line
	}{
		{"on", api.Stream{WAN: "tls", ResumeWindowS: window(30), Stats: &api.Stats{Resume: api.ResumeOn}},
			": inbound connected\n", "  resume on (up to 30s)\n"},
		{"on, longer", api.Stream{WAN: "quic", ResumeWindowS: window(600), Stats: &api.Stats{Resume: api.ResumeOn}},
			": inbound connected\n", "  resume on (up to 10m0s)\n"},
		{"off", api.Stream{WAN: "tls", ResumeWindowS: window(0), Stats: &api.Stats{Resume: api.ResumeOff}},
			": inbound connected\n", "  resume off (the stream's resume window is 0)\n"},
		{"an older peer", api.Stream{WAN: "tls", ResumeWindowS: window(30), Stats: &api.Stats{Resume: api.ResumePeer}},
			": inbound connected\n", "  no resume: the peer gateway's release does not resume\n"},
		{"tcp", api.Stream{WAN: "tcp", ResumeWindowS: window(30), Stats: &api.Stats{Resume: api.ResumePlain}},
			": inbound connected\n", "  no resume: plaintext tcp legs\n"},
		{"pooled, an older peer", api.Stream{Role: api.RoleOutbound, WAN: "tls", WANPool: 2, ResumeWindowS: window(30), Stats: &api.Stats{Resume: api.ResumePooled}},
			": outbound connected\n", "  no resume: the peer gateway's release does not resume on pooled legs\n"},
		{"pooled", api.Stream{Role: api.RoleOutbound, WAN: "tls", WANPool: 2, ResumeWindowS: window(30), Stats: &api.Stats{Resume: api.ResumeOn}},
			": outbound connected\n", "  resume on (up to 30s)\n"},
		// Before a leg said: what the settings tell.
		{"tcp, no leg yet", api.Stream{WAN: "tcp", State: api.StateListening, ResumeWindowS: window(30)},
			": inbound listening\n", "  no resume: plaintext tcp legs\n"},
		{"pooled, no leg yet", api.Stream{Role: api.RoleOutbound, WAN: "tls", WANPool: 1, State: api.StateWired, ResumeWindowS: window(30)},
			": outbound wired (no data has passed yet)\n", "  resume up to 30s if the peer gateway resumes (no WAN leg yet)\n"},
		{"asked none, no leg yet", api.Stream{WAN: "tls", State: api.StateListening, ResumeWindowS: window(0)},
			": inbound listening\n", "  resume off (the stream's resume window is 0)\n"},
		{"no leg yet", api.Stream{WAN: "tls", State: api.StateListening, ResumeWindowS: window(45)},
			": inbound listening\n", "  resume up to 45s if the peer gateway resumes (no WAN leg yet)\n"},
		{"an older gateway", api.Stream{WAN: "tls", State: api.StateListening},
			": inbound listening\n", "  resume not known (a gateway of an older release)\n"},
		// Parked: resuming, with the counts so far.
		{"one parked", api.Stream{WAN: "tls", ResumeWindowS: window(30), Stats: &api.Stats{Resume: api.ResumeOn, ActiveConns: 1, ParkedConns: 1}},
			": inbound resuming (1 connection waits for a new WAN leg)\n", "  resume on (up to 30s)\n"},
		{"three parked", api.Stream{Role: api.RoleOutbound, WAN: "tls", ResumeWindowS: window(30), Stats: &api.Stats{Resume: api.ResumeOn, ActiveConns: 3, ParkedConns: 3,
			ResumedLegs: 4, ResentBytes: 3 << 19, ParkedSeconds: 12.34, ResumeExpired: 1}},
			": outbound resuming (3 connections wait for a new WAN leg)\n", "  resume on (up to 30s): 4 legs resumed, 1.5 MiB resent, 12.3s parked, 1 connection reset after the window\n"},
		{"resumed once", api.Stream{WAN: "tls", ResumeWindowS: window(30), Stats: &api.Stats{Resume: api.ResumeOn, ResumedLegs: 1, ParkedSeconds: 0.5}},
			": inbound connected\n", "  resume on (up to 30s): 1 leg resumed, 500ms parked\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := c.s
			s.UID = uid
			if s.Role == "" {
				s.Role = api.RoleInbound
			}
			if s.State == "" {
				s.State = api.StateConnected
			}
			var b bytes.Buffer
			printStatus(&b, "gw:5000", &s)
			out := b.String()
			if first, _, _ := strings.Cut(out, "\n"); !strings.HasSuffix(first+"\n", c.state) {
				t.Errorf("first line %q; want it to end %q", first, c.state)
			}
			if !strings.Contains(out, "\n"+c.says) {
				t.Errorf("status lacks %q:\n%s", c.says, out)
			}
			watchLine := streamLines(&s, &sparks{})[0]
			if parked := s.Stats != nil && s.Stats.ParkedConns > 0; parked != strings.Contains(watchLine, " resuming (") {
				t.Errorf("watch's line %q: says resuming %v, want %v", watchLine, !parked, parked)
			}
		})
	}
	// An ended stream says nothing of resuming.
	var b bytes.Buffer
	printStatus(&b, "gw", &api.Stream{UID: uid, Role: api.RoleInbound, State: api.StateReleased, WAN: "tls", ResumeWindowS: window(30)})
	if strings.Contains(b.String(), "resum") {
		t.Errorf("a released stream's status speaks of resuming:\n%s", b.String())
	}
	// watch on a pipe: the mode and the counts, keyed.
	s := watchedStream()
	s.Stats.Resume, s.Stats.ParkedConns, s.Stats.ResumedLegs, s.Stats.ResumeExpired = api.ResumeOn, 2, 5, 1
	l := (&view{at: time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC), gws: []gatewayView{{Gateway: "gw:5000", Streams: []api.Stream{s}}}}).lines()
	if len(l) != 1 || !strings.Contains(l[0], " resume=on parked=2 resumed_legs=5 resume_expired=1 ") {
		t.Errorf("watch's line of a resuming stream: %q", l)
	}
	s.Stats = &api.Stats{}
	l = (&view{at: time.Now(), gws: []gatewayView{{Gateway: "gw:5000", Streams: []api.Stream{s}}}}).lines()
	if len(l) != 1 || !strings.Contains(l[0], " resume=unknown parked=0 ") {
		t.Errorf("watch's line of a stream no leg said of: %q", l)
	}
}
