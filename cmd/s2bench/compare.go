package main

import (
	"context"
	"flag"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"scistream/internal/api"
	"scistream/internal/exp/compare"
	"scistream/internal/exp/workload"
	"scistream/internal/localgw"
	"scistream/internal/relay"
	"scistream/internal/tcpcc"
)

// knownWANs are the WAN transports compare can ask for; whether the s2cs
// at hand provides one is checked against its /v1/info once it runs.
var knownWANs = []string{api.WANTLS, api.WANTCP, api.WANQUIC}

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
	wanCC                                                              *string
	reps, stripe                                                       *int
	runTimeout, idle, rateInterval                                     *time.Duration
}

// register defines the flags on fs; reps is the default of --reps.
func (f *compareFlags) register(fs *flag.FlagSet, reps int) {
	f.wf.Register(fs)
	f.pairs = fs.String("pairs", "1", "producer/consumer pairs at once, each its own connection; a list (1,2,4,8) runs each count")
	f.reps = fs.Int("reps", reps, "repetitions of each (size, path), interleaved: direct, gateways, direct, ...")
	f.stripe = fs.Int("stripe", 1, "WAN legs at once each connection through the gateways is carried on (the stream's stripe; tls legs), 1 to 16")
	f.engine = fs.String("engine", "splice", "data-plane engine of both gateways (s2cs --type): "+strings.Join(relay.Names(), ", "))
	f.wan = fs.String("wan", api.WANTLS, "WAN transport between the gateways: tls, tcp (s2cs --insecure_tcp_wan), or quic")
	f.jsonPath = fs.String("json", "", "also write every run as a JSON array of records to FILE")
	f.plotsDir = fs.String("plots", "", "write plots (goodput and jitter against message size, RTT CDF in rr mode) to DIR")
	f.plotFormat = fs.String("plot_format", "svg", "plot file format: svg or png")
	f.progress = fs.String("progress", "auto", "progress line during runs on stderr: auto (when stderr is a terminal), on or off")
	f.s2cs = fs.String("s2cs", "", "s2cs binary (default: next to s2bench, in ./bin or on PATH)")
	f.runTimeout = fs.Duration("run_timeout", 5*time.Minute, "upper bound of one run")
	f.idle = fs.Duration("idle_timeout", 30*time.Second, "fail a run that makes no progress for this long")
	f.wanCC = fs.String("wan_cc", "", "congestion control of the gateways' WAN legs (s2cs --wan_cc): auto, host, or a name (default: s2cs's, auto: bbr where the kernel offers it)")
	f.rateInterval = fs.Duration("rate_interval", time.Second, "how often the gateways sample their rates (s2cs --rate_interval), 10ms to 1m; each gateway run prints the steady state they saw next to the goodput")
}

// config validates the parsed flags of fs.
func (f *compareFlags) config(fs *flag.FlagSet) (*compare.Config, error) {
	cfg := &compare.Config{Reps: *f.reps, Engine: *f.engine, WAN: *f.wan, JSONPath: *f.jsonPath, PlotsDir: *f.plotsDir,
		PlotFormat: *f.plotFormat, Progress: *f.progress, S2CS: *f.s2cs, RunTimeout: *f.runTimeout, Idle: *f.idle, RateInterval: *f.rateInterval,
		WANCC: *f.wanCC, Stripe: *f.stripe}
	var err error
	if cfg.Pairs, err = parsePairs(*f.pairs); err != nil {
		return nil, err
	}
	if cfg.Plan, err = resolveWorkload(&f.wf, slices.Max(cfg.Pairs)); err != nil {
		return nil, err
	}
	switch {
	case cfg.Reps < 1 || cfg.Reps > maxReps:
		return nil, usagef("--reps %d out of range: give 1 to %d", cfg.Reps, maxReps)
	case !slices.Contains(relay.Names(), cfg.Engine):
		return nil, usagef("--engine %q: use one of %s", cfg.Engine, strings.Join(relay.Names(), ", "))
	case !slices.Contains(knownWANs, cfg.WAN):
		return nil, usagef("--wan %q: use one of %s", cfg.WAN, strings.Join(knownWANs, ", "))
	case cfg.Stripe < 1 || cfg.Stripe > 16:
		return nil, usagef("--stripe %d out of range: give 1 (one leg) to 16", cfg.Stripe)
	case cfg.Stripe > 1 && cfg.WAN != api.WANTLS:
		return nil, usagef("--stripe %d with --wan %s: striping carries tls legs; use --wan tls", cfg.Stripe, cfg.WAN)
	case cfg.RateInterval < 10*time.Millisecond || cfg.RateInterval > time.Minute:
		return nil, usagef("--rate_interval %s out of range: give 10ms to 1m", cfg.RateInterval)
	}
	if cfg.WANCC != "" && cfg.WANCC != tcpcc.Auto && cfg.WANCC != tcpcc.Host {
		if err := tcpcc.Valid(cfg.WANCC); err != nil {
			return nil, usagef("--wan_cc: %v", err)
		}
	}
	if err := checkExperimentFlags(cfg.Plan, cfg.RunTimeout, cfg.Idle, cfg.PlotFormat, cfg.Progress, cfg.JSONPath, cfg.PlotsDir); err != nil {
		return nil, err
	}
	if cfg.S2CS == "" {
		p, err := localgw.FindBinary("s2cs")
		if err != nil {
			return nil, usagef("no s2cs binary next to s2bench, in ./bin or on PATH: build it with go build -o bin/ ./cmd/... or pass --s2cs PATH")
		}
		cfg.S2CS = p
	} else if st, err := os.Stat(cfg.S2CS); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		return nil, usagef("--s2cs %s is not an executable file: build it with go build -o bin/ ./cmd/s2cs", cfg.S2CS)
	}
	return cfg, nil
}

func parseCompare(args []string, help io.Writer) (*compare.Config, error) {
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	fs.SetOutput(help)
	var f compareFlags
	f.register(fs, 3)
	baseline := fs.Bool("baseline", false, "also run the workload through a naive proxy pair (io.Copy over the same WAN transport), interleaved with direct and gateways")
	if err := parseFlags(fs, args, compareUsage, help); err != nil {
		return nil, err
	}
	cfg, err := f.config(fs)
	if err != nil {
		return nil, err
	}
	cfg.Baseline = *baseline
	return cfg, nil
}

func runCompare(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseCompare(args, stdout)
	if err != nil {
		return err
	}
	if cfg.Baseline {
		// The naive pair's sides are this program's naiveproxy command.
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		cfg.NaiveCommand = []string{exe, "naiveproxy"}
	}
	_, err = compare.Run(ctx, *cfg, stdout, stderr)
	return err
}

// checkExperimentFlags validates the flags that compare, run and testbed
// run share: the bounds of a run and where the results go.
func checkExperimentFlags(p *workload.Plan, runTimeout, idle time.Duration, plotFormat, progress, jsonPath, plotsDir string) error {
	switch {
	case runTimeout <= 0:
		return usagef("--run_timeout must be positive, e.g. 5m")
	case idle <= 0:
		return usagef("--idle_timeout must be positive, e.g. 30s")
	case plotFormat != "svg" && plotFormat != "png":
		return usagef("--plot_format %q: use svg or png", plotFormat)
	case progress != "auto" && progress != "on" && progress != "off":
		return usagef("--progress %q: use auto, on or off", progress)
	case p.Duration > 0 && p.Duration >= runTimeout:
		return usagef("--duration %s is not below --run_timeout %s: lower --duration or raise --run_timeout", p.Duration, runTimeout)
	}
	if jsonPath != "" {
		if err := checkOutPath("--json", jsonPath); err != nil {
			return err
		}
	}
	if plotsDir != "" {
		if st, err := os.Stat(plotsDir); err != nil || !st.IsDir() {
			return usagef("--plots %s is not a directory: create it (mkdir -p %s) or choose another", plotsDir, plotsDir)
		}
	}
	return nil
}
