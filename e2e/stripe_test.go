package e2e

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"scistream/internal/api"
	"scistream/internal/carry"
	"scistream/internal/client"
)

// Striped streams (issue 38): one application connection carried on
// several WAN legs at once, between two gateways in namespaces of a lab
// (resume_test.go's pair).

// wireStriped makes a TLS stream of stripe legs at once to the consumer
// at port, paced at rate bits per second, pooled (pool idle legs a
// channel) if pool > 0.
func (p *resumePair) wireStriped(t *testing.T, port int, rate int64, stripe, pool int) (in, out *api.Stream) {
	t.Helper()
	in, out, err := client.Wire(context.Background(), p.in, p.out,
		&api.InboundRequest{RemoteIP: p.l.hostIP, ReceiverPorts: []int{port}, NumConn: 1, Rate: rate},
		api.OutboundRequest{NumConn: 1, Allow: []string{p.l.hostIP + "/32"}, Stripe: stripe, WANPool: pool}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return in, out
}

// legPorts returns the peer ports of the TCP connections established
// to port in the consumer gateway's namespace: the stream's WAN legs.
func (p *resumePair) legPorts(t *testing.T, port int) []string {
	t.Helper()
	var ports []string
	for _, l := range p.legs(t, port) {
		ports = append(ports, l.peer)
	}
	return ports
}

// legStat is one WAN leg as ss reports it at the consumer gateway.
type legStat struct {
	peer    string // the peer's port
	segsOut int    // data segments the consumer gateway sent on it
}

// legs returns the TCP connections established to port in the consumer
// gateway's namespace.
func (p *resumePair) legs(t *testing.T, port int) []legStat {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", p.consNS, "ss", "-Htni", "state", "established", fmt.Sprintf("( sport = :%d )", port)).CombinedOutput()
	if err != nil {
		t.Fatalf("ss: %v\n%s", err, out)
	}
	var legs []legStat
	for _, line := range strings.Split(string(out), "\n") {
		// A socket's line (queues, addresses), then its details.
		f := strings.Fields(line)
		if !strings.Contains(line, "data_segs_out:") {
			if len(f) >= 4 {
				if _, pp, err := net.SplitHostPort(f[len(f)-1]); err == nil {
					legs = append(legs, legStat{peer: pp})
				}
			}
			continue
		}
		for _, kv := range f {
			if v, ok := strings.CutPrefix(kv, "data_segs_out:"); ok && len(legs) > 0 {
				legs[len(legs)-1].segsOut, _ = strconv.Atoi(v)
			}
		}
	}
	return legs
}

// ackLeg returns the peer port of the WAN leg to port at the consumer
// gateway that carries its acks: the connection's first leg, the one of
// its legs the gateway sent the most data segments on. It waits until
// one leads the others (a tie could name a further leg).
func (p *resumePair) ackLeg(t *testing.T, port int) string {
	t.Helper()
	var first string
	eventually(t, 30*time.Second, "one leg to carry the consumer gateway's acks", func() bool {
		legs := p.legs(t, port)
		slices.SortFunc(legs, func(a, b legStat) int { return b.segsOut - a.segsOut })
		if len(legs) < 2 || legs[0].segsOut <= legs[1].segsOut {
			return false
		}
		first = legs[0].peer
		return true
	})
	return first
}

// resetLeg resets the one WAN leg from peer port from to port at the
// consumer gateway (iptables in its namespace) until done says what the
// reset was to bring about; the other legs of the connection, and the
// new legs (other ports), carry on meanwhile. during, if not nil, is
// called once the rule is in place (a held producer's release).
func (p *resumePair) resetLeg(t *testing.T, port int, from string, what string, during func(), done func() bool) {
	t.Helper()
	rule := []string{"-p", "tcp", "--dport", strconv.Itoa(port), "--sport", from, "-j", "REJECT", "--reject-with", "tcp-reset"}
	ipt := func(op string) {
		t.Helper()
		if out, err := exec.Command("ip", append([]string{"netns", "exec", p.consNS, "iptables", op, "INPUT"}, rule...)...).CombinedOutput(); err != nil {
			t.Fatalf("iptables %s: %v\n%s", op, err, out)
		}
	}
	ipt("-I")
	defer ipt("-D")
	if during != nil {
		during()
	}
	eventually(t, time.Minute, what, done)
}

// TestStripedStream: a stream of stripe 4 carries its connection on 4
// WAN legs at once (the consumer gateway has 4 established); one of
// them reset mid-transfer loses the connection's legs, which come back,
// and the 200 MB arrive byte-exact with neither application reset;
// with a resume window of 0 both applications are reset instead. A
// gateway told --max_stripe 2 grants 2, and status says so.
func TestStripedStream(t *testing.T) {
	t.Run("resume", func(t *testing.T) { stripedResume(t, 0) })
	// On pooled legs the connection's first leg is a warm leg's session;
	// its further legs are legs of their own.
	t.Run("pooled", func(t *testing.T) { stripedResume(t, 1) })
	t.Run("no resume", func(t *testing.T) {
		// A resume window of 0: the lost leg resets both applications,
		// never silence.
		p := newResumePair(t, "--resume_window=0s")
		app := newTimedSink(t, p.l.hostIP)
		in, out := p.wireStriped(t, app.port(), 80e6, 4, 0)
		_, portS, _ := net.SplitHostPort(in.Listeners[0])
		port, _ := strconv.Atoi(portS)
		conn, err := dialFrom(p.l.hostIP, out.Listeners[0])
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		werr := make(chan error, 1)
		go func() {
			conn.SetWriteDeadline(time.Now().Add(time.Minute))
			werr <- writeRandom(conn, 1<<30, 43)
		}()
		eventually(t, time.Minute, "the consumer to have 4 MB", func() bool { return app.n.Load() >= 4<<20 })
		eventually(t, 30*time.Second, "4 WAN legs at the consumer's gateway", func() bool { return len(p.legPorts(t, port)) >= 4 })
		// The first leg, the hard case: it carries the consumer
		// gateway's acks, and a firewall that resets it also drops the
		// producer gateway's reset of it, so that the consumer gateway
		// can learn of the loss only from the other legs.
		first := p.ackLeg(t, port)
		var r timedResult
		start := time.Now()
		p.resetLeg(t, port, first, "the consumer's connection to end", nil, func() bool {
			select {
			case r = <-app.done:
				return true
			default:
				return false
			}
		})
		if r.err == nil {
			t.Fatalf("the consumer read a clean end after %d bytes; want a reset", r.n)
		}
		t.Logf("the consumer reset %v after the leg's (%v)", time.Since(start).Round(10*time.Millisecond), r.err)
		select {
		case err := <-werr:
			if err == nil {
				t.Fatal("the producer's writes all succeeded")
			}
		case <-time.After(time.Minute):
			t.Fatal("the producer's writes never failed")
		}
		// Not by the liveness timeout (about 15 s of silence on the
		// first leg): the stripes' resets said it at once.
		if log := p.cons.Log(); strings.Contains(log, carry.ErrLegSilent.Error()) {
			t.Errorf("the consumer gateway waited for the silent first leg instead of taking the stripes' resets:\n%s", lastLines(log, 20))
		}
	})
	t.Run("granted less", func(t *testing.T) {
		p := newResumePairOf(t, nil, []string{"--max_stripe=2"})
		app := newTimedSink(t, p.l.hostIP)
		in, out := p.wireStriped(t, app.port(), 0, 4, 0)
		_, portS, _ := net.SplitHostPort(in.Listeners[0])
		port, _ := strconv.Atoi(portS)
		conn, err := dialFrom(p.l.hostIP, out.Listeners[0])
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		const total = 64 << 20
		pr := produce(conn, total, 42)
		eventually(t, 30*time.Second, "2 WAN legs at the consumer's gateway", func() bool { return len(p.legPorts(t, port)) == 2 })
		r := pr.result(app)
		pr.check(t, r)
		st, err := p.out.Get(context.Background(), out.UID)
		if err != nil {
			t.Fatal(err)
		}
		if st.Stats.StripeLegs != 2 {
			t.Errorf("the outbound side says %d stripe legs, want the 2 the inbound granted", st.Stats.StripeLegs)
		}
	})
}

// stripedResume is TestStripedStream's resume case: one leg of the four
// reset, or, on pooled legs (pool > 0), every leg to the port.
func stripedResume(t *testing.T, pool int) {
	p := newResumePair(t)
	app := newTimedSink(t, p.l.hostIP)
	in, out := p.wireStriped(t, app.port(), 400e6, 4, pool)
	if out.Stripe != 4 {
		t.Fatalf("the outbound stream's view says stripe %d, want 4", out.Stripe)
	}
	_, portS, _ := net.SplitHostPort(in.Listeners[0])
	port, _ := strconv.Atoi(portS)
	conn, err := dialFrom(p.l.hostIP, out.Listeners[0])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const total = 200 << 20
	// The producer holds at 40 MB while the fault is put in place: the
	// legs then carry the rest through it, however slow the machine.
	pr := produce(conn, total, 41, total/5)
	eventually(t, time.Minute, "the consumer to have 40 MB", func() bool { return app.n.Load() >= total/5 })
	eventually(t, 30*time.Second, "4 WAN legs at the consumer's gateway", func() bool { return len(p.legPorts(t, port)) >= 4 })
	if pool == 0 {
		// The first leg (see "no resume").
		p.resetLeg(t, port, p.ackLeg(t, port), "the connection to resume", pr.release, func() bool {
			st, err := p.out.Get(context.Background(), out.UID)
			return err == nil && st.Stats.ResumedLegs >= 1
		})
	} else {
		// The warm legs are among those to the port: reset them all.
		p.reject(t, port, time.Second, pr.release)
	}
	r := pr.result(app)
	pr.check(t, r)
	t.Logf("the consumer's largest pause: %v", r.maxGap.Round(time.Millisecond))
	st, err := p.out.Get(context.Background(), out.UID)
	if err != nil {
		t.Fatal(err)
	}
	if s := st.Stats; s.StripeLegs != 4 || s.ResumedLegs < 1 || s.AbortedConns != 0 {
		t.Errorf("the outbound side: %d stripe legs, %d legs resumed, %d connections aborted; want 4, at least 1, none", s.StripeLegs, s.ResumedLegs, s.AbortedConns)
	}
	if s, err := p.in.Get(context.Background(), in.UID); err != nil || s.Stats.AbortedConns != 0 {
		t.Errorf("the inbound side aborted connections: %+v %v", s.Stats, err)
	}
}

// TestStripeRefused: a stripe past the gateway's maximum, or with QUIC
// legs, is refused with an error that names the fix, and nothing is
// made.
func TestStripeRefused(t *testing.T) {
	p := newResumePair(t)
	for _, tc := range []struct {
		wan    string
		stripe int
		want   string
	}{
		{"", 9, "exceeds this gateway's maximum of 8"},
		{api.WANQUIC, 2, "use wan tls to stripe"},
		{"", -1, "is negative"},
	} {
		_, _, err := client.Wire(context.Background(), p.in, p.out,
			&api.InboundRequest{RemoteIP: p.l.hostIP, ReceiverPorts: []int{9}, NumConn: 1, WAN: tc.wan},
			api.OutboundRequest{NumConn: 1, Allow: []string{p.l.hostIP + "/32"}, Stripe: tc.stripe}, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("stripe %d over %q: %v, want an error saying %q", tc.stripe, tc.wan, err, tc.want)
		}
	}
	if l, err := p.out.List(context.Background(), false); err != nil || len(l) != 0 {
		t.Errorf("the outbound gateway holds %d streams after the refusals (%v)", len(l), err)
	}
}
