package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"scistream/internal/api"
	"scistream/internal/bench"
	"scistream/internal/bytesize"
	"scistream/internal/exp/record"
	"scistream/internal/exp/workload"
	"scistream/internal/localetcd"
	"scistream/internal/localgw"
	"scistream/internal/relay"
)

// s2bench facility: a facility of several s2cs nodes sharing etcd
// (issue 16, "Measure"), on loopback, with a real etcd (localetcd).
// Three experiments:
//
//   - goodput: one stream of --num_conn channels whose channels are
//     served by 1, 2 and 3 nodes of each facility, the verified workload
//     over --conns connections spread over the channels, interleaved
//     with the direct path; goodput and the CPU of every node together
//     per GB (facilitygoodput.go).
//   - takeover: a stream across 3+3 nodes probed on every channel every
//     ~50 ms; the consumer-side node serving a channel is killed with
//     SIGKILL and the time until every channel carries data again is
//     taken, for each --takeover bound (facilitytakeover.go).
//   - control: inbound-request + release pairs against a gateway on
//     bbolt, one on etcd, and the nodes of a facility, interleaved
//     (facilityctl.go).

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

// facilityExperiments are the experiments, in the order they run.
var facilityExperiments = []string{"goodput", "takeover", "control"}

type facilityConfig struct {
	experiments []string
	nodes       []int // goodput: nodes per facility
	numConn     int   // channels of the stream
	conns       int   // goodput: producer connections per run
	size        int
	bytes       int64 // goodput: payload per run over all connections
	reps        int
	takeover    []time.Duration
	requests    int
	wan, engine string
	jsonPath    string
	s2cs        string
	runTimeout  time.Duration
}

// Bounds of the facility flags.
const (
	maxFacilityNodes = 5
	maxFacilityConn  = 16
	maxFacilityConns = 256
	maxCtlRequests   = 10000
	// takeoverNodes is the size of each facility of the takeover
	// experiment (and of control's facility).
	takeoverNodes = 3
)

func parseFacility(args []string, stderr io.Writer) (*facilityConfig, error) {
	fs := flag.NewFlagSet("s2bench facility", flag.ContinueOnError)
	exps := fs.String("experiments", strings.Join(facilityExperiments, ","), "experiments to run, comma-separated: goodput, takeover, control")
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
	if err := parseFlags(fs, args, facilityUsage, stderr); err != nil {
		return nil, err
	}
	cfg := &facilityConfig{numConn: *numConn, conns: *conns, reps: *reps, requests: *requests, wan: *wanT, engine: *engine,
		jsonPath: *jsonPath, s2cs: *s2cs, runTimeout: *runTimeout}
	for _, e := range splitComma(*exps) {
		if !slices.Contains(facilityExperiments, e) {
			return nil, usagef("--experiments: %q unknown: give some of %s", e, strings.Join(facilityExperiments, ", "))
		}
		if !slices.Contains(cfg.experiments, e) {
			cfg.experiments = append(cfg.experiments, e)
		}
	}
	for _, f := range splitComma(*nodes) {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 || n > maxFacilityNodes {
			return nil, usagef("--nodes %q: give counts of nodes per facility from 1 to %d, e.g. 1,2,3", *nodes, maxFacilityNodes)
		}
		if !slices.Contains(cfg.nodes, n) {
			cfg.nodes = append(cfg.nodes, n)
		}
	}
	for _, s := range splitComma(*takeover) {
		d, err := time.ParseDuration(s)
		if err != nil || d < 4*time.Second || d > time.Minute {
			return nil, usagef("--takeover %q: give durations of 4s (etcd's leases need it) to 1m, e.g. 10s,4s", s)
		}
		cfg.takeover = append(cfg.takeover, d)
	}
	sz, err := bytesize.Parse(*size)
	if err != nil {
		return nil, usagef("--size %v", err)
	}
	cfg.size = int(min(sz, bench.MaxSize+1))
	if cfg.bytes, err = bytesize.Parse(*total); err != nil {
		return nil, usagef("--bytes %v", err)
	}
	if cfg.conns == 0 {
		cfg.conns = cfg.numConn
	}
	switch {
	case len(cfg.experiments) == 0:
		return nil, usagef("--experiments: give some of %s", strings.Join(facilityExperiments, ", "))
	case len(cfg.nodes) == 0:
		return nil, usagef("--nodes: give counts of nodes per facility, e.g. 1,2,3")
	case cfg.numConn < 1 || cfg.numConn > maxFacilityConn:
		return nil, usagef("--num_conn %d out of range: give 1 to %d", cfg.numConn, maxFacilityConn)
	case cfg.conns < cfg.numConn || cfg.conns > maxFacilityConns:
		return nil, usagef("--conns %d out of range: give %d (one per channel, so each carries data) to %d", cfg.conns, cfg.numConn, maxFacilityConns)
	case cfg.size < 1 || cfg.size > bench.MaxSize:
		return nil, usagef("--size %s out of range: give 1B to %s", *size, bytesize.Format(bench.MaxSize))
	case cfg.bytes > workload.MaxBytes:
		return nil, usagef("--bytes %s out of range: give at most %s", *total, bytesize.Format(workload.MaxBytes))
	case cfg.bytes/int64(cfg.conns) < 2*int64(cfg.size):
		return nil, usagef("--bytes %s gives each of %d connections less than two %s messages: raise --bytes or lower --size", *total, cfg.conns, *size)
	case cfg.reps < 1 || cfg.reps > maxReps:
		return nil, usagef("--reps %d out of range: give 1 to %d", cfg.reps, maxReps)
	case len(cfg.takeover) == 0:
		return nil, usagef("--takeover: give at least one bound, e.g. 10s")
	case cfg.requests < 1 || cfg.requests > maxCtlRequests:
		return nil, usagef("--requests %d out of range: give 1 to %d", cfg.requests, maxCtlRequests)
	case cfg.wan != api.WANTLS && cfg.wan != api.WANTCP:
		return nil, usagef("--wan %q: use tls or tcp (a facility of several nodes does not serve quic yet)", cfg.wan)
	case !slices.Contains(relay.Names(), cfg.engine):
		return nil, usagef("--engine %q: use one of %s", cfg.engine, strings.Join(relay.Names(), ", "))
	case cfg.runTimeout < time.Second || cfg.runTimeout > time.Hour:
		return nil, usagef("--run_timeout %s out of range: give 1s to 1h", cfg.runTimeout)
	}
	if cfg.jsonPath != "" {
		if err := checkOutPath("--json", cfg.jsonPath); err != nil {
			return nil, err
		}
	}
	if cfg.s2cs == "" {
		if cfg.s2cs, err = localgw.FindBinary("s2cs"); err != nil {
			return nil, usagef("%v", err)
		}
	}
	return cfg, nil
}

// gatewayArgs are the s2cs flags of every node and gateway.
func (cfg *facilityConfig) gatewayArgs() []string {
	args := []string{"--type", cfg.engine}
	if cfg.wan == api.WANTCP {
		args = append(args, "--insecure_tcp_wan")
	}
	return args
}

// facilityRecord is one measurement of s2bench facility in --json: its
// experiment says which fields it has. The names are API: add fields,
// never rename one.
type facilityRecord struct {
	Experiment string `json:"experiment"`
	Rep        int    `json:"rep,omitempty"`
	// Nodes is the nodes per facility (goodput, takeover, control's
	// facility); 0 on the direct path and a gateway of one node.
	Nodes   int `json:"nodes,omitempty"`
	NumConn int `json:"num_conn,omitempty"`
	// goodput: the run, as compare records one (path "direct" or
	// "nodesN"); ConsNodesUsed and ProdNodesUsed count the distinct
	// nodes that served the stream's channels on each side.
	Run           *record.Record `json:"run,omitempty"`
	ConsNodesUsed int            `json:"cons_nodes_used,omitempty"`
	ProdNodesUsed int            `json:"prod_nodes_used,omitempty"`
	// takeover: the nodes' --takeover, the node killed and the channels
	// it served, the time from its death until every channel carried
	// data again (absent if they did not within the bound and 15 s),
	// and probes that failed meanwhile on the channels of live nodes.
	TakeoverBoundS     float64  `json:"takeover_bound_s,omitempty"`
	Victim             string   `json:"victim,omitempty"`
	VictimChannels     []int    `json:"victim_channels,omitempty"`
	TakeoverS          *float64 `json:"takeover_s,omitempty"`
	OtherProbeFailures int      `json:"other_probe_failures,omitempty"`
	// control: where the gateway keeps its records (bbolt, etcd,
	// facility) and the latency of inbound-request + release pairs and
	// of each request, nearest-rank percentiles, in milliseconds.
	Store        string  `json:"store,omitempty"`
	Requests     int     `json:"requests,omitempty"`
	PairP50Ms    float64 `json:"pair_p50_ms,omitempty"`
	PairP99Ms    float64 `json:"pair_p99_ms,omitempty"`
	PairMaxMs    float64 `json:"pair_max_ms,omitempty"`
	InboundP50Ms float64 `json:"inbound_p50_ms,omitempty"`
	InboundP99Ms float64 `json:"inbound_p99_ms,omitempty"`
	ReleaseP50Ms float64 `json:"release_p50_ms,omitempty"`
	ReleaseP99Ms float64 `json:"release_p99_ms,omitempty"`
	Error        string  `json:"error,omitempty"`
}

func runFacility(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	cfg, err := parseFacility(args, stderr)
	if err != nil {
		return err
	}
	wall := time.Now()
	dir, err := os.MkdirTemp("", "s2bench-")
	if err != nil {
		return fmt.Errorf("temporary directory: %w", err)
	}
	defer os.RemoveAll(dir)
	if err := os.Mkdir(filepath.Join(dir, "etcd"), 0o700); err != nil {
		return err
	}
	etcd, err := localetcd.Start(localetcd.Options{Dir: filepath.Join(dir, "etcd")})
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	defer etcd.Stop() // after every node has stopped (deferred later)
	env, err := newFacEnv(cfg.s2cs, etcd.Endpoint, dir, cfg.gatewayArgs())
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "s2bench facility: experiments %s; etcd pid %d at %s; wan %s, engine %s; this host has %d CPUs, which every node shares\n",
		strings.Join(cfg.experiments, ","), etcd.PID(), etcd.Endpoint, cfg.wan, cfg.engine, runtime.NumCPU())
	var recs []facilityRecord
	defer func() {
		if cfg.jsonPath == "" || len(recs) == 0 {
			return
		}
		if jerr := record.WriteJSON(cfg.jsonPath, recs); jerr != nil {
			err = errors.Join(err, jerr)
			return
		}
		fmt.Fprintf(stdout, "wrote %d records to %s\n", len(recs), cfg.jsonPath)
	}()
	for _, e := range cfg.experiments {
		var got []facilityRecord
		switch e {
		case "goodput":
			got, err = facGoodput(ctx, cfg, env, stdout)
		case "takeover":
			for _, bound := range cfg.takeover {
				var more []facilityRecord
				more, err = facTakeover(ctx, cfg, env, bound, stdout)
				got = append(got, more...)
				if err != nil {
					break
				}
			}
			printTakeover(stdout, got)
		case "control":
			got, err = facControl(ctx, cfg, env, stdout)
		}
		recs = append(recs, got...)
		if err != nil {
			return fmt.Errorf("%s: %w", e, err)
		}
	}
	fmt.Fprintf(stdout, "every node stopped; wall time %.1f s\n", time.Since(wall).Seconds())
	return nil
}
