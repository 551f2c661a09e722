// Package pool is s2bench pool: pooled WAN legs (issue 13 item 2, seed
// 002). Two experiments on real s2cs gateways, on loopback or in the
// testbed's namespaces (Config.Bed):
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
package pool

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
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

// poolRequest is what each connection sends; the consumer echoes it.
const poolRequest = 64

// Config is a pool experiment.
type Config struct {
	// Experiments are run in the order given; nil: Warm, HotSet,
	// Stealing.
	Experiments []string
	Conns       int // warm: new connections on each of the two streams; 0: 200
	// WANPool is the idle legs kept warm per stream (s2uc --wan_pool) of
	// the warm stream and of every pattern stream; 0: 1.
	WANPool int
	// Cap is the outbound gateway's cap of pooled legs to its peer (s2cs
	// --pool_max_per_peer) in the pattern runs, below Pattern.Flows; 0: 4.
	Cap     int
	Pattern Params        // the access patterns
	Timeout time.Duration // the whole experiment stops with an error after this long; 0: 10 minutes
	S2CS    string        // the s2cs binary; empty: localgw.FindBinary's
	// Bed, if set, is the testbed to run in (testbed.Open); nil:
	// loopback. Asked and Keep are testbed.Open's.
	Bed   *netbed.Config
	Asked map[string]bool
	Keep  bool
}

func (cfg Config) withDefaults() Config {
	if len(cfg.Experiments) == 0 {
		cfg.Experiments = []string{Warm, HotSet, Stealing}
	}
	if cfg.Conns == 0 {
		cfg.Conns = 200
	}
	if cfg.WANPool == 0 {
		cfg.WANPool = 1
	}
	if cfg.Cap == 0 {
		cfg.Cap = 4
	}
	cfg.Pattern = cfg.Pattern.withDefaults()
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Minute
	}
	return cfg
}

// Result is what a pool experiment measured.
type Result struct {
	Warm     *WarmResult    // nil unless Warm ran
	Patterns []PolicyResult // each pattern that ran under lru, then lrum
}

// WarmResult is the warm experiment's outcome.
type WarmResult struct {
	// Cold and Warm are each connection's time from connect() to its
	// first echoed byte, on the stream without pooled legs and on the one
	// with them.
	Cold, Warm []time.Duration
	// TookIdle counts the warm stream's connections that took an idle
	// leg; Created, Reused and TornDown are its legs.
	TookIdle, Created, Reused, TornDown int64
}

// Run runs the experiments, printing their steps and tables to stdout,
// and stops every gateway, the echo consumer and a testbed it brought up
// (unless Keep), also after a failure, an interrupt (ctx) or Timeout.
func Run(ctx context.Context, cfg Config, stdout io.Writer) (res Result, err error) {
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithTimeoutCause(ctx, cfg.Timeout, fmt.Errorf("s2bench pool ran out of its --timeout %s", cfg.Timeout))
	defer cancel()
	wall := time.Now()
	env := &poolEnv{base: localpair.Config{S2CS: cfg.S2CS, Engine: "splice", WAN: api.WANTLS, NoStream: true}}
	where := "loopback"
	var ln *net.TCPListener
	if cfg.Bed == nil {
		ip := localgw.RandomLoopback()
		if ln, err = net.ListenTCP("tcp", &net.TCPAddr{IP: net.ParseIP(ip)}); err != nil {
			return res, fmt.Errorf("consumer listener: %w", err)
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
		tb, m, down, err := testbed.Open(ctx, *cfg.Bed, cfg.Asked, cfg.Keep, stdout)
		if err != nil {
			return res, err
		}
		defer func() { err = errors.Join(err, down()) }()
		where = fmt.Sprintf("testbed %s (%s; gateway path RTT measured %.1f ms)", tb.Name, tb.Preset, ms(m.GatewayRTT()))
		if err := netbed.Do(tb.NS(netbed.Consumer), func() (err error) {
			ln, err = net.ListenTCP("tcp", &net.TCPAddr{IP: net.ParseIP(tb.ConsumerLAN())})
			return err
		}); err != nil {
			return res, fmt.Errorf("consumer listener in %s: %w", tb.NS(netbed.Consumer), err)
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

	for _, e := range cfg.Experiments {
		var err error
		if e == Warm {
			res.Warm, err = env.warmVsCold(ctx, &cfg, stdout)
		} else {
			var rs []PolicyResult
			rs, err = env.patterns(ctx, &cfg, e, stdout)
			res.Patterns = append(res.Patterns, rs...)
		}
		if ctx.Err() != nil {
			err = context.Cause(ctx) // what a connection cut short says is the timeout's doing
		}
		if err != nil {
			return res, fmt.Errorf("%s: %w", e, err)
		}
	}
	fmt.Fprintf(stdout, "wall time %.1f s\n", time.Since(wall).Seconds())
	return res, nil
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
func (e *poolEnv) warmVsCold(ctx context.Context, cfg *Config, stdout io.Writer) (_ *WarmResult, err error) {
	r, err := e.start(ctx, nil, []int{0, cfg.WANPool}, cfg.WANPool)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, r.close()) }()
	fmt.Fprintf(stdout, "\nwarm pool against cold: %d new connections on each of two streams of one gateway pair (%s), alternating\n", cfg.Conns, r.lp.Describe())
	var samples [2][]time.Duration
	var reused, lastReused int64
	for i := range cfg.Conns {
		for j := range 2 {
			k := j ^ i%2 // cold first on even rounds, warm first on odd ones
			d, err := e.access(ctx, r.streams[k].Listeners[0])
			if err != nil {
				return nil, err
			}
			st, err := r.settle(ctx, k)
			if err != nil {
				return nil, err
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
		return nil, err
	}
	fmt.Fprintf(stdout, "%-22s %6s %10s %10s %10s %10s %10s\n", "first byte (ms)", "conns", "p50", "p99", "mean", "min", "max")
	rows := [2]bench.RTTStats{}
	for k, label := range []string{"cold (wan_pool 0)", "warm (wan_pool " + strconv.Itoa(cfg.WANPool) + ")"} {
		s := bench.SummarizeRTT(samples[k])
		rows[k] = s
		fmt.Fprintf(stdout, "%-22s %6d %10.2f %10.2f %10.2f %10.2f %10.2f\n", label, s.N, s.P50/1e3, s.P99/1e3, s.Mean/1e3, float64(slices.Min(samples[k]))/1e6, s.Max/1e3)
	}
	fmt.Fprintf(stdout, "warm/cold: p50 %.2f, mean %.2f; warm stream: %d of %d connections took an idle leg; legs created %d, reused %d, torn down %d\n",
		rows[1].P50/rows[0].P50, rows[1].Mean/rows[0].Mean, reused, cfg.Conns, warm.LegsCreated, warm.LegsReused, warm.LegsTornDown)
	return &WarmResult{Cold: samples[0], Warm: samples[1], TookIdle: reused, Created: warm.LegsCreated, Reused: warm.LegsReused, TornDown: warm.LegsTornDown}, nil
}

// PolicyResult is one pattern replayed under one policy.
type PolicyResult struct {
	Pattern, Policy string // HotSet or Stealing; lru or lrum
	// Created, Reused and TornDown are the legs of every stream; Errors
	// the streams' errors.
	Created, Reused, TornDown, Errors int64
	Hits                              int // connections that took an idle leg
	// All, Hit and Miss are the connections' setup times (connect() to
	// the first echoed byte): all of them, those that took an idle leg,
	// and the others.
	All, Hit, Miss []time.Duration
}

// patterns replays one pattern under lru and lrum and returns both,
// lru first.
func (e *poolEnv) patterns(ctx context.Context, cfg *Config, name string, stdout io.Writer) ([]PolicyResult, error) {
	p := cfg.Pattern
	seq := p.Sequence(name)
	fmt.Fprintf(stdout, "\n%s: %d connections over %d streams (wan_pool %d each) to one peer gateway, s2cs --pool_max_per_peer %d, seed %d\n  %s\n",
		name, len(seq), p.Flows, cfg.WANPool, cfg.Cap, p.Seed, p.Describe(name))
	// Each pattern starts with the other policy than the last, so a
	// drift of the machine does not always favour one.
	policies := []string{"lru", "lrum"}
	if name == Stealing {
		slices.Reverse(policies)
	}
	results := map[string]*PolicyResult{}
	for _, pol := range policies {
		res, err := e.replay(ctx, cfg, pol, seq, stdout)
		if err != nil {
			return nil, fmt.Errorf("policy %s: %w", pol, err)
		}
		res.Pattern = name
		results[pol] = res
	}
	fmt.Fprintf(stdout, "%-9s %-7s %6s %10s %8s %7s %6s %11s %9s %9s %10s %10s %7s\n",
		"pattern", "policy", "conns", "teardowns", "created", "reused", "hit%", "setup mean", "p50", "p99", "hit mean", "miss mean", "errors")
	for _, pol := range []string{"lru", "lrum"} {
		r := results[pol]
		s := bench.SummarizeRTT(r.All)
		fmt.Fprintf(stdout, "%-9s %-7s %6d %10d %8d %7d %6.1f %8.2f ms %9.2f %9.2f %10.2f %10.2f %7d\n",
			name, pol, len(r.All), r.TornDown, r.Created, r.Reused, 100*float64(r.Hits)/float64(len(r.All)),
			s.Mean/1e3, s.P50/1e3, s.P99/1e3, meanMs(r.Hit), meanMs(r.Miss), r.Errors)
	}
	lru, lrum := results["lru"], results["lrum"]
	fmt.Fprintf(stdout, "%s: LRU-M tore down %d legs, LRU %d (LRU-M/LRU %s); mean setup LRU-M %.2f ms, LRU %.2f ms\n",
		name, lrum.TornDown, lru.TornDown, ratio(lrum.TornDown, lru.TornDown), meanMs(lrum.All), meanMs(lru.All))
	return []PolicyResult{*lru, *lrum}, nil
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
func (e *poolEnv) replay(ctx context.Context, cfg *Config, pol string, seq []int, stdout io.Writer) (_ *PolicyResult, err error) {
	pools := make([]int, cfg.Pattern.Flows)
	for i := range pools {
		pools[i] = cfg.WANPool
	}
	r, err := e.start(ctx, []string{"--pool_policy", pol, "--pool_max_per_peer", strconv.Itoa(cfg.Cap)}, pools, cfg.Cap)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, r.close()) }()
	fmt.Fprintf(stdout, "  %s: %s\n", pol, r.lp.Describe())
	res := &PolicyResult{Policy: pol}
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
		res.All = append(res.All, d)
		if st.LegsReused > lastReused[f] {
			res.Hits++
			res.Hit = append(res.Hit, d)
		} else {
			res.Miss = append(res.Miss, d)
		}
		lastReused[f] = st.LegsReused
	}
	for i := range r.streams {
		st, err := r.stats(ctx, i)
		if err != nil {
			return nil, err
		}
		res.Created += st.LegsCreated
		res.Reused += st.LegsReused
		res.TornDown += st.LegsTornDown
		res.Errors += st.Errors
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

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
