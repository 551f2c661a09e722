// Package rate is s2bench rate: negotiated rates kept to (issue 14 item
// 4). Two experiments on a real local gateway pair:
//
//   - accuracy: one stream at a time, first without a rate (what the
//     path carries), then granted each of Config.Rates; the producer
//     sends as fast as it can for Config.Duration and the consumer's
//     verified goodput is set against the grant.
//   - compete: gateways that declare Config.Capacity; one stream
//     reserves Config.Reserved and Config.BestEffort streams ask for
//     nothing; all send as fast as they can at once for Config.Duration.
//     The reserved stream should keep its rate, and the best-effort ones
//     share what is left.
package rate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"text/tabwriter"
	"time"

	"scistream/internal/api"
	"scistream/internal/bench"
	"scistream/internal/bytesize"
	"scistream/internal/client"
	"scistream/internal/exp/localpair"
	"scistream/internal/exp/record"
	"scistream/internal/pace"
)

// The experiments.
const (
	Accuracy = "accuracy"
	Compete  = "compete"
)

// Config is a rate experiment.
type Config struct {
	// Experiments are run in the order given; nil: Accuracy, Compete.
	Experiments []string
	// Rates are accuracy's grants, one stream each (positive); nil:
	// 10MB/s, 100MB/s, 500MB/s.
	Rates []pace.Rate
	// Capacity is compete's both gateways' --capacity_rate; 0: 300MB/s.
	Capacity pace.Rate
	// Reserved is compete's reserved stream's grant, below Capacity; 0:
	// 100MB/s.
	Reserved   pace.Rate
	BestEffort int           // compete: best-effort streams beside the reserved one; 0: 3
	Duration   time.Duration // how long each stream sends; 0: 5 s
	Size       int           // message size (one write each); 0: 64 KiB
	WAN        string        // the transport between the gateways; empty: TLS
	Engine     string        // the gateways' engine; empty: splice
	S2CS       string        // the s2cs binary; empty: localgw.FindBinary's
}

func (cfg Config) withDefaults() Config {
	if len(cfg.Experiments) == 0 {
		cfg.Experiments = []string{Accuracy, Compete}
	}
	if len(cfg.Rates) == 0 {
		cfg.Rates = []pace.Rate{80e6, 800e6, 4000e6}
	}
	if cfg.Capacity == 0 {
		cfg.Capacity = 2400e6
	}
	if cfg.Reserved == 0 {
		cfg.Reserved = 800e6
	}
	if cfg.BestEffort == 0 {
		cfg.BestEffort = 3
	}
	if cfg.Duration == 0 {
		cfg.Duration = 5 * time.Second
	}
	if cfg.Size == 0 {
		cfg.Size = 64 << 10
	}
	if cfg.WAN == "" {
		cfg.WAN = api.WANTLS
	}
	if cfg.Engine == "" {
		cfg.Engine = "splice"
	}
	return cfg
}

// Result is what a rate experiment measured: goodputs at the consumer,
// in bytes per second.
type Result struct {
	// Accuracy has a row per grant, the first without a rate (Granted 0).
	Accuracy []Row
	// Compete has the reserved stream's row, then each best-effort one's.
	Compete []Row
}

// Row is one stream of an experiment.
type Row struct {
	Label     string
	Granted   pace.Rate // accuracy: the stream's grant; compete: the reserved stream's
	Due       float64   // compete: the rate due to the stream (its grant, or its share of what is left), bytes/s
	Delivered float64   // the consumer's verified goodput, bytes/s
}

// Run runs the experiments, printing a table each to stdout, and stops
// the gateways of each, also after a failure or an interrupt (ctx).
func Run(ctx context.Context, cfg Config, stdout io.Writer) (res Result, err error) {
	cfg = cfg.withDefaults()
	fmt.Fprintf(stdout, "s2bench rate: wan %s, engine %s, %s messages, %s per stream\n", cfg.WAN, cfg.Engine, bytesize.Format(int64(cfg.Size)), cfg.Duration)
	for _, e := range cfg.Experiments {
		switch e {
		case Accuracy:
			res.Accuracy, err = accuracy(ctx, &cfg, stdout)
		case Compete:
			res.Compete, err = compete(ctx, &cfg, stdout)
		}
		if err != nil {
			return res, fmt.Errorf("%s: %w", e, err)
		}
	}
	return res, nil
}

// rateStream is one stream of a rate experiment: its consumer listener
// and the outbound listener its producer connects to.
type rateStream struct {
	label  string
	grant  pace.Rate
	ln     *net.TCPListener
	target string
}

// wireRated wires a stream asking for rate (0: best effort) from the
// pair's outbound gateway to a consumer listener of its own.
func wireRated(ctx context.Context, lp *localpair.Pair, wanT, label string, rate pace.Rate) (*rateStream, func(), error) {
	host, _, _ := net.SplitHostPort(lp.ConsAddr)
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.ParseIP(host)})
	if err != nil {
		return nil, nil, fmt.Errorf("consumer listener: %w", err)
	}
	inS, outS, err := wireWith(ctx, lp, &api.InboundRequest{RemoteIP: host, ReceiverPorts: []int{ln.Addr().(*net.TCPAddr).Port}, NumConn: 1, WAN: wanT, Rate: int64(rate)})
	if err != nil {
		ln.Close()
		return nil, nil, err
	}
	if outS.Rate != int64(rate) || inS.Rate != int64(rate) {
		return nil, nil, fmt.Errorf("stream %s granted %d/%d bit/s, asked %d", label, inS.Rate, outS.Rate, int64(rate))
	}
	release := func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		lp.OutC.Release(rctx, outS.UID)
		lp.InC.Release(rctx, inS.UID)
		ln.Close()
	}
	return &rateStream{label: label, grant: rate, ln: ln, target: outS.Listeners[0]}, release, nil
}

// wireWith wires a stream of one channel from the pair's outbound
// gateway as in asks, as s2uc stream does.
func wireWith(ctx context.Context, lp *localpair.Pair, in *api.InboundRequest) (*api.Stream, *api.Stream, error) {
	return client.Wire(ctx, lp.InC, lp.OutC, in, api.OutboundRequest{NumConn: 1, Allow: []string{lp.Allow}}, nil)
}

// send runs an open-ended workload over rs for d and returns the
// consumer's verified goodput in bytes per second.
func (rs *rateStream) send(ctx context.Context, size int, d time.Duration) (float64, error) {
	h := bench.Hello{Mode: bench.Throughput, Spec: bench.Spec{Size: size, Seed: rand.Uint64(), Run: rand.Uint32()}, Pairs: 1, Path: record.PathGateways}
	h.Group = h.Spec.Run
	res, err := bench.Run(ctx, rs.ln, rs.target, h, bench.RunOptions{Duration: d, Timeout: d + time.Minute})
	if err != nil {
		return 0, err
	}
	return res.Summary.GoodputBps, nil
}

func accuracy(ctx context.Context, cfg *Config, stdout io.Writer) (rows []Row, err error) {
	lp, err := localpair.Start(ctx, localpair.Config{S2CS: cfg.S2CS, Engine: cfg.Engine, WAN: cfg.WAN, NoStream: true})
	if err != nil {
		return nil, err
	}
	defer lp.Close()
	fmt.Fprintf(stdout, "\naccuracy: one stream at a time, sending as fast as it can; goodput at the consumer against the rate granted\n")
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "granted\tMB/s granted\tMB/s delivered\tdelivered/granted\t")
	for _, r := range append([]pace.Rate{0}, cfg.Rates...) {
		label := r.String()
		rs, release, err := wireRated(ctx, lp, cfg.WAN, label, r)
		if err != nil {
			return rows, err
		}
		got, err := rs.send(ctx, cfg.Size, cfg.Duration)
		release()
		if err != nil {
			return rows, fmt.Errorf("%s: %w", label, err)
		}
		rows = append(rows, Row{Label: label, Granted: r, Delivered: got})
		if r == 0 {
			fmt.Fprintf(tw, "none\t-\t%.1f\t-\t\n", got/1e6)
			continue
		}
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.3f\t\n", r, r.BytesPerSecond()/1e6, got/1e6, got/r.BytesPerSecond())
	}
	return rows, tw.Flush()
}

func compete(ctx context.Context, cfg *Config, stdout io.Writer) (rows []Row, err error) {
	lp, err := localpair.Start(ctx, localpair.Config{S2CS: cfg.S2CS, Engine: cfg.Engine, WAN: cfg.WAN, NoStream: true,
		Args: []string{"--capacity_rate", fmt.Sprint(int64(cfg.Capacity))}})
	if err != nil {
		return nil, err
	}
	defer lp.Close()
	streams := make([]*rateStream, 0, 1+cfg.BestEffort)
	for i := 0; i <= cfg.BestEffort; i++ {
		label, r := fmt.Sprintf("best effort %d", i), pace.Rate(0)
		if i == 0 {
			label, r = "reserved", cfg.Reserved
		}
		rs, release, err := wireRated(ctx, lp, cfg.WAN, label, r)
		if err != nil {
			return nil, err
		}
		defer release()
		streams = append(streams, rs)
	}
	got := make([]float64, len(streams))
	errs := make([]error, len(streams))
	var wg sync.WaitGroup
	for i, rs := range streams {
		wg.Go(func() { got[i], errs[i] = rs.send(ctx, cfg.Size, cfg.Duration) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	left := cfg.Capacity - cfg.Reserved
	fmt.Fprintf(stdout, "\ncompete: capacity %s (%.1f MB/s), one stream reserving %s, %d best-effort streams sharing the %.1f MB/s left, all at once\n",
		cfg.Capacity, cfg.Capacity.BytesPerSecond()/1e6, cfg.Reserved, cfg.BestEffort, left.BytesPerSecond()/1e6)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "stream\tMB/s due\tMB/s delivered\tdelivered/due\t")
	var beSum float64
	for i, rs := range streams {
		due := left.BytesPerSecond() / float64(cfg.BestEffort)
		if i == 0 {
			due = cfg.Reserved.BytesPerSecond()
		} else {
			beSum += got[i]
		}
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.3f\t\n", rs.label, due/1e6, got[i]/1e6, got[i]/due)
		rows = append(rows, Row{Label: rs.label, Granted: rs.grant, Due: due, Delivered: got[i]})
	}
	fmt.Fprintf(tw, "best effort together\t%.1f\t%.1f\t%.3f\t\n", left.BytesPerSecond()/1e6, beSum/1e6, beSum/left.BytesPerSecond())
	return rows, tw.Flush()
}
