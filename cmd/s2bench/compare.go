package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"scistream/internal/api"
	"scistream/internal/bench"
	"scistream/internal/exp/localpair"
	"scistream/internal/exp/naive"
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

	lp, err := localpair.Start(ctx, localpair.Config{S2CS: cfg.s2cs, Engine: cfg.engine, WAN: cfg.wan, Args: cfg.gatewayArgs()})
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
	fmt.Fprintf(stdout, "gateways: %s\n", lp.Describe())
	fmt.Fprintf(stdout, "stream %s wired in %.1f ms (client.Wire); producer connects to %s\n",
		lp.OutS.UID, ms(lp.Setup), lp.Target())
	ps := []string{record.PathDirect, record.PathGateways}
	var np *naive.Pair
	if cfg.baseline {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		if np, err = naive.StartPair(ctx, naive.PairConfig{Command: []string{exe, "naiveproxy"}, WAN: cfg.wan, Consumer: lp.ConsAddr}); err != nil {
			return err
		}
		defer np.Close()
		ps = append(ps, record.PathNaive)
		fmt.Fprintf(stdout, "naive baseline (io.Copy over %s): pids %v; producer connects to %s\n", cfg.wan, np.PIDs(), np.Target())
	}

	e := &experiment{
		plan: p, pairs: cfg.pairs, reps: cfg.reps, paths: ps, engine: cfg.engine, wan: cfg.wan,
		jsonPath: cfg.jsonPath, plotsDir: cfg.plotsDir, plotFormat: cfg.plotFormat, progress: cfg.progress, cpu: true,
		runOne: func(ctx context.Context, h bench.Hello, prog *progress.Display, label string) (record.Record, error) {
			rt := lp.Route(h.Path)
			if h.Path == record.PathNaive {
				rt = localpair.Route{LN: lp.Consumer, Target: np.Target(), CPU: np.CPU}
			}
			return localpair.RunPath(ctx, lp, h, rt, cfg.runOptions(), prog, label, stderr)
		},
		onFail: func(path string) {
			if path == record.PathGateways {
				fmt.Fprint(stderr, lp.LogTail(10))
			}
		},
	}
	if err := e.execute(ctx, stdout, stderr); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "stream setup (client.Wire): %.1f ms\n", ms(lp.Setup))
	closed = true
	if err := lp.Close(); err != nil {
		return fmt.Errorf("clean up: %w", err)
	}
	fmt.Fprint(stdout, lp.SockmapReport())
	fmt.Fprintf(stdout, "stream released, gateways stopped; wall time %.1f s\n", time.Since(wall).Seconds())
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
