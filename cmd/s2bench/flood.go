package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"scistream/internal/api"
	"scistream/internal/bench"
	"scistream/internal/bytesize"
	"scistream/internal/exp/localpair"
	"scistream/internal/exp/procs"
	"scistream/internal/exp/progress"
	"scistream/internal/exp/record"
	"scistream/internal/localgw"
)

// s2bench flood: what strangers cost a gateway. It wires a local gateway
// pair (as compare does), measures a stream's verified goodput alone, then
// again while a flood of stranger TCP connections hits the inbound
// gateway's WAN listener (connections that open and say nothing, as a
// scanner or an attacker holds them), and follows the inbound gateway's
// memory (VmRSS) through the flood and after it. Everything runs on this
// machine's shared cores, the flood included, in one run.

type floodConfig struct {
	conns    int
	sources  int
	duration time.Duration
	size     int
	settle   time.Duration
	s2cs     string
	engine   string
	wan      string
}

func parseFlood(args []string, stderr io.Writer) (*floodConfig, error) {
	fs := flag.NewFlagSet("s2bench flood", flag.ContinueOnError)
	conns := fs.Int("conns", 20000, "stranger connections in the flood")
	sources := fs.Int("sources", 4, "source addresses the flood comes from (random 127.x.y.z)")
	duration := fs.Duration("duration", 5*time.Second, "length of each goodput measurement, alone and under the flood")
	size := fs.String("size", "64KiB", "message size of the measured stream")
	settle := fs.Duration("settle", 30*time.Second, "how long to wait after the flood for the gateway's memory to come back")
	s2cs := fs.String("s2cs", "", "s2cs binary (default: next to s2bench, ./bin, PATH)")
	engine := fs.String("engine", "splice", "data-plane engine of both gateways")
	wanT := fs.String("wan", api.WANTLS, "WAN transport: tls or tcp (the flood is TCP connections to the WAN listener)")
	if err := parseFlags(fs, args, "usage: s2bench flood [--conns 20000] [--sources 4] [--duration 5s] [--wan tls|tcp]", stderr); err != nil {
		return nil, err
	}
	cfg := &floodConfig{conns: *conns, sources: *sources, duration: *duration, settle: *settle, s2cs: *s2cs, engine: *engine, wan: *wanT}
	sz, err := bytesize.Parse(*size)
	switch {
	case err != nil:
		return nil, usagef("--size %v", err)
	case sz < 1 || sz > bench.MaxSize:
		return nil, usagef("--size %s out of range: give 1B to %s", *size, bytesize.Format(bench.MaxSize))
	case cfg.conns < 1 || cfg.conns > 200000:
		return nil, usagef("--conns %d out of range: give 1 to 200000", cfg.conns)
	case cfg.sources < 1 || cfg.sources > 64:
		return nil, usagef("--sources %d out of range: give 1 to 64", cfg.sources)
	case cfg.duration < time.Second || cfg.duration > 10*time.Minute:
		return nil, usagef("--duration %s out of range: give 1s to 10m", cfg.duration)
	case cfg.settle < 0 || cfg.settle > 10*time.Minute:
		return nil, usagef("--settle %s out of range: give 0 to 10m", cfg.settle)
	case cfg.wan != api.WANTLS && cfg.wan != api.WANTCP:
		return nil, usagef("--wan %q: use tls or tcp", cfg.wan)
	}
	cfg.size = int(sz)
	if cfg.s2cs == "" {
		p, err := localgw.FindBinary("s2cs")
		if err != nil {
			return nil, usagef("%v", err)
		}
		cfg.s2cs = p
	}
	return cfg, nil
}

func runFlood(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseFlood(args, stderr)
	if err != nil {
		return err
	}
	return flood(ctx, cfg, stdout, stderr)
}

func flood(ctx context.Context, cfg *floodConfig, stdout, stderr io.Writer) (err error) {
	// The flood holds what the gateway has not yet refused (its caps,
	// a few hundred) and the dials in flight; the rest close at once.
	if err := procs.RaiseNoFile(uint64(min(cfg.conns, 8192)) + 1024); err != nil {
		// Only the connections the gateway still holds stay open here.
		fmt.Fprintf(stderr, "s2bench: note: %v; the flood holds at most that many at once\n", err)
	}
	lp, err := localpair.Start(ctx, localpair.Config{S2CS: cfg.s2cs, Engine: cfg.engine, WAN: cfg.wan})
	if err != nil {
		return err
	}
	defer func() {
		if cerr := lp.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("clean up: %w", cerr))
		}
	}()
	target := lp.InS.Listeners[0]
	fmt.Fprintf(stdout, "gateways: %s\n", lp.Describe())
	fmt.Fprintf(stdout, "s2bench flood: %d stranger connections from %d addresses to the inbound gateway's WAN listener %s; stream over %s, %s messages, %s per measurement\n",
		cfg.conns, cfg.sources, target, cfg.wan, bytesize.Format(int64(cfg.size)), cfg.duration)

	rss := procs.WatchRSS(lp.In.PID())
	defer rss.Stop()
	measure := func(label string) (record.Record, error) {
		h := bench.Hello{Mode: bench.Throughput, Spec: bench.Spec{Size: cfg.size, Seed: rand.Uint64(), Run: rand.Uint32()}, Pairs: 1, Path: record.PathGateways}
		h.Group = h.Spec.Run
		rec, err := localpair.RunPath(ctx, lp, h, lp.Route(record.PathGateways), bench.RunOptions{Duration: cfg.duration}, progress.New(stderr, "off"), label, stderr)
		if err != nil {
			return rec, fmt.Errorf("%s: %w", label, err)
		}
		fmt.Fprintf(stdout, "  %-12s %9.1f MB/s, every message verified\n", label, rec.GoodputMBps)
		return rec, nil
	}

	before := rss.Now()
	alone, err := measure("alone")
	if err != nil {
		return err
	}
	quiet := rss.Now()

	rss.Peak() // the peak of the flood, not of the first run
	f := startFlood(ctx, target, cfg.conns, cfg.sources)
	flooded, merr := measure("under flood")
	opened, refused, held, failed := f.stop()
	if merr != nil {
		return merr
	}
	peak := rss.Peak()
	ended := time.Now()
	back := time.Duration(-1)
	limit := quiet + max(quiet/20, 2<<20)
	for time.Since(ended) < cfg.settle {
		if rss.Now() <= limit {
			back = time.Since(ended)
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	ratio := flooded.GoodputMBps / alone.GoodputMBps
	fmt.Fprintf(stdout, "goodput under the flood: %.2f of alone (%.1f / %.1f MB/s)\n", ratio, flooded.GoodputMBps, alone.GoodputMBps)
	fmt.Fprintf(stdout, "flood: %d connections reached the gateway, %d reset or closed by it (during the connect or after), %d still open when it ended; %d dials failed otherwise\n", opened, refused, held, failed)
	fmt.Fprintf(stdout, "inbound gateway memory (VmRSS): %.1f MB at start, %.1f MB before the flood (after the first run), %.1f MB at the flood's peak\n",
		mb(before), mb(quiet), mb(peak))
	if opened+failed < int64(cfg.conns) {
		fmt.Fprintf(stdout, "note: the flood made %d of its %d attempts within the measurement\n", opened+failed, cfg.conns)
	}
	if back >= 0 {
		fmt.Fprintf(stdout, "memory back within 2 MB (or 5%%) of its level before the flood %.1f s after the flood ended\n", back.Seconds())
	} else {
		fmt.Fprintf(stdout, "memory NOT back within 2 MB (or 5%%) of its level before the flood %s after the flood ended: %.1f MB\n", cfg.settle, mb(rss.Now()))
	}
	if s := refusalSummaries(lp.In.Log()); s != "" {
		fmt.Fprintf(stdout, "the inbound gateway's refusal summaries:\n%s", s)
	}
	return nil
}

func mb(b int64) float64 { return float64(b) / 1e6 }

// refusalSummaries returns the lines of log that sum up refusals.
func refusalSummaries(log string) string {
	var b strings.Builder
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "msg=\"refused ") || strings.Contains(l, `"msg":"refused `) {
			b.WriteString("  " + l + "\n")
		}
	}
	return b.String()
}

// flooder holds stranger connections to one address.
type flooder struct {
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	opened  atomic.Int64
	refused atomic.Int64
	failed  atomic.Int64 // dials that failed other than by the gateway's reset
	mu      sync.Mutex   // guards conns
	conns   []net.Conn
}

// startFlood opens n connections to target from sources random loopback
// addresses, 64 at a time, and holds each until the gateway closes it or
// stop.
func startFlood(ctx context.Context, target string, n, sources int) *flooder {
	ctx, cancel := context.WithCancel(ctx)
	f := &flooder{cancel: cancel}
	ips, err := localgw.DistinctLoopbacks(sources)
	if err != nil {
		ips = []string{"127.0.0.1"}
	}
	next := make(chan int)
	const dialers = 64
	for range dialers {
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			for i := range next {
				d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(ips[i%len(ips)])}}
				c, err := d.DialContext(ctx, "tcp", target)
				if errors.Is(err, syscall.ECONNRESET) {
					// Reset before the connect returned: it reached
					// the gateway, which refused it at once.
					f.opened.Add(1)
					f.refused.Add(1)
					continue
				}
				if err != nil {
					f.failed.Add(1)
					continue
				}
				f.opened.Add(1)
				f.mu.Lock()
				f.conns = append(f.conns, c)
				f.mu.Unlock()
				f.wg.Add(1)
				go f.hold(ctx, c)
			}
		}()
	}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		defer close(next)
		for i := range n {
			select {
			case next <- i:
			case <-ctx.Done():
				return
			}
		}
	}()
	return f
}

// hold waits until the gateway ends c (counted as refused, and closed
// here at once) or the flood stops (stop makes the read return).
func (f *flooder) hold(ctx context.Context, c net.Conn) {
	defer f.wg.Done()
	if _, err := c.Read(make([]byte, 1)); err != nil && ctx.Err() == nil {
		f.refused.Add(1)
		c.Close()
	}
}

// stop ends the flood: every connection is closed and every goroutine has
// returned. It returns how many connections reached the gateway, how many
// it ended, how many were still open, and how many dials failed
// otherwise.
func (f *flooder) stop() (opened, refused, held, failed int64) {
	opened, refused = f.opened.Load(), f.refused.Load()
	f.cancel()
	f.mu.Lock()
	for _, c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
	return opened, refused, opened - refused, f.failed.Load()
}
