package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"scistream/internal/api"
	"scistream/internal/bench"
	"scistream/internal/bytesize"
	"scistream/internal/exp/rate"
	"scistream/internal/localgw"
	"scistream/internal/pace"
)

const rateUsage = `usage: s2bench rate [--experiments accuracy,compete] [--rates 10MB/s,100MB/s,500MB/s]
                   [--capacity 300MB/s] [--reserved 100MB/s] [--besteffort 3]
                   [--duration 5s] [--size 64KiB] [--wan tls] [--engine splice]

Rates granted to streams (s2uc --rate) and kept to by the gateways' token
buckets, on a local pair of real s2cs gateways. accuracy: each of --rates
granted to a stream that would go faster; the goodput delivered against the
grant. compete: gateways with --capacity, one stream reserving --reserved and
--besteffort streams without a rate, all at once. Rates are bits per second
with an optional prefix (800M, 1Gbit/s) or bytes with B/s (100MB/s).`

func parseRateFlags(args []string, help io.Writer) (*rate.Config, error) {
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
	if err := parseFlags(fs, args, rateUsage, help); err != nil {
		return nil, err
	}
	cfg := &rate.Config{BestEffort: *be, Duration: *duration, WAN: *wanT, Engine: *engine, S2CS: *s2cs}
	for _, e := range splitComma(*exps) {
		if e != rate.Accuracy && e != rate.Compete {
			return nil, usagef("--experiments: %q unknown: give accuracy and/or compete", e)
		}
		cfg.Experiments = append(cfg.Experiments, e)
	}
	for _, s := range splitComma(*rates) {
		r, err := pace.ParseRate(s)
		if err != nil || r == 0 {
			return nil, usagef("--rates: %v", orZero(err, s))
		}
		cfg.Rates = append(cfg.Rates, r)
	}
	var err error
	if cfg.Capacity, err = pace.ParseRate(*capacity); err != nil || cfg.Capacity == 0 {
		return nil, usagef("--capacity: %v", orZero(err, *capacity))
	}
	if cfg.Reserved, err = pace.ParseRate(*reserved); err != nil || cfg.Reserved == 0 {
		return nil, usagef("--reserved: %v", orZero(err, *reserved))
	}
	n, err := bytesize.Parse(*size)
	if err != nil {
		return nil, usagef("--size %v", err)
	}
	cfg.Size = int(min(n, bench.MaxSize+1))
	switch {
	case len(cfg.Experiments) == 0:
		return nil, usagef("--experiments: give accuracy and/or compete")
	case cfg.Reserved >= cfg.Capacity:
		return nil, usagef("--reserved %s must be below --capacity %s, so best effort has a share", cfg.Reserved, cfg.Capacity)
	case cfg.BestEffort < 1 || cfg.BestEffort > 16:
		return nil, usagef("--besteffort %d out of range: give 1 to 16", cfg.BestEffort)
	case cfg.Duration < time.Second || cfg.Duration > 10*time.Minute:
		return nil, usagef("--duration %s out of range: give 1s to 10m", cfg.Duration)
	case cfg.Size < 1 || cfg.Size > bench.MaxSize:
		return nil, usagef("--size %d out of range: give 1 byte to %s", cfg.Size, bytesize.Format(bench.MaxSize))
	case cfg.WAN != api.WANTLS && cfg.WAN != api.WANQUIC && cfg.WAN != api.WANTCP:
		return nil, usagef("--wan %q: give tls, quic or tcp", cfg.WAN)
	}
	if cfg.S2CS == "" {
		p, err := localgw.FindBinary("s2cs")
		if err != nil {
			return nil, usagef("%v", err)
		}
		cfg.S2CS = p
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
	cfg, err := parseRateFlags(args, stdout)
	if err != nil {
		return err
	}
	_, err = rate.Run(ctx, *cfg, stdout)
	return err
}
