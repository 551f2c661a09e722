package facility

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"scistream/internal/bench"
	"scistream/internal/localgw"
)

// probeEvery is the pause between two probes of one channel.
const probeEvery = 50 * time.Millisecond

// probeTimeout bounds one probe: connect, send, read the echo.
const probeTimeout = 2 * time.Second

// echoApp is the consumer of the takeover experiment: it echoes every
// connection back until its end. Close stops it and waits.
type echoApp struct {
	ln *net.TCPListener
	wg sync.WaitGroup
}

func startEchoApp(ip string) (*echoApp, error) {
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.ParseIP(ip)})
	if err != nil {
		return nil, fmt.Errorf("consumer listener: %w", err)
	}
	a := &echoApp{ln: ln}
	a.wg.Go(func() {
		var conns sync.WaitGroup
		defer conns.Wait()
		for {
			c, err := ln.AcceptTCP()
			if err != nil {
				return
			}
			conns.Go(func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(probeTimeout))
				io.Copy(c, c)
			})
		}
	})
	return a, nil
}

func (a *echoApp) Close() {
	a.ln.Close()
	a.wg.Wait()
}

// probe is one probe of a channel: when it began and ended, and whether
// the bytes it sent came back.
type probe struct {
	start, end time.Time
	ok         bool
}

// probers probe every channel of a stream, each on a goroutine of its
// own: connect to the channel's listener at the producer facility, send
// 32 random bytes, read them back through both facilities and the echo
// consumer; then wait probeEvery and probe again.
type probers struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex // guards probes
	probes [][]probe  // by channel
}

func startProbers(ctx context.Context, targets []string) *probers {
	ctx, cancel := context.WithCancel(ctx)
	p := &probers{cancel: cancel, probes: make([][]probe, len(targets))}
	for ch, addr := range targets {
		p.wg.Go(func() {
			t := time.NewTimer(0)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				start := time.Now()
				err := probeOnce(ctx, addr)
				p.mu.Lock()
				p.probes[ch] = append(p.probes[ch], probe{start: start, end: time.Now(), ok: err == nil})
				p.mu.Unlock()
				t.Reset(probeEvery)
			}
		})
	}
	return p
}

func probeOnce(ctx context.Context, addr string) error {
	d := net.Dialer{Timeout: probeTimeout}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(probeTimeout))
	msg := make([]byte, 32)
	rand.Read(msg)
	if _, err := c.Write(msg); err != nil {
		return err
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		return err
	}
	if !bytes.Equal(got, msg) {
		return errors.New("the echo differs from what was sent")
	}
	return nil
}

// stop ends every prober and waits for them. Idempotent.
func (p *probers) stop() {
	p.cancel()
	p.wg.Wait()
}

// servedSince returns, for each channel, the end of its first successful
// probe that began at or after t (zero while there is none).
func (p *probers) servedSince(t time.Time) []time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]time.Time, len(p.probes))
	for ch, ps := range p.probes {
		for _, pr := range ps {
			if pr.ok && !pr.start.Before(t) {
				out[ch] = pr.end
				break
			}
		}
	}
	return out
}

// failures counts the failed probes of the channels in chans that began
// in [from, to).
func (p *probers) failures(chans []int, from, to time.Time) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, ch := range chans {
		for _, pr := range p.probes[ch] {
			if !pr.ok && !pr.start.Before(from) && pr.start.Before(to) {
				n++
			}
		}
	}
	return n
}

// waitServed waits until every channel has carried a probe that began at
// or after since, and returns when each first did; it gives up at
// deadline with what it has.
func (p *probers) waitServed(ctx context.Context, since, deadline time.Time) ([]time.Time, error) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		got := p.servedSince(since)
		if !slices.ContainsFunc(got, time.Time.IsZero) {
			return got, nil
		}
		if time.Now().After(deadline) {
			var missing []string
			for ch, t := range got {
				if t.IsZero() {
					missing = append(missing, fmt.Sprint(ch))
				}
			}
			return got, fmt.Errorf("channel(s) %s carried no data for %s", strings.Join(missing, ","), deadline.Sub(since).Round(time.Millisecond))
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return got, context.Cause(ctx)
		}
	}
}

// facTakeover runs the takeover experiment for one bound: facilities of
// takeoverNodes nodes each with --takeover bound, a stream of
// cfg.NumConn channels probed on every channel; each repetition kills
// the consumer-side node serving one channel (a different channel each
// time), times the return of data on every channel, and starts the node
// again.
func facTakeover(ctx context.Context, cfg *Config, env *facEnv, bound time.Duration, stdout io.Writer) (recs []Record, err error) {
	ips, err := localgw.DistinctLoopbacks(1)
	if err != nil {
		return nil, err
	}
	app, err := startEchoApp(ips[0])
	if err != nil {
		return nil, err
	}
	defer app.Close()
	name := fmt.Sprintf("to%d", int(bound.Seconds()))
	s := &facSetup{k: takeoverNodes}
	defer func() {
		if cerr := s.close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("clean up: %w", cerr))
		}
	}()
	if s.cons, err = env.startFacNodes(ctx, name+"-cons", takeoverNodes, "--takeover", bound.String()); err != nil {
		return nil, err
	}
	if s.prod, err = env.startFacNodes(ctx, name+"-prod", takeoverNodes, "--takeover", bound.String()); err != nil {
		return nil, err
	}
	if s.inS, s.outS, err = wireFacilities(ctx, s.cons, s.prod, app.ln.Addr().(*net.TCPAddr), cfg.NumConn, cfg.WAN); err != nil {
		return nil, fmt.Errorf("wire the stream: %w", err)
	}
	fmt.Fprintf(stdout, "\ntakeover, --takeover %s: stream %s of %d channels across %d+%d nodes (consumer side pids %v, producer side pids %v), every channel probed every %s (32 bytes echoed)\n",
		bound, s.inS.UID, cfg.NumConn, takeoverNodes, takeoverNodes, s.cons.pids(), s.prod.pids(), probeEvery)
	pr := startProbers(ctx, s.outS.Listeners)
	defer pr.stop()
	for rep := 1; rep <= cfg.Reps; rep++ {
		rec := Record{Experiment: "takeover", Rep: rep, Nodes: takeoverNodes, NumConn: cfg.NumConn, TakeoverBoundS: bound.Seconds()}
		rerr := takeoverOnce(ctx, s, pr, bound, rep, &rec)
		recs = append(recs, rec)
		took := "not served"
		if rec.TakeoverS != nil {
			took = fmt.Sprintf("%.2f s", *rec.TakeoverS)
		}
		again := ""
		if vi := s.cons.index(rec.Victim); vi >= 0 && s.cons.nodes[vi] != nil {
			again = fmt.Sprintf("; started again as pid %d", s.cons.nodes[vi].PID())
		}
		fmt.Fprintf(stdout, "  rep %d: killed %s (channels %v): every channel carried data again after %s; %d failed probes on the other channels%s\n",
			rep, rec.Victim, rec.VictimChannels, took, rec.OtherProbeFailures, again)
		if rerr != nil {
			rec.Error = rerr.Error()
			recs[len(recs)-1] = rec
			return recs, fmt.Errorf("--takeover %s, rep %d: %w", bound, rep, rerr)
		}
	}
	return recs, nil
}

// takeoverOnce is one repetition: steady state, kill, time, restart.
func takeoverOnce(ctx context.Context, s *facSetup, pr *probers, bound time.Duration, rep int, rec *Record) error {
	if _, err := pr.waitServed(ctx, time.Now(), time.Now().Add(30*time.Second)); err != nil {
		return fmt.Errorf("before the kill: %w", err)
	}
	st, err := s.cons.cls[s.cons.live(-1)].Get(ctx, s.inS.UID)
	if err != nil {
		return fmt.Errorf("the stream's channels: %w", err)
	}
	rec.Victim = st.Channels[(rep-1)%len(st.Channels)].Node
	vi := s.cons.index(rec.Victim)
	if vi < 0 {
		return fmt.Errorf("channel %d is served by %q, no node of %s", (rep-1)%len(st.Channels), rec.Victim, s.cons.name)
	}
	var others []int
	for _, c := range st.Channels {
		if c.Node == rec.Victim {
			rec.VictimChannels = append(rec.VictimChannels, c.Channel)
		} else {
			others = append(others, c.Channel)
		}
	}
	s.cons.kill(vi)
	dead := time.Now()
	served, err := pr.waitServed(ctx, dead, dead.Add(bound+15*time.Second))
	end := time.Now()
	if err == nil {
		d := slices.MaxFunc(served, time.Time.Compare).Sub(dead).Seconds()
		rec.TakeoverS = &d
	}
	rec.OtherProbeFailures = pr.failures(others, dead, end)
	if err != nil {
		return err
	}
	// The node comes back under its name on its address; the next
	// repetition starts once every node sees all of them.
	if err := s.cons.start(ctx, vi); err != nil {
		return err
	}
	return s.cons.waitNodes(ctx, takeoverNodes)
}

// printTakeover prints one row per bound: the times of its repetitions.
func printTakeover(w io.Writer, recs []Record) {
	if len(recs) == 0 {
		return
	}
	var bounds []float64
	for _, r := range recs {
		if !slices.Contains(bounds, r.TakeoverBoundS) {
			bounds = append(bounds, r.TakeoverBoundS)
		}
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "--takeover\tkills\tserved again: min s\tmedian s\tmax s\twithin the bound\tevery kill (s)\tfailed probes, other channels\t")
	for _, b := range bounds {
		var ts []float64
		var all []string
		n, within, other := 0, 0, 0
		for _, r := range recs {
			if r.TakeoverBoundS != b {
				continue
			}
			n++
			other += r.OtherProbeFailures
			if r.TakeoverS == nil {
				all = append(all, "none")
				continue
			}
			ts = append(ts, *r.TakeoverS)
			all = append(all, fmt.Sprintf("%.2f", *r.TakeoverS))
			if *r.TakeoverS <= b {
				within++
			}
		}
		lo, hi := bench.MinMax(ts)
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.2f\t%.2f\t%d/%d\t%s\t%d\t\n", time.Duration(b*float64(time.Second)), n, lo, bench.Median(ts), hi, within, n, strings.Join(all, " "), other)
	}
	tw.Flush()
	fmt.Fprintln(w, "(served again = from the SIGKILL of a consumer-side node to the end of the first successful probe of its last channel")
	fmt.Fprintf(w, " that began after the kill; a probe every %s per channel, so the resolution is about that plus one probe)\n", probeEvery)
}
