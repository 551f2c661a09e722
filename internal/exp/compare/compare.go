// Package compare is s2bench's central experiment: the same verified
// workload run directly and through a local pair of real s2cs gateways
// (and, with Baseline, a naive proxy pair), interleaved, with a line per
// run, a table, JSON records and plots (Run). Experiment is the
// interleaved loop that compare, run across hosts (RunRemote) and the
// testbed share.
package compare

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"scistream/internal/api"
	"scistream/internal/bench"
	"scistream/internal/exp/localpair"
	"scistream/internal/exp/naive"
	"scistream/internal/exp/progress"
	"scistream/internal/exp/record"
	"scistream/internal/exp/workload"
)

// Config is a compare experiment (s2bench compare's flags; testbed run
// has them too).
type Config struct {
	Plan  *workload.Plan // what each run sends; required
	Pairs []int          // the pair counts, one after another; nil: 1
	Reps  int            // repetitions of each (size, path); 0: 1
	// Engine is both gateways' data-plane engine (s2cs --type); empty:
	// splice.
	Engine string
	// WAN is the transport between the gateways (api.WANTLS, WANTCP,
	// WANQUIC); empty: TLS.
	WAN string
	// JSONPath, PlotsDir, PlotFormat and Progress are the Experiment's:
	// empty, no JSON file, no plots, svg, no progress line.
	JSONPath, PlotsDir, PlotFormat, Progress string
	// S2CS is the s2cs binary; empty: localgw.FindBinary's.
	S2CS string
	// RunTimeout bounds one run; 0: 5 minutes.
	RunTimeout time.Duration
	// Idle fails a run that makes no progress for this long; 0: 30 s.
	Idle time.Duration
	// Baseline also runs the naive proxy pair, a third path.
	Baseline bool
	// NaiveCommand runs one side of the naive pair
	// (naive.PairConfig.Command: s2bench naiveproxy); required with
	// Baseline.
	NaiveCommand []string
	// RateInterval is the gateways' sampling of their rates (s2cs
	// --rate_interval), whose steady state each gateway run reports;
	// 0: 1 s.
	RateInterval time.Duration
	// WANCC is the gateways' s2cs --wan_cc (the congestion control of
	// their WAN legs); empty: s2cs's default (auto).
	WANCC string
	// Stripe is the stream's stripe: the WAN legs at once of each
	// connection; 0 or 1: one.
	Stripe int
}

// WithDefaults returns cfg with its zero fields set to their defaults.
func (cfg Config) WithDefaults() Config {
	if cfg.Engine == "" {
		cfg.Engine = "splice"
	}
	if cfg.WAN == "" {
		cfg.WAN = api.WANTLS
	}
	if len(cfg.Pairs) == 0 {
		cfg.Pairs = []int{1}
	}
	cfg.Reps = max(cfg.Reps, 1)
	if cfg.RunTimeout == 0 {
		cfg.RunTimeout = 5 * time.Minute
	}
	if cfg.Idle == 0 {
		cfg.Idle = 30 * time.Second
	}
	if cfg.RateInterval == 0 {
		cfg.RateInterval = time.Second
	}
	return cfg
}

// GatewayArgs are the s2cs flags of the experiment's gateways.
func (cfg *Config) GatewayArgs() []string {
	d := cfg.WithDefaults()
	args := []string{"--rate_interval", d.RateInterval.String()}
	if d.WANCC != "" {
		args = append(args, "--wan_cc", d.WANCC)
	}
	return args
}

// RunOptions are the bounds of one run.
func (cfg *Config) RunOptions() bench.RunOptions {
	d := cfg.WithDefaults()
	return bench.RunOptions{Timeout: d.RunTimeout, Idle: d.Idle, Duration: d.Plan.Duration, EachMessage: d.Plan.Each}
}

// Run starts the gateway pair (and the naive pair), prints what it runs,
// runs the experiment and stops them all, also after a failure or an
// interrupt (ctx). It returns the records, those of a failed experiment
// too. Lines and tables go to stdout; the progress line, warnings and a
// failed gateway run's logs to stderr.
func Run(ctx context.Context, cfg Config, stdout, stderr io.Writer) (recs []record.Record, err error) {
	cfg = cfg.WithDefaults()
	wall := time.Now()
	p := cfg.Plan
	fmt.Fprintf(stdout, "s2bench compare: workload %s, %d size(s), pairs %v, %d repetition(s) per path, engine %s, WAN %s, stripe %d\n",
		p.Name, len(p.Sizes), cfg.Pairs, cfg.Reps, cfg.Engine, cfg.WAN, max(cfg.Stripe, 1))
	p.Print(stdout, cfg.Pairs)

	lp, err := localpair.Start(ctx, localpair.Config{S2CS: cfg.S2CS, Engine: cfg.Engine, WAN: cfg.WAN, Args: cfg.GatewayArgs(), Stripe: cfg.Stripe})
	if err != nil {
		return nil, err
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
	if cfg.Baseline {
		if np, err = naive.StartPair(ctx, naive.PairConfig{Command: cfg.NaiveCommand, WAN: cfg.WAN, Consumer: lp.ConsAddr}); err != nil {
			return nil, err
		}
		defer np.Close()
		ps = append(ps, record.PathNaive)
		fmt.Fprintf(stdout, "naive baseline (io.Copy over %s): pids %v; producer connects to %s\n", cfg.WAN, np.PIDs(), np.Target())
	}

	e := &Experiment{
		Plan: p, Pairs: cfg.Pairs, Reps: cfg.Reps, Paths: ps, Engine: cfg.Engine, WAN: cfg.WAN,
		JSONPath: cfg.JSONPath, PlotsDir: cfg.PlotsDir, PlotFormat: cfg.PlotFormat, Progress: cfg.Progress, CPU: true,
		RunOne: func(ctx context.Context, h bench.Hello, prog *progress.Display, label string) (record.Record, error) {
			rt := lp.Route(h.Path)
			if h.Path == record.PathNaive {
				rt = localpair.Route{LN: lp.Consumer, Target: np.Target(), CPU: np.CPU}
			}
			return localpair.RunPath(ctx, lp, h, rt, cfg.RunOptions(), prog, label, stderr)
		},
		OnFail: func(path string) {
			if path == record.PathGateways {
				fmt.Fprint(stderr, lp.LogTail(10))
			}
		},
	}
	if recs, err = e.Run(ctx, stdout, stderr); err != nil {
		return recs, err
	}
	fmt.Fprintf(stdout, "stream setup (client.Wire): %.1f ms\n", ms(lp.Setup))
	closed = true
	if err := lp.Close(); err != nil {
		return recs, fmt.Errorf("clean up: %w", err)
	}
	fmt.Fprint(stdout, lp.SockmapReport())
	fmt.Fprintf(stdout, "stream released, gateways stopped; wall time %.1f s\n", time.Since(wall).Seconds())
	return recs, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
