// Package facility is s2bench facility: a facility of several s2cs nodes
// sharing etcd (issue 16, "Measure"), on loopback, with a real etcd
// (localetcd). Three experiments:
//
//   - goodput: one stream of Config.NumConn channels whose channels are
//     served by 1, 2 and 3 nodes of each facility, the verified workload
//     over Config.Conns connections spread over the channels,
//     interleaved with the direct path; goodput and the CPU of every
//     node together per GB (goodput.go).
//   - takeover: a stream across 3+3 nodes probed on every channel every
//     ~50 ms; the consumer-side node serving a channel is killed with
//     SIGKILL and the time until every channel carries data again is
//     taken, for each Config.Takeover bound (takeover.go).
//   - control: inbound-request + release pairs against a gateway on
//     bbolt, one on etcd, and the nodes of a facility, interleaved
//     (control.go).
//
// The nodes are nodes.go's: real s2cs processes on loopback addresses of
// their own, killed and started again under their names.
package facility

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"scistream/internal/api"
	"scistream/internal/exp/record"
	"scistream/internal/localetcd"
)

// The experiments, in the order they run.
const (
	Goodput  = "goodput"
	Takeover = "takeover"
	Control  = "control"
)

// Experiments returns the experiments, in the order they run.
func Experiments() []string { return []string{Goodput, Takeover, Control} }

// Config is a facility experiment.
type Config struct {
	Experiments []string // run in the order given; nil: Experiments()
	Nodes       []int    // goodput: nodes per facility, one configuration each; nil: 1, 2, 3
	NumConn     int      // channels of the measured streams (num_conn), spread over the nodes; 0: 3
	Conns       int      // goodput: producer connections per run, spread round-robin over the channels; 0: NumConn
	Size        int      // goodput: message size; 0: 64 KiB
	Bytes       int64    // goodput: payload per run, over all connections; 0: 512 MiB
	// Reps are the repetitions of each goodput path (interleaved) and
	// the kills per takeover bound; 0: 1.
	Reps int
	// Takeover are the nodes' --takeover bounds (at least 4 s), one
	// facility pair each; nil: 10 s, 4 s.
	Takeover []time.Duration
	Requests int    // control: inbound-request + release pairs per store; 0: 200
	WAN      string // the transport between the facilities, api.WANTLS or WANTCP; empty: TLS
	Engine   string // the nodes' engine (s2cs --type); empty: splice
	JSONPath string // if set, every record is written there at the end (also after a failure)
	S2CS     string // the s2cs binary; empty: localgw.FindBinary's
	// RunTimeout bounds one goodput run; 0: 2 minutes.
	RunTimeout time.Duration
}

func (cfg Config) withDefaults() Config {
	if len(cfg.Experiments) == 0 {
		cfg.Experiments = Experiments()
	}
	if len(cfg.Nodes) == 0 {
		cfg.Nodes = []int{1, 2, 3}
	}
	if cfg.NumConn == 0 {
		cfg.NumConn = 3
	}
	if cfg.Conns == 0 {
		cfg.Conns = cfg.NumConn
	}
	if cfg.Size == 0 {
		cfg.Size = 64 << 10
	}
	if cfg.Bytes == 0 {
		cfg.Bytes = 512 << 20
	}
	cfg.Reps = max(cfg.Reps, 1)
	if len(cfg.Takeover) == 0 {
		cfg.Takeover = []time.Duration{10 * time.Second, 4 * time.Second}
	}
	if cfg.Requests == 0 {
		cfg.Requests = 200
	}
	if cfg.WAN == "" {
		cfg.WAN = api.WANTLS
	}
	if cfg.Engine == "" {
		cfg.Engine = "splice"
	}
	if cfg.RunTimeout == 0 {
		cfg.RunTimeout = 2 * time.Minute
	}
	return cfg
}

// takeoverNodes is the size of each facility of the takeover experiment
// (and of control's facility).
const takeoverNodes = 3

// gatewayArgs are the s2cs flags of every node and gateway.
func (cfg *Config) gatewayArgs() []string {
	args := []string{"--type", cfg.Engine}
	if cfg.WAN == api.WANTCP {
		args = append(args, "--insecure_tcp_wan")
	}
	return args
}

// Record is one measurement of s2bench facility in --json: its
// experiment says which fields it has. The names are API: add fields,
// never rename one.
type Record struct {
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

// Run starts etcd and runs the experiments, printing their steps and
// tables to stdout; it writes the records (JSONPath) at the end, also
// after a failure or an interrupt (ctx), and returns them. Every node,
// gateway and etcd it started is stopped, and its temporary directory
// removed.
func Run(ctx context.Context, cfg Config, stdout io.Writer) (recs []Record, err error) {
	cfg = cfg.withDefaults()
	wall := time.Now()
	dir, err := os.MkdirTemp("", "s2bench-")
	if err != nil {
		return nil, fmt.Errorf("temporary directory: %w", err)
	}
	defer os.RemoveAll(dir)
	if err := os.Mkdir(filepath.Join(dir, "etcd"), 0o700); err != nil {
		return nil, err
	}
	etcd, err := localetcd.Start(localetcd.Options{Dir: filepath.Join(dir, "etcd")})
	if err != nil {
		return nil, fmt.Errorf("etcd: %w", err)
	}
	defer etcd.Stop() // after every node has stopped (deferred later)
	env, err := newFacEnv(cfg.S2CS, etcd.Endpoint, dir, cfg.gatewayArgs())
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(stdout, "s2bench facility: experiments %s; etcd pid %d at %s; wan %s, engine %s; this host has %d CPUs, which every node shares\n",
		strings.Join(cfg.Experiments, ","), etcd.PID(), etcd.Endpoint, cfg.WAN, cfg.Engine, runtime.NumCPU())
	defer func() {
		if cfg.JSONPath == "" || len(recs) == 0 {
			return
		}
		if jerr := record.WriteJSON(cfg.JSONPath, recs); jerr != nil {
			err = errors.Join(err, jerr)
			return
		}
		fmt.Fprintf(stdout, "wrote %d records to %s\n", len(recs), cfg.JSONPath)
	}()
	for _, e := range cfg.Experiments {
		var got []Record
		switch e {
		case Goodput:
			got, err = facGoodput(ctx, &cfg, env, stdout)
		case Takeover:
			for _, bound := range cfg.Takeover {
				var more []Record
				more, err = facTakeover(ctx, &cfg, env, bound, stdout)
				got = append(got, more...)
				if err != nil {
					break
				}
			}
			printTakeover(stdout, got)
		case Control:
			got, err = facControl(ctx, &cfg, env, stdout)
		}
		recs = append(recs, got...)
		if err != nil {
			return recs, fmt.Errorf("%s: %w", e, err)
		}
	}
	fmt.Fprintf(stdout, "every node stopped; wall time %.1f s\n", time.Since(wall).Seconds())
	return recs, nil
}
