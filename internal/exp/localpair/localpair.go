// Package localpair starts a pair of real s2cs gateways on this host
// (localgw) and wires a stream through them the way s2uc stream does
// (client.Wire): from the outbound gateway's listener, where producers
// connect, to a consumer listener. compare, flood, conns, pool and rate
// measure through it; the testbed runs the same pair in its gateway
// namespaces. RunPath is one run of the verified workload over the pair
// or around it, checked: every connection took the path it names, the
// gateways counted every byte, and what they saw of the run's rate.
package localpair

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

// Config describes the local gateway pair to start.
type Config struct {
	// S2CS is the s2cs binary; empty: localgw.FindBinary's.
	S2CS string
	// Engine is both gateways' data-plane engine (s2cs --type); empty:
	// splice.
	Engine string
	// WAN is the stream's WAN transport, api.WANTLS, api.WANTCP (s2cs
	// --insecure_tcp_wan) or api.WANQUIC; empty: TLS.
	WAN string
	// Consumer, if set, is the address of a consumer listening already
	// (another process); if nil, the pair opens a consumer listener on
	// a third random loopback address (Pair.Consumer).
	Consumer *net.TCPAddr
	// NetNS and IPs place the testbed's gateways: if set, each gateway
	// (inbound, outbound) runs in that network namespace (ip netns exec)
	// with its listeners on that address. Unset: random loopback
	// addresses in this namespace.
	NetNS, IPs [2]string
	// Allow is the outbound stream's allow-list; empty: 127.0.0.0/8.
	Allow string
	// Args are more s2cs flags, given to both gateways.
	Args []string
	// Stripe is the stream's stripe (api.OutboundRequest.Stripe): the
	// WAN legs at once of each connection; 0 or 1: one.
	Stripe int
	// NoStream starts the gateways only, without the stream: the caller
	// wires its own streams with InC and OutC (and releases them).
	NoStream bool
}

// NotOfferedError is Start's refusal of a WAN transport or an engine the
// s2cs binary does not offer (its /v1/info): the caller's choice, not a
// failure of the pair. Its message names the flag (--wan, --engine).
type NotOfferedError struct{ msg string }

func (e *NotOfferedError) Error() string { return e.msg }

// Pair is a local pair of real s2cs gateways on two random loopback
// addresses and one stream wired from the outbound gateway's listener to
// the consumer (a listener it opens on a third address, or a given one),
// the same way s2uc stream does (client.Wire). Close undoes all of it.
// Its fields are set by Start and read-only afterwards.
type Pair struct {
	In, Out   *localgw.Gateway // the inbound and outbound gateways
	InC, OutC *client.Client   // their control API, with the pair's token
	// Consumer is the consumer listener the pair opened (nil when
	// Config.Consumer was given).
	Consumer *net.TCPListener
	// InS and OutS are the stream's two sides (nil with NoStream).
	InS, OutS *api.Stream
	ConsAddr  string        // where the stream leads
	Allow     string        // the outbound stream's allow-list
	Setup     time.Duration // time of client.Wire

	netns [2]string // inbound, outbound (empty: this namespace)
	dir   string

	closeOnce sync.Once
	closeErr  error
}

// Start starts the gateways, the consumer listener and the stream. On
// failure it has already cleaned up what it started. An s2cs without
// the engine or WAN transport asked for is a *NotOfferedError.
func Start(ctx context.Context, cfg Config) (_ *Pair, err error) {
	if cfg.Engine == "" {
		cfg.Engine = "splice"
	}
	if cfg.WAN == "" {
		cfg.WAN = api.WANTLS
	}
	lp := &Pair{}
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
	ips, err := localgw.DistinctLoopbacks(3)
	if err != nil {
		return nil, err
	}
	for i, ip := range cfg.IPs {
		if ip != "" {
			ips[i] = ip
		}
	}
	lp.netns = cfg.NetNS
	args := []string{"--type", cfg.Engine}
	if cfg.WAN == api.WANTCP {
		args = append(args, "--insecure_tcp_wan")
	}
	args = append(args, cfg.Args...)
	for i, g := range []**localgw.Gateway{&lp.In, &lp.Out} {
		role := []string{"inbound", "outbound"}[i]
		var prefix []string
		if cfg.NetNS[i] != "" {
			prefix = []string{"ip", "netns", "exec", cfg.NetNS[i]}
		}
		*g, err = localgw.Start(ctx, localgw.Options{
			S2CS:       cfg.S2CS,
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
	if lp.InC, err = lp.In.Client(token); err != nil {
		return nil, err
	}
	if lp.OutC, err = lp.Out.Client(token); err != nil {
		return nil, err
	}
	info, err := lp.InC.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("gateway info: %w", err)
	}
	if !slices.Contains(info.WAN, cfg.WAN) {
		return nil, &NotOfferedError{fmt.Sprintf("--wan %s: this s2cs (%s) offers WAN %s; choose one of those or build an s2cs that has %s", cfg.WAN, cfg.S2CS, strings.Join(info.WAN, ", "), cfg.WAN)}
	}
	if !slices.Contains(info.Engines, cfg.Engine) {
		return nil, &NotOfferedError{fmt.Sprintf("--engine %s: this s2cs (%s) offers engines %s", cfg.Engine, cfg.S2CS, strings.Join(info.Engines, ", "))}
	}
	consumerIP, port := ips[2], 0
	if cfg.Consumer != nil {
		consumerIP, port = cfg.Consumer.IP.String(), cfg.Consumer.Port
	} else {
		if lp.Consumer, err = net.ListenTCP("tcp", &net.TCPAddr{IP: net.ParseIP(ips[2])}); err != nil {
			return nil, fmt.Errorf("consumer listener: %w", err)
		}
		port = lp.Consumer.Addr().(*net.TCPAddr).Port
	}

	lp.ConsAddr = net.JoinHostPort(consumerIP, strconv.Itoa(port))
	lp.Allow = "127.0.0.0/8"
	if cfg.Allow != "" {
		lp.Allow = cfg.Allow
	}
	if cfg.NoStream {
		return lp, nil
	}
	start := time.Now()
	inS, outS, err := client.Wire(ctx, lp.InC, lp.OutC,
		&api.InboundRequest{RemoteIP: consumerIP, ReceiverPorts: []int{port}, NumConn: 1, WAN: cfg.WAN},
		api.OutboundRequest{NumConn: 1, Allow: []string{lp.Allow}, Stripe: api.StripeField(cfg.Stripe)},
		nil)
	lp.Setup = time.Since(start)
	if err != nil {
		return nil, fmt.Errorf("wire the stream: %w", err)
	}
	lp.InS, lp.OutS = inS, outS
	switch {
	case len(outS.Listeners) != 1:
		return nil, fmt.Errorf("outbound stream has %d listeners, want 1", len(outS.Listeners))
	case outS.Engine != cfg.Engine || inS.Engine != cfg.Engine:
		return nil, fmt.Errorf("stream runs engines %q/%q, want %q", inS.Engine, outS.Engine, cfg.Engine)
	case outS.WAN != cfg.WAN || inS.WAN != cfg.WAN:
		return nil, fmt.Errorf("stream runs WAN %q/%q, want %q", inS.WAN, outS.WAN, cfg.WAN)
	}
	return lp, nil
}

// Target is where the producer connects for the gateway path.
func (lp *Pair) Target() string { return lp.OutS.Listeners[0] }

// WANBytes returns the bytes the outbound gateway sent towards the WAN
// and the inbound gateway received from it on the stream.
func (lp *Pair) WANBytes(ctx context.Context) (sent, received int64, err error) {
	o, err := lp.OutC.Get(ctx, lp.OutS.UID)
	if err != nil {
		return 0, 0, err
	}
	i, err := lp.InC.Get(ctx, lp.InS.UID)
	if err != nil {
		return 0, 0, err
	}
	if o.Stats == nil || i.Stats == nil {
		return 0, 0, errors.New("gateway reported no stream statistics")
	}
	return o.Stats.BytesToWAN, i.Stats.BytesFromWAN, nil
}

// LogTail returns the last n lines of both gateways' logs.
func (lp *Pair) LogTail(n int) string {
	var sb strings.Builder
	for i, g := range []*localgw.Gateway{lp.In, lp.Out} {
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
func (lp *Pair) Close() error {
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
		release(lp.OutC, lp.OutS, "outbound")
		release(lp.InC, lp.InS, "inbound")
		for _, c := range []*client.Client{lp.OutC, lp.InC} {
			if c != nil {
				c.Close()
			}
		}
		for i, g := range []*localgw.Gateway{lp.Out, lp.In} {
			if g != nil {
				if err := g.Stop(); err != nil {
					errs = append(errs, fmt.Errorf("stop the %s gateway (pid %d): %w", []string{"outbound", "inbound"}[i], g.PID(), err))
				}
			}
		}
		if lp.Consumer != nil {
			lp.Consumer.Close()
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

// SockmapReport says, once the gateways have stopped, how each one's
// sockmap engine moved the bytes (the totals s2cs logs at exit: bytes
// redirected in the kernel and copied in user space), or that it could not
// load the program. Empty when neither gateway ran the sockmap engine.
func (lp *Pair) SockmapReport() string {
	var sb strings.Builder
	for i, g := range []*localgw.Gateway{lp.In, lp.Out} {
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

// Describe names the gateway processes, for the output.
func (lp *Pair) Describe() string {
	where := func(i int) string {
		if lp.netns[i] == "" {
			return ""
		}
		return " in " + lp.netns[i]
	}
	return "inbound s2cs pid " + strconv.Itoa(lp.In.PID()) + where(0) + " at " + lp.In.Addr +
		", outbound s2cs pid " + strconv.Itoa(lp.Out.PID()) + where(1) + " at " + lp.Out.Addr +
		"; consumer listens on " + lp.ConsAddr
}

// PIDs returns the gateway processes' PIDs.
func (lp *Pair) PIDs() []int { return []int{lp.In.PID(), lp.Out.PID()} }

// CPU returns the CPU time both gateway processes have used so far.
func (lp *Pair) CPU() (time.Duration, error) {
	var total time.Duration
	for _, pid := range lp.PIDs() {
		d, err := bench.ProcessCPU(pid)
		if err != nil {
			return 0, err
		}
		total += d
	}
	return total, nil
}
