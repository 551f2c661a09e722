package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"scistream/internal/api"
	"scistream/internal/bench"
	"scistream/internal/client"
	"scistream/internal/exp/localpair"
	"scistream/internal/exp/testbed"
	"scistream/internal/localgw"
	"scistream/internal/netbed"
	"scistream/internal/waitfor"
)

// s2bench pool: pooled WAN legs (issue 13 item 2, seed 002). Two
// experiments on real s2cs gateways, on loopback or in the testbed's
// namespaces (--preset):
//
//   - warm: the first-byte latency of a new application connection
//     through a stream without pooled legs (every connection pays the
//     WAN's TCP and TLS handshakes) and through one with wan_pool legs
//     kept warm, both streams on one gateway pair, alternating connection
//     by connection so machine noise falls on both.
//   - hotset, stealing: seed 002's access patterns replayed, the same
//     seeded sequence under --pool_policy lru and then lrum (a fresh
//     gateway pair each, --pool_max_per_peer below the streams that want
//     legs), counting legs torn down, created and reused, and the
//     connections' setup time.
//
// Every connection is a small request that the consumer echoes; the
// producer times connect() to the first echoed byte, reads the whole
// echo, checks it and closes; the next connection starts once the
// outbound gateway's stream shows no active connection, so each finds
// the pool as the last one left it.

const poolUsage = `usage: s2bench pool [--experiments warm,hotset,stealing] [--conns 200] [--wan_pool 1]
                   [--flows 12] [--pool_max_per_peer 4] [--accesses 300] [--hot 4] [--churn 50] [--steal 0.3] [--seed 1]
                   [--preset longwan | --rtt 150ms] [--name pool] [--keep]

Pooled WAN legs (s2uc --wan_pool, s2cs --pool_max_per_peer and --pool_policy)
on real s2cs gateways, on loopback, or with --preset in the testbed's
namespaces across its emulated WAN (root; s2bench testbed).
warm: the first-byte latency of --conns new connections through a stream
without pooled legs and through one with --wan_pool warm legs, alternating.
hotset, stealing: seed 002's access patterns over --flows streams to one peer
gateway, under --pool_policy lru then lrum with the same seeded sequence:
legs torn down, created, reused, and the connections' setup time.`

// poolRequest is what each connection sends; the consumer echoes it.
const poolRequest = 64

type poolConfig struct {
	experiments []string
	conns       int
	wanPool     int
	cap         int // --pool_max_per_peer of the pattern runs
	pattern     patternParams
	timeout     time.Duration
	s2cs        string
	bed         *netbed.Config // nil: loopback
	explicit    map[string]bool
	keep        bool
}

func parsePool(args []string, stdout, stderr io.Writer) (*poolConfig, error) {
	fs := flag.NewFlagSet("s2bench pool", flag.ContinueOnError)
	exps := fs.String("experiments", "warm,hotset,stealing", "experiments to run, comma-separated: warm (warm pool against cold), hotset, stealing (LRU against LRU-M)")
	conns := fs.Int("conns", 200, "warm: new connections on each of the two streams")
	wanPool := fs.Int("wan_pool", 1, "idle legs kept warm per stream (s2uc --wan_pool) of the warm stream and of every pattern stream")
	flows := fs.Int("flows", 12, "hotset, stealing: streams (flows) to the one peer gateway")
	poolCap := fs.Int("pool_max_per_peer", 4, "hotset, stealing: the outbound gateway's cap of pooled legs to its peer (below --flows, so legs are torn down)")
	accesses := fs.Int("accesses", 300, "hotset, stealing: connections replayed under each policy")
	hot := fs.Int("hot", 4, "hotset: streams in the hot set; stealing: a worker's own streams")
	churn := fs.Int("churn", 50, "hotset: connections between two changes of the hot set")
	steal := fs.Float64("steal", 0.3, "stealing: share of connections that steal from any stream")
	seed := fs.Uint64("seed", 1, "seed of the access patterns (the same for both policies)")
	timeout := fs.Duration("timeout", 10*time.Minute, "the whole command stops with an error after this long")
	s2cs := fs.String("s2cs", "", "s2cs binary (default: next to s2bench, ./bin, PATH)")
	preset := fs.String("preset", "", "run in the testbed's namespaces across this emulated path ("+strings.Join(netbed.PresetNames(), ", ")+"; root); default: loopback")
	rtt := fs.Duration("rtt", 0, "run in the testbed with this overall RTT instead of a preset's, e.g. 150ms")
	name := fs.String("name", "pool", "testbed name (with --preset or --rtt): one that is up is used as it is, else one is brought up and taken down")
	wanRate := fs.String("wan_rate", "", "rate of the testbed's emulated WAN (default: the preset's)")
	keep := fs.Bool("keep", false, "leave a testbed this command brought up running afterwards")
	if err := parseFlags(fs, args, poolUsage, stderr); err != nil {
		return nil, err
	}
	cfg := &poolConfig{
		conns: *conns, wanPool: *wanPool, cap: *poolCap, timeout: *timeout, s2cs: *s2cs, keep: *keep, explicit: flagsSet(fs),
		pattern: patternParams{flows: *flows, accesses: *accesses, hot: *hot, churn: *churn, steal: *steal, seed: *seed},
	}
	for _, e := range strings.Split(*exps, ",") {
		e = strings.TrimSpace(e)
		switch {
		case e != "warm" && e != patternHotSet && e != patternStealing:
			return nil, usagef("--experiments: %q unknown: give warm, hotset and/or stealing, comma-separated", e)
		case slices.Contains(cfg.experiments, e):
			return nil, usagef("--experiments: %s given twice", e)
		}
		cfg.experiments = append(cfg.experiments, e)
	}
	p := cfg.pattern
	switch {
	case cfg.conns < 1 || cfg.conns > 10000:
		return nil, usagef("--conns %d out of range: give 1 to 10000", cfg.conns)
	case cfg.wanPool < 1 || cfg.wanPool > 16:
		return nil, usagef("--wan_pool %d out of range: give 1 to 16 (s2cs --pool_max_warm's default)", cfg.wanPool)
	case p.flows < 2 || p.flows > 48:
		return nil, usagef("--flows %d out of range: give 2 to 48", p.flows)
	case cfg.cap < 1 || cfg.cap >= p.flows:
		return nil, usagef("--pool_max_per_peer %d: give 1 to %d, below --flows, or no leg is ever torn down", cfg.cap, p.flows-1)
	case p.accesses < 1 || p.accesses > 10000:
		return nil, usagef("--accesses %d out of range: give 1 to 10000", p.accesses)
	case p.hot < 1 || p.hot >= p.flows:
		return nil, usagef("--hot %d: give 1 to %d, below --flows", p.hot, p.flows-1)
	case p.churn < 1:
		return nil, usagef("--churn %d: give at least 1", p.churn)
	case !(p.steal >= 0 && p.steal <= 1):
		return nil, usagef("--steal %v: give a share from 0 to 1, e.g. 0.3", p.steal)
	case cfg.timeout < 10*time.Second || cfg.timeout > 2*time.Hour:
		return nil, usagef("--timeout %s out of range: give 10s to 2h", cfg.timeout)
	}
	if *preset != "" || *rtt != 0 {
		if *preset == "" {
			*preset = "shortwan" // replaced by --rtt
		}
		loss, cc, root := 0.0, "", netbed.DefaultStateRoot
		bed, err := (&bedFlags{name: name, preset: preset, wanRate: wanRate, cc: &cc, stateRoot: &root, loss: &loss, rtt: rtt}).config(stdout)
		if err != nil {
			return nil, err
		}
		cfg.bed = &bed
	} else {
		for _, f := range []string{"name", "wan_rate", "keep"} {
			if cfg.explicit[f] {
				return nil, usagef("--%s is a testbed flag: give --preset (or --rtt) too, or drop it", f)
			}
		}
	}
	if cfg.s2cs == "" {
		p, err := localgw.FindBinary("s2cs")
		if err != nil {
			return nil, usagef("%v", err)
		}
		cfg.s2cs = p
	}
	return cfg, nil
}

func runPool(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parsePool(args, stdout, stderr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeoutCause(ctx, cfg.timeout, fmt.Errorf("s2bench pool ran out of its --timeout %s", cfg.timeout))
	defer cancel()
	return pool(ctx, cfg, stdout)
}

func pool(ctx context.Context, cfg *poolConfig, stdout io.Writer) (err error) {
	wall := time.Now()
	env := &poolEnv{base: localpair.Config{S2CS: cfg.s2cs, Engine: "splice", WAN: api.WANTLS, NoStream: true}}
	where := "loopback"
	var ln *net.TCPListener
	if cfg.bed == nil {
		ip := localgw.RandomLoopback()
		if ln, err = net.ListenTCP("tcp", &net.TCPAddr{IP: net.ParseIP(ip)}); err != nil {
			return fmt.Errorf("consumer listener: %w", err)
		}
		env.dial = func(ctx context.Context, addr string) (*net.TCPConn, time.Time, error) {
			var d net.Dialer
			start := time.Now()
			c, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				return nil, start, err
			}
			return c.(*net.TCPConn), start, nil
		}
	} else {
		tb, m, down, err := testbed.Open(ctx, *cfg.bed, cfg.explicit, cfg.keep, stdout)
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, down()) }()
		where = fmt.Sprintf("testbed %s (%s; gateway path RTT measured %.1f ms)", tb.Name, tb.Preset, ms(m.GatewayRTT()))
		if err := netbed.Do(tb.NS(netbed.Consumer), func() (err error) {
			ln, err = net.ListenTCP("tcp", &net.TCPAddr{IP: net.ParseIP(tb.ConsumerLAN())})
			return err
		}); err != nil {
			return fmt.Errorf("consumer listener in %s: %w", tb.NS(netbed.Consumer), err)
		}
		env.base.NetNS = [2]string{tb.NS(netbed.ConsumerGW), tb.NS(netbed.ProducerGW)}
		env.base.IPs = [2]string{tb.ConsumerGWWAN(), tb.ProducerGWWAN()}
		env.base.Allow = tb.LANASubnet()
		env.dial = func(ctx context.Context, addr string) (conn *net.TCPConn, start time.Time, err error) {
			err = netbed.Do(tb.NS(netbed.Producer), func() error {
				var d net.Dialer
				start = time.Now()
				c, err := d.DialContext(ctx, "tcp", addr)
				if err == nil {
					conn = c.(*net.TCPConn)
				}
				return err
			})
			return conn, start, err
		}
	}
	env.echo = startEcho(ln)
	defer func() { err = errors.Join(err, env.echo.stop()) }()
	env.base.Consumer = ln.Addr().(*net.TCPAddr)
	fmt.Fprintf(stdout, "s2bench pool: on %s; TLS WAN legs, splice engine; every connection sends %d bytes, the consumer (%s) echoes them\n", where, poolRequest, ln.Addr())

	for _, e := range cfg.experiments {
		var err error
		if e == "warm" {
			err = env.warmVsCold(ctx, cfg, stdout)
		} else {
			err = env.patterns(ctx, cfg, e, stdout)
		}
		if ctx.Err() != nil {
			err = context.Cause(ctx) // what a connection cut short says is the timeout's doing
		}
		if err != nil {
			return fmt.Errorf("%s: %w", e, err)
		}
	}
	fmt.Fprintf(stdout, "wall time %.1f s\n", time.Since(wall).Seconds())
	return nil
}

// poolEnv is where the experiments run: loopback, or the testbed.
type poolEnv struct {
	base localpair.Config // the gateway pair, without its policy flags
	echo *echoServer
	// dial connects to addr from the producer's side (its namespace on
	// the testbed) and returns the time it started.
	dial func(ctx context.Context, addr string) (*net.TCPConn, time.Time, error)
}

// poolRun is a gateway pair with its streams.
type poolRun struct {
	lp      *localpair.Pair
	streams []*api.Stream // outbound sides
	inbound []*api.Stream
}

// start starts a gateway pair with more s2cs flags args and wires a
// stream per entry of pools (its wan_pool), all to the echo consumer;
// it returns once the warm legs are up: as many as pools ask for, or the
// cap of legs per peer (capLegs).
func (e *poolEnv) start(ctx context.Context, args []string, pools []int, capLegs int) (_ *poolRun, err error) {
	cfg := e.base
	cfg.Args = args
	lp, err := localpair.Start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	r := &poolRun{lp: lp}
	defer func() {
		if err != nil {
			err = errors.Join(err, r.close())
		}
	}()
	cons := cfg.Consumer
	want := int64(0)
	for _, n := range pools {
		inS, outS, err := client.Wire(ctx, lp.InC, lp.OutC,
			&api.InboundRequest{RemoteIP: cons.IP.String(), ReceiverPorts: []int{cons.Port}, NumConn: 1, WAN: api.WANTLS},
			api.OutboundRequest{NumConn: 1, Allow: []string{lp.Allow}, WANPool: n}, nil)
		if err != nil {
			return r, fmt.Errorf("wire stream %d: %w", len(r.streams)+1, err)
		}
		r.inbound, r.streams = append(r.inbound, inS), append(r.streams, outS)
		want += int64(n)
	}
	want = min(want, int64(capLegs))
	var created int64
	var serr error
	// The warmers' first dials may come before the inbound sides were
	// attached (refused, then retried after 1 s, 2 s, ...).
	if !waitfor.Cond(30*time.Second, func() bool {
		if ctx.Err() != nil {
			return true
		}
		created = 0
		for i := range r.streams {
			st, err := r.stats(ctx, i)
			if err != nil {
				serr = err
				return true
			}
			created += st.LegsCreated
		}
		return created >= want
	}) {
		return r, fmt.Errorf("%d of %d warm legs up after 30 s", created, want)
	}
	if serr != nil {
		return r, serr
	}
	return r, ctx.Err()
}

// stats returns stream i's outbound statistics.
func (r *poolRun) stats(ctx context.Context, i int) (*api.Stats, error) {
	s, err := r.lp.OutC.Get(ctx, r.streams[i].UID)
	if err != nil {
		return nil, fmt.Errorf("status of stream %s: %w", r.streams[i].UID, err)
	}
	if s.Stats == nil {
		return nil, fmt.Errorf("stream %s: no statistics", r.streams[i].UID)
	}
	return s.Stats, nil
}

// settle waits until stream i has no active connection and, if it has
// pooled legs, one of them idle (the last connection's leg back in the
// pool; active_conns drops just before), and returns its statistics.
func (r *poolRun) settle(ctx context.Context, i int) (*api.Stats, error) {
	var st *api.Stats
	var err error
	pooled := r.streams[i].WANPool > 0
	if !waitfor.Cond(10*time.Second, func() bool {
		st, err = r.stats(ctx, i)
		return err != nil || st.ActiveConns == 0 && (!pooled || st.LegsIdle > 0)
	}) {
		return nil, fmt.Errorf("stream %s: %d active connections and %d idle legs 10 s after the last connection ended", r.streams[i].UID, st.ActiveConns, st.LegsIdle)
	}
	return st, err
}

// close releases the streams and stops the gateways.
func (r *poolRun) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var errs []error
	for i := range r.streams {
		for _, side := range []struct {
			c   *client.Client
			uid string
		}{{r.lp.OutC, r.streams[i].UID}, {r.lp.InC, r.inbound[i].UID}} {
			if _, err := side.c.Release(ctx, side.uid); err != nil {
				errs = append(errs, fmt.Errorf("release stream %s: %w", side.uid, err))
			}
		}
	}
	return errors.Join(append(errs, r.lp.Close())...)
}

// access makes one new connection to target: it sends the request, half
// closes, and returns the time from connect() to the first echoed byte
// once the whole echo came back intact and the consumer closed.
func (e *poolEnv) access(ctx context.Context, target string) (time.Duration, error) {
	c, start, err := e.dial(ctx, target)
	if err != nil {
		return 0, fmt.Errorf("connect to %s: %w", target, err)
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
	defer stop()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	req := make([]byte, poolRequest)
	for i := range req {
		req[i] = byte(i*7 + 1)
	}
	if _, err := c.Write(req); err != nil {
		return 0, fmt.Errorf("send the request to %s: %w", target, err)
	}
	if err := c.CloseWrite(); err != nil {
		return 0, fmt.Errorf("half-close to %s: %w", target, err)
	}
	got := make([]byte, 0, poolRequest)
	buf := make([]byte, poolRequest+1)
	n, err := c.Read(buf)
	first := time.Since(start)
	got = append(got, buf[:n]...)
	for err == nil {
		n, err = c.Read(buf)
		got = append(got, buf[:n]...)
		if len(got) > poolRequest {
			break
		}
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, fmt.Errorf("read the echo from %s after %d bytes: %w", target, len(got), err)
	}
	if !bytes.Equal(got, req) {
		return 0, fmt.Errorf("echo through %s: %d bytes, not the %d sent", target, len(got), len(req))
	}
	return first, nil
}

// warmVsCold times new connections through a stream without pooled legs
// and through one with wan_pool warm legs, alternately.
func (e *poolEnv) warmVsCold(ctx context.Context, cfg *poolConfig, stdout io.Writer) (err error) {
	r, err := e.start(ctx, nil, []int{0, cfg.wanPool}, cfg.wanPool)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, r.close()) }()
	fmt.Fprintf(stdout, "\nwarm pool against cold: %d new connections on each of two streams of one gateway pair (%s), alternating\n", cfg.conns, r.lp.Describe())
	var samples [2][]time.Duration
	var reused, lastReused int64
	for i := range cfg.conns {
		for j := range 2 {
			k := j ^ i%2 // cold first on even rounds, warm first on odd ones
			d, err := e.access(ctx, r.streams[k].Listeners[0])
			if err != nil {
				return err
			}
			st, err := r.settle(ctx, k)
			if err != nil {
				return err
			}
			samples[k] = append(samples[k], d)
			if k == 1 {
				if st.LegsReused > lastReused {
					reused++
				}
				lastReused = st.LegsReused
			}
		}
	}
	warm, err := r.stats(ctx, 1)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%-22s %6s %10s %10s %10s %10s %10s\n", "first byte (ms)", "conns", "p50", "p99", "mean", "min", "max")
	rows := [2]bench.RTTStats{}
	for k, label := range []string{"cold (wan_pool 0)", "warm (wan_pool " + strconv.Itoa(cfg.wanPool) + ")"} {
		s := bench.SummarizeRTT(samples[k])
		rows[k] = s
		fmt.Fprintf(stdout, "%-22s %6d %10.2f %10.2f %10.2f %10.2f %10.2f\n", label, s.N, s.P50/1e3, s.P99/1e3, s.Mean/1e3, float64(slices.Min(samples[k]))/1e6, s.Max/1e3)
	}
	fmt.Fprintf(stdout, "warm/cold: p50 %.2f, mean %.2f; warm stream: %d of %d connections took an idle leg; legs created %d, reused %d, torn down %d\n",
		rows[1].P50/rows[0].P50, rows[1].Mean/rows[0].Mean, reused, cfg.conns, warm.LegsCreated, warm.LegsReused, warm.LegsTornDown)
	return nil
}

// patternResult is one pattern replayed under one policy.
type patternResult struct {
	policy                      string
	created, reused, torn, errs int64
	hits                        int
	all, hit, miss              []time.Duration
}

// patterns replays one pattern under lru and lrum.
func (e *poolEnv) patterns(ctx context.Context, cfg *poolConfig, name string, stdout io.Writer) error {
	p := cfg.pattern
	seq := p.sequence(name)
	fmt.Fprintf(stdout, "\n%s: %d connections over %d streams (wan_pool %d each) to one peer gateway, s2cs --pool_max_per_peer %d, seed %d\n  %s\n",
		name, len(seq), p.flows, cfg.wanPool, cfg.cap, p.seed, p.describe(name))
	// Each pattern starts with the other policy than the last, so a
	// drift of the machine does not always favour one.
	policies := []string{"lru", "lrum"}
	if name == patternStealing {
		slices.Reverse(policies)
	}
	results := map[string]*patternResult{}
	for _, pol := range policies {
		res, err := e.replay(ctx, cfg, pol, seq, stdout)
		if err != nil {
			return fmt.Errorf("policy %s: %w", pol, err)
		}
		results[pol] = res
	}
	fmt.Fprintf(stdout, "%-9s %-7s %6s %10s %8s %7s %6s %11s %9s %9s %10s %10s %7s\n",
		"pattern", "policy", "conns", "teardowns", "created", "reused", "hit%", "setup mean", "p50", "p99", "hit mean", "miss mean", "errors")
	for _, pol := range []string{"lru", "lrum"} {
		r := results[pol]
		s := bench.SummarizeRTT(r.all)
		fmt.Fprintf(stdout, "%-9s %-7s %6d %10d %8d %7d %6.1f %8.2f ms %9.2f %9.2f %10.2f %10.2f %7d\n",
			name, pol, len(r.all), r.torn, r.created, r.reused, 100*float64(r.hits)/float64(len(r.all)),
			s.Mean/1e3, s.P50/1e3, s.P99/1e3, meanMs(r.hit), meanMs(r.miss), r.errs)
	}
	lru, lrum := results["lru"], results["lrum"]
	fmt.Fprintf(stdout, "%s: LRU-M tore down %d legs, LRU %d (LRU-M/LRU %s); mean setup LRU-M %.2f ms, LRU %.2f ms\n",
		name, lrum.torn, lru.torn, ratio(lrum.torn, lru.torn), meanMs(lrum.all), meanMs(lru.all))
	return nil
}

func ratio(a, b int64) string {
	if b == 0 {
		return "n/a"
	}
	return strconv.FormatFloat(float64(a)/float64(b), 'f', 2, 64)
}

func meanMs(ds []time.Duration) float64 {
	if len(ds) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return ms(sum / time.Duration(len(ds)))
}

// replay runs seq on a fresh gateway pair whose outbound gateway has the
// policy pol.
func (e *poolEnv) replay(ctx context.Context, cfg *poolConfig, pol string, seq []int, stdout io.Writer) (_ *patternResult, err error) {
	pools := make([]int, cfg.pattern.flows)
	for i := range pools {
		pools[i] = cfg.wanPool
	}
	r, err := e.start(ctx, []string{"--pool_policy", pol, "--pool_max_per_peer", strconv.Itoa(cfg.cap)}, pools, cfg.cap)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, r.close()) }()
	fmt.Fprintf(stdout, "  %s: %s\n", pol, r.lp.Describe())
	res := &patternResult{policy: pol}
	lastReused := make([]int64, len(r.streams))
	for _, f := range seq {
		d, err := e.access(ctx, r.streams[f].Listeners[0])
		if err != nil {
			return nil, err
		}
		st, err := r.settle(ctx, f)
		if err != nil {
			return nil, err
		}
		res.all = append(res.all, d)
		if st.LegsReused > lastReused[f] {
			res.hits++
			res.hit = append(res.hit, d)
		} else {
			res.miss = append(res.miss, d)
		}
		lastReused[f] = st.LegsReused
	}
	for i := range r.streams {
		st, err := r.stats(ctx, i)
		if err != nil {
			return nil, err
		}
		res.created += st.LegsCreated
		res.reused += st.LegsReused
		res.torn += st.LegsTornDown
		res.errs += st.Errors
	}
	return res, nil
}

// echoServer is the consumer: it echoes every connection's bytes as they
// come and half-closes after the producer's end.
type echoServer struct {
	ln *net.TCPListener
	wg sync.WaitGroup

	mu        sync.Mutex // guards the following fields
	conns     map[*net.TCPConn]bool
	acceptErr error // why the accept loop ended, if not by stop
}

func startEcho(ln *net.TCPListener) *echoServer {
	s := &echoServer{ln: ln, conns: map[*net.TCPConn]bool{}}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.AcceptTCP()
			if err != nil {
				if !errors.Is(err, net.ErrClosed) {
					s.mu.Lock()
					s.acceptErr = fmt.Errorf("echo consumer: accept: %w", err)
					s.mu.Unlock()
				}
				return
			}
			s.mu.Lock()
			s.conns[c] = true
			s.mu.Unlock()
			s.wg.Add(1)
			go s.serve(c)
		}
	}()
	return s
}

func (s *echoServer) serve(c *net.TCPConn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
	}()
	buf := make([]byte, 4096)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if errors.Is(err, io.EOF) {
			c.CloseWrite()
			return
		}
		if err != nil {
			return
		}
	}
}

// stop closes the listener and every connection, waits for their
// goroutines, and says if the accept loop had failed before.
func (s *echoServer) stop() error {
	s.ln.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return s.acceptErr
}
