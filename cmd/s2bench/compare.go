package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"scistream/internal/api"
	"scistream/internal/bench"
	"scistream/internal/exp/progress"
	"scistream/internal/exp/record"
	"scistream/internal/exp/workload"
	"scistream/internal/localgw"
	"scistream/internal/relay"
)

// knownWANs are the WAN transports compare can ask for; whether the s2cs
// at hand provides one is checked against its /v1/info once it runs.
var knownWANs = []string{api.WANTLS, api.WANTCP, api.WANQUIC}

type compareConfig struct {
	plan       *workload.Plan
	pairs      []int
	reps       int
	engine     string
	wan        string
	jsonPath   string
	plotsDir   string
	plotFormat string
	progress   string
	s2cs       string
	runTimeout time.Duration
	idle       time.Duration
	baseline   bool // also run the naive proxy pair (compare only)
	// rateInterval is the gateways' sampling of their rates (s2cs
	// --rate_interval), whose steady state each gateway run reports.
	rateInterval time.Duration
}

// gatewayArgs are the s2cs flags of compare's gateways.
func (cfg *compareConfig) gatewayArgs() []string {
	return []string{"--rate_interval", cfg.rateInterval.String()}
}

const compareUsage = `usage: s2bench compare [--workload sweep|dstream|lstream|SIZE[,SIZE...]] [--bytes N | --messages N | --duration D]
                       [--rate R] [--mode throughput|rr] [--pairs N[,N...]] [--reps 3]
                       [--engine splice|buffer|sockmap] [--wan tls|tcp|quic] [--baseline] [--json FILE] [--plots DIR]
                       [--rate_interval 1s]

Starts two local s2cs gateways, wires a stream through them (as s2uc stream
does), and runs the same verified workload directly and through the gateways,
interleaved: for each repetition and size, direct then gateways. Prints both
paths per size with the ratio; every message is checked (sequence, length,
CRC-32C) and any error fails the run. With no flags: 1GiB of 64KiB messages,
3 repetitions, TLS between the gateways.

Each gateway run also prints the steady-state rate each gateway sampled from
its own byte counters (s2cs --rate_interval; ramp-up and tail left out) next
to the goodput, and their ratio to it (x1.000: they agree).

With --baseline, a third path runs in the same rotation: a naive proxy pair
(two s2bench naiveproxy processes, io.Copy over the same WAN transport: TCP,
crypto/tls, or one quic-go connection), the simplest alternative a facility
could build, measured against the same direct runs.`

// compareFlags are the flags of compare; testbed run has them too.
type compareFlags struct {
	wf                                                                 workload.Flags
	pairs, engine, wan, jsonPath, plotsDir, plotFormat, progress, s2cs *string
	reps                                                               *int
	runTimeout, idle, rateInterval                                     *time.Duration
}

// register defines the flags on fs; reps is the default of --reps.
func (f *compareFlags) register(fs *flag.FlagSet, reps int) {
	f.wf.Register(fs)
	f.pairs = fs.String("pairs", "1", "producer/consumer pairs at once, each its own connection; a list (1,2,4,8) runs each count")
	f.reps = fs.Int("reps", reps, "repetitions of each (size, path), interleaved: direct, gateways, direct, ...")
	f.engine = fs.String("engine", "splice", "data-plane engine of both gateways (s2cs --type): "+strings.Join(relay.Names(), ", "))
	f.wan = fs.String("wan", api.WANTLS, "WAN transport between the gateways: tls, tcp (s2cs --insecure_tcp_wan), or quic")
	f.jsonPath = fs.String("json", "", "also write every run as a JSON array of records to FILE")
	f.plotsDir = fs.String("plots", "", "write plots (goodput and jitter against message size, RTT CDF in rr mode) to DIR")
	f.plotFormat = fs.String("plot_format", "svg", "plot file format: svg or png")
	f.progress = fs.String("progress", "auto", "progress line during runs on stderr: auto (when stderr is a terminal), on or off")
	f.s2cs = fs.String("s2cs", "", "s2cs binary (default: next to s2bench, in ./bin or on PATH)")
	f.runTimeout = fs.Duration("run_timeout", 5*time.Minute, "upper bound of one run")
	f.idle = fs.Duration("idle_timeout", 30*time.Second, "fail a run that makes no progress for this long")
	f.rateInterval = fs.Duration("rate_interval", time.Second, "how often the gateways sample their rates (s2cs --rate_interval), 10ms to 1m; each gateway run prints the steady state they saw next to the goodput")
}

// config validates the parsed flags of fs.
func (f *compareFlags) config(fs *flag.FlagSet) (*compareConfig, error) {
	cfg := &compareConfig{reps: *f.reps, engine: *f.engine, wan: *f.wan, jsonPath: *f.jsonPath, plotsDir: *f.plotsDir,
		plotFormat: *f.plotFormat, progress: *f.progress, s2cs: *f.s2cs, runTimeout: *f.runTimeout, idle: *f.idle, rateInterval: *f.rateInterval}
	var err error
	if cfg.pairs, err = parsePairs(*f.pairs); err != nil {
		return nil, err
	}
	if cfg.plan, err = resolveWorkload(&f.wf, slices.Max(cfg.pairs)); err != nil {
		return nil, err
	}
	switch {
	case cfg.reps < 1 || cfg.reps > maxReps:
		return nil, usagef("--reps %d out of range: give 1 to %d", cfg.reps, maxReps)
	case !slices.Contains(relay.Names(), cfg.engine):
		return nil, usagef("--engine %q: use one of %s", cfg.engine, strings.Join(relay.Names(), ", "))
	case !slices.Contains(knownWANs, cfg.wan):
		return nil, usagef("--wan %q: use one of %s", cfg.wan, strings.Join(knownWANs, ", "))
	case cfg.rateInterval < 10*time.Millisecond || cfg.rateInterval > time.Minute:
		return nil, usagef("--rate_interval %s out of range: give 10ms to 1m", cfg.rateInterval)
	}
	if err := checkExperimentFlags(cfg.plan, cfg.runTimeout, cfg.idle, cfg.plotFormat, cfg.progress, cfg.jsonPath, cfg.plotsDir); err != nil {
		return nil, err
	}
	if cfg.s2cs == "" {
		p, err := localgw.FindBinary("s2cs")
		if err != nil {
			return nil, usagef("no s2cs binary next to s2bench, in ./bin or on PATH: build it with go build -o bin/ ./cmd/... or pass --s2cs PATH")
		}
		cfg.s2cs = p
	} else if st, err := os.Stat(cfg.s2cs); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		return nil, usagef("--s2cs %s is not an executable file: build it with go build -o bin/ ./cmd/s2cs", cfg.s2cs)
	}
	return cfg, nil
}

// runOptions are the bounds of one run.
func (cfg *compareConfig) runOptions() bench.RunOptions {
	return bench.RunOptions{Timeout: cfg.runTimeout, Idle: cfg.idle, Duration: cfg.plan.Duration, EachMessage: cfg.plan.Each}
}

func parseCompare(args []string, stderr io.Writer) (*compareConfig, error) {
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f compareFlags
	f.register(fs, 3)
	baseline := fs.Bool("baseline", false, "also run the workload through a naive proxy pair (io.Copy over the same WAN transport), interleaved with direct and gateways")
	if err := parseFlags(fs, args, compareUsage, stderr); err != nil {
		return nil, err
	}
	cfg, err := f.config(fs)
	if err != nil {
		return nil, err
	}
	cfg.baseline = *baseline
	return cfg, nil
}

func runCompare(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseCompare(args, stderr)
	if err != nil {
		return err
	}
	return compare(ctx, cfg, stdout, stderr)
}

func compare(ctx context.Context, cfg *compareConfig, stdout, stderr io.Writer) (err error) {
	wall := time.Now()
	p := cfg.plan
	fmt.Fprintf(stdout, "s2bench compare: workload %s, %d size(s), pairs %v, %d repetition(s) per path, engine %s, WAN %s\n",
		p.Name, len(p.Sizes), cfg.pairs, cfg.reps, cfg.engine, cfg.wan)
	p.Print(stdout, cfg.pairs)

	lp, err := startLocalPair(ctx, localPairConfig{s2cs: cfg.s2cs, engine: cfg.engine, wan: cfg.wan, args: cfg.gatewayArgs()})
	if err != nil {
		return err
	}
	closed := false
	defer func() {
		if closed {
			return
		}
		if cerr := lp.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("clean up: %w", cerr))
		}
	}()
	fmt.Fprintf(stdout, "gateways: %s\n", lp.describe())
	fmt.Fprintf(stdout, "stream %s wired in %.1f ms (client.Wire); producer connects to %s\n",
		lp.outS.UID, ms(lp.setup), lp.target())
	ps := []string{record.PathDirect, record.PathGateways}
	var naive *naivePair
	if cfg.baseline {
		if naive, err = startNaivePair(ctx, cfg.wan, lp.consAddr); err != nil {
			return err
		}
		defer naive.Close()
		ps = append(ps, record.PathNaive)
		fmt.Fprintf(stdout, "naive baseline (io.Copy over %s): pids %v; producer connects to %s\n", cfg.wan, naive.pids(), naive.target)
	}

	e := &experiment{
		plan: p, pairs: cfg.pairs, reps: cfg.reps, paths: ps, engine: cfg.engine, wan: cfg.wan,
		jsonPath: cfg.jsonPath, plotsDir: cfg.plotsDir, plotFormat: cfg.plotFormat, progress: cfg.progress, cpu: true,
		runOne: func(ctx context.Context, h bench.Hello, prog *progress.Display, label string) (record.Record, error) {
			rt := lp.route(h.Path)
			if h.Path == record.PathNaive {
				rt = route{ln: lp.consumer, target: naive.target, cpu: naive.cpu}
			}
			return runPath(ctx, lp, h, rt, cfg.runOptions(), prog, label, stderr)
		},
		onFail: func(path string) {
			if path == record.PathGateways {
				fmt.Fprint(stderr, lp.logTail(10))
			}
		},
	}
	if err := e.execute(ctx, stdout, stderr); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "stream setup (client.Wire): %.1f ms\n", ms(lp.setup))
	closed = true
	if err := lp.Close(); err != nil {
		return fmt.Errorf("clean up: %w", err)
	}
	fmt.Fprint(stdout, lp.sockmapReport())
	fmt.Fprintf(stdout, "stream released, gateways stopped; wall time %.1f s\n", time.Since(wall).Seconds())
	return nil
}

// route is where a run over one path goes.
type route struct {
	ln     *net.TCPListener // the consumer's listener
	target string           // where the producers connect
	// peer, if set, is the IP address the consumer must see every
	// connection come from (the testbed's producer or consumer gateway).
	peer string
	// cpu, if set, returns the CPU time used so far by the proxies of
	// this path (the gateways' by default).
	cpu func() (time.Duration, error)
}

// route returns compare's route for path: the one consumer listener, reached
// directly or through the gateways.
func (lp *localPair) route(path string) route {
	if path == record.PathGateways {
		return route{ln: lp.consumer, target: lp.target()}
	}
	return route{ln: lp.consumer, target: lp.consumer.Addr().String()}
}

// runPath runs h once over rt, bounded by o, and checks that every
// connection took h.Path: directly, the consumer sees the producer's own
// address; through the gateways, it sees a gateway, and the gateways
// counted every byte of the run; with rt.peer, the consumer sees that
// address. On the gateway path it also measures the gateways' CPU time.
func runPath(ctx context.Context, lp *localPair, h bench.Hello, rt route, o bench.RunOptions, prog *progress.Display, label string, stderr io.Writer) (record.Record, error) {
	rec := record.Record{Path: h.Path, SizeBytes: h.Spec.Size, Pairs: h.Pairs, Mode: h.Mode.String(), RateMsgsPerS: h.Rate}
	if o.Duration > 0 {
		rec.DurationS = o.Duration.Seconds()
	}
	gw := h.Path == record.PathGateways
	cpuOf := rt.cpu
	if cpuOf == nil && gw {
		cpuOf = lp.cpu
	}
	var (
		sent0, recv0 int64
		cpu0         time.Duration
		err          error
	)
	if gw {
		if sent0, recv0, err = lp.wanBytes(ctx); err != nil {
			return rec, fmt.Errorf("stream statistics: %w", err)
		}
	}
	if cpuOf != nil {
		if cpu0, err = cpuOf(); err != nil {
			return rec, err
		}
	}
	var counter atomic.Int64
	want := h.Spec.Bytes * int64(h.Pairs)
	prog.Start(label, &counter, want)
	o.Progress = &counter
	res, err := bench.Run(ctx, rt.ln, rt.target, h, o)
	prog.End()
	rec.Fill(res)
	if cpuOf != nil {
		if cpu1, cerr := cpuOf(); cerr == nil && rec.Bytes > 0 {
			s := (cpu1 - cpu0).Seconds()
			perGB := s / (float64(rec.Bytes) / 1e9)
			rec.GwCPUS, rec.GwCPUSPerGB = &s, &perGB
		}
	}
	if err != nil {
		rec.Error = err.Error()
		return rec, err
	}
	var wire int64
	for i, p := range res.Pairs {
		host, _, _ := net.SplitHostPort(p.Recv.Remote)
		switch {
		case h.Path == record.PathDirect && p.Recv.Remote != p.Send.Local:
			err = fmt.Errorf("direct run, pair %d: the consumer saw %s, not the producer %s", i, p.Recv.Remote, p.Send.Local)
		case h.Path != record.PathDirect && p.Recv.Remote == p.Send.Local:
			err = fmt.Errorf("%s run, pair %d: the consumer saw the producer %s itself", h.Path, i, p.Send.Local)
		case rt.peer != "" && host != rt.peer:
			err = fmt.Errorf("%s run, pair %d: the consumer saw %s, want %s", h.Path, i, p.Recv.Remote, rt.peer)
		case p.Recv.Measure.Messages != p.Send.Messages || p.Recv.Measure.Bytes != p.Send.Bytes:
			err = fmt.Errorf("pair %d: verified %d messages, %d bytes; the producer sent %d, %d", i, p.Recv.Measure.Messages, p.Recv.Measure.Bytes, p.Send.Messages, p.Send.Bytes)
		case !h.Spec.Open() && p.Send.Messages != h.Spec.Messages():
			err = fmt.Errorf("pair %d: sent %d messages, want %d", i, p.Send.Messages, h.Spec.Messages())
		}
		if err != nil {
			rec.Error = err.Error()
			return rec, err
		}
		wire += bench.HelloLen + p.Send.Bytes + p.Send.Messages*bench.HeaderLen
		if h.Spec.Open() {
			wire += bench.HeaderLen
		}
	}
	if res.Summary.GoodputBps <= 0 {
		err = fmt.Errorf("run too short to time (every message arrived at once): raise --bytes")
		rec.Error = err.Error()
		return rec, err
	}
	if gw {
		sent1, recv1, err := lp.wanBytes(ctx)
		if err != nil {
			return rec, fmt.Errorf("stream statistics: %w", err)
		}
		if sent1-sent0 != wire || recv1-recv0 != wire {
			fmt.Fprintf(stderr, "s2bench: warning: the gateways counted %d bytes sent and %d received on the WAN for this run; the run carried %d\n",
				sent1-sent0, recv1-recv0, wire)
		}
		if out, in, err := lp.runRates(ctx, wire); err != nil {
			rec.GwRateNote = err.Error()
		} else {
			setGwRates(&rec, out, in)
		}
		if rec.GwOutSteadyMBps != nil {
			ratio := (*rec.GwOutSteadyMBps + *rec.GwInSteadyMBps) / 2 / (rec.GoodputMBps * float64(wire) / float64(rec.Bytes))
			rec.GwOverGoodput = &ratio
		}
		if rec.GwRateNote != "" && ctx.Err() == nil {
			fmt.Fprintf(stderr, "s2bench: the gateways' rates of this run: %s\n", rec.GwRateNote)
		}
	}
	rec.IntegrityOK = true
	return rec, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
