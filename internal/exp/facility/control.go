package facility

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"slices"
	"text/tabwriter"
	"time"

	"scistream/internal/api"
	"scistream/internal/bench"
	"scistream/internal/client"
	"scistream/internal/localgw"
)

// ctlTarget is one gateway (or facility) of the control experiment and
// the latencies measured against it.
type ctlTarget struct {
	store                  string           // bbolt, etcd, facility
	nodes                  int              // nodes of the facility; 0 for one gateway
	cls                    []*client.Client // requests go to each in turn
	pair, inbound, release []time.Duration
}

// facControl times --requests inbound-request + release pairs against a
// gateway on bbolt (no --store), a gateway on etcd (--store etcd, no
// --node) and a facility of takeoverNodes nodes (requests to each node
// in turn), interleaved: request i goes to every target, starting with
// a different one each time.
func facControl(ctx context.Context, cfg *Config, env *facEnv, stdout io.Writer) (recs []Record, err error) {
	ips, err := localgw.DistinctLoopbacks(3)
	if err != nil {
		return nil, err
	}
	// The streams are released before anything connects: the consumer
	// is an address and a port, never dialled.
	app, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.ParseIP(ips[2])})
	if err != nil {
		return nil, fmt.Errorf("consumer listener: %w", err)
	}
	defer app.Close()
	var gws []*localgw.Gateway
	var fac *facNodes
	defer func() {
		for _, g := range gws {
			if serr := g.Stop(); serr != nil {
				err = errors.Join(err, fmt.Errorf("stop the gateway (pid %d): %w", g.PID(), serr))
			}
		}
		if fac != nil {
			if serr := fac.stop(); serr != nil {
				err = errors.Join(err, serr)
			}
		}
	}()
	var targets []*ctlTarget
	for i, t := range []struct {
		store string
		args  []string
	}{{"bbolt", nil}, {"etcd", []string{"--store", "etcd://" + env.etcd, "--store_facility", "ctl-etcd"}}} {
		g, err := localgw.Start(ctx, localgw.Options{S2CS: env.s2cs, ListenerIP: ips[i], StateDir: filepath.Join(env.dir, "ctl-"+t.store),
			TokensFile: env.tokens, Args: append(slices.Clone(env.args), t.args...)})
		if err != nil {
			return nil, fmt.Errorf("start the gateway on %s: %w", t.store, err)
		}
		gws = append(gws, g)
		c, err := g.Client(env.token)
		if err != nil {
			return nil, err
		}
		defer c.Close()
		targets = append(targets, &ctlTarget{store: t.store, cls: []*client.Client{c}})
	}
	if fac, err = env.startFacNodes(ctx, "ctl-fac", takeoverNodes); err != nil {
		return nil, err
	}
	targets = append(targets, &ctlTarget{store: "facility", nodes: takeoverNodes, cls: fac.cls})

	fmt.Fprintf(stdout, "\ncontrol: %d inbound-request + release pairs (num_conn %d) per target, interleaved: a gateway on bbolt (pid %d), one on etcd (pid %d), a facility of %d nodes (pids %v, each in turn)\n",
		cfg.Requests, cfg.NumConn, gws[0].PID(), gws[1].PID(), takeoverNodes, fac.pids())
	req := api.InboundRequest{RemoteIP: ips[2], ReceiverPorts: []int{app.Addr().(*net.TCPAddr).Port}, NumConn: cfg.NumConn, WAN: cfg.WAN}
	// One pair each first, not counted: connections and caches warm.
	for _, t := range targets {
		for _, c := range t.cls {
			if _, _, _, err := ctlPair(ctx, c, req); err != nil {
				return nil, fmt.Errorf("%s: %w", t.store, err)
			}
		}
	}
	for i := range cfg.Requests {
		for j := range targets {
			t := targets[(i+j)%len(targets)]
			in, rel, pair, err := ctlPair(ctx, t.cls[i%len(t.cls)], req)
			if err != nil {
				return nil, fmt.Errorf("%s, pair %d: %w", t.store, i+1, err)
			}
			t.inbound, t.release, t.pair = append(t.inbound, in), append(t.release, rel), append(t.pair, pair)
		}
	}
	for _, t := range targets {
		p, in, rel := bench.SummarizeRTT(t.pair), bench.SummarizeRTT(t.inbound), bench.SummarizeRTT(t.release)
		recs = append(recs, Record{Experiment: "control", Store: t.store, Nodes: t.nodes, NumConn: cfg.NumConn, Requests: cfg.Requests,
			PairP50Ms: p.P50 / 1e3, PairP99Ms: p.P99 / 1e3, PairMaxMs: p.Max / 1e3,
			InboundP50Ms: in.P50 / 1e3, InboundP99Ms: in.P99 / 1e3, ReleaseP50Ms: rel.P50 / 1e3, ReleaseP99Ms: rel.P99 / 1e3})
	}
	printControl(stdout, recs)
	return recs, nil
}

// ctlPair creates an inbound stream with req on c and releases it,
// timing both requests.
func ctlPair(ctx context.Context, c *client.Client, req api.InboundRequest) (in, rel, pair time.Duration, err error) {
	start := time.Now()
	s, err := c.Inbound(ctx, &req)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("inbound request: %w", err)
	}
	mid := time.Now()
	r, err := c.Release(ctx, s.UID)
	end := time.Now()
	switch {
	case err != nil:
		return 0, 0, 0, fmt.Errorf("release %s: %w", s.UID, err)
	case !r.State.Terminal():
		return 0, 0, 0, fmt.Errorf("release %s: state %s after release", s.UID, r.State)
	}
	return mid.Sub(start), end.Sub(mid), end.Sub(start), nil
}

func printControl(w io.Writer, recs []Record) {
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "store\tnodes\tpairs\tpair p50 ms\tp99 ms\tmax ms\tinbound p50 ms\tp99 ms\trelease p50 ms\tp99 ms\t")
	for _, r := range recs {
		nodes := "1"
		if r.Nodes > 0 {
			nodes = fmt.Sprint(r.Nodes)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t\n", r.Store, nodes, r.Requests,
			r.PairP50Ms, r.PairP99Ms, r.PairMaxMs, r.InboundP50Ms, r.InboundP99Ms, r.ReleaseP50Ms, r.ReleaseP99Ms)
	}
	tw.Flush()
	fmt.Fprintln(w, "(a pair = an inbound request (create, ports bound, record stored) and the release of that stream, on one gateway")
	fmt.Fprintln(w, " or node over HTTPS with a warm connection; nearest-rank percentiles over every pair)")
}
