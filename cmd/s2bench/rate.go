package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"scistream/internal/api"
	"scistream/internal/bench"
	"scistream/internal/bytesize"
	"scistream/internal/client"
	"scistream/internal/exp/localpair"
	"scistream/internal/exp/record"
	"scistream/internal/localgw"
	"scistream/internal/pace"
)

// s2bench rate: negotiated rates kept to (issue 14 item 4). Two
// experiments on a real local gateway pair:
//
//   - accuracy: one stream at a time, first without a rate (what the
//     path carries), then granted each of --rates; the producer sends as
//     fast as it can for --duration and the consumer's verified goodput
//     is set against the grant.
//   - compete: gateways that declare --capacity; one stream reserves
//     --reserved and --besteffort streams ask for nothing; all send as
//     fast as they can at once for --duration. The reserved stream should
//     keep its rate, and the best-effort ones share what is left.

const rateUsage = `usage: s2bench rate [--experiments accuracy,compete] [--rates 10MB/s,100MB/s,500MB/s]
                   [--capacity 300MB/s] [--reserved 100MB/s] [--besteffort 3]
                   [--duration 5s] [--size 64KiB] [--wan tls] [--engine splice]

Rates granted to streams (s2uc --rate) and kept to by the gateways' token
buckets, on a local pair of real s2cs gateways. accuracy: each of --rates
granted to a stream that would go faster; the goodput delivered against the
grant. compete: gateways with --capacity, one stream reserving --reserved and
--besteffort streams without a rate, all at once. Rates are bits per second
with an optional prefix (800M, 1Gbit/s) or bytes with B/s (100MB/s).`

type rateConfig struct {
	experiments        []string
	rates              []pace.Rate
	capacity, reserved pace.Rate
	bestEffort         int
	duration           time.Duration
	size               int
	wan, engine, s2cs  string
}

func parseRateFlags(args []string, stderr io.Writer) (*rateConfig, error) {
	fs := flag.NewFlagSet("s2bench rate", flag.ContinueOnError)
	exps := fs.String("experiments", "accuracy,compete", "experiments to run, comma-separated: accuracy, compete")
	rates := fs.String("rates", "10MB/s,100MB/s,500MB/s", "accuracy: the rates granted, one stream each, comma-separated")
	capacity := fs.String("capacity", "300MB/s", "compete: both gateways' --capacity_rate")
	reserved := fs.String("reserved", "100MB/s", "compete: the rate the reserved stream is granted")
	be := fs.Int("besteffort", 3, "compete: best-effort streams beside the reserved one")
	duration := fs.Duration("duration", 5*time.Second, "how long each stream sends")
	size := fs.String("size", "64KiB", "message size (one write each)")
	wanT := fs.String("wan", api.WANTLS, "WAN transport between the gateways: tls, quic or tcp")
	engine := fs.String("engine", "splice", "the gateways' engine: splice, buffer or sockmap")
	s2cs := fs.String("s2cs", "", "s2cs binary (default: next to s2bench, ./bin, PATH)")
	if err := parseFlags(fs, args, rateUsage, stderr); err != nil {
		return nil, err
	}
	cfg := &rateConfig{bestEffort: *be, duration: *duration, wan: *wanT, engine: *engine, s2cs: *s2cs}
	for _, e := range splitComma(*exps) {
		if e != "accuracy" && e != "compete" {
			return nil, usagef("--experiments: %q unknown: give accuracy and/or compete", e)
		}
		cfg.experiments = append(cfg.experiments, e)
	}
	for _, s := range splitComma(*rates) {
		r, err := pace.ParseRate(s)
		if err != nil || r == 0 {
			return nil, usagef("--rates: %v", orZero(err, s))
		}
		cfg.rates = append(cfg.rates, r)
	}
	var err error
	if cfg.capacity, err = pace.ParseRate(*capacity); err != nil || cfg.capacity == 0 {
		return nil, usagef("--capacity: %v", orZero(err, *capacity))
	}
	if cfg.reserved, err = pace.ParseRate(*reserved); err != nil || cfg.reserved == 0 {
		return nil, usagef("--reserved: %v", orZero(err, *reserved))
	}
	n, err := bytesize.Parse(*size)
	if err != nil {
		return nil, usagef("--size %v", err)
	}
	cfg.size = int(min(n, bench.MaxSize+1))
	switch {
	case len(cfg.experiments) == 0:
		return nil, usagef("--experiments: give accuracy and/or compete")
	case cfg.reserved >= cfg.capacity:
		return nil, usagef("--reserved %s must be below --capacity %s, so best effort has a share", cfg.reserved, cfg.capacity)
	case cfg.bestEffort < 1 || cfg.bestEffort > 16:
		return nil, usagef("--besteffort %d out of range: give 1 to 16", cfg.bestEffort)
	case cfg.duration < time.Second || cfg.duration > 10*time.Minute:
		return nil, usagef("--duration %s out of range: give 1s to 10m", cfg.duration)
	case cfg.size < 1 || cfg.size > bench.MaxSize:
		return nil, usagef("--size %d out of range: give 1 byte to %s", cfg.size, bytesize.Format(bench.MaxSize))
	case cfg.wan != api.WANTLS && cfg.wan != api.WANQUIC && cfg.wan != api.WANTCP:
		return nil, usagef("--wan %q: give tls, quic or tcp", cfg.wan)
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

func splitComma(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// orZero is err, or says a rate of zero is no rate.
func orZero(err error, s string) error {
	if err != nil {
		return err
	}
	return fmt.Errorf("%q is no rate: give a positive one", s)
}

func runRate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseRateFlags(args, stderr)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "s2bench rate: wan %s, engine %s, %s messages, %s per stream\n", cfg.wan, cfg.engine, bytesize.Format(int64(cfg.size)), cfg.duration)
	for _, e := range cfg.experiments {
		switch e {
		case "accuracy":
			err = rateAccuracy(ctx, cfg, stdout)
		case "compete":
			err = rateCompete(ctx, cfg, stdout)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", e, err)
		}
	}
	return nil
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

func rateAccuracy(ctx context.Context, cfg *rateConfig, stdout io.Writer) error {
	lp, err := localpair.Start(ctx, localpair.Config{S2CS: cfg.s2cs, Engine: cfg.engine, WAN: cfg.wan, NoStream: true})
	if err != nil {
		return err
	}
	defer lp.Close()
	fmt.Fprintf(stdout, "\naccuracy: one stream at a time, sending as fast as it can; goodput at the consumer against the rate granted\n")
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "granted\tMB/s granted\tMB/s delivered\tdelivered/granted\t")
	for _, r := range append([]pace.Rate{0}, cfg.rates...) {
		label := r.String()
		rs, release, err := wireRated(ctx, lp, cfg.wan, label, r)
		if err != nil {
			return err
		}
		got, err := rs.send(ctx, cfg.size, cfg.duration)
		release()
		if err != nil {
			return fmt.Errorf("%s: %w", label, err)
		}
		if r == 0 {
			fmt.Fprintf(tw, "none\t-\t%.1f\t-\t\n", got/1e6)
			continue
		}
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.3f\t\n", r, r.BytesPerSecond()/1e6, got/1e6, got/r.BytesPerSecond())
	}
	return tw.Flush()
}

func rateCompete(ctx context.Context, cfg *rateConfig, stdout io.Writer) error {
	lp, err := localpair.Start(ctx, localpair.Config{S2CS: cfg.s2cs, Engine: cfg.engine, WAN: cfg.wan, NoStream: true,
		Args: []string{"--capacity_rate", fmt.Sprint(int64(cfg.capacity))}})
	if err != nil {
		return err
	}
	defer lp.Close()
	streams := make([]*rateStream, 0, 1+cfg.bestEffort)
	for i := 0; i <= cfg.bestEffort; i++ {
		label, r := fmt.Sprintf("best effort %d", i), pace.Rate(0)
		if i == 0 {
			label, r = "reserved", cfg.reserved
		}
		rs, release, err := wireRated(ctx, lp, cfg.wan, label, r)
		if err != nil {
			return err
		}
		defer release()
		streams = append(streams, rs)
	}
	got := make([]float64, len(streams))
	errs := make([]error, len(streams))
	var wg sync.WaitGroup
	for i, rs := range streams {
		wg.Go(func() { got[i], errs[i] = rs.send(ctx, cfg.size, cfg.duration) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	left := cfg.capacity - cfg.reserved
	fmt.Fprintf(stdout, "\ncompete: capacity %s (%.1f MB/s), one stream reserving %s, %d best-effort streams sharing the %.1f MB/s left, all at once\n",
		cfg.capacity, cfg.capacity.BytesPerSecond()/1e6, cfg.reserved, cfg.bestEffort, left.BytesPerSecond()/1e6)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "stream\tMB/s due\tMB/s delivered\tdelivered/due\t")
	var beSum float64
	for i, rs := range streams {
		due := left.BytesPerSecond() / float64(cfg.bestEffort)
		if i == 0 {
			due = cfg.reserved.BytesPerSecond()
		} else {
			beSum += got[i]
		}
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.3f\t\n", rs.label, due/1e6, got[i]/1e6, got[i]/due)
	}
	fmt.Fprintf(tw, "best effort together\t%.1f\t%.1f\t%.3f\t\n", left.BytesPerSecond()/1e6, beSum/1e6, beSum/left.BytesPerSecond())
	return tw.Flush()
}
