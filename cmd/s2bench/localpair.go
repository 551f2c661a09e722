package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"scistream/internal/api"
	"scistream/internal/bench"
	"scistream/internal/client"
	"scistream/internal/localgw"
)

// localPairConfig describes the local gateway pair to start.
type localPairConfig struct {
	s2cs   string // s2cs binary
	engine string // s2cs --type
	wan    string // api.WANTLS or api.WANTCP
	// consumer, if set, is the address of a consumer listening already
	// (another process); if empty, the pair opens a consumer listener on
	// a third random loopback address.
	consumer *net.TCPAddr
	// The testbed's gateways: if set, each gateway (inbound, outbound)
	// runs in that network namespace (ip netns exec) with its listeners
	// on that address, and the outbound stream admits producers from
	// allow. Unset: random loopback addresses in this namespace,
	// admitting 127.0.0.0/8.
	netns, ips [2]string
	allow      string
	// args are more s2cs flags, given to both gateways.
	args []string
	// noStream starts the gateways only, without the stream: the caller
	// wires its own streams with inC and outC (and releases them).
	noStream bool
}

// localPair is a local pair of real s2cs gateways on two random loopback
// addresses and one stream wired from the outbound gateway's listener to
// the consumer (a listener it opens on a third address, or a given one),
// the same way s2uc stream does (client.Wire). Close undoes all of it.
// The testbed runs the same pair in its gateway namespaces.
type localPair struct {
	netns     [2]string // inbound, outbound (empty: this namespace)
	consAddr  string    // where the stream leads
	allow     string    // the outbound stream's allow-list
	dir       string
	in, out   *localgw.Gateway
	inC, outC *client.Client
	consumer  *net.TCPListener
	inS, outS *api.Stream
	setup     time.Duration // time of client.Wire

	closeOnce sync.Once
	closeErr  error
}

// distinctLoopbacks returns n different random loopback addresses.
func distinctLoopbacks(n int) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	for try := 0; len(out) < n && try < 100; try++ {
		ip := localgw.RandomLoopback()
		if !seen[ip] {
			seen[ip] = true
			out = append(out, ip)
		}
	}
	if len(out) < n {
		return nil, errors.New("could not pick distinct loopback addresses")
	}
	return out, nil
}

// startLocalPair starts the gateways, the consumer listener and the
// stream. On failure it has already cleaned up what it started.
func startLocalPair(ctx context.Context, cfg localPairConfig) (_ *localPair, err error) {
	lp := &localPair{}
	defer func() {
		if err != nil {
			if cerr := lp.Close(); cerr != nil {
				err = errors.Join(err, fmt.Errorf("clean up: %w", cerr))
			}
		}
	}()
	if lp.dir, err = os.MkdirTemp("", "s2bench-"); err != nil {
		return nil, fmt.Errorf("temporary directory: %w", err)
	}
	token := localgw.NewToken()
	tokens := filepath.Join(lp.dir, "tokens")
	if err := localgw.WriteTokens(tokens, map[string]string{"s2bench": token}); err != nil {
		return nil, err
	}
	ips, err := distinctLoopbacks(3)
	if err != nil {
		return nil, err
	}
	for i, ip := range cfg.ips {
		if ip != "" {
			ips[i] = ip
		}
	}
	lp.netns = cfg.netns
	args := []string{"--type", cfg.engine}
	if cfg.wan == api.WANTCP {
		args = append(args, "--insecure_tcp_wan")
	}
	args = append(args, cfg.args...)
	for i, g := range []**localgw.Gateway{&lp.in, &lp.out} {
		role := []string{"inbound", "outbound"}[i]
		var prefix []string
		if cfg.netns[i] != "" {
			prefix = []string{"ip", "netns", "exec", cfg.netns[i]}
		}
		*g, err = localgw.Start(ctx, localgw.Options{
			S2CS:       cfg.s2cs,
			ListenerIP: ips[i],
			StateDir:   filepath.Join(lp.dir, role),
			TokensFile: tokens,
			Args:       args,
			Prefix:     prefix,
		})
		if err != nil {
			return nil, fmt.Errorf("start the %s gateway: %w", role, err)
		}
	}
	if lp.inC, err = lp.in.Client(token); err != nil {
		return nil, err
	}
	if lp.outC, err = lp.out.Client(token); err != nil {
		return nil, err
	}
	info, err := lp.inC.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("gateway info: %w", err)
	}
	if !slices.Contains(info.WAN, cfg.wan) {
		return nil, usagef("--wan %s: this s2cs (%s) offers WAN %s; choose one of those or build an s2cs that has %s", cfg.wan, cfg.s2cs, strings.Join(info.WAN, ", "), cfg.wan)
	}
	if !slices.Contains(info.Engines, cfg.engine) {
		return nil, usagef("--engine %s: this s2cs (%s) offers engines %s", cfg.engine, cfg.s2cs, strings.Join(info.Engines, ", "))
	}
	consumerIP, port := ips[2], 0
	if cfg.consumer != nil {
		consumerIP, port = cfg.consumer.IP.String(), cfg.consumer.Port
	} else {
		if lp.consumer, err = net.ListenTCP("tcp", &net.TCPAddr{IP: net.ParseIP(ips[2])}); err != nil {
			return nil, fmt.Errorf("consumer listener: %w", err)
		}
		port = lp.consumer.Addr().(*net.TCPAddr).Port
	}

	lp.consAddr = net.JoinHostPort(consumerIP, strconv.Itoa(port))
	lp.allow = "127.0.0.0/8"
	if cfg.allow != "" {
		lp.allow = cfg.allow
	}
	if cfg.noStream {
		return lp, nil
	}
	start := time.Now()
	inS, outS, err := client.Wire(ctx, lp.inC, lp.outC,
		&api.InboundRequest{RemoteIP: consumerIP, ReceiverPorts: []int{port}, NumConn: 1, WAN: cfg.wan},
		api.OutboundRequest{NumConn: 1, Allow: []string{lp.allow}},
		nil)
	lp.setup = time.Since(start)
	if err != nil {
		return nil, fmt.Errorf("wire the stream: %w", err)
	}
	lp.inS, lp.outS = inS, outS
	switch {
	case len(outS.Listeners) != 1:
		return nil, fmt.Errorf("outbound stream has %d listeners, want 1", len(outS.Listeners))
	case outS.Engine != cfg.engine || inS.Engine != cfg.engine:
		return nil, fmt.Errorf("stream runs engines %q/%q, want %q", inS.Engine, outS.Engine, cfg.engine)
	case outS.WAN != cfg.wan || inS.WAN != cfg.wan:
		return nil, fmt.Errorf("stream runs WAN %q/%q, want %q", inS.WAN, outS.WAN, cfg.wan)
	}
	return lp, nil
}

// target is where the producer connects for the gateway path.
func (lp *localPair) target() string { return lp.outS.Listeners[0] }

// wanBytes returns the bytes the outbound gateway sent towards the WAN
// and the inbound gateway received from it on the stream.
func (lp *localPair) wanBytes(ctx context.Context) (sent, received int64, err error) {
	o, err := lp.outC.Get(ctx, lp.outS.UID)
	if err != nil {
		return 0, 0, err
	}
	i, err := lp.inC.Get(ctx, lp.inS.UID)
	if err != nil {
		return 0, 0, err
	}
	if o.Stats == nil || i.Stats == nil {
		return 0, 0, errors.New("gateway reported no stream statistics")
	}
	return o.Stats.BytesToWAN, i.Stats.BytesFromWAN, nil
}

// logTail returns the last n lines of both gateways' logs.
func (lp *localPair) logTail(n int) string {
	var sb strings.Builder
	for i, g := range []*localgw.Gateway{lp.in, lp.out} {
		if g == nil {
			continue
		}
		lines := strings.Split(strings.TrimSpace(g.Log()), "\n")
		lines = lines[max(0, len(lines)-n):]
		fmt.Fprintf(&sb, "--- %s gateway (pid %d) log, last %d lines:\n%s\n", []string{"inbound", "outbound"}[i], g.PID(), len(lines), strings.Join(lines, "\n"))
	}
	return sb.String()
}

// Close releases the stream (outbound side first, so no new producer is
// accepted while the far side goes), stops both gateways, closes the
// consumer listener and removes the temporary directory. It does not
// depend on any context: it runs to the end after a Ctrl-C, bounded by
// the request timeouts and localgw's stop deadline. Idempotent.
func (lp *localPair) Close() error {
	lp.closeOnce.Do(func() {
		var errs []error
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		release := func(c *client.Client, s *api.Stream, role string) {
			if c == nil || s == nil {
				return
			}
			r, err := c.Release(ctx, s.UID)
			switch {
			case err != nil:
				errs = append(errs, fmt.Errorf("release the %s side of stream %s: %w", role, s.UID, err))
			case !r.State.Terminal():
				errs = append(errs, fmt.Errorf("release the %s side of stream %s: state %s after release", role, s.UID, r.State))
			}
		}
		release(lp.outC, lp.outS, "outbound")
		release(lp.inC, lp.inS, "inbound")
		for _, c := range []*client.Client{lp.outC, lp.inC} {
			if c != nil {
				c.Close()
			}
		}
		for i, g := range []*localgw.Gateway{lp.out, lp.in} {
			if g != nil {
				if err := g.Stop(); err != nil {
					errs = append(errs, fmt.Errorf("stop the %s gateway (pid %d): %w", []string{"outbound", "inbound"}[i], g.PID(), err))
				}
			}
		}
		if lp.consumer != nil {
			lp.consumer.Close()
		}
		if lp.dir != "" {
			if err := os.RemoveAll(lp.dir); err != nil {
				errs = append(errs, err)
			}
		}
		lp.closeErr = errors.Join(errs...)
	})
	return lp.closeErr
}

// sockmapReport says, once the gateways have stopped, how each one's
// sockmap engine moved the bytes (the totals s2cs logs at exit: bytes
// redirected in the kernel and copied in user space), or that it could not
// load the program. Empty when neither gateway ran the sockmap engine.
func (lp *localPair) sockmapReport() string {
	var sb strings.Builder
	for i, g := range []*localgw.Gateway{lp.in, lp.out} {
		if g == nil {
			continue
		}
		role := []string{"inbound", "outbound"}[i]
		for _, l := range strings.Split(g.Log(), "\n") {
			switch {
			case strings.Contains(l, `msg="sockmap totals"`):
				fmt.Fprintf(&sb, "sockmap, %s gateway: %s\n", role, strings.TrimSpace(l[strings.Index(l, `msg="sockmap totals"`)+len(`msg="sockmap totals"`):]))
			case strings.Contains(l, "engine sockmap unavailable"):
				why := ""
				if i := strings.Index(l, " err="); i >= 0 {
					why = ": " + strings.TrimSpace(l[i+len(" err="):])
				}
				fmt.Fprintf(&sb, "sockmap, %s gateway: not loaded, the gateway used splice%s\n", role, why)
			}
		}
	}
	return sb.String()
}

// describe names the gateway processes, for the output.
func (lp *localPair) describe() string {
	where := func(i int) string {
		if lp.netns[i] == "" {
			return ""
		}
		return " in " + lp.netns[i]
	}
	return "inbound s2cs pid " + strconv.Itoa(lp.in.PID()) + where(0) + " at " + lp.in.Addr +
		", outbound s2cs pid " + strconv.Itoa(lp.out.PID()) + where(1) + " at " + lp.out.Addr +
		"; consumer listens on " + lp.consAddr
}

// pids returns the gateway processes' PIDs.
func (lp *localPair) pids() []int { return []int{lp.in.PID(), lp.out.PID()} }

// cpu returns the CPU time both gateway processes have used so far.
func (lp *localPair) cpu() (time.Duration, error) {
	var total time.Duration
	for _, pid := range lp.pids() {
		d, err := bench.ProcessCPU(pid)
		if err != nil {
			return 0, err
		}
		total += d
	}
	return total, nil
}
