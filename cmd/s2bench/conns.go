package main

import (
	"context"
	"flag"
	"io"
	"os"
	"strings"
	"time"

	"scistream/internal/api"
	"scistream/internal/bench"
	"scistream/internal/bytesize"
	"scistream/internal/exp/conns"
	"scistream/internal/localgw"
)

const connsUsage = `usage: s2bench conns [--conns 1000] [--wan tls|tcp|quic] [--engine splice] [--bytes 1GiB] [--size 16KiB]

Opens --conns application connections at once through one local gateway pair
(real s2cs processes) and prints: the accept rate (connections/s established
through both gateways), each gateway's resident memory per open connection
(RSS with all open minus RSS before, divided by the count) while idle and at
the peak of the transfer, the aggregate goodput of --bytes split over every
connection (every message verified by an s2bench consumer process), and the
gateways' CPU per GB; then (unless --direct=false) the same workload straight
to a consumer, so the cost of the count shows apart from the gateways'. Each gateway holds 2 descriptors per connection over
tls and tcp (the application's socket and the WAN leg's; splice on tcp adds
2 pipes) and 1 over quic (one UDP socket carries every stream): the count
must fit the file-descriptor limit, which the command checks first.`

func parseConns(args []string, help io.Writer) (*conns.Config, error) {
	fs := flag.NewFlagSet("s2bench conns", flag.ContinueOnError)
	count := fs.Int("conns", 1000, "application connections open at once")
	size := fs.String("size", "16KiB", "message size")
	total := fs.String("bytes", "1GiB", "payload of the transfer, split evenly over the connections")
	dialers := fs.Int("dialers", 128, "connects in flight at once while the connections open")
	timeout := fs.Duration("timeout", 3*time.Minute, "upper bound of the whole experiment once the gateways run")
	s2cs := fs.String("s2cs", "", "s2cs binary (default: next to s2bench, ./bin, PATH)")
	s2b := fs.String("s2bench", "", "s2bench binary for the consumer process (default: this program if it is s2bench, else next to it, ./bin, PATH)")
	engine := fs.String("engine", "splice", "data-plane engine of both gateways")
	wanT := fs.String("wan", api.WANTLS, "WAN transport: tls, tcp or quic")
	direct := fs.Bool("direct", true, "then run the same workload straight to a consumer (no gateways) and print the ratio")
	if err := parseFlags(fs, args, connsUsage, help); err != nil {
		return nil, err
	}
	cfg := &conns.Config{Conns: *count, Dialers: *dialers, Timeout: *timeout, S2CS: *s2cs, S2Bench: *s2b, Engine: *engine, WAN: *wanT, Direct: *direct}
	sz, err := bytesize.Parse(*size)
	switch {
	case err != nil:
		return nil, usagef("--size %v", err)
	case sz < 1 || sz > bench.MaxSize:
		return nil, usagef("--size %s out of range: give 1B to %s", *size, bytesize.Format(bench.MaxSize))
	}
	cfg.Size = int(sz)
	if cfg.Bytes, err = bytesize.Parse(*total); err != nil {
		return nil, usagef("--bytes %v", err)
	}
	switch {
	case cfg.Conns < 1 || cfg.Conns > bench.MaxPairs:
		return nil, usagef("--conns %d out of range: give 1 to %d", cfg.Conns, bench.MaxPairs)
	case cfg.Bytes/int64(cfg.Conns) < 2*int64(cfg.Size):
		return nil, usagef("--bytes %s gives each of %d connections less than two %s messages: raise --bytes or lower --size", *total, cfg.Conns, *size)
	case cfg.Bytes > 1<<40:
		return nil, usagef("--bytes %s out of range: give at most 1TiB", *total)
	case cfg.Dialers < 1 || cfg.Dialers > 4096:
		return nil, usagef("--dialers %d out of range: give 1 to 4096", cfg.Dialers)
	case cfg.Timeout < 5*time.Second || cfg.Timeout > time.Hour:
		return nil, usagef("--timeout %s out of range: give 5s to 1h", cfg.Timeout)
	case cfg.WAN != api.WANTLS && cfg.WAN != api.WANTCP && cfg.WAN != api.WANQUIC:
		return nil, usagef("--wan %q: use tls, tcp or quic", cfg.WAN)
	}
	if cfg.S2CS == "" {
		if cfg.S2CS, err = localgw.FindBinary("s2cs"); err != nil {
			return nil, usagef("%v", err)
		}
	}
	if cfg.S2Bench == "" {
		if cfg.S2Bench, err = findSelf(); err != nil {
			return nil, usagef("%v", err)
		}
	}
	return cfg, nil
}

// findSelf returns the s2bench binary: this program when it is s2bench
// (not a test binary), else localgw's search.
func findSelf() (string, error) {
	if exe, err := os.Executable(); err == nil && strings.HasPrefix(baseName(exe), "s2bench") && !strings.HasSuffix(exe, ".test") {
		return exe, nil
	}
	return localgw.FindBinary("s2bench")
}

func baseName(p string) string { return p[strings.LastIndexByte(p, '/')+1:] }

func runConns(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseConns(args, stdout)
	if err != nil {
		return err
	}
	_, err = conns.Run(ctx, *cfg, stdout, stderr)
	return err
}
