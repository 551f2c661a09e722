package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"scistream/internal/bytesize"
	"scistream/internal/exp/testbed"
	"scistream/internal/exp/workload"
	"scistream/internal/netbed"
)

// The testbed command: a two-facility testbed of network namespaces with
// an emulated WAN (internal/netbed), and seed 000's experiment on it.

const testbedUsage = `usage: s2bench testbed up   [--name tb] [--preset shortwan | --rtt 10ms] [--wan_rate 200mbit] [--loss 0] [--flow_rate 50mbit] [--host_cc cubic] [--tcp_buf auto]
       s2bench testbed run  [--name tb] [--preset shortwan ...] [--workload sweep|dstream|lstream|SIZE[,SIZE...]]
                            [--bytes N | --messages N | --duration D] [--rate R] [--mode throughput|rr] [--pairs N[,N...]]
                            [--reps 1] [--engine splice|buffer] [--wan tls|tcp|quic] [--json FILE] [--plots DIR] [--keep]
       s2bench testbed table [--preset longwan] [--loss 0.001] [--flow_rate 50mbit] [--stripes 1,4] [--reps 3]
                            [--workload 1MiB] [--duration 20s] [--json FILE] [--plots DIR]
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
brought up (unless --keep). table runs one connection's goodput under
the limits one TCP flow meets on a WAN (random loss, a per-flow cap,
neither), directly and through the gateways with each stripe (WAN legs at
once), and prints the table (and with --plots, its bar chart).

presets (seed 000 Table I, overall RTT): ` + "lan 0.44 ms, metro 5.49 ms, shortwan 24.3 ms, wan 58.2 ms, longwan 143.7 ms"

func runTestbed(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		if len(args) == 0 {
			fmt.Fprintln(stderr, testbedUsage)
			return usagef("testbed: give up, run, table or down")
		}
		fmt.Fprintln(stdout, testbedUsage) // asked for
		return flag.ErrHelp
	}
	switch args[0] {
	case "up":
		return testbedUp(ctx, args[1:], stdout, stderr)
	case "run":
		return testbedRunCmd(ctx, args[1:], stdout, stderr)
	case "table":
		return testbedTableCmd(ctx, args[1:], stdout, stderr)
	case "down":
		return testbedDown(args[1:], stdout, stderr)
	case "delayline": // internal: the delay-line process inside a router namespace
		return netbed.DelayLineMain(ctx, args[1:], stdout, stderr)
	}
	return usagef("testbed: unknown subcommand %q: use up, run, table or down", args[0])
}

// bedFlags are the flags that describe the testbed.
type bedFlags struct {
	name, preset, wanRate, flowRate, cc, stateRoot *string
	// tcpBuf is --tcp_buf (nil: auto).
	tcpBuf *string
	loss   *float64
	rtt    *time.Duration
}

func addBedFlags(fs *flag.FlagSet) *bedFlags {
	b := &bedFlags{
		name:      fs.String("name", "tb", "testbed name: 1 to 8 of a-z, 0-9 (several testbeds can be up at once)"),
		preset:    fs.String("preset", "shortwan", "emulated path: "+strings.Join(netbed.PresetNames(), ", ")),
		wanRate:   fs.String("wan_rate", "", "rate of the emulated WAN and direct path, e.g. 500mbit or 1gbit (default: the preset's, 200mbit)"),
		loss:      fs.Float64("loss", 0, "probability of losing a packet on the WAN, e.g. 0.0001"),
		flowRate:  fs.String("flow_rate", "", "police each TCP flow on the WAN and the direct path to this rate, each direction, as a flow-balanced firewall does (a packet over the flow's share is dropped), e.g. 50mbit; the link keeps --wan_rate (default: none)"),
		rtt:       fs.Duration("rtt", 0, "overall RTT instead of the preset's, e.g. 10ms (the preset is then named custom)"),
		cc:        fs.String("host_cc", netbed.DefaultHostCC, "TCP congestion control of the hosts, as facility hosts have theirs: the producer's and consumer's sockets (the direct path, and the LAN ends of the gateways' path) and the namespaces' default, which the gateways' LAN legs run; the gateways' WAN legs run their own (--wan_cc)"),
		stateRoot: fs.String("state_root", netbed.DefaultStateRoot, "directory of testbed state files"),
		tcpBuf:    fs.String("tcp_buf", "auto", "the largest buffer TCP autotuning may give one socket (tcp_rmem and tcp_wmem max) on the hosts and gateways, e.g. 64MiB; auto: 4 x the path's bandwidth-delay product, at least 64 MiB, as a data transfer node is tuned"),
	}
	fs.StringVar(b.cc, "cc", netbed.DefaultHostCC, "the same as --host_cc (its name before the gateways chose their WAN legs' own)")
	return b
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
	if *b.flowRate != "" {
		if p.FlowRateBps, err = netbed.ParseRate(*b.flowRate); err != nil {
			return netbed.Config{}, usageError{fmt.Errorf("--flow_rate: %w", err)}
		}
	}
	if *b.rtt != 0 {
		p.Name, p.RTT = "custom", *b.rtt
	}
	if err := p.Validate(); err != nil {
		return netbed.Config{}, usagef("--preset %s: %w", p.Name, err)
	}
	var tcpBuf int64
	if b.tcpBuf != nil && *b.tcpBuf != "auto" {
		if tcpBuf, err = bytesize.Parse(*b.tcpBuf); err != nil {
			return netbed.Config{}, usageError{fmt.Errorf("--tcp_buf: %w", err)}
		}
		if tcpBuf < netbed.MinTCPBuf || tcpBuf > netbed.MaxTCPBuf {
			return netbed.Config{}, usagef("--tcp_buf %s out of range: give %s to %s, or auto", *b.tcpBuf, bytesize.Format(netbed.MinTCPBuf), bytesize.Format(netbed.MaxTCPBuf))
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return netbed.Config{}, fmt.Errorf("own executable (runs the delay line): %w", err)
	}
	return netbed.Config{Name: *b.name, Preset: p, DelayLine: []string{exe, "testbed", "delayline"}, CC: *b.cc, TCPBuf: tcpBuf, StateRoot: *b.stateRoot, Log: stdout}, nil
}

func parseSub(fs *flag.FlagSet, args []string, help io.Writer) error {
	return parseFlags(fs, args, testbedUsage, help)
}

func testbedUp(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("testbed up", flag.ContinueOnError)
	bf := addBedFlags(fs)
	if err := parseSub(fs, args, stdout); err != nil {
		return err
	}
	cfg, err := bf.config(stdout)
	if err != nil {
		return err
	}
	return testbed.Up(ctx, cfg, stdout, stderr)
}

func testbedDown(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("testbed down", flag.ContinueOnError)
	name := fs.String("name", "tb", "testbed name")
	root := fs.String("state_root", netbed.DefaultStateRoot, "directory of testbed state files")
	if err := parseSub(fs, args, stdout); err != nil {
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

func parseTestbedRun(args []string, stdout, help io.Writer) (*testbed.RunConfig, error) {
	fs := flag.NewFlagSet("testbed run", flag.ContinueOnError)
	bf := addBedFlags(fs)
	cf := compareFlags{wf: workload.Flags{Default: workload.Sweep}}
	cf.register(fs, 1)
	keep := fs.Bool("keep", false, "leave a testbed this run brought up running afterwards")
	// The testbed's own defaults of the amount (see testbed.Amount).
	fs.Lookup("bytes").Usage = "payload per run, over all pairs, e.g. 64MiB (default: what the WAN rate carries in max(2 s, 15 RTT), at least 16 messages per pair)"
	fs.Lookup("messages").Usage = "messages per run, over all pairs, instead of --bytes (default in rr mode: one per RTT for 2 s, 16 to 2000 per pair)"
	if err := parseSub(fs, args, help); err != nil {
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
	return &testbed.RunConfig{Bed: bed, Asked: flagsSet(fs), Compare: *cmp, Keep: *keep}, nil
}

func testbedRunCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseTestbedRun(args, stdout, stdout)
	if err != nil {
		return err
	}
	_, err = testbed.Run(ctx, *cfg, stdout, stderr)
	return err
}
