package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"scistream/internal/api"
	"scistream/internal/bench"
	"scistream/internal/client"
	"scistream/internal/cliflag"
	"scistream/internal/localgw"
	"scistream/internal/netbed"
)

// The testbed command: a two-facility testbed of network namespaces with
// an emulated WAN (internal/netbed), and seed 000's experiment on it.

const testbedUsage = `usage: s2bench testbed up   [--name tb] [--preset shortwan | --rtt 10ms] [--rate 200mbit] [--loss 0] [--cc bbr|cubic]
       s2bench testbed run  [--name tb] [--preset shortwan] [--engine splice|buffer] [--workload SIZES] [--bytes auto] [--reps 1] [--json FILE] [--keep]
       s2bench testbed down [--name tb]

Builds, as root, a producer host and gateway (facility A) and a consumer
gateway and host (facility B) in network namespaces, joined by an emulated
WAN (user-space delay line + tc tbf), plus a separate direct path with the
same RTT and rate for the baseline. run measures the achieved RTT and rate,
refuses to run if they are more than 10% off the preset, then runs the
verified workload directly and through real s2cs gateways for each message
size and prints goodput and jitter. run brings the testbed up if needed and
takes down what it brought up (unless --keep).

presets (seed 000 Table I, overall RTT): ` + "lan 0.44 ms, metro 5.49 ms, shortwan 24.3 ms, wan 58.2 ms, longwan 143.7 ms"

// defaultSweep is seed 000's sample sizes: 512 B to 1 MiB in powers of two.
const defaultSweep = "512,1KiB,2KiB,4KiB,8KiB,16KiB,32KiB,64KiB,128KiB,256KiB,512KiB,1MiB"

func runTestbed(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintln(stderr, testbedUsage)
		if len(args) == 0 {
			return usagef("testbed: give up, run or down")
		}
		return flag.ErrHelp
	}
	switch args[0] {
	case "up":
		return testbedUp(ctx, args[1:], stdout, stderr)
	case "run":
		return testbedRunCmd(ctx, args[1:], stdout, stderr)
	case "down":
		return testbedDown(args[1:], stdout, stderr)
	case "delayline": // internal: the delay-line process inside a router namespace
		return netbed.DelayLineMain(ctx, args[1:], stdout, stderr)
	}
	return usagef("testbed: unknown subcommand %q: use up, run or down", args[0])
}

// bedFlags are the flags that describe the testbed.
type bedFlags struct {
	name, preset, rate, cc, stateRoot *string
	loss                              *float64
	rtt                               *time.Duration
}

func addBedFlags(fs *flag.FlagSet) *bedFlags {
	return &bedFlags{
		name:      fs.String("name", "tb", "testbed name: 1 to 8 of a-z, 0-9 (several testbeds can be up at once)"),
		preset:    fs.String("preset", "shortwan", "emulated path: "+strings.Join(netbed.PresetNames(), ", ")),
		rate:      fs.String("rate", "", "WAN rate, e.g. 500mbit or 1gbit (default: the preset's, 200mbit)"),
		loss:      fs.Float64("loss", 0, "probability of losing a packet on the WAN, e.g. 0.0001"),
		rtt:       fs.Duration("rtt", 0, "overall RTT instead of the preset's, e.g. 10ms (the preset is then named custom)"),
		cc:        fs.String("cc", "", "TCP congestion control of hosts and gateways (default: bbr if available, else cubic)"),
		stateRoot: fs.String("state_root", netbed.DefaultStateRoot, "directory of testbed state files"),
	}
}

// config validates the flags into a netbed.Config.
func (b *bedFlags) config(stdout io.Writer) (netbed.Config, error) {
	if err := netbed.ValidateName(*b.name); err != nil {
		return netbed.Config{}, usageError{fmt.Errorf("--name: %w", err)}
	}
	p, err := netbed.LookupPreset(*b.preset)
	if err != nil {
		return netbed.Config{}, usageError{fmt.Errorf("--preset: %w", err)}
	}
	if *b.rate != "" {
		if p.RateBps, err = netbed.ParseRate(*b.rate); err != nil {
			return netbed.Config{}, usageError{fmt.Errorf("--rate: %w", err)}
		}
	}
	p.Loss = *b.loss
	if *b.rtt != 0 {
		p.Name, p.RTT = "custom", *b.rtt
	}
	if err := p.Validate(); err != nil {
		return netbed.Config{}, usagef("--preset %s: %w", p.Name, err)
	}
	exe, err := os.Executable()
	if err != nil {
		return netbed.Config{}, fmt.Errorf("own executable (runs the delay line): %w", err)
	}
	return netbed.Config{Name: *b.name, Preset: p, DelayLine: []string{exe, "testbed", "delayline"}, CC: *b.cc, StateRoot: *b.stateRoot, Log: stdout}, nil
}

func parseSub(fs *flag.FlagSet, args []string, stderr io.Writer) error {
	fs.SetOutput(stderr)
	cliflag.AddAliases(fs)
	fs.Usage = func() {
		fmt.Fprintln(stderr, testbedUsage)
		fmt.Fprintln(stderr)
		cliflag.PrintDefaults(fs)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q: every testbed option is a --flag", fs.Arg(0))
	}
	return nil
}

func testbedUp(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("testbed up", flag.ContinueOnError)
	bf := addBedFlags(fs)
	if err := parseSub(fs, args, stderr); err != nil {
		return err
	}
	cfg, err := bf.config(stdout)
	if err != nil {
		return err
	}
	if err := netbed.Available(ctx); err != nil {
		return fmt.Errorf("cannot build a testbed here: %w", err)
	}
	tb, err := netbed.Up(ctx, cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "testbed %s is up: %s\n", tb.Name, tb.Preset)
	fmt.Fprintf(stdout, "TCP: %s\n", tb.Tuning)
	m, err := tb.MeasureChecked(ctx, 3)
	if m == nil {
		return fmt.Errorf("measure (the testbed stays up; take it down with s2bench testbed down --name %s): %w", tb.Name, err)
	}
	fmt.Fprintf(stdout, "measured: %s\n", m)
	if err != nil {
		fmt.Fprintf(stderr, "s2bench: warning: %v (testbed run will refuse to run unless a new measurement is within bounds)\n", err)
	}
	fmt.Fprintf(stdout, "namespaces: %s\nrun an experiment with: s2bench testbed run --name %s; take it down with: s2bench testbed down --name %s\n",
		strings.Join(tb.Namespaces, " "), tb.Name, tb.Name)
	return nil
}

func testbedDown(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("testbed down", flag.ContinueOnError)
	name := fs.String("name", "tb", "testbed name")
	root := fs.String("state_root", netbed.DefaultStateRoot, "directory of testbed state files")
	if err := parseSub(fs, args, stderr); err != nil {
		return err
	}
	if err := netbed.ValidateName(*name); err != nil {
		return usageError{fmt.Errorf("--name: %w", err)}
	}
	if err := netbed.DownByName(*root, *name); err != nil {
		return fmt.Errorf("testbed %s down: %w", *name, err)
	}
	fmt.Fprintf(stdout, "testbed %s is down: no namespace, link, process or state of it is left\n", *name)
	return nil
}

type testbedRunConfig struct {
	bed        netbed.Config
	explicit   map[string]bool // testbed flags given on the command line
	sizes      []int
	bytes      int64 // per run; 0: from the rate and RTT
	reps       int
	engine     string
	wan        string
	jsonPath   string
	s2cs       string
	keep       bool
	runTimeout time.Duration
	idle       time.Duration
}

// testbedRecord is one run: compare's record plus the testbed's preset
// and the RTT measured on the run's path before the experiment.
type testbedRecord struct {
	record
	Preset        string  `json:"preset"`
	RTTmsMeasured float64 `json:"rtt_ms_measured"`

	spanS float64 // first to last arrival, for the output
}

func parseTestbedRun(args []string, stdout, stderr io.Writer) (*testbedRunConfig, error) {
	fs := flag.NewFlagSet("testbed run", flag.ContinueOnError)
	bf := addBedFlags(fs)
	var (
		workload   = fs.String("workload", defaultSweep, "message sizes to sweep, comma-separated (units B, KiB, MiB; e.g. 1048576 or 4KiB,1MiB)")
		bytesS     = fs.String("bytes", "auto", "payload bytes per run, or auto: what the rate carries in max(2 s, 15 RTT), at least 16 messages")
		reps       = fs.Int("reps", 1, "runs of each path per size, interleaved: direct, gateways, ...")
		engine     = fs.String("engine", "splice", "data-plane engine of both gateways (s2cs --type): splice or buffer")
		wanT       = fs.String("wan", api.WANTLS, "WAN transport between the gateways: tls, or tcp (s2cs --insecure_tcp_wan)")
		jsonPath   = fs.String("json", "", "also write every run as a JSON array of records to FILE")
		s2cs       = fs.String("s2cs", "", "s2cs binary (default: next to s2bench, in ./bin or on PATH)")
		keep       = fs.Bool("keep", false, "leave a testbed this run brought up running afterwards")
		runTimeout = fs.Duration("run_timeout", 5*time.Minute, "upper bound of one run")
		idle       = fs.Duration("idle_timeout", 30*time.Second, "fail a run that makes no progress for this long")
	)
	if err := parseSub(fs, args, stderr); err != nil {
		return nil, err
	}
	bed, err := bf.config(stdout)
	if err != nil {
		return nil, err
	}
	cfg := &testbedRunConfig{bed: bed, explicit: map[string]bool{}, reps: *reps, engine: *engine, wan: *wanT,
		jsonPath: *jsonPath, s2cs: *s2cs, keep: *keep, runTimeout: *runTimeout, idle: *idle}
	fs.Visit(func(f *flag.Flag) { cfg.explicit[f.Name] = true })
	for _, s := range strings.Split(*workload, ",") {
		n, err := bench.ParseBytes(strings.TrimSpace(s))
		if err != nil {
			return nil, usagef("--workload %q: %w", s, err)
		}
		if n < 1 || n > bench.MaxSize {
			return nil, usagef("--workload %s out of range: give sizes of 1B to %s", s, bench.FormatBytes(bench.MaxSize))
		}
		cfg.sizes = append(cfg.sizes, int(n))
	}
	if *bytesS != "auto" {
		if cfg.bytes, err = bench.ParseBytes(*bytesS); err != nil {
			return nil, usagef("--bytes %w", err)
		}
		for _, s := range cfg.sizes {
			if cfg.bytes < 2*int64(s) || cfg.bytes > maxBytes {
				return nil, usagef("--bytes %s: give 2 messages of the largest size (%s) to %s", *bytesS, bench.FormatBytes(int64(s)), bench.FormatBytes(maxBytes))
			}
		}
	}
	switch {
	case cfg.reps < 1 || cfg.reps > maxReps:
		return nil, usagef("--reps %d out of range: give 1 to %d", cfg.reps, maxReps)
	case cfg.engine != "splice" && cfg.engine != "buffer":
		return nil, usagef("--engine %q: use splice or buffer", cfg.engine)
	case cfg.wan != api.WANTLS && cfg.wan != api.WANTCP:
		return nil, usagef("--wan %q: use tls or tcp", cfg.wan)
	case cfg.runTimeout <= 0:
		return nil, usagef("--run_timeout must be positive, e.g. 5m")
	case cfg.idle <= 0:
		return nil, usagef("--idle_timeout must be positive, e.g. 30s")
	}
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

func testbedRunCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseTestbedRun(args, stdout, stderr)
	if err != nil {
		return err
	}
	return testbedRun(ctx, cfg, stdout, stderr)
}

// runBytes is the payload of one run of messages of size on tb.
func (cfg *testbedRunConfig) runBytes(tb *netbed.Testbed, size int) int64 {
	if cfg.bytes > 0 {
		return cfg.bytes
	}
	secs := max(2, 15*tb.Preset.RTT.Seconds())
	b := int64(float64(tb.Preset.RateBps) / 8 * secs)
	return max(b, 16*int64(size))
}

func testbedRun(ctx context.Context, cfg *testbedRunConfig, stdout, stderr io.Writer) (err error) {
	wall := time.Now()
	tb, err := netbed.Load(cfg.bed.StateRoot, cfg.bed.Name)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if aerr := netbed.Available(ctx); aerr != nil {
			return fmt.Errorf("cannot build a testbed here: %w", aerr)
		}
		fmt.Fprintf(stdout, "testbed %s is not up: bringing it up (%s)\n", cfg.bed.Name, cfg.bed.Preset)
		if tb, err = netbed.Up(ctx, cfg.bed); err != nil {
			return err
		}
		if !cfg.keep {
			defer func() {
				if derr := tb.Down(); derr != nil {
					err = errors.Join(err, fmt.Errorf("take testbed %s down: %w", tb.Name, derr))
				} else {
					fmt.Fprintf(stdout, "testbed %s taken down\n", tb.Name)
				}
			}()
		}
	case err != nil:
		return err
	default:
		want := cfg.bed.Preset
		if ((cfg.explicit["preset"] || cfg.explicit["rtt"]) && (want.Name != tb.Preset.Name || want.RTT != tb.Preset.RTT)) || (cfg.explicit["rate"] && want.RateBps != tb.Preset.RateBps) || (cfg.explicit["loss"] && want.Loss != tb.Preset.Loss) {
			return fmt.Errorf("testbed %s is up with %s, not %s: take it down first (s2bench testbed down --name %s) or run it as it is (drop --preset, --rate, --loss)",
				tb.Name, tb.Preset, want, tb.Name)
		}
	}
	tb.SetLog(stdout)
	fmt.Fprintf(stdout, "testbed %s: %s\nTCP: %s\n", tb.Name, tb.Preset, tb.Tuning)
	m, err := tb.MeasureChecked(ctx, 3)
	if m == nil {
		return fmt.Errorf("measure the testbed: %w", err)
	}
	fmt.Fprintf(stdout, "measured: %s\n", m)
	if err != nil {
		return fmt.Errorf("refusing to run: %w", err)
	}

	gw, err := startNetGateways(ctx, tb, cfg)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := gw.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("stop the gateways: %w", cerr))
		}
	}()
	fmt.Fprintf(stdout, "gateways: outbound s2cs pid %d in %s at %s, inbound s2cs pid %d in %s at %s; engine %s, WAN %s; stream %s wired in %.1f ms\n",
		gw.out.PID(), tb.NS(netbed.ProducerGW), gw.out.Addr, gw.in.PID(), tb.NS(netbed.ConsumerGW), gw.in.Addr, cfg.engine, cfg.wan, gw.outS.UID, ms(gw.setup))

	opts := bench.RunOptions{Timeout: cfg.runTimeout, Idle: cfg.idle}
	tag := rand.Uint32()
	var recs []testbedRecord
	for _, size := range cfg.sizes {
		spec := bench.Spec{Size: size, Bytes: cfg.runBytes(tb, size), Seed: rand.Uint64()}
		for rep := 1; rep <= cfg.reps; rep++ {
			for _, path := range paths {
				spec.Run = tag + uint32(len(recs))
				rec, rerr := gw.runPath(ctx, tb, path, spec, opts)
				rec.Rep, rec.Engine, rec.WAN, rec.Preset = rep, cfg.engine, cfg.wan, tb.Preset.Name
				rec.RTTmsMeasured = ms(m.DirectRTT)
				if path == pathGateways {
					rec.RTTmsMeasured = ms(m.GatewayRTT())
				}
				recs = append(recs, rec)
				fmt.Fprintf(stdout, "size %-7s run %d/%d %-8s %9.2f MB/s  jitter %10.2f us  (%s in %.1f s)  %s\n",
					bench.FormatBytes(int64(size)), rep, cfg.reps, path, rec.GoodputMBps, rec.JitterUS,
					bench.FormatBytes(spec.Bytes), rec.spanS, status(ctx, rerr))
				if rerr != nil {
					if ctx.Err() != nil {
						return fmt.Errorf("interrupted during %s run of size %d: %w", path, size, context.Cause(ctx))
					}
					if path == pathGateways {
						fmt.Fprint(stderr, gw.logTail(10))
					}
					if cfg.jsonPath != "" {
						rerr = errors.Join(rerr, writeTestbedJSON(cfg.jsonPath, recs))
					}
					return fmt.Errorf("%s run of size %d FAILED: %w", path, size, rerr)
				}
			}
		}
	}
	fmt.Fprintln(stdout)
	printSweep(stdout, tb, m, recs)
	if cfg.jsonPath != "" {
		if err := writeTestbedJSON(cfg.jsonPath, recs); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote %d records to %s\n", len(recs), cfg.jsonPath)
	}
	fmt.Fprintf(stdout, "wall time %.1f s\n", time.Since(wall).Seconds())
	return nil
}

// netGateways is a pair of s2cs gateways in the testbed's gateway
// namespaces and one stream wired through them to the consumer.
type netGateways struct {
	dir            string
	in, out        *localgw.Gateway
	inC, outC      *client.Client
	inS, outS      *api.Stream
	lnGW, lnDirect *net.TCPListener // the consumer's listeners, in its namespace
	setup          time.Duration
}

func startNetGateways(ctx context.Context, tb *netbed.Testbed, cfg *testbedRunConfig) (_ *netGateways, err error) {
	g := &netGateways{}
	defer func() {
		if err != nil {
			err = errors.Join(err, g.Close())
		}
	}()
	if g.dir, err = os.MkdirTemp("", "s2bench-testbed-"); err != nil {
		return nil, err
	}
	token := localgw.NewToken()
	tokens := filepath.Join(g.dir, "tokens")
	if err := localgw.WriteTokens(tokens, map[string]string{"s2bench": token}); err != nil {
		return nil, err
	}
	args := []string{"--type", cfg.engine}
	if cfg.wan == api.WANTCP {
		args = append(args, "--insecure_tcp_wan")
	}
	for _, s := range []struct {
		g        **localgw.Gateway
		role, ip string
	}{{&g.in, netbed.ConsumerGW, tb.ConsumerGWWAN()}, {&g.out, netbed.ProducerGW, tb.ProducerGWWAN()}} {
		*s.g, err = localgw.Start(ctx, localgw.Options{
			S2CS: cfg.s2cs, ListenerIP: s.ip, StateDir: filepath.Join(g.dir, s.role), TokensFile: tokens,
			Args: args, Prefix: []string{"ip", "netns", "exec", tb.NS(s.role)},
		})
		if err != nil {
			return nil, fmt.Errorf("start the gateway in %s: %w", tb.NS(s.role), err)
		}
	}
	if g.inC, err = g.in.Client(token); err != nil {
		return nil, err
	}
	if g.outC, err = g.out.Client(token); err != nil {
		return nil, err
	}
	err = netbed.Do(tb.NS(netbed.Consumer), func() (err error) {
		if g.lnGW, err = net.ListenTCP("tcp", &net.TCPAddr{IP: net.ParseIP(tb.ConsumerLAN())}); err != nil {
			return err
		}
		g.lnDirect, err = net.ListenTCP("tcp", &net.TCPAddr{IP: net.ParseIP(tb.ConsumerDirect())})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("consumer listeners: %w", err)
	}
	start := time.Now()
	g.inS, g.outS, err = client.Wire(ctx, g.inC, g.outC,
		&api.InboundRequest{RemoteIP: tb.ConsumerLAN(), ReceiverPorts: []int{g.lnGW.Addr().(*net.TCPAddr).Port}, NumConn: 1, WAN: cfg.wan},
		api.OutboundRequest{NumConn: 1, Allow: []string{tb.LANASubnet()}}, nil)
	g.setup = time.Since(start)
	if err != nil {
		return nil, fmt.Errorf("wire the stream: %w", err)
	}
	if len(g.outS.Listeners) != 1 {
		return nil, fmt.Errorf("outbound stream has %d listeners, want 1", len(g.outS.Listeners))
	}
	return g, nil
}

// runPath runs spec once over path, the producer in its namespace, and
// checks the connection took that path: directly, the consumer sees the
// producer's direct address; through the gateways, the consumer
// gateway's LAN address.
func (g *netGateways) runPath(ctx context.Context, tb *netbed.Testbed, path string, spec bench.Spec, opts bench.RunOptions) (testbedRecord, error) {
	rec := testbedRecord{record: record{Path: path, SizeBytes: spec.Size, Pairs: 1}}
	ln, target, wantPeer := g.lnDirect, g.lnDirect.Addr().String(), tb.ProducerDirect()
	if path == pathGateways {
		ln, target, wantPeer = g.lnGW, g.outS.Listeners[0], tb.ConsumerGWLAN()
	}
	var res *bench.RunResult
	err := netbed.Do(tb.NS(netbed.Producer), func() (err error) {
		// bench.Run dials from this goroutine: from the producer's
		// namespace.
		res, err = bench.Run(ctx, ln, target, spec, opts)
		return err
	})
	if res != nil {
		rec.Messages, rec.Bytes = res.Messages, res.Bytes
		rec.GoodputMBps, rec.MsgsPerS = res.GoodputBps/1e6, res.MsgsPerSec
		rec.LatencyUS, rec.JitterUS = res.LatencyUS, res.JitterUS
		rec.spanS = res.Span.Seconds()
	}
	if err != nil {
		return rec, err
	}
	host, _, _ := net.SplitHostPort(res.Consumer)
	switch {
	case host != wantPeer:
		return rec, fmt.Errorf("%s run: the consumer saw %s, want %s", path, res.Consumer, wantPeer)
	case res.Bytes != spec.Bytes || res.Messages != spec.Messages():
		return rec, fmt.Errorf("verified %d messages, %d bytes; want %d, %d", res.Messages, res.Bytes, spec.Messages(), spec.Bytes)
	case res.GoodputBps <= 0:
		return rec, errors.New("run too short to time (every message arrived at once): raise --bytes")
	}
	rec.IntegrityOK = true
	return rec, nil
}

func (g *netGateways) logTail(n int) string {
	var sb strings.Builder
	for i, gw := range []*localgw.Gateway{g.in, g.out} {
		if gw == nil {
			continue
		}
		lines := strings.Split(strings.TrimSpace(gw.Log()), "\n")
		lines = lines[max(0, len(lines)-n):]
		fmt.Fprintf(&sb, "--- %s gateway (pid %d) log, last %d lines:\n%s\n", []string{"inbound", "outbound"}[i], gw.PID(), len(lines), strings.Join(lines, "\n"))
	}
	return sb.String()
}

// Close releases the stream, stops both gateways and closes the
// consumer's listeners. It runs to the end after a Ctrl-C.
func (g *netGateways) Close() error {
	var errs []error
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for _, s := range []struct {
		c *client.Client
		s *api.Stream
	}{{g.outC, g.outS}, {g.inC, g.inS}} {
		if s.c != nil && s.s != nil {
			if _, err := s.c.Release(ctx, s.s.UID); err != nil {
				errs = append(errs, fmt.Errorf("release stream %s: %w", s.s.UID, err))
			}
		}
	}
	for _, c := range []*client.Client{g.outC, g.inC} {
		if c != nil {
			c.Close()
		}
	}
	for _, gw := range []*localgw.Gateway{g.out, g.in} {
		if gw != nil {
			if err := gw.Stop(); err != nil {
				errs = append(errs, fmt.Errorf("stop s2cs pid %d: %w", gw.PID(), err))
			}
		}
	}
	for _, ln := range []*net.TCPListener{g.lnGW, g.lnDirect} {
		if ln != nil {
			ln.Close()
		}
	}
	if g.dir != "" {
		errs = append(errs, os.RemoveAll(g.dir))
	}
	return errors.Join(errs...)
}

// printSweep prints, per message size, the median goodput and jitter of
// each path and the gateways/direct goodput ratio, then a bar plot of the
// goodput and one of the jitter.
func printSweep(w io.Writer, tb *netbed.Testbed, m *netbed.Measurement, recs []testbedRecord) {
	type row struct {
		size     int
		gp, jit  [2]float64 // direct, gateways
		ok, runs int
	}
	var rows []*row
	bySize := map[int]*row{}
	vals := map[[2]int][2][]float64{}
	for _, r := range recs {
		rw := bySize[r.SizeBytes]
		if rw == nil {
			rw = &row{size: r.SizeBytes}
			bySize[r.SizeBytes] = rw
			rows = append(rows, rw)
		}
		i := 0
		if r.Path == pathGateways {
			i = 1
		}
		v := vals[[2]int{r.SizeBytes, i}]
		v[0], v[1] = append(v[0], r.GoodputMBps), append(v[1], r.JitterUS)
		vals[[2]int{r.SizeBytes, i}] = v
		rw.runs++
		if r.IntegrityOK {
			rw.ok++
		}
	}
	for _, rw := range rows {
		for i := range 2 {
			v := vals[[2]int{rw.size, i}]
			rw.gp[i], rw.jit[i] = bench.Median(v[0]), bench.Median(v[1])
		}
	}
	fmt.Fprintf(w, "preset %s, RTT measured direct %.3f ms / through the gateways %.3f ms; %s\n", tb.Preset, ms(m.DirectRTT), ms(m.GatewayRTT()), tb.Tuning)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "size\tdirect MB/s\tgateways MB/s\tratio\tdirect jitter us\tgateways jitter us\tintegrity\t")
	var top, topJ float64
	for _, rw := range rows {
		ratio := rw.gp[1] / rw.gp[0]
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.3f\t%.1f\t%.1f\tok %d/%d\t\n", bench.FormatBytes(int64(rw.size)), rw.gp[0], rw.gp[1], ratio, rw.jit[0], rw.jit[1], rw.ok, rw.runs)
		top, topJ = max(top, rw.gp[0], rw.gp[1]), max(topJ, rw.jit[0], rw.jit[1])
	}
	tw.Flush()
	fmt.Fprintln(w, "(MB/s = 10^6 payload bytes/s at the consumer, first to last arrival; jitter = standard deviation of the inter-arrival time; medians over runs)")
	plot := func(title string, scale float64, val func(*row, int) float64, unit string) {
		fmt.Fprintf(w, "\n%s (D direct, G gateways)\n", title)
		for _, rw := range rows {
			for i, c := range []string{"D", "G"} {
				n := 0
				if scale > 0 {
					n = int(val(rw, i) / scale * 50)
				}
				fmt.Fprintf(w, "%8s %s |%s %.1f %s\n", bench.FormatBytes(int64(rw.size)), c, strings.Repeat("#", n), val(rw, i), unit)
			}
		}
	}
	plot("goodput vs message size", top, func(r *row, i int) float64 { return r.gp[i] }, "MB/s")
	plot("jitter vs message size", topJ, func(r *row, i int) float64 { return r.jit[i] }, "us")
}

func writeTestbedJSON(path string, recs []testbedRecord) error {
	b, err := json.MarshalIndent(recs, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("--json: %w", err)
	}
	return nil
}
