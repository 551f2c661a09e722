package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"scistream/internal/api"
	"scistream/internal/client"
	"scistream/internal/localgw"
)

// testbedConfig describes the local gateway pair to start.
type testbedConfig struct {
	s2cs   string // s2cs binary
	engine string // s2cs --type
	wan    string // api.WANTLS or api.WANTCP
}

// testbed is a local pair of real s2cs gateways on two random loopback
// addresses, a consumer listener on a third, and one stream wired from
// the outbound gateway's listener to the consumer. Close undoes all of it.
type testbed struct {
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

// startTestbed starts the gateways, the consumer listener and the
// stream. On failure it has already cleaned up what it started.
func startTestbed(ctx context.Context, cfg testbedConfig) (_ *testbed, err error) {
	tb := &testbed{}
	defer func() {
		if err != nil {
			if cerr := tb.Close(); cerr != nil {
				err = errors.Join(err, fmt.Errorf("clean up: %w", cerr))
			}
		}
	}()
	if tb.dir, err = os.MkdirTemp("", "s2bench-"); err != nil {
		return nil, fmt.Errorf("temporary directory: %w", err)
	}
	token := localgw.NewToken()
	tokens := filepath.Join(tb.dir, "tokens")
	if err := localgw.WriteTokens(tokens, map[string]string{"s2bench": token}); err != nil {
		return nil, err
	}
	ips, err := distinctLoopbacks(3)
	if err != nil {
		return nil, err
	}
	args := []string{"--type", cfg.engine}
	if cfg.wan == api.WANTCP {
		args = append(args, "--insecure_tcp_wan")
	}
	for i, g := range []**localgw.Gateway{&tb.in, &tb.out} {
		role := []string{"inbound", "outbound"}[i]
		*g, err = localgw.Start(ctx, localgw.Options{
			S2CS:       cfg.s2cs,
			ListenerIP: ips[i],
			StateDir:   filepath.Join(tb.dir, role),
			TokensFile: tokens,
			Args:       args,
		})
		if err != nil {
			return nil, fmt.Errorf("start the %s gateway: %w", role, err)
		}
	}
	if tb.inC, err = tb.in.Client(token); err != nil {
		return nil, err
	}
	if tb.outC, err = tb.out.Client(token); err != nil {
		return nil, err
	}
	if tb.consumer, err = net.ListenTCP("tcp", &net.TCPAddr{IP: net.ParseIP(ips[2])}); err != nil {
		return nil, fmt.Errorf("consumer listener: %w", err)
	}
	port := tb.consumer.Addr().(*net.TCPAddr).Port

	start := time.Now()
	inS, outS, err := client.Wire(ctx, tb.inC, tb.outC,
		&api.InboundRequest{RemoteIP: ips[2], ReceiverPorts: []int{port}, NumConn: 1, WAN: cfg.wan},
		api.OutboundRequest{NumConn: 1, Allow: []string{"127.0.0.0/8"}},
		nil)
	tb.setup = time.Since(start)
	if err != nil {
		return nil, fmt.Errorf("wire the stream: %w", err)
	}
	tb.inS, tb.outS = inS, outS
	switch {
	case len(outS.Listeners) != 1:
		return nil, fmt.Errorf("outbound stream has %d listeners, want 1", len(outS.Listeners))
	case outS.Engine != cfg.engine || inS.Engine != cfg.engine:
		return nil, fmt.Errorf("stream runs engines %q/%q, want %q", inS.Engine, outS.Engine, cfg.engine)
	case outS.WAN != cfg.wan || inS.WAN != cfg.wan:
		return nil, fmt.Errorf("stream runs WAN %q/%q, want %q", inS.WAN, outS.WAN, cfg.wan)
	}
	return tb, nil
}

// target is where the producer connects for the gateway path.
func (tb *testbed) target() string { return tb.outS.Listeners[0] }

// wanBytes returns the bytes the outbound gateway sent towards the WAN
// and the inbound gateway received from it on the stream.
func (tb *testbed) wanBytes(ctx context.Context) (sent, received int64, err error) {
	o, err := tb.outC.Get(ctx, tb.outS.UID)
	if err != nil {
		return 0, 0, err
	}
	i, err := tb.inC.Get(ctx, tb.inS.UID)
	if err != nil {
		return 0, 0, err
	}
	if o.Stats == nil || i.Stats == nil {
		return 0, 0, errors.New("gateway reported no stream statistics")
	}
	return o.Stats.BytesToWAN, i.Stats.BytesFromWAN, nil
}

// logTail returns the last n lines of both gateways' logs.
func (tb *testbed) logTail(n int) string {
	var sb strings.Builder
	for i, g := range []*localgw.Gateway{tb.in, tb.out} {
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
func (tb *testbed) Close() error {
	tb.closeOnce.Do(func() {
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
		release(tb.outC, tb.outS, "outbound")
		release(tb.inC, tb.inS, "inbound")
		for _, c := range []*client.Client{tb.outC, tb.inC} {
			if c != nil {
				c.Close()
			}
		}
		for i, g := range []*localgw.Gateway{tb.out, tb.in} {
			if g != nil {
				if err := g.Stop(); err != nil {
					errs = append(errs, fmt.Errorf("stop the %s gateway (pid %d): %w", []string{"outbound", "inbound"}[i], g.PID(), err))
				}
			}
		}
		if tb.consumer != nil {
			tb.consumer.Close()
		}
		if tb.dir != "" {
			if err := os.RemoveAll(tb.dir); err != nil {
				errs = append(errs, err)
			}
		}
		tb.closeErr = errors.Join(errs...)
	})
	return tb.closeErr
}

// pids describes the gateway processes, for the output.
func (tb *testbed) describe() string {
	return "inbound s2cs pid " + strconv.Itoa(tb.in.PID()) + " at " + tb.in.Addr +
		", outbound s2cs pid " + strconv.Itoa(tb.out.PID()) + " at " + tb.out.Addr +
		"; consumer listens on " + tb.consumer.Addr().String()
}
