package main

import (
	"context"
	"flag"
	"io"
	"time"

	"scistream/internal/api"
	"scistream/internal/bench"
	"scistream/internal/bytesize"
	"scistream/internal/exp/flood"
	"scistream/internal/localgw"
)

func parseFlood(args []string, help io.Writer) (*flood.Config, error) {
	fs := flag.NewFlagSet("s2bench flood", flag.ContinueOnError)
	conns := fs.Int("conns", 20000, "stranger connections in the flood")
	sources := fs.Int("sources", 4, "source addresses the flood comes from (random 127.x.y.z)")
	duration := fs.Duration("duration", 5*time.Second, "length of each goodput measurement, alone and under the flood")
	size := fs.String("size", "64KiB", "message size of the measured stream")
	settle := fs.Duration("settle", 30*time.Second, "how long to wait after the flood for the gateway's memory to come back")
	s2cs := fs.String("s2cs", "", "s2cs binary (default: next to s2bench, ./bin, PATH)")
	engine := fs.String("engine", "splice", "data-plane engine of both gateways")
	wanT := fs.String("wan", api.WANTLS, "WAN transport: tls or tcp (the flood is TCP connections to the WAN listener)")
	if err := parseFlags(fs, args, "usage: s2bench flood [--conns 20000] [--sources 4] [--duration 5s] [--wan tls|tcp]", help); err != nil {
		return nil, err
	}
	cfg := &flood.Config{Conns: *conns, Sources: *sources, Duration: *duration, Settle: *settle, S2CS: *s2cs, Engine: *engine, WAN: *wanT}
	sz, err := bytesize.Parse(*size)
	switch {
	case err != nil:
		return nil, usagef("--size %v", err)
	case sz < 1 || sz > bench.MaxSize:
		return nil, usagef("--size %s out of range: give 1B to %s", *size, bytesize.Format(bench.MaxSize))
	case cfg.Conns < 1 || cfg.Conns > 200000:
		return nil, usagef("--conns %d out of range: give 1 to 200000", cfg.Conns)
	case cfg.Sources < 1 || cfg.Sources > 64:
		return nil, usagef("--sources %d out of range: give 1 to 64", cfg.Sources)
	case cfg.Duration < time.Second || cfg.Duration > 10*time.Minute:
		return nil, usagef("--duration %s out of range: give 1s to 10m", cfg.Duration)
	case cfg.Settle < 0 || cfg.Settle > 10*time.Minute:
		return nil, usagef("--settle %s out of range: give 0 to 10m", cfg.Settle)
	case cfg.WAN != api.WANTLS && cfg.WAN != api.WANTCP:
		return nil, usagef("--wan %q: use tls or tcp", cfg.WAN)
	}
	cfg.Size = int(sz)
	if cfg.S2CS == "" {
		p, err := localgw.FindBinary("s2cs")
		if err != nil {
			return nil, usagef("%v", err)
		}
		cfg.S2CS = p
	}
	return cfg, nil
}

func runFlood(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseFlood(args, stdout)
	if err != nil {
		return err
	}
	_, err = flood.Run(ctx, *cfg, stdout, stderr)
	return err
}
