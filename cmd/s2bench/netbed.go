package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"scistream/internal/bench"
	"scistream/internal/exp/compare"
	"scistream/internal/exp/localpair"
	"scistream/internal/exp/progress"
	"scistream/internal/exp/record"
	"scistream/internal/exp/workload"
	"scistream/internal/netbed"
)

// The testbed command: a two-facility testbed of network namespaces with
// an emulated WAN (internal/netbed), and seed 000's experiment on it.

const testbedUsage = `usage: s2bench testbed up   [--name tb] [--preset shortwan | --rtt 10ms] [--wan_rate 200mbit] [--loss 0] [--cc bbr|cubic]
       s2bench testbed run  [--name tb] [--preset shortwan ...] [--workload sweep|dstream|lstream|SIZE[,SIZE...]]
                            [--bytes N | --messages N | --duration D] [--rate R] [--mode throughput|rr] [--pairs N[,N...]]
                            [--reps 1] [--engine splice|buffer] [--wan tls|tcp|quic] [--json FILE] [--plots DIR] [--keep]
       s2bench testbed down [--name tb]

Builds, as root, a producer host and gateway (facility A) and a consumer
gateway and host (facility B) in network namespaces, joined by an emulated
WAN (user-space delay line + tc tbf), plus a separate direct path with the
same RTT and rate for the baseline. run measures the achieved RTT and rate,
refuses to run if they are more than 10% off the preset, then runs compare's
experiment on the testbed: the same verified workload directly and through
real s2cs gateways, interleaved, with compare's table, JSON records (plus
preset and rtt_ms_measured) and plots. Workload flags are compare's; the
default is the sweep, once, with what the WAN rate carries in max(2 s,
15 RTT) per run. run brings the testbed up if needed and takes down what it
brought up (unless --keep).

presets (seed 000 Table I, overall RTT): ` + "lan 0.44 ms, metro 5.49 ms, shortwan 24.3 ms, wan 58.2 ms, longwan 143.7 ms"

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
	name, preset, wanRate, cc, stateRoot *string
	loss                                 *float64
	rtt                                  *time.Duration
}

func addBedFlags(fs *flag.FlagSet) *bedFlags {
	return &bedFlags{
		name:      fs.String("name", "tb", "testbed name: 1 to 8 of a-z, 0-9 (several testbeds can be up at once)"),
		preset:    fs.String("preset", "shortwan", "emulated path: "+strings.Join(netbed.PresetNames(), ", ")),
		wanRate:   fs.String("wan_rate", "", "rate of the emulated WAN and direct path, e.g. 500mbit or 1gbit (default: the preset's, 200mbit)"),
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
	if *b.wanRate != "" {
		if p.RateBps, err = netbed.ParseRate(*b.wanRate); err != nil {
			return netbed.Config{}, usageError{fmt.Errorf("--wan_rate: %w", err)}
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
	return parseFlags(fs, args, testbedUsage, stderr)
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
	bed      netbed.Config
	explicit map[string]bool // flags given on the command line
	cmp      *compare.Config // the experiment, as compare's
	keep     bool
}

func parseTestbedRun(args []string, stdout, stderr io.Writer) (*testbedRunConfig, error) {
	fs := flag.NewFlagSet("testbed run", flag.ContinueOnError)
	bf := addBedFlags(fs)
	cf := compareFlags{wf: workload.Flags{Default: workload.Sweep}}
	cf.register(fs, 1)
	keep := fs.Bool("keep", false, "leave a testbed this run brought up running afterwards")
	// The testbed's own defaults of the amount (see testbedAmount).
	fs.Lookup("bytes").Usage = "payload per run, over all pairs, e.g. 64MiB (default: what the WAN rate carries in max(2 s, 15 RTT), at least 16 messages per pair)"
	fs.Lookup("messages").Usage = "messages per run, over all pairs, instead of --bytes (default in rr mode: one per RTT for 2 s, 16 to 2000 per pair)"
	if err := parseSub(fs, args, stderr); err != nil {
		return nil, err
	}
	bed, err := bf.config(stdout)
	if err != nil {
		return nil, err
	}
	cmp, err := cf.config(fs)
	if err != nil {
		return nil, err
	}
	return &testbedRunConfig{bed: bed, explicit: flagsSet(fs), cmp: cmp, keep: *keep}, nil
}

func testbedRunCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseTestbedRun(args, stdout, stderr)
	if err != nil {
		return err
	}
	return testbedRun(ctx, cfg, stdout, stderr)
}

// testbedAmount gives the payload per pair of a run on the emulated path
// pr when no amount is given: what the WAN rate (or the pacing rate, if
// lower) carries in max(2 s, 15 RTT), shared by the pairs; in rr mode one
// message per RTT for 2 s, at most 2000; at least 16 messages either way.
func testbedAmount(pr netbed.Preset, p *workload.Plan) func(size, pairs int) int64 {
	return func(size, pairs int) int64 {
		sz := int64(size)
		if p.Mode.RoundTrips() {
			return min(2000, max(16, int64(2*time.Second/pr.RTT))) * sz
		}
		secs := max(2, 15*pr.RTT.Seconds())
		per := int64(float64(pr.RateBps)/8*secs) / int64(pairs)
		if r := p.Rate.PerSecond(size); r > 0 {
			per = min(per, int64(r*secs)*sz)
		}
		return max(per/sz*sz, 16*sz)
	}
}

func testbedRun(ctx context.Context, cfg *testbedRunConfig, stdout, stderr io.Writer) (err error) {
	wall := time.Now()
	tb, m, down, err := openTestbed(ctx, cfg.bed, cfg.explicit, cfg.keep, stdout)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, down()) }()

	c, p := cfg.cmp, cfg.cmp.Plan
	p.Auto = testbedAmount(tb.Preset, p)
	fmt.Fprintf(stdout, "s2bench testbed run: workload %s, %d size(s), pairs %v, %d repetition(s) per path, engine %s, WAN %s\n",
		p.Name, len(p.Sizes), c.Pairs, c.Reps, c.Engine, c.WAN)
	p.Print(stdout, c.Pairs)

	// The consumer's listeners, in its namespace: one the stream leads
	// to, one the direct path reaches.
	var lnGW, lnDirect *net.TCPListener
	err = netbed.Do(tb.NS(netbed.Consumer), func() (err error) {
		if lnGW, err = net.ListenTCP("tcp", &net.TCPAddr{IP: net.ParseIP(tb.ConsumerLAN())}); err != nil {
			return err
		}
		lnDirect, err = net.ListenTCP("tcp", &net.TCPAddr{IP: net.ParseIP(tb.ConsumerDirect())})
		return err
	})
	for _, ln := range []*net.TCPListener{lnGW, lnDirect} {
		if ln != nil {
			defer ln.Close()
		}
	}
	if err != nil {
		return fmt.Errorf("consumer listeners in %s: %w", tb.NS(netbed.Consumer), err)
	}

	lp, err := localpair.Start(ctx, localpair.Config{
		S2CS: c.S2CS, Engine: c.Engine, WAN: c.WAN, Consumer: lnGW.Addr().(*net.TCPAddr),
		NetNS: [2]string{tb.NS(netbed.ConsumerGW), tb.NS(netbed.ProducerGW)},
		IPs:   [2]string{tb.ConsumerGWWAN(), tb.ProducerGWWAN()},
		Allow: tb.LANASubnet(),
		Args:  c.GatewayArgs(),
	})
	if err != nil {
		return err
	}
	defer func() {
		if cerr := lp.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("stop the gateways: %w", cerr))
		}
		fmt.Fprint(stdout, lp.SockmapReport())
	}()
	fmt.Fprintf(stdout, "gateways: %s\n", lp.Describe())
	fmt.Fprintf(stdout, "stream %s wired in %.1f ms (client.Wire); producer in %s connects to %s (gateways) or %s (direct)\n",
		lp.OutS.UID, ms(lp.Setup), tb.NS(netbed.Producer), lp.Target(), lnDirect.Addr())

	// The producers dial from the producer's namespace: a socket stays
	// in the namespace it was made in.
	o := c.RunOptions()
	o.Dial = func(ctx context.Context, addr string) (conn *net.TCPConn, err error) {
		err = netbed.Do(tb.NS(netbed.Producer), func() error {
			d := net.Dialer{Timeout: c.Idle}
			nc, err := d.DialContext(ctx, "tcp", addr)
			if err == nil {
				conn = nc.(*net.TCPConn)
			}
			return err
		})
		return conn, err
	}
	e := &compare.Experiment{
		Plan: p, Pairs: c.Pairs, Reps: c.Reps, Paths: []string{record.PathDirect, record.PathGateways}, Engine: c.Engine, WAN: c.WAN,
		JSONPath: c.JSONPath, PlotsDir: c.PlotsDir, PlotFormat: c.PlotFormat, Progress: c.Progress, CPU: true,
		RunOne: func(ctx context.Context, h bench.Hello, prog *progress.Display, label string) (record.Record, error) {
			// Directly, the consumer must see the producer's direct
			// address; through the gateways, the consumer gateway's LAN
			// address.
			rt, rtt := localpair.Route{LN: lnDirect, Target: lnDirect.Addr().String(), Peer: tb.ProducerDirect()}, m.DirectRTT
			if h.Path == record.PathGateways {
				rt, rtt = localpair.Route{LN: lnGW, Target: lp.Target(), Peer: tb.ConsumerGWLAN()}, m.GatewayRTT()
			}
			rec, err := localpair.RunPath(ctx, lp, h, rt, o, prog, label, stderr)
			rec.Preset, rec.RTTmsMeasured = tb.Preset.Name, ms(rtt)
			return rec, err
		},
		OnFail: func(path string) {
			if path == record.PathGateways {
				fmt.Fprint(stderr, lp.LogTail(10))
			}
		},
	}
	if _, err := e.Run(ctx, stdout, stderr); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "testbed %s: preset %s, RTT measured direct %.3f ms / through the gateways %.3f ms; %s; wall time %.1f s\n",
		tb.Name, tb.Preset, ms(m.DirectRTT), ms(m.GatewayRTT()), tb.Tuning, time.Since(wall).Seconds())
	return nil
}

// openTestbed returns the testbed bed names, measured and checked against
// its preset: the one that is up (refused if the flags in explicit ask
// for another preset, RTT, rate or loss than it has), or else a new one
// it brings up. down takes down a testbed it brought up, unless keep (a
// no-op otherwise); on error nothing it brought up is left.
func openTestbed(ctx context.Context, bed netbed.Config, explicit map[string]bool, keep bool, stdout io.Writer) (tb *netbed.Testbed, m *netbed.Measurement, down func() error, err error) {
	down = func() error { return nil }
	tb, err = netbed.Load(bed.StateRoot, bed.Name)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if aerr := netbed.Available(ctx); aerr != nil {
			return nil, nil, down, fmt.Errorf("cannot build a testbed here: %w", aerr)
		}
		fmt.Fprintf(stdout, "testbed %s is not up: bringing it up (%s)\n", bed.Name, bed.Preset)
		if tb, err = netbed.Up(ctx, bed); err != nil {
			return nil, nil, down, err
		}
		if !keep {
			down = func() error {
				if derr := tb.Down(); derr != nil {
					return fmt.Errorf("take testbed %s down: %w", tb.Name, derr)
				}
				fmt.Fprintf(stdout, "testbed %s taken down\n", tb.Name)
				return nil
			}
		}
	case err != nil:
		return nil, nil, down, err
	default:
		want := bed.Preset
		if ((explicit["preset"] || explicit["rtt"]) && (want.Name != tb.Preset.Name || want.RTT != tb.Preset.RTT)) || (explicit["wan_rate"] && want.RateBps != tb.Preset.RateBps) || (explicit["loss"] && want.Loss != tb.Preset.Loss) {
			return nil, nil, down, fmt.Errorf("testbed %s is up with %s, not %s: take it down first (s2bench testbed down --name %s) or run it as it is (drop --preset, --rtt, --wan_rate, --loss)",
				tb.Name, tb.Preset, want, tb.Name)
		}
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, down())
		}
	}()
	tb.SetLog(stdout)
	fmt.Fprintf(stdout, "testbed %s: %s\nTCP: %s\n", tb.Name, tb.Preset, tb.Tuning)
	m, err = tb.MeasureChecked(ctx, 3)
	if m == nil {
		return nil, nil, down, fmt.Errorf("measure the testbed: %w", err)
	}
	fmt.Fprintf(stdout, "measured: %s\n", m)
	if err != nil {
		return nil, nil, down, fmt.Errorf("refusing to run: %w", err)
	}
	return tb, m, down, nil
}
