package main

import (
	"context"
	"flag"
	"io"
	"slices"
	"strings"
	"time"

	"scistream/internal/exp/pool"
	"scistream/internal/localgw"
	"scistream/internal/netbed"
)

const poolUsage = `usage: s2bench pool [--experiments warm,hotset,stealing] [--conns 200] [--wan_pool 1]
                   [--flows 12] [--pool_max_per_peer 4] [--accesses 300] [--hot 4] [--churn 50] [--steal 0.3] [--seed 1]
                   [--preset longwan | --rtt 150ms] [--name pool] [--keep]

Pooled WAN legs (s2uc --wan_pool, s2cs --pool_max_per_peer and --pool_policy)
on real s2cs gateways, on loopback, or with --preset in the testbed's
namespaces across its emulated WAN (root; s2bench testbed).
warm: the first-byte latency of --conns new connections through a stream
without pooled legs and through one with --wan_pool warm legs, alternating.
hotset, stealing: seed 002's access patterns over --flows streams to one peer
gateway, under --pool_policy lru then lrum with the same seeded sequence:
legs torn down, created, reused, and the connections' setup time.`

func parsePool(args []string, stdout, help io.Writer) (*pool.Config, error) {
	fs := flag.NewFlagSet("s2bench pool", flag.ContinueOnError)
	exps := fs.String("experiments", "warm,hotset,stealing", "experiments to run, comma-separated: warm (warm pool against cold), hotset, stealing (LRU against LRU-M)")
	conns := fs.Int("conns", 200, "warm: new connections on each of the two streams")
	wanPool := fs.Int("wan_pool", 1, "idle legs kept warm per stream (s2uc --wan_pool) of the warm stream and of every pattern stream")
	flows := fs.Int("flows", 12, "hotset, stealing: streams (flows) to the one peer gateway")
	poolCap := fs.Int("pool_max_per_peer", 4, "hotset, stealing: the outbound gateway's cap of pooled legs to its peer (below --flows, so legs are torn down)")
	accesses := fs.Int("accesses", 300, "hotset, stealing: connections replayed under each policy")
	hot := fs.Int("hot", 4, "hotset: streams in the hot set; stealing: a worker's own streams")
	churn := fs.Int("churn", 50, "hotset: connections between two changes of the hot set")
	steal := fs.Float64("steal", 0.3, "stealing: share of connections that steal from any stream")
	seed := fs.Uint64("seed", 1, "seed of the access patterns (the same for both policies)")
	timeout := fs.Duration("timeout", 10*time.Minute, "the whole command stops with an error after this long")
	s2cs := fs.String("s2cs", "", "s2cs binary (default: next to s2bench, ./bin, PATH)")
	preset := fs.String("preset", "", "run in the testbed's namespaces across this emulated path ("+strings.Join(netbed.PresetNames(), ", ")+"; root); default: loopback")
	rtt := fs.Duration("rtt", 0, "run in the testbed with this overall RTT instead of a preset's, e.g. 150ms")
	name := fs.String("name", "pool", "testbed name (with --preset or --rtt): one that is up is used as it is, else one is brought up and taken down")
	wanRate := fs.String("wan_rate", "", "rate of the testbed's emulated WAN (default: the preset's)")
	keep := fs.Bool("keep", false, "leave a testbed this command brought up running afterwards")
	if err := parseFlags(fs, args, poolUsage, help); err != nil {
		return nil, err
	}
	cfg := &pool.Config{
		Conns: *conns, WANPool: *wanPool, Cap: *poolCap, Timeout: *timeout, S2CS: *s2cs, Keep: *keep, Asked: flagsSet(fs),
		Pattern: pool.Params{Flows: *flows, Accesses: *accesses, Hot: *hot, Churn: *churn, Steal: *steal, Seed: *seed},
	}
	for _, e := range strings.Split(*exps, ",") {
		e = strings.TrimSpace(e)
		switch {
		case e != pool.Warm && e != pool.HotSet && e != pool.Stealing:
			return nil, usagef("--experiments: %q unknown: give warm, hotset and/or stealing, comma-separated", e)
		case slices.Contains(cfg.Experiments, e):
			return nil, usagef("--experiments: %s given twice", e)
		}
		cfg.Experiments = append(cfg.Experiments, e)
	}
	p := cfg.Pattern
	switch {
	case cfg.Conns < 1 || cfg.Conns > 10000:
		return nil, usagef("--conns %d out of range: give 1 to 10000", cfg.Conns)
	case cfg.WANPool < 1 || cfg.WANPool > 16:
		return nil, usagef("--wan_pool %d out of range: give 1 to 16 (s2cs --pool_max_warm's default)", cfg.WANPool)
	case p.Flows < 2 || p.Flows > 48:
		return nil, usagef("--flows %d out of range: give 2 to 48", p.Flows)
	case cfg.Cap < 1 || cfg.Cap >= p.Flows:
		return nil, usagef("--pool_max_per_peer %d: give 1 to %d, below --flows, or no leg is ever torn down", cfg.Cap, p.Flows-1)
	case p.Accesses < 1 || p.Accesses > 10000:
		return nil, usagef("--accesses %d out of range: give 1 to 10000", p.Accesses)
	case p.Hot < 1 || p.Hot >= p.Flows:
		return nil, usagef("--hot %d: give 1 to %d, below --flows", p.Hot, p.Flows-1)
	case p.Churn < 1:
		return nil, usagef("--churn %d: give at least 1", p.Churn)
	case !(p.Steal >= 0 && p.Steal <= 1):
		return nil, usagef("--steal %v: give a share from 0 to 1, e.g. 0.3", p.Steal)
	case cfg.Timeout < 10*time.Second || cfg.Timeout > 2*time.Hour:
		return nil, usagef("--timeout %s out of range: give 10s to 2h", cfg.Timeout)
	}
	if *preset != "" || *rtt != 0 {
		if *preset == "" {
			*preset = "shortwan" // replaced by --rtt
		}
		loss, cc, root := 0.0, "", netbed.DefaultStateRoot
		bed, err := (&bedFlags{name: name, preset: preset, wanRate: wanRate, cc: &cc, stateRoot: &root, loss: &loss, rtt: rtt}).config(stdout)
		if err != nil {
			return nil, err
		}
		cfg.Bed = &bed
	} else {
		for _, f := range []string{"name", "wan_rate", "keep"} {
			if cfg.Asked[f] {
				return nil, usagef("--%s is a testbed flag: give --preset (or --rtt) too, or drop it", f)
			}
		}
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

func runPool(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parsePool(args, stdout, stdout)
	if err != nil {
		return err
	}
	_, err = pool.Run(ctx, *cfg, stdout)
	return err
}
