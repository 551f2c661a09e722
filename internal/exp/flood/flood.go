// Package flood is s2bench flood: what strangers cost a gateway. It
// wires a local gateway pair (as compare does), measures a stream's
// verified goodput alone, then again while a flood of stranger TCP
// connections hits the inbound gateway's WAN listener (connections that
// open and say nothing, as a scanner or an attacker holds them), and
// follows the inbound gateway's memory (VmRSS) through the flood and
// after it. Everything runs on this machine's shared cores, the flood
// included, in one run.
package flood

import (
	"context"
	"errors"
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

// Config is a flood experiment.
type Config struct {
	Conns   int // stranger connections in the flood; 0: 20000
	Sources int // source addresses the flood comes from (random 127.x.y.z); 0: 4
	// Duration is the length of each goodput measurement, alone and
	// under the flood; 0: 5 s.
	Duration time.Duration
	Size     int // message size of the measured stream; 0: 64 KiB
	// Settle is how long to wait after the flood for the gateway's
	// memory to come back; 0: no wait.
	Settle time.Duration
	S2CS   string // the s2cs binary; empty: localgw.FindBinary's
	Engine string // both gateways' data-plane engine; empty: splice
	// WAN is the transport between the gateways, api.WANTLS or WANTCP
	// (the flood is TCP connections to the WAN listener); empty: TLS.
	WAN string
}

// Result is what a flood experiment measured.
type Result struct {
	Alone, Flooded record.Record // the stream's run alone and under the flood
	// Opened connections of the flood reached the gateway, which reset
	// or closed Refused of them and left Held open until the flood
	// ended; Failed dials failed otherwise.
	Opened, Refused, Held, Failed int64
	// The inbound gateway's VmRSS at the start, before the flood (after
	// the first run) and at the flood's peak, in bytes.
	RSSStart, RSSBefore, RSSPeak int64
	// Back is the time from the flood's end until the gateway's memory
	// came back within 2 MB (or 5%) of RSSBefore; -1 if it did not
	// within Settle.
	Back time.Duration
}

func (cfg Config) withDefaults() Config {
	if cfg.Conns == 0 {
		cfg.Conns = 20000
	}
	if cfg.Sources == 0 {
		cfg.Sources = 4
	}
	if cfg.Duration == 0 {
		cfg.Duration = 5 * time.Second
	}
	if cfg.Size == 0 {
		cfg.Size = 64 << 10
	}
	if cfg.Engine == "" {
		cfg.Engine = "splice"
	}
	if cfg.WAN == "" {
		cfg.WAN = api.WANTLS
	}
	return cfg
}

// Run runs the experiment, printing its steps and results to stdout and
// notes to stderr, and stops the gateways, also after a failure or an
// interrupt (ctx).
func Run(ctx context.Context, cfg Config, stdout, stderr io.Writer) (res Result, err error) {
	cfg = cfg.withDefaults()
	// The flood holds what the gateway has not yet refused (its caps,
	// a few hundred) and the dials in flight; the rest close at once.
	if err := procs.RaiseNoFile(uint64(min(cfg.Conns, 8192)) + 1024); err != nil {
		// Only the connections the gateway still holds stay open here.
		fmt.Fprintf(stderr, "s2bench: note: %v; the flood holds at most that many at once\n", err)
	}
	lp, err := localpair.Start(ctx, localpair.Config{S2CS: cfg.S2CS, Engine: cfg.Engine, WAN: cfg.WAN})
	if err != nil {
		return res, err
	}
	defer func() {
		if cerr := lp.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("clean up: %w", cerr))
		}
	}()
	target := lp.InS.Listeners[0]
	fmt.Fprintf(stdout, "gateways: %s\n", lp.Describe())
	fmt.Fprintf(stdout, "s2bench flood: %d stranger connections from %d addresses to the inbound gateway's WAN listener %s; stream over %s, %s messages, %s per measurement\n",
		cfg.Conns, cfg.Sources, target, cfg.WAN, bytesize.Format(int64(cfg.Size)), cfg.Duration)

	rss := procs.WatchRSS(lp.In.PID())
	defer rss.Stop()
	measure := func(label string) (record.Record, error) {
		h := bench.Hello{Mode: bench.Throughput, Spec: bench.Spec{Size: cfg.Size, Seed: rand.Uint64(), Run: rand.Uint32()}, Pairs: 1, Path: record.PathGateways}
		h.Group = h.Spec.Run
		rec, err := localpair.RunPath(ctx, lp, h, lp.Route(record.PathGateways), bench.RunOptions{Duration: cfg.Duration}, progress.New(stderr, progress.Off), label, stderr)
		if err != nil {
			return rec, fmt.Errorf("%s: %w", label, err)
		}
		fmt.Fprintf(stdout, "  %-12s %9.1f MB/s, every message verified\n", label, rec.GoodputMBps)
		return rec, nil
	}

	before := rss.Now()
	alone, err := measure("alone")
	res.Alone, res.RSSStart = alone, before
	if err != nil {
		return res, err
	}
	quiet := rss.Now()
	res.RSSBefore = quiet

	rss.Peak() // the peak of the flood, not of the first run
	f := startFlood(ctx, target, cfg.Conns, cfg.Sources)
	flooded, merr := measure("under flood")
	opened, refused, held, failed := f.stop()
	res.Flooded, res.Opened, res.Refused, res.Held, res.Failed = flooded, opened, refused, held, failed
	if merr != nil {
		return res, merr
	}
	peak := rss.Peak()
	res.RSSPeak = peak
	ended := time.Now()
	back := time.Duration(-1)
	limit := quiet + max(quiet/20, 2<<20)
	for time.Since(ended) < cfg.Settle {
		if rss.Now() <= limit {
			back = time.Since(ended)
			break
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	res.Back = back
	ratio := flooded.GoodputMBps / alone.GoodputMBps
	fmt.Fprintf(stdout, "goodput under the flood: %.2f of alone (%.1f / %.1f MB/s)\n", ratio, flooded.GoodputMBps, alone.GoodputMBps)
	fmt.Fprintf(stdout, "flood: %d connections reached the gateway, %d reset or closed by it (during the connect or after), %d still open when it ended; %d dials failed otherwise\n", opened, refused, held, failed)
	fmt.Fprintf(stdout, "inbound gateway memory (VmRSS): %.1f MB at start, %.1f MB before the flood (after the first run), %.1f MB at the flood's peak\n",
		mb(before), mb(quiet), mb(peak))
	if opened+failed < int64(cfg.Conns) {
		fmt.Fprintf(stdout, "note: the flood made %d of its %d attempts within the measurement\n", opened+failed, cfg.Conns)
	}
	if back >= 0 {
		fmt.Fprintf(stdout, "memory back within 2 MB (or 5%%) of its level before the flood %.1f s after the flood ended\n", back.Seconds())
	} else {
		fmt.Fprintf(stdout, "memory NOT back within 2 MB (or 5%%) of its level before the flood %s after the flood ended: %.1f MB\n", cfg.Settle, mb(rss.Now()))
	}
	if s := refusalSummaries(lp.In.Log()); s != "" {
		fmt.Fprintf(stdout, "the inbound gateway's refusal summaries:\n%s", s)
	}
	return res, nil
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
