package main

import (
	"context"
	"flag"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"scistream/internal/api"
	"scistream/internal/bench"
	"scistream/internal/bytesize"
	"scistream/internal/exp/facility"
	"scistream/internal/exp/workload"
	"scistream/internal/localgw"
	"scistream/internal/relay"
)

const facilityUsage = `usage: s2bench facility [--experiments goodput,takeover,control] [--nodes 1,2,3] [--num_conn 3]
                        [--conns N] [--bytes 512MiB] [--size 64KiB] [--reps 3]
                        [--takeover 10s,4s] [--requests 200] [--wan tls|tcp] [--engine splice] [--json FILE]

A facility of several s2cs nodes (--node) sharing one etcd (Debian's etcd,
started on loopback), measured on this host:
  goodput   one stream of --num_conn channels served by 1, 2, 3 nodes per side
            (--nodes), the verified workload over --conns connections spread
            over its channels, interleaved with the direct path: MB/s and the
            CPU seconds per GB of every node together;
  takeover  a stream across 3+3 nodes, every channel probed every ~50 ms; the
            consumer-side node serving a channel is killed (SIGKILL) and the
            time until every channel carries data again is taken, --reps times
            per --takeover bound (the node is started again in between);
  control   --requests inbound-request + release pairs, interleaved, against a
            gateway on bbolt, a gateway on etcd and the nodes of a facility.
On one host the nodes share its cores and its loopback: more nodes cannot add
goodput here; each node's own NIC is what adds up across nodes.`

// Bounds of the facility flags.
const (
	maxFacilityNodes = 5
	maxFacilityConn  = 16
	maxFacilityConns = 256
	maxCtlRequests   = 10000
)

func parseFacility(args []string, help io.Writer) (*facility.Config, error) {
	fs := flag.NewFlagSet("s2bench facility", flag.ContinueOnError)
	exps := fs.String("experiments", strings.Join(facility.Experiments(), ","), "experiments to run, comma-separated: goodput, takeover, control")
	nodes := fs.String("nodes", "1,2,3", "goodput: nodes per facility, one configuration each (1 to 5), comma-separated")
	numConn := fs.Int("num_conn", 3, "channels of the measured streams (num_conn), spread over the nodes")
	conns := fs.Int("conns", 0, "goodput: producer connections per run, spread round-robin over the channels (default: one per channel)")
	size := fs.String("size", "64KiB", "goodput: message size")
	total := fs.String("bytes", "512MiB", "goodput: payload per run, over all connections")
	reps := fs.Int("reps", 3, "repetitions: of each goodput path (interleaved), and kills per --takeover bound")
	takeover := fs.String("takeover", "10s,4s", "takeover: the nodes' --takeover bound(s), one facility pair each, comma-separated (at least 4s)")
	requests := fs.Int("requests", 200, "control: inbound-request + release pairs per store")
	wanT := fs.String("wan", api.WANTLS, "WAN transport between the facilities: tls or tcp (a facility refuses quic for now, docs/facility.md)")
	engine := fs.String("engine", "splice", "the nodes' engine (s2cs --type): "+strings.Join(relay.Names(), ", "))
	jsonPath := fs.String("json", "", "also write every run as a JSON array of records to FILE")
	s2cs := fs.String("s2cs", "", "s2cs binary (default: next to s2bench, ./bin, PATH)")
	runTimeout := fs.Duration("run_timeout", 2*time.Minute, "goodput: upper bound of one run")
	if err := parseFlags(fs, args, facilityUsage, help); err != nil {
		return nil, err
	}
	cfg := &facility.Config{NumConn: *numConn, Conns: *conns, Reps: *reps, Requests: *requests, WAN: *wanT, Engine: *engine,
		JSONPath: *jsonPath, S2CS: *s2cs, RunTimeout: *runTimeout}
	for _, e := range splitComma(*exps) {
		if !slices.Contains(facility.Experiments(), e) {
			return nil, usagef("--experiments: %q unknown: give some of %s", e, strings.Join(facility.Experiments(), ", "))
		}
		if !slices.Contains(cfg.Experiments, e) {
			cfg.Experiments = append(cfg.Experiments, e)
		}
	}
	for _, f := range splitComma(*nodes) {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 || n > maxFacilityNodes {
			return nil, usagef("--nodes %q: give counts of nodes per facility from 1 to %d, e.g. 1,2,3", *nodes, maxFacilityNodes)
		}
		if !slices.Contains(cfg.Nodes, n) {
			cfg.Nodes = append(cfg.Nodes, n)
		}
	}
	for _, s := range splitComma(*takeover) {
		d, err := time.ParseDuration(s)
		if err != nil || d < 4*time.Second || d > time.Minute {
			return nil, usagef("--takeover %q: give durations of 4s (etcd's leases need it) to 1m, e.g. 10s,4s", s)
		}
		cfg.Takeover = append(cfg.Takeover, d)
	}
	sz, err := bytesize.Parse(*size)
	if err != nil {
		return nil, usagef("--size %v", err)
	}
	cfg.Size = int(min(sz, bench.MaxSize+1))
	if cfg.Bytes, err = bytesize.Parse(*total); err != nil {
		return nil, usagef("--bytes %v", err)
	}
	if cfg.Conns == 0 {
		cfg.Conns = cfg.NumConn
	}
	switch {
	case len(cfg.Experiments) == 0:
		return nil, usagef("--experiments: give some of %s", strings.Join(facility.Experiments(), ", "))
	case len(cfg.Nodes) == 0:
		return nil, usagef("--nodes: give counts of nodes per facility, e.g. 1,2,3")
	case cfg.NumConn < 1 || cfg.NumConn > maxFacilityConn:
		return nil, usagef("--num_conn %d out of range: give 1 to %d", cfg.NumConn, maxFacilityConn)
	case cfg.Conns < cfg.NumConn || cfg.Conns > maxFacilityConns:
		return nil, usagef("--conns %d out of range: give %d (one per channel, so each carries data) to %d", cfg.Conns, cfg.NumConn, maxFacilityConns)
	case cfg.Size < 1 || cfg.Size > bench.MaxSize:
		return nil, usagef("--size %s out of range: give 1B to %s", *size, bytesize.Format(bench.MaxSize))
	case cfg.Bytes > workload.MaxBytes:
		return nil, usagef("--bytes %s out of range: give at most %s", *total, bytesize.Format(workload.MaxBytes))
	case cfg.Bytes/int64(cfg.Conns) < 2*int64(cfg.Size):
		return nil, usagef("--bytes %s gives each of %d connections less than two %s messages: raise --bytes or lower --size", *total, cfg.Conns, *size)
	case cfg.Reps < 1 || cfg.Reps > maxReps:
		return nil, usagef("--reps %d out of range: give 1 to %d", cfg.Reps, maxReps)
	case len(cfg.Takeover) == 0:
		return nil, usagef("--takeover: give at least one bound, e.g. 10s")
	case cfg.Requests < 1 || cfg.Requests > maxCtlRequests:
		return nil, usagef("--requests %d out of range: give 1 to %d", cfg.Requests, maxCtlRequests)
	case cfg.WAN != api.WANTLS && cfg.WAN != api.WANTCP:
		return nil, usagef("--wan %q: use tls or tcp (a facility of several nodes does not serve quic yet)", cfg.WAN)
	case !slices.Contains(relay.Names(), cfg.Engine):
		return nil, usagef("--engine %q: use one of %s", cfg.Engine, strings.Join(relay.Names(), ", "))
	case cfg.RunTimeout < time.Second || cfg.RunTimeout > time.Hour:
		return nil, usagef("--run_timeout %s out of range: give 1s to 1h", cfg.RunTimeout)
	}
	if cfg.JSONPath != "" {
		if err := checkOutPath("--json", cfg.JSONPath); err != nil {
			return nil, err
		}
	}
	if cfg.S2CS == "" {
		if cfg.S2CS, err = localgw.FindBinary("s2cs"); err != nil {
			return nil, usagef("%v", err)
		}
	}
	return cfg, nil
}

func runFacility(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseFacility(args, stdout)
	if err != nil {
		return err
	}
	_, err = facility.Run(ctx, *cfg, stdout)
	return err
}
