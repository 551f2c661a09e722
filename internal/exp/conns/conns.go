// Package conns is s2bench conns: many application connections at once
// through one local gateway pair (issue 13, "ten thousand connections").
// It wires a stream as compare does, opens Config.Conns producer
// connections through it and waits until both gateways relay every one
// of them (the accept rate), reads both gateways' resident memory with
// all of them open and idle, then has every connection send its share of
// Config.Bytes at once, every message verified by an s2bench consumer in
// a process of its own, and reads the gateways' memory peak and CPU time
// meanwhile.
//
// The consumer is a separate process because the two ends of N
// connections need 2N descriptors, and this machine's hard limit may be
// below that (on the development VM it is 20,000 and cannot be raised).
package conns

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"scistream/internal/api"
	"scistream/internal/bench"
	"scistream/internal/bytesize"
	"scistream/internal/client"
	"scistream/internal/exp/localpair"
	"scistream/internal/exp/procs"
	"scistream/internal/exp/record"
	"scistream/internal/gateway"
	"scistream/internal/localgw"
	"scistream/internal/ports"
)

// Config is a conns experiment.
type Config struct {
	Conns   int           // application connections open at once; 0: 1000
	Size    int           // message size; 0: 16 KiB
	Bytes   int64         // payload of the transfer, split evenly over the connections; 0: 1 GiB
	Dialers int           // connects in flight at once while the connections open; 0: 128
	Timeout time.Duration // bound of the whole experiment once the gateways run; 0: 3 minutes
	S2CS    string        // the s2cs binary; empty: localgw.FindBinary's
	// S2Bench is the s2bench binary whose consumer command (s2bench
	// consumer) runs the consumer process; required.
	S2Bench string
	Engine  string // both gateways' data-plane engine; empty: splice
	WAN     string // the transport between the gateways: api.WANTLS, WANTCP or WANQUIC; empty: TLS
	// Direct then runs the same workload straight to a consumer (no
	// gateways), so the cost of the count shows apart from the gateways'.
	Direct bool
}

func (cfg Config) withDefaults() Config {
	if cfg.Conns == 0 {
		cfg.Conns = 1000
	}
	if cfg.Size == 0 {
		cfg.Size = 16 << 10
	}
	if cfg.Bytes == 0 {
		cfg.Bytes = 1 << 30
	}
	if cfg.Dialers == 0 {
		cfg.Dialers = 128
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 3 * time.Minute
	}
	if cfg.Engine == "" {
		cfg.Engine = "splice"
	}
	if cfg.WAN == "" {
		cfg.WAN = api.WANTLS
	}
	return cfg
}

// Result is what a conns experiment measured.
type Result struct {
	// Established is the time until both gateways relayed every
	// connection; Redials the WAN dials the outbound gateway dialled
	// again after the inbound reset them in its handshake cap.
	Established time.Duration
	Redials     int64
	// Each gateway's ("inbound", "outbound") VmRSS before the
	// connections, with all of them open and idle, and at the peak of
	// the transfer, in bytes.
	RSSBefore, RSSOpen, RSSPeak map[string]int64
	// ResumePeak is each gateway's most held of its resume buffer
	// (s2cs --resume_buffer: what framed connections sent and the peer
	// has not acknowledged, or received and the application has not
	// taken) since it started, from GET /v1/status; ResumeCap its size.
	ResumePeak, ResumeCap map[string]int64
	// Transfer is the run through the gateways, every message verified.
	Transfer bench.Summary
	// CPUPerGB is both gateways' CPU seconds per 10^9 payload bytes
	// during the transfer; 0 if not measured.
	CPUPerGB float64
	// DirectBps is the aggregate goodput of the same workload straight
	// to a consumer, in bytes per second; 0 without Config.Direct.
	DirectBps float64
}

// FitError is CheckFit's refusal of a count the gateways cannot hold
// within the limit of open files: the caller's setting, not a failure.
// Its message names the flags (--conns, --wan).
type FitError struct{ msg string }

func (e *FitError) Error() string { return e.msg }

// gatewayPorts is the port range localgw gives a gateway, in which the
// gateway plans its open files.
func gatewayPorts() ports.Range { return ports.Range{Lo: 5100, Hi: 5199} }

// gatewayCap is the --max_active_conns that lets a gateway hold n
// connections over wan: it counts connections over TLS or TCP legs, and
// one over QUIC holds half the files (its own socket; the channel's UDP
// socket carries every leg).
func gatewayCap(wan string, n int) int {
	if wan == api.WANQUIC {
		return (n + 1) / 2
	}
	return n
}

// CheckFit refuses (*FitError) a count the gateways cannot hold within
// the hard limit of open files, with the gateway's own arithmetic
// (gateway.Config.Files). The producer and the consumer process hold one
// per connection, never more than a gateway.
func CheckFit(cfg Config, hard int) error {
	cfg = cfg.withDefaults()
	gc := gateway.Config{ListenerIP: "127.0.0.1", PortRange: gatewayPorts(), FileLimit: hard - 1, MaxActiveConns: gatewayCap(cfg.WAN, cfg.Conns)}
	if _, err := gc.Files(); err != nil {
		var ce *gateway.ConfigError
		errors.As(err, &ce)
		alt := ""
		if cfg.WAN != api.WANQUIC {
			alt = "; over quic a connection holds one file, not two (--wan quic)"
		}
		return &FitError{fmt.Sprintf("--conns %d over %s does not fit the gateways' limit of open files: s2cs --max_active_conns %s%s", cfg.Conns, cfg.WAN, ce.Problem, alt)}
	}
	return nil
}

// Run runs the experiment, printing its steps and results to stdout; the
// consumer process's first 4 KiB of errors go to stderr. A count that
// does not fit the limit of open files is a *FitError, before anything
// starts. It stops every process it started, also after a failure or an
// interrupt (ctx).
func Run(ctx context.Context, cfg Config, stdout, stderr io.Writer) (res Result, err error) {
	cfg = cfg.withDefaults()
	hard, err := procs.NoFileLimit()
	if err != nil {
		return res, err
	}
	if err := CheckFit(cfg, hard); err != nil {
		return res, err
	}
	if err := procs.RaiseNoFile(uint64(cfg.Conns + 256)); err != nil {
		return res, err
	}
	ctx, cancel := context.WithTimeoutCause(ctx, cfg.Timeout, fmt.Errorf("the experiment did not finish within --timeout %s", cfg.Timeout))
	defer cancel()

	ips, err := localgw.DistinctLoopbacks(1)
	if err != nil {
		return res, err
	}
	cons, err := startConsumerProcess(cfg.S2Bench, ips[0], cfg.Timeout, stderr)
	if err != nil {
		return res, err
	}
	defer func() {
		if cerr := cons.stop(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	maxActive := gatewayCap(cfg.WAN, cfg.Conns)
	lp, err := localpair.Start(ctx, localpair.Config{S2CS: cfg.S2CS, Engine: cfg.Engine, WAN: cfg.WAN, Consumer: cons.addr,
		Args: []string{"--max_active_conns", strconv.Itoa(maxActive)}})
	if err != nil {
		return res, err
	}
	defer func() {
		if cerr := lp.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("clean up: %w", cerr))
		}
	}()
	per := cfg.Bytes / int64(cfg.Conns) / int64(cfg.Size) * int64(cfg.Size)
	fmt.Fprintf(stdout, "s2bench conns: %d connections at once over %s, engine %s, %s messages, %s per connection (%s in all)\n",
		cfg.Conns, cfg.WAN, cfg.Engine, bytesize.Format(int64(cfg.Size)), bytesize.Human(per), bytesize.Human(per*int64(cfg.Conns)))
	fmt.Fprintf(stdout, "gateways: %s\n", lp.Describe())
	fmt.Fprintf(stdout, "open files: hard limit %d per process; gateways run with --max_active_conns %d (%d files per connection over %s); this producer process and the consumer process (pid %d) hold 1 per connection\n",
		hard, maxActive, gatewayCap(cfg.WAN, 2), cfg.WAN, cons.pid())

	pids := map[string]int{"inbound": lp.In.PID(), "outbound": lp.Out.PID()}
	rssOf := func() (map[string]int64, error) {
		m := map[string]int64{}
		for role, pid := range pids {
			v, err := bench.ProcessRSS(pid)
			if err != nil {
				return nil, err
			}
			m[role] = v
		}
		return m, nil
	}
	before, err := rssOf()
	if err != nil {
		return res, err
	}

	// Producers: each dials through a bounded number of connects in
	// flight, then waits at the gate until every connection is up.
	gate := make(chan struct{})
	var gateOnce sync.Once
	openGate := func() { gateOnce.Do(func() { close(gate) }) }
	defer openGate()
	sem := make(chan struct{}, cfg.Dialers)
	dial := func(ctx context.Context, addr string) (*net.TCPConn, error) {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
		d := net.Dialer{Timeout: 30 * time.Second}
		nc, err := d.DialContext(ctx, "tcp", addr)
		<-sem
		if err != nil {
			return nil, err
		}
		select {
		case <-gate:
		case <-ctx.Done():
			nc.Close()
			return nil, context.Cause(ctx)
		}
		return nc.(*net.TCPConn), nil
	}
	h := bench.Hello{Mode: bench.Throughput, Spec: bench.Spec{Size: cfg.Size, Bytes: per, Seed: rand.Uint64(), Run: rand.Uint32()},
		Pairs: cfg.Conns, Path: record.PathGateways}
	h.Group = h.Spec.Run
	done := make(chan connsRun, 1)
	start := time.Now()
	go func() {
		res, err := bench.RunRemote(ctx, lp.Target(), h, bench.RunOptions{Timeout: cfg.Timeout, Idle: cfg.Timeout, Dial: dial, EachMessage: true})
		done <- connsRun{res, err}
	}()
	// The run's goroutine returns within the timeout; wait for it however
	// this function returns.
	var r connsRun
	got := false
	defer func() {
		if !got {
			cancel()
			<-done
		}
	}()

	// Established: both gateways relay every connection.
	redials, err := waitActive(ctx, lp, int64(cfg.Conns), done)
	if err != nil {
		return res, fmt.Errorf("open %d connections: %w", cfg.Conns, err)
	}
	established := time.Since(start)
	res.Established, res.Redials, res.RSSBefore = established, redials, before
	open, err := rssOf()
	res.RSSOpen = open
	if err != nil {
		return res, err
	}
	fmt.Fprintf(stdout, "established: %d connections through both gateways in %.2f s: %.0f connections/s\n",
		cfg.Conns, established.Seconds(), float64(cfg.Conns)/established.Seconds())
	if redials > 0 {
		fmt.Fprintf(stdout, "  the inbound gateway reset %d WAN dials in its cap of connections in their handshake (before the first leg authenticated); the outbound dialled them again\n", redials)
	}
	for _, role := range []string{"outbound", "inbound"} {
		fmt.Fprintf(stdout, "  %-8s gateway RSS %.1f MB before, %.1f MB with all open: %.1f KiB per connection\n",
			role, mb(before[role]), mb(open[role]), perConnKiB(open[role]-before[role], cfg.Conns))
	}

	// Transfer: every connection at once.
	watches := map[string]*procs.RSSWatch{}
	for role, pid := range pids {
		watches[role] = procs.WatchRSS(pid)
		defer watches[role].Stop()
	}
	cpu0, err := lp.CPU()
	if err != nil {
		return res, err
	}
	openGate()
	r = <-done
	got = true
	cpu1, cerr := lp.CPU()
	if r.err != nil {
		return res, fmt.Errorf("transfer: %w", r.err)
	}
	if err := checkConnsResult(r.res, h); err != nil {
		return res, err
	}
	s := r.res.Summary
	res.Transfer = s
	fmt.Fprintf(stdout, "transfer: %s verified on %d connections, aggregate goodput %.1f MB/s", bytesize.Human(s.Bytes), s.Pairs, s.GoodputBps/1e6)
	if cerr == nil && s.Bytes > 0 {
		res.CPUPerGB = (cpu1 - cpu0).Seconds() / (float64(s.Bytes) / 1e9)
		fmt.Fprintf(stdout, ", gateways' CPU %.2f s/GB", res.CPUPerGB)
	}
	fmt.Fprintln(stdout)
	res.RSSPeak = map[string]int64{}
	for _, role := range []string{"outbound", "inbound"} {
		peak := watches[role].Peak()
		res.RSSPeak[role] = peak
		fmt.Fprintf(stdout, "  %-8s gateway RSS peak %.1f MB during the transfer: %.1f KiB per connection\n",
			role, mb(peak), perConnKiB(peak-before[role], cfg.Conns))
	}
	res.ResumePeak, res.ResumeCap = map[string]int64{}, map[string]int64{}
	for role, c := range map[string]*client.Client{"outbound": lp.OutC, "inbound": lp.InC} {
		var st api.GatewayStatus
		if err := c.Do(ctx, http.MethodGet, "/v1/status", nil, &st); err != nil {
			return res, fmt.Errorf("%s gateway's status: %w", role, err)
		}
		res.ResumePeak[role], res.ResumeCap[role] = st.Health.ResumeBufferPeak, st.Health.ResumeBufferCapacity
	}
	for _, role := range []string{"outbound", "inbound"} {
		fmt.Fprintf(stdout, "  %-8s gateway resume buffers at most %.1f MB at once (%.1f KiB per connection) of its %s\n",
			role, mb(res.ResumePeak[role]), perConnKiB(res.ResumePeak[role], cfg.Conns), bytesize.Format(res.ResumeCap[role]))
	}
	if err := cons.wait(30 * time.Second); err != nil {
		return res, err
	}
	fmt.Fprintf(stdout, "consumer: %s\n", cons.lastLine())
	if cfg.Direct {
		d, err := connsDirect(ctx, cfg, ips[0], per, stderr)
		if err != nil {
			return res, fmt.Errorf("direct path: %w", err)
		}
		res.DirectBps = d
		fmt.Fprintf(stdout, "direct: the same workload straight to a consumer process, aggregate goodput %.1f MB/s; gateways/direct %.2f\n",
			d/1e6, s.GoodputBps/d)
	}
	return res, nil
}

// connsDirect runs the workload of a conns run on the direct path: the
// same count of connections, each with its share, from this process
// straight to a new consumer process on ip, every message verified. It
// returns the aggregate goodput in bytes per second: what the machine
// does with that many connections without gateways, to tell the cost of
// the count from the cost of the gateways.
func connsDirect(ctx context.Context, cfg Config, ip string, per int64, stderr io.Writer) (float64, error) {
	cons, err := startConsumerProcess(cfg.S2Bench, ip, cfg.Timeout, stderr)
	if err != nil {
		return 0, err
	}
	defer cons.stop()
	sem := make(chan struct{}, cfg.Dialers)
	dial := func(ctx context.Context, addr string) (*net.TCPConn, error) {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
		defer func() { <-sem }()
		d := net.Dialer{Timeout: 30 * time.Second}
		nc, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return nc.(*net.TCPConn), nil
	}
	h := bench.Hello{Mode: bench.Throughput, Spec: bench.Spec{Size: cfg.Size, Bytes: per, Seed: rand.Uint64(), Run: rand.Uint32()},
		Pairs: cfg.Conns, Path: record.PathDirect}
	h.Group = h.Spec.Run
	res, err := bench.RunRemote(ctx, cons.addr.String(), h, bench.RunOptions{Timeout: cfg.Timeout, Idle: cfg.Timeout, Dial: dial, EachMessage: true})
	if err != nil {
		return 0, err
	}
	if err := checkConnsResult(res, h); err != nil {
		return 0, err
	}
	if err := cons.wait(30 * time.Second); err != nil {
		return 0, err
	}
	return res.Summary.GoodputBps, nil
}

// connsRun is the outcome of the run's producers.
type connsRun struct {
	res *bench.RunResult
	err error
}

func perConnKiB(b int64, n int) float64 { return float64(b) / 1024 / float64(n) }

// checkConnsResult checks that every connection of the run delivered
// what its producer sent, as the consumer verified it.
func checkConnsResult(res *bench.RunResult, h bench.Hello) error {
	for i, p := range res.Pairs {
		switch {
		case p.Send == nil || p.Recv == nil:
			return fmt.Errorf("pair %d: no result from the consumer", i)
		case p.Send.Messages != h.Spec.Messages() || p.Recv.Messages != p.Send.Messages || p.Recv.Bytes != p.Send.Bytes:
			return fmt.Errorf("pair %d: the consumer verified %d messages, %d bytes; the producer sent %d, %d of %d",
				i, p.Recv.Messages, p.Recv.Bytes, p.Send.Messages, p.Send.Bytes, h.Spec.Messages())
		}
	}
	if res.Summary.GoodputBps <= 0 {
		return errors.New("run too short to time (every message arrived at once): raise --bytes")
	}
	return nil
}

// waitActive waits until both gateways relay n connections of the
// stream, and returns how many WAN dials the outbound gateway dialled
// again after the inbound reset them in its handshake cap (which a burst
// meets before the first leg authenticated, peerdial.Redial). It fails
// at once when the outbound gateway refused or aborted a connection, or
// the inbound aborted one, or the run ended (done received something: it
// is put back); once all are up, the inbound's refusals must be the dials
// the outbound dialled again, no more.
func waitActive(ctx context.Context, lp *localpair.Pair, n int64, done chan connsRun) (int64, error) {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		var stats [2]*api.Stats
		for i, side := range []struct {
			c interface {
				Get(context.Context, string) (*api.Stream, error)
			}
			uid string
		}{{lp.OutC, lp.OutS.UID}, {lp.InC, lp.InS.UID}} {
			st, err := side.c.Get(ctx, side.uid)
			if err != nil {
				return 0, fmt.Errorf("stream status: %w", err)
			}
			if st.Stats == nil {
				return 0, errors.New("gateway reported no stream statistics")
			}
			stats[i] = st.Stats
		}
		out, in := stats[0], stats[1]
		for i, s := range stats {
			if s.AbortedConns > 0 || i == 0 && s.RejectedConns > 0 {
				return 0, fmt.Errorf("the %s gateway refused %d and aborted %d connections (%v; last: %v)",
					[]string{"outbound", "inbound"}[i], s.RejectedConns, s.AbortedConns, s.AbortedByKind, s.LastErrors)
			}
		}
		if out.ActiveConns == n && in.ActiveConns == n {
			if in.RejectedConns != out.WANRedials {
				return 0, fmt.Errorf("the inbound gateway refused %d connections, the outbound dialled %d of them again", in.RejectedConns, out.WANRedials)
			}
			return out.WANRedials, nil
		}
		select {
		case r := <-done:
			done <- r
			return 0, fmt.Errorf("the run ended with %d and %d of them up", out.ActiveConns, in.ActiveConns)
		case <-ctx.Done():
			return 0, fmt.Errorf("%d up at the outbound gateway, %d at the inbound: %w", out.ActiveConns, in.ActiveConns, context.Cause(ctx))
		case <-t.C:
		}
	}
}

// consumerProcess is an s2bench consumer running as a child process.
type consumerProcess struct {
	cmd   *exec.Cmd
	addr  *net.TCPAddr
	exit  chan error // the process's exit status, once
	mu    sync.Mutex // guards last
	last  string     // the last line it printed
	lines sync.WaitGroup
}

// startConsumerProcess starts `s2bench consumer` for one run on ip and
// waits until it listens. timeout bounds the run's connections; its
// first 4 KiB of errors go to stderr.
func startConsumerProcess(bin, ip string, timeout time.Duration, stderr io.Writer) (*consumerProcess, error) {
	cmd := exec.Command(bin, "consumer", "--listen", net.JoinHostPort(ip, "0"), "--runs", "1",
		"--run_timeout", timeout.String(), "--idle_timeout", timeout.String())
	// Its first 4 KiB: a consumer that fails says so once per connection.
	cmd.Stderr = procs.LimitWriter(stderr, 4<<10)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	// As localgw does for s2cs: its own process group, and SIGTERM if we die.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the consumer %s: %w", bin, err)
	}
	p := &consumerProcess{cmd: cmd, exit: make(chan error, 1)}
	addrc := make(chan string, 1)
	p.lines.Add(1)
	go func() {
		defer p.lines.Done()
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			l := sc.Text()
			if a, ok := strings.CutPrefix(l, "s2bench consumer: listening on "); ok {
				addrc <- a
			}
			p.mu.Lock()
			p.last = l
			p.mu.Unlock()
		}
		io.Copy(io.Discard, out)
	}()
	go func() {
		p.lines.Wait() // Wait closes the pipe: read it all first
		p.exit <- cmd.Wait()
	}()
	select {
	case a := <-addrc:
		ta, err := net.ResolveTCPAddr("tcp", a)
		if err != nil {
			p.stop()
			return nil, fmt.Errorf("consumer address %q: %w", a, err)
		}
		p.addr = ta
		return p, nil
	case err := <-p.exit:
		p.exit <- err
		return nil, fmt.Errorf("the consumer %s exited before listening: %v", bin, err)
	case <-time.After(15 * time.Second):
		p.stop()
		return nil, errors.New("the consumer did not listen within 15 s")
	}
}

func (p *consumerProcess) pid() int { return p.cmd.Process.Pid }

func (p *consumerProcess) lastLine() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last
}

// wait waits up to d for the consumer to exit on its own (after its one
// run) and reports its exit status.
func (p *consumerProcess) wait(d time.Duration) error {
	select {
	case err := <-p.exit:
		p.exit <- err
		if err != nil {
			return fmt.Errorf("the consumer (pid %d) failed: %w (its output is above)", p.pid(), err)
		}
		return nil
	case <-time.After(d):
		return fmt.Errorf("the consumer (pid %d) did not exit within %s of the run's end", p.pid(), d)
	}
}

// stop ends the consumer by its PID if it still runs and waits for it.
// Idempotent.
func (p *consumerProcess) stop() error {
	select {
	case err := <-p.exit:
		p.exit <- err
		return nil
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.exit:
		p.exit <- err
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		p.exit <- <-p.exit
	}
	return nil
}

func mb(b int64) float64 { return float64(b) / 1e6 }
