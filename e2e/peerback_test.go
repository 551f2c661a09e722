package e2e

import (
	"io"
	"net/http"
	"testing"
	"time"

	"scistream/internal/api"
	"scistream/internal/localgw"
	"scistream/internal/metricstest"
	"scistream/internal/waitfor"
)

// TestPeerBackAfterRestart (issue 36): a peer gateway stopped
// gracefully says "stopping" on the watch leg; once it is started
// again and its watch leg answers, the other gateway's view of it says
// up again, in s2uc status (the peer field) and in the metrics (the
// peer label), with no data sent since. Each gateway in turn is the one
// restarted: the outbound one (which dials the watch leg) and the
// inbound one (which serves it).
func TestPeerBackAfterRestart(t *testing.T) {
	for _, restarted := range []string{"outbound", "inbound"} {
		t.Run(restarted, func(t *testing.T) {
			p := newPair(t, pairOpts{args: []string{"--metrics_listen", "127.0.0.1:0"}})
			app := newSink(t, "127.0.0.1", nil)
			so := p.wire("alice", app.host(), app.port(), 1)
			sendOne(t, so.Listeners[0], app, "before the restart")
			// p.prod is the outbound gateway (the producer connects to
			// it), p.cons the inbound one.
			dead, watcher := &p.prod, p.cons
			if restarted == "inbound" {
				dead, watcher = &p.cons, p.prod
			}
			stats, deadStats := p.statsOn(watcher, so.UID), p.statsOn(*dead, so.UID)
			peerIs := func(want string) func() bool {
				return func() bool { return stats().Peer == want && metricsPeer(t, watcher, so.UID) == want }
			}
			waitfor.Must(t, time.Minute, "both gateways to see their peer up", func() bool {
				return peerIs(api.PeerUp)() && deadStats().Peer == api.PeerUp
			})
			if err := (*dead).Stop(); err != nil {
				t.Fatalf("graceful stop of the %s gateway: %v", restarted, err)
			}
			waitfor.Must(t, 30*time.Second, "the other gateway to hear that its peer is stopping", peerIs(api.PeerStopping))
			old := *dead
			*dead = p.start(old.Opts.StateDir, old.Opts.ListenerIP, pairOpts{portRange: old.Opts.PortRange, args: old.Opts.Args})
			// The watch leg's dials back off to 30 s at most: within a
			// minute the restarted peer answers one.
			waitfor.Must(t, 90*time.Second, "the other gateway to see its restarted peer up, no data sent", peerIs(api.PeerUp))
			// As s2uc status and a scraper see it.
			if st := p.status(watcher, so.UID); st.Stats.Peer != api.PeerUp || st.Stats.TotalConns != 1 {
				t.Errorf("s2uc status on the other gateway: peer %q after %d connections; want up after the one before the restart", st.Stats.Peer, st.Stats.TotalConns)
			}
			if got := scrapePlain(t, watcher).Value(t, "scistream_stream_info", metricstest.Labels{"uid": so.UID, "peer": api.PeerUp}); got != 1 {
				t.Errorf("the other gateway's metrics: stream info{peer=up} = %v, want 1", got)
			}
			sendOne(t, so.Listeners[0], app, "after the restart")
		})
	}
}

// metricsPeer is the peer label of the stream's info series on g's
// plain metrics listener ("" without one): cheap enough to poll.
func metricsPeer(t *testing.T, g *localgw.Gateway, uid string) string {
	t.Helper()
	resp, err := http.Get("http://" + g.MetricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics on %s: %d %v", g.MetricsAddr, resp.StatusCode, err)
	}
	f := metricstest.Parse(t, b)["scistream_stream_info"]
	if f == nil {
		return ""
	}
	for _, m := range f.GetMetric() {
		labels := metricstest.Labels{}
		for _, lp := range m.GetLabel() {
			labels[lp.GetName()] = lp.GetValue()
		}
		if labels["uid"] == uid {
			return labels["peer"]
		}
	}
	return ""
}
