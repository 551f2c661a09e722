package compare

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"scistream/internal/bench"
	"scistream/internal/exp/progress"
	"scistream/internal/exp/record"
	"scistream/internal/exp/workload"
)

// RemoteConfig is the experiment across hosts (s2bench run): an s2bench
// consumer elsewhere, reached directly and through remote gateways.
type RemoteConfig struct {
	Plan *workload.Plan // what each run sends; required
	// Targets are the addresses of the paths: record.PathDirect (the
	// consumer's) and record.PathGateways (the producer-side gateway
	// listener leading to it); at least one.
	Targets map[string]string
	Pairs   []int // the pair counts, one after another; nil: 1
	Reps    int   // repetitions of each (size, path); 0: 1
	// Engine and WAN label the records ("" when unknown): the gateways
	// are not this program's.
	Engine, WAN string
	// JSONPath, PlotsDir, PlotFormat and Progress are the Experiment's:
	// empty, no JSON file, no plots, svg, no progress line.
	JSONPath, PlotsDir, PlotFormat, Progress string
	// RunTimeout bounds one run; 0: 5 minutes.
	RunTimeout time.Duration
	// Idle fails a run that makes no progress for this long; 0: 30 s.
	Idle time.Duration
}

// RunRemote runs the plan to the remote consumer over each path of
// cfg.Targets, interleaved, as Run does locally, with the consumer's
// numbers returned over each connection (bench.RunRemote). It returns
// the records; the gateways' CPU is not measured (they are not local).
func RunRemote(ctx context.Context, cfg RemoteConfig, stdout, stderr io.Writer) ([]record.Record, error) {
	if cfg.RunTimeout == 0 {
		cfg.RunTimeout = 5 * time.Minute
	}
	if cfg.Idle == 0 {
		cfg.Idle = 30 * time.Second
	}
	if len(cfg.Pairs) == 0 {
		cfg.Pairs = []int{1}
	}
	cfg.Reps = max(cfg.Reps, 1)
	var ps []string
	for _, p := range []string{record.PathDirect, record.PathGateways} {
		if a, ok := cfg.Targets[p]; ok {
			ps = append(ps, p)
			fmt.Fprintf(stdout, "path %s: %s\n", p, a)
		}
	}
	fmt.Fprintf(stdout, "s2bench run: workload %s, %d size(s), pairs %v, %d repetition(s) per path\n",
		cfg.Plan.Name, len(cfg.Plan.Sizes), cfg.Pairs, cfg.Reps)
	e := &Experiment{
		Plan: cfg.Plan, Pairs: cfg.Pairs, Reps: cfg.Reps, Paths: ps, Engine: cfg.Engine, WAN: cfg.WAN,
		JSONPath: cfg.JSONPath, PlotsDir: cfg.PlotsDir, PlotFormat: cfg.PlotFormat, Progress: cfg.Progress,
		RunOne: func(ctx context.Context, h bench.Hello, prog *progress.Display, label string) (record.Record, error) {
			rec := record.Record{Path: h.Path, SizeBytes: h.Spec.Size, Pairs: h.Pairs, Mode: h.Mode.String(), RateMsgsPerS: h.Rate}
			if cfg.Plan.Duration > 0 {
				rec.DurationS = cfg.Plan.Duration.Seconds()
			}
			var sent atomic.Int64
			prog.Start(label, &sent, h.Spec.Bytes*int64(h.Pairs))
			res, err := bench.RunRemote(ctx, cfg.Targets[h.Path], h, bench.RunOptions{Timeout: cfg.RunTimeout, Idle: cfg.Idle, Duration: cfg.Plan.Duration, Sent: &sent, EachMessage: cfg.Plan.Each})
			prog.End()
			rec.Fill(res)
			if err != nil {
				rec.Error = err.Error()
				return rec, fmt.Errorf("%w (the consumer's output says why if it refused the data)", err)
			}
			for i, p := range res.Pairs {
				if p.Recv == nil || p.Recv.Measure.Messages != p.Send.Messages || p.Recv.Measure.Bytes != p.Send.Bytes {
					return rec, fmt.Errorf("pair %d: the consumer reports %+v; the producer sent %d messages", i, p.Recv, p.Send.Messages)
				}
			}
			if res.Summary.GoodputBps <= 0 {
				return rec, fmt.Errorf("run too short to time (every message arrived at once): raise --bytes")
			}
			rec.IntegrityOK = true
			return rec, nil
		},
	}
	return e.Run(ctx, stdout, stderr)
}
