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
