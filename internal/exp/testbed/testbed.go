// Package testbed runs s2bench's experiments on the two-facility
// testbed of internal/netbed (network namespaces, an emulated WAN):
// brings one up and measures it (Up), opens one that is up or brings it
// up for a run and checks its measured path against its preset (Open),
// and runs compare's experiment on it (Run): the same verified workload
// directly and through real s2cs gateways in the gateway namespaces,
// with compare's table, records (plus preset and rtt_ms_measured) and
// plots.
package testbed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"time"

	"scistream/internal/bench"
	"scistream/internal/exp/compare"
	"scistream/internal/exp/localpair"
	"scistream/internal/exp/progress"
	"scistream/internal/exp/record"
	"scistream/internal/exp/workload"
	"scistream/internal/netbed"
	"scistream/internal/tcpcc"
)

// Up brings up the testbed bed describes, prints it and its measured
// path, and leaves it up. A measurement off the preset's bounds is a
// warning on stderr (a run measures again); no measurement at all is an
// error, the testbed staying up.
func Up(ctx context.Context, bed netbed.Config, stdout, stderr io.Writer) error {
	if err := netbed.Available(ctx); err != nil {
		return fmt.Errorf("cannot build a testbed here: %w", err)
	}
	tb, err := netbed.Up(ctx, bed)
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

// RunConfig is compare's experiment on the testbed.
type RunConfig struct {
	// Bed is the testbed to run on: the one of its name that is up, or
	// else a new one brought up for the run; required.
	Bed netbed.Config
	// Asked are the testbed's settings asked for explicitly, by flag:
	// preset, rtt, wan_rate, loss; a testbed that is up with another
	// value of one of them is refused. nil: none.
	Asked map[string]bool
	// Compare is the experiment, as compare's (Baseline aside); its
	// Plan's Auto is set from the emulated path.
	Compare compare.Config
	// Keep leaves a testbed the run brought up running afterwards.
	Keep bool
}

// Amount gives the payload per pair of a run of plan p on the emulated
// path pr when no amount is given (workload.Plan.Auto): what the WAN rate (or the pacing rate, if
// lower) carries in max(2 s, 15 RTT), shared by the pairs; in rr mode one
// message per RTT for 2 s, at most 2000; at least 16 messages either way.
func Amount(pr netbed.Preset, p *workload.Plan) func(size, pairs int) int64 {
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

// Run opens the testbed (Open), starts the gateway pair in its gateway
// namespaces and runs compare's experiment: producers in the producer's
// namespace, the consumer in its own, directly and through the
// gateways. It stops the gateways and takes down a testbed it brought
// up (unless Keep), also after a failure or an interrupt, and returns
// the records.
func Run(ctx context.Context, cfg RunConfig, stdout, stderr io.Writer) (recs []record.Record, err error) {
	wall := time.Now()
	tb, m, down, err := Open(ctx, cfg.Bed, cfg.Asked, cfg.Keep, stdout)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, down()) }()

	c := cfg.Compare.WithDefaults()
	p := c.Plan
	p.Auto = Amount(tb.Preset, p)
	fmt.Fprintf(stdout, "s2bench testbed run: workload %s, %d size(s), pairs %v, %d repetition(s) per path, engine %s, WAN %s, stripe %d\n",
		p.Name, len(p.Sizes), c.Pairs, c.Reps, c.Engine, c.WAN, max(c.Stripe, 1))
	p.Print(stdout, c.Pairs)

	// The consumer's listeners, in its namespace: one the stream leads
	// to, one the direct path reaches.
	// The hosts' congestion control on the producer's and the
	// consumer's every socket (the listeners pass theirs on to what
	// they accept): a namespace may not be able to take it as its
	// default (netbed.Tuning.CCNote).
	host := tb.Tuning.HostOf()
	hostCC := func(_, _ string, rc syscall.RawConn) error { return tcpcc.Set(rc, host) }
	var lnGW, lnDirect *net.TCPListener
	err = netbed.Do(tb.NS(netbed.Consumer), func() (err error) {
		lc := net.ListenConfig{Control: hostCC}
		listen := func(ip string) (*net.TCPListener, error) {
			ln, err := lc.Listen(ctx, "tcp", net.JoinHostPort(ip, "0"))
			if err != nil {
				return nil, err
			}
			return ln.(*net.TCPListener), nil
		}
		if lnGW, err = listen(tb.ConsumerLAN()); err != nil {
			return err
		}
		lnDirect, err = listen(tb.ConsumerDirect())
		return err
	})
	for _, ln := range []*net.TCPListener{lnGW, lnDirect} {
		if ln != nil {
			defer ln.Close()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("consumer listeners in %s: %w", tb.NS(netbed.Consumer), err)
	}

	lp, err := localpair.Start(ctx, localpair.Config{
		S2CS: c.S2CS, Engine: c.Engine, WAN: c.WAN, Consumer: lnGW.Addr().(*net.TCPAddr),
		NetNS:  [2]string{tb.NS(netbed.ConsumerGW), tb.NS(netbed.ProducerGW)},
		IPs:    [2]string{tb.ConsumerGWWAN(), tb.ProducerGWWAN()},
		Allow:  tb.LANASubnet(),
		Args:   c.GatewayArgs(),
		Stripe: c.Stripe,
	})
	if err != nil {
		return nil, err
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
			d := net.Dialer{Timeout: c.Idle, Control: hostCC}
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
	if recs, err = e.Run(ctx, stdout, stderr); err != nil {
		return recs, err
	}
	fmt.Fprintf(stdout, "testbed %s: preset %s, RTT measured direct %.3f ms / through the gateways %.3f ms; %s; wall time %.1f s\n",
		tb.Name, tb.Preset, ms(m.DirectRTT), ms(m.GatewayRTT()), tb.Tuning, time.Since(wall).Seconds())
	return recs, nil
}

// Open returns the testbed bed names, measured and checked against its
// preset: the one that is up (refused if asked names a preset, RTT,
// rate or loss it does not have: see RunConfig.Asked), or else a new one
// it brings up. down takes down a testbed it brought up, unless keep (a
// no-op otherwise); on error nothing it brought up is left.
func Open(ctx context.Context, bed netbed.Config, asked map[string]bool, keep bool, stdout io.Writer) (tb *netbed.Testbed, m *netbed.Measurement, down func() error, err error) {
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
			// The testbed it brought up, not the result tb, which an
			// error return sets to nil before the deferred clean-up
			// below runs (issue 27: a failed calibration panicked
			// there and left the namespaces behind).
			up := tb
			down = func() error {
				if derr := up.Down(); derr != nil {
					return fmt.Errorf("take testbed %s down: %w", up.Name, derr)
				}
				fmt.Fprintf(stdout, "testbed %s taken down\n", up.Name)
				return nil
			}
		}
	case err != nil:
		return nil, nil, down, err
	default:
		want := bed.Preset
		if ((asked["preset"] || asked["rtt"]) && (want.Name != tb.Preset.Name || want.RTT != tb.Preset.RTT)) || (asked["wan_rate"] && want.RateBps != tb.Preset.RateBps) || (asked["loss"] && want.Loss != tb.Preset.Loss) || (asked["flow_rate"] && want.FlowRateBps != tb.Preset.FlowRateBps) {
			return nil, nil, down, fmt.Errorf("testbed %s is up with %s, not %s: take it down first (s2bench testbed down --name %s) or run it as it is (drop --preset, --rtt, --wan_rate, --loss, --flow_rate)",
				tb.Name, tb.Preset, want, tb.Name)
		}
		if (asked["host_cc"] || asked["cc"]) && bed.CC != tb.Tuning.HostOf() {
			return nil, nil, down, fmt.Errorf("testbed %s is up with host congestion control %s, not %s: take it down first (s2bench testbed down --name %s) or run it as it is (drop --host_cc)",
				tb.Name, tb.Tuning.HostOf(), bed.CC, tb.Name)
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

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
