package e2e

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"scistream/internal/api"
	"scistream/internal/localgw"
)

// TestRatesAndLeases runs seed 001's workflow with a reserved rate
// through two real gateways of different capacities: s2uc settles on the
// lower grant, a request that fits neither is refused naming the
// gateway and its limit and leaves nothing behind, s2uc update lowers
// and raises the rate on both sides (a raise one side refuses is set
// back on the other), the reservation survives a kill -9, and a short
// lease ends the stream on both gateways with the reason in its status.
func TestRatesAndLeases(t *testing.T) {
	p := newPair(t, pairOpts{args: []string{"--capacity_rate", "1G"}, prodArgs: []string{"--capacity_rate", "400M"}})
	app := newSink(t, "127.0.0.1", nil)
	so := p.wire("alice", app.host(), app.port(), 1, "--rate", "600M", "--min_rate", "100M")
	status := func(g string, uid string) api.Stream {
		t.Helper()
		gw := p.cons
		if g == "prod" {
			gw = p.prod
		}
		var s api.Stream
		out := p.mustS2UC("alice", "status", uid, "--s2cs", gw.Addr, "--server_cert", gw.CertFile, "--output", "json")
		if err := json.Unmarshal([]byte(out), &s); err != nil {
			t.Fatalf("status output: %v\n%s", err, out)
		}
		return s
	}
	for _, g := range []string{"cons", "prod"} {
		if s := status(g, so.UID); s.Rate != 400e6 || s.RateRequested != 600e6 && g == "cons" {
			t.Fatalf("%s side: rate %d requested %d; want the 400 Mbit/s the producer's gateway has", g, s.Rate, s.RateRequested)
		}
	}
	c, err := dialFrom("", so.Listeners[0])
	if err != nil {
		t.Fatal(err)
	}
	sum := sendRandom(t, c, 4<<20, 7)
	c.Close()
	if r := app.next(t, 30*time.Second); r.err != nil || r.n != 4<<20 || r.sum != sum {
		t.Fatalf("consumer got %d bytes (%v), checksum match %v", r.n, r.err, r.sum == sum)
	}

	// Bob asks for what the producer's gateway no longer has.
	_, errs, code := p.s2uc("bob", "stream",
		"--inbound_s2cs", p.cons.Addr, "--inbound_server_cert", p.cons.CertFile,
		"--outbound_s2cs", p.prod.Addr, "--outbound_server_cert", p.prod.CertFile,
		"--remote_ip", app.host(), "--receiver_ports", app.port(), "--rate", "100M")
	if code == 0 || !strings.Contains(errs, p.prod.Addr) || !strings.Contains(errs, "no_resources") || !strings.Contains(errs, "--capacity_rate") {
		t.Fatalf("bob's stream beyond the producer's capacity: exit %d, %q; want no_resources naming %s and --capacity_rate", code, errs, p.prod.Addr)
	}
	info := p.mustS2UC("bob", "info", "--s2cs", p.cons.Addr, "--server_cert", p.cons.CertFile)
	if !strings.Contains(info, "capacity 1 Gbit/s, 400 Mbit/s reserved") {
		t.Fatalf("the consumer's gateway after bob's refused stream (its inbound side rolled back):\n%s", info)
	}

	p.mustS2UC("alice", "update", so.UID, "--rate", "200M")
	_, errs, code = p.s2uc("alice", "update", so.UID, "--rate", "900M")
	if code == 0 || !strings.Contains(errs, "--capacity_rate") {
		t.Fatalf("a raise past the producer's capacity: exit %d, %q", code, errs)
	}
	for _, g := range []string{"cons", "prod"} {
		if s := status(g, so.UID); s.Rate != 200e6 {
			t.Fatalf("%s side at %d after a refused raise; want it set back to 200 Mbit/s", g, s.Rate)
		}
	}

	p.restart(&p.cons, false)
	// Restored attached: connected if the janitor stored the first
	// data's flip before the kill (within a second of it), wired if not.
	if s := status("cons", so.UID); s.Rate != 200e6 || !s.State.Attached() {
		t.Fatalf("after kill -9 and restart: %s rate %d", s.State, s.Rate)
	}
	for _, g := range []string{"cons", "prod"} { // the restarted gateway's control port is new: name each
		gw := map[string]*localgw.Gateway{"cons": p.cons, "prod": p.prod}[g]
		out := p.mustS2UC("alice", "update", so.UID, "--lease", "2s", "--s2cs", gw.Addr, "--server_cert", gw.CertFile)
		if !strings.Contains(out, "lease 2s") {
			t.Fatalf("s2uc update --lease 2s on %s:\n%s", g, out)
		}
	}
	for _, g := range []string{"cons", "prod"} {
		eventually(t, 15*time.Second, g+" side to expire", func() bool { return status(g, so.UID).State == api.StateExpired })
		if s := status(g, so.UID); !strings.Contains(s.Reason, "lease (2s) ran out") {
			t.Fatalf("%s side ended: %q", g, s.Reason)
		}
	}
	if c, err := dialFrom("", so.Listeners[0]); err == nil {
		c.Close()
		t.Fatal("the expired stream's producer listener still accepts connections")
	}

	// Step by step: a rate only the outbound request asks for cannot
	// settle with a best-effort inbound side; raising that side first
	// (which the local record then knows) can.
	out := p.mustS2UC("bob", "inbound-request", "--s2cs", p.cons.Addr, "--server_cert", p.cons.CertFile,
		"--remote_ip", app.host(), "--receiver_ports", app.port())
	m := regexp.MustCompile(`(?m)^uid: (\S+)\nlisteners: (\S+)$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("inbound-request output:\n%s", out)
	}
	outbound := []string{"outbound-request", "--s2cs", p.prod.Addr, "--server_cert", p.prod.CertFile, "--rate", "50M", m[1], m[2]}
	if _, errs, code := p.s2uc("bob", outbound...); code == 0 || !strings.Contains(errs, "reserved no rate") {
		t.Fatalf("outbound-request --rate beside a best-effort inbound side: exit %d, %q", code, errs)
	}
	p.mustS2UC("bob", "update", m[1], "--rate", "50M", "--s2cs", p.cons.Addr, "--server_cert", p.cons.CertFile)
	if out := p.mustS2UC("bob", outbound...); !strings.Contains(out, "rate: 50 Mbit/s reserved") {
		t.Fatalf("outbound-request after the inbound side was raised:\n%s", out)
	}
}
