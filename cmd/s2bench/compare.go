package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"scistream/internal/api"
	"scistream/internal/bench"
	"scistream/internal/cliflag"
	"scistream/internal/localgw"
)

// Bounds of compare's flags.
const (
	maxBytes = 1 << 40
	maxReps  = 100
)

// Paths, in the order each repetition runs them.
const (
	pathDirect   = "direct"
	pathGateways = "gateways"
)

var paths = []string{pathDirect, pathGateways}

type compareConfig struct {
	bytes      int64
	size       int
	reps       int
	engine     string
	wan        string
	jsonPath   string
	s2cs       string
	runTimeout time.Duration
	idle       time.Duration
}

// record is one run in the --json output.
type record struct {
	Path        string  `json:"path"`
	Rep         int     `json:"rep"`
	SizeBytes   int     `json:"size_bytes"`
	Messages    int64   `json:"messages"`
	Bytes       int64   `json:"bytes"`
	GoodputMBps float64 `json:"goodput_MBps"`
	MsgsPerS    float64 `json:"msgs_per_s"`
	LatencyUS   float64 `json:"latency_us"`
	JitterUS    float64 `json:"jitter_us"`
	Pairs       int     `json:"pairs"`
	IntegrityOK bool    `json:"integrity_ok"`
	Engine      string  `json:"engine"`
	WAN         string  `json:"wan"`
}

func parseCompare(args []string, stderr io.Writer) (*compareConfig, error) {
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		bytesS     = fs.String("bytes", "1GiB", "payload bytes per run; units B, KiB, MiB, GiB, KB, MB, GB")
		sizeS      = fs.String("size", "64KiB", "payload bytes per message (the last one carries any remainder)")
		reps       = fs.Int("reps", 3, "runs of each path, interleaved: direct, gateways, direct, ...")
		engine     = fs.String("engine", "splice", "data-plane engine of both gateways (s2cs --type): splice or buffer")
		wanT       = fs.String("wan", api.WANTLS, "WAN transport between the gateways: tls, or tcp (s2cs --insecure_tcp_wan)")
		jsonPath   = fs.String("json", "", "also write every run as a JSON array of records to FILE")
		s2cs       = fs.String("s2cs", "", "s2cs binary (default: next to s2bench, in ./bin or on PATH)")
		runTimeout = fs.Duration("run_timeout", 5*time.Minute, "upper bound of one run")
		idle       = fs.Duration("idle_timeout", 30*time.Second, "fail a run that makes no progress for this long")
	)
	cliflag.AddAliases(fs)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: s2bench compare [--bytes 1GiB] [--size 64KiB] [--reps 3] [--engine splice|buffer] [--wan tls|tcp] [--json FILE]")
		fmt.Fprintln(stderr, "\nStarts two local s2cs gateways, wires a stream through them and runs the same")
		fmt.Fprintln(stderr, "verified workload directly and through the gateways; prints goodput per path.")
		fmt.Fprintln(stderr)
		cliflag.PrintDefaults(fs)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, usageError{err}
	}
	if fs.NArg() > 0 {
		return nil, usagef("unexpected argument %q: every compare option is a --flag", fs.Arg(0))
	}
	cfg := &compareConfig{reps: *reps, engine: *engine, wan: *wanT, jsonPath: *jsonPath, s2cs: *s2cs, runTimeout: *runTimeout, idle: *idle}
	b, err := bench.ParseBytes(*bytesS)
	if err != nil {
		return nil, usagef("--bytes %w", err)
	}
	s, err := bench.ParseBytes(*sizeS)
	if err != nil {
		return nil, usagef("--size %w", err)
	}
	switch {
	case s < 1 || s > bench.MaxSize:
		return nil, usagef("--size %s out of range: give 1B to %s, e.g. 64KiB", *sizeS, bench.FormatBytes(bench.MaxSize))
	case b > maxBytes:
		return nil, usagef("--bytes %s exceeds %s: give a smaller total", *bytesS, bench.FormatBytes(maxBytes))
	case b < 2*s:
		return nil, usagef("--bytes %s is less than two messages of --size %s: raise --bytes or lower --size (timing needs two arrivals)", *bytesS, *sizeS)
	case cfg.reps < 1 || cfg.reps > maxReps:
		return nil, usagef("--reps %d out of range: give 1 to %d", cfg.reps, maxReps)
	case cfg.engine != "splice" && cfg.engine != "buffer" && cfg.engine != "sockmap":
		return nil, usagef("--engine %q: use splice or buffer", cfg.engine)
	case cfg.wan != api.WANTLS && cfg.wan != api.WANTCP:
		return nil, usagef("--wan %q: use tls or tcp", cfg.wan)
	case cfg.runTimeout <= 0:
		return nil, usagef("--run_timeout must be positive, e.g. 5m")
	case cfg.idle <= 0:
		return nil, usagef("--idle_timeout must be positive, e.g. 30s")
	}
	cfg.bytes, cfg.size = b, int(s)
	if cfg.jsonPath != "" {
		if st, err := os.Stat(cfg.jsonPath); err == nil && st.IsDir() {
			return nil, usagef("--json %s is a directory: give a file name", cfg.jsonPath)
		}
		if st, err := os.Stat(filepath.Dir(cfg.jsonPath)); err != nil || !st.IsDir() {
			return nil, usagef("--json %s: directory %s does not exist; create it or choose another path", cfg.jsonPath, filepath.Dir(cfg.jsonPath))
		}
	}
	if cfg.s2cs == "" {
		p, err := localgw.FindBinary("s2cs")
		if err != nil {
			return nil, usagef("no s2cs binary next to s2bench, in ./bin or on PATH: build it with go build -o bin/ ./cmd/... or pass --s2cs PATH")
		}
		cfg.s2cs = p
	} else if st, err := os.Stat(cfg.s2cs); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		return nil, usagef("--s2cs %s is not an executable file: build it with go build -o bin/ ./cmd/s2cs", cfg.s2cs)
	}
	return cfg, nil
}

func runCompare(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseCompare(args, stderr)
	if err != nil {
		return err
	}
	return compare(ctx, cfg, stdout, stderr)
}

func compare(ctx context.Context, cfg *compareConfig, stdout, stderr io.Writer) (err error) {
	wall := time.Now()
	spec := bench.Spec{Size: cfg.size, Bytes: cfg.bytes, Seed: rand.Uint64()}
	fmt.Fprintf(stdout, "s2bench compare: %s per run in %d messages of %s, %d run(s) per path, engine %s, WAN %s\n",
		bench.FormatBytes(cfg.bytes), spec.Messages(), bench.FormatBytes(int64(cfg.size)), cfg.reps, cfg.engine, cfg.wan)

	tb, err := startTestbed(ctx, testbedConfig{s2cs: cfg.s2cs, engine: cfg.engine, wan: cfg.wan})
	if err != nil {
		return err
	}
	closed := false
	defer func() {
		if closed {
			return
		}
		if cerr := tb.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("clean up: %w", cerr))
		}
	}()
	fmt.Fprintf(stdout, "gateways: %s\n", tb.describe())
	fmt.Fprintf(stdout, "stream %s wired in %.1f ms (client.Wire); producer connects to %s\n",
		tb.outS.UID, ms(tb.setup), tb.target())

	opts := bench.RunOptions{Timeout: cfg.runTimeout, Idle: cfg.idle}
	tag := rand.Uint32()
	var recs []record
	for rep := 1; rep <= cfg.reps; rep++ {
		for _, path := range paths {
			spec.Run = tag + uint32(len(recs))
			rec, rerr := runPath(ctx, tb, path, spec, opts, stderr)
			rec.Rep, rec.Engine, rec.WAN = rep, cfg.engine, cfg.wan
			recs = append(recs, rec)
			fmt.Fprintf(stdout, "run %d/%d %-8s %9.1f MB/s %10.0f msgs/s  latency %8.2f us  jitter %8.2f us  %s\n",
				rep, cfg.reps, path, rec.GoodputMBps, rec.MsgsPerS, rec.LatencyUS, rec.JitterUS, status(ctx, rerr))
			if rerr != nil {
				if ctx.Err() != nil {
					return fmt.Errorf("interrupted during %s run %d: %w", path, rep, context.Cause(ctx))
				}
				if path == pathGateways {
					fmt.Fprint(stderr, tb.logTail(10))
				}
				if bench.IsIntegrity(rerr) && cfg.jsonPath != "" {
					if jerr := writeJSON(cfg.jsonPath, recs); jerr != nil {
						rerr = errors.Join(rerr, jerr)
					}
				}
				return fmt.Errorf("%s run %d FAILED: %w", path, rep, rerr)
			}
		}
	}

	fmt.Fprintln(stdout)
	printTable(stdout, recs)
	fmt.Fprintf(stdout, "stream setup (client.Wire): %.1f ms\n", ms(tb.setup))
	if cfg.jsonPath != "" {
		if err := writeJSON(cfg.jsonPath, recs); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote %d records to %s\n", len(recs), cfg.jsonPath)
	}
	closed = true
	if err := tb.Close(); err != nil {
		return fmt.Errorf("clean up: %w", err)
	}
	fmt.Fprintf(stdout, "stream released, gateways stopped; wall time %.1f s\n", time.Since(wall).Seconds())
	return nil
}

// runPath runs spec once over path and checks that the connection took
// that path: directly, the consumer sees the producer's own address;
// through the gateways, it sees the inbound gateway, and both gateways
// counted every byte of the run.
func runPath(ctx context.Context, tb *testbed, path string, spec bench.Spec, opts bench.RunOptions, stderr io.Writer) (record, error) {
	target := tb.consumer.Addr().String()
	var sent0, recv0 int64
	if path == pathGateways {
		target = tb.target()
		var err error
		if sent0, recv0, err = tb.wanBytes(ctx); err != nil {
			return record{Path: path, SizeBytes: spec.Size, Pairs: 1}, fmt.Errorf("stream statistics: %w", err)
		}
	}
	res, err := bench.Run(ctx, tb.consumer, target, spec, opts)
	rec := record{Path: path, SizeBytes: spec.Size, Pairs: 1}
	if res != nil {
		rec.Messages, rec.Bytes = res.Messages, res.Bytes
		rec.GoodputMBps, rec.MsgsPerS = res.GoodputBps/1e6, res.MsgsPerSec
		rec.LatencyUS, rec.JitterUS = res.LatencyUS, res.JitterUS
	}
	if err != nil {
		return rec, err
	}
	switch {
	case path == pathDirect && res.Consumer != res.Producer:
		return rec, fmt.Errorf("direct run: the consumer saw %s, not the producer %s", res.Consumer, res.Producer)
	case path == pathGateways && res.Consumer == res.Producer:
		return rec, fmt.Errorf("gateway run: the consumer saw the producer %s itself", res.Producer)
	case res.Bytes != spec.Bytes || res.Messages != spec.Messages():
		return rec, fmt.Errorf("verified %d messages, %d bytes; want %d, %d", res.Messages, res.Bytes, spec.Messages(), spec.Bytes)
	}
	if res.GoodputBps <= 0 {
		return rec, fmt.Errorf("run too short to time (every message arrived at once): raise --bytes")
	}
	if path == pathGateways {
		sent1, recv1, err := tb.wanBytes(ctx)
		if err != nil {
			return rec, fmt.Errorf("stream statistics: %w", err)
		}
		if want := spec.WireBytes(); sent1-sent0 != want || recv1-recv0 != want {
			fmt.Fprintf(stderr, "s2bench: warning: the gateways counted %d bytes sent and %d received on the WAN for this run; the run carried %d\n",
				sent1-sent0, recv1-recv0, want)
		}
	}
	rec.IntegrityOK = true
	return rec, nil
}

// status describes how a run ended.
func status(ctx context.Context, err error) string {
	switch {
	case err == nil:
		return "integrity ok"
	case bench.IsIntegrity(err):
		return "INTEGRITY FAILED"
	case ctx.Err() != nil:
		return "interrupted"
	}
	return "FAILED"
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// printTable prints, per path, the median, minimum and maximum goodput
// over the runs, the median message rate, inter-arrival time and jitter,
// and the ratio of the gateways' median goodput to the direct one.
func printTable(w io.Writer, recs []record) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "path\truns\tgoodput MB/s (median)\tmin\tmax\tmsgs/s\tlatency_us\tjitter_us\tintegrity\t")
	med := map[string]float64{}
	for _, p := range paths {
		var gp, mr, lat, jit []float64
		ok := 0
		for _, r := range recs {
			if r.Path != p {
				continue
			}
			gp, mr, lat, jit = append(gp, r.GoodputMBps), append(mr, r.MsgsPerS), append(lat, r.LatencyUS), append(jit, r.JitterUS)
			if r.IntegrityOK {
				ok++
			}
		}
		if len(gp) == 0 {
			continue
		}
		lo, hi := bench.MinMax(gp)
		med[p] = bench.Median(gp)
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.1f\t%.1f\t%.0f\t%.2f\t%.2f\tok %d/%d\t\n",
			p, len(gp), med[p], lo, hi, bench.Median(mr), bench.Median(lat), bench.Median(jit), ok, len(gp))
	}
	tw.Flush()
	fmt.Fprintln(w, "(MB/s = 10^6 payload bytes/s at the consumer from the first message's arrival to the last's; latency_us = mean inter-arrival, jitter_us = its standard deviation; medians over runs)")
	if med[pathDirect] > 0 {
		fmt.Fprintf(w, "ratio gateways/direct (median goodput): %.3f\n", med[pathGateways]/med[pathDirect])
	}
}

func writeJSON(path string, recs []record) error {
	b, err := json.MarshalIndent(recs, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("--json: %w", err)
	}
	return nil
}
