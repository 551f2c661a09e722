package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"scistream/internal/api"
	"scistream/internal/bench"
	"scistream/internal/bytesize"
	"scistream/internal/exp/localpair"
	"scistream/internal/exp/procs"
	"scistream/internal/exp/record"
	"scistream/internal/gateway"
	"scistream/internal/localgw"
	"scistream/internal/ports"
)

// s2bench conns: many application connections at once through one local
// gateway pair (issue 13, "ten thousand connections"). It wires a stream
// as compare does, opens --conns producer connections through it and
// waits until both gateways relay every one of them (the accept rate),
// reads both gateways' resident memory with all of them open and idle,
// then has every connection send its share of --bytes at once, every
// message verified by an s2bench consumer in a process of its own, and
// reads the gateways' memory peak and CPU time meanwhile.
//
// The consumer is a separate process because the two ends of N
// connections need 2N descriptors, and this machine's hard limit may be
// below that (on the development VM it is 20,000 and cannot be raised).

type connsConfig struct {
	conns   int
	size    int
	bytes   int64 // payload over all connections
	dialers int   // connects in flight at once
	timeout time.Duration
	s2cs    string
	s2bench string
	engine  string
	wan     string
	direct  bool // also run the workload on the direct path
}

const connsUsage = `usage: s2bench conns [--conns 1000] [--wan tls|tcp|quic] [--engine splice] [--bytes 1GiB] [--size 16KiB]

Opens --conns application connections at once through one local gateway pair
(real s2cs processes) and prints: the accept rate (connections/s established
through both gateways), each gateway's resident memory per open connection
(RSS with all open minus RSS before, divided by the count) while idle and at
the peak of the transfer, the aggregate goodput of --bytes split over every
connection (every message verified by an s2bench consumer process), and the
gateways' CPU per GB; then (unless --direct=false) the same workload straight
to a consumer, so the cost of the count shows apart from the gateways'. Each gateway holds 2 descriptors per connection over
tls and tcp (the application's socket and the WAN leg's; splice on tcp adds
2 pipes) and 1 over quic (one UDP socket carries every stream): the count
must fit the file-descriptor limit, which the command checks first.`

func parseConns(args []string, stderr io.Writer) (*connsConfig, error) {
	fs := flag.NewFlagSet("s2bench conns", flag.ContinueOnError)
	conns := fs.Int("conns", 1000, "application connections open at once")
	size := fs.String("size", "16KiB", "message size")
	total := fs.String("bytes", "1GiB", "payload of the transfer, split evenly over the connections")
	dialers := fs.Int("dialers", 128, "connects in flight at once while the connections open")
	timeout := fs.Duration("timeout", 3*time.Minute, "upper bound of the whole experiment once the gateways run")
	s2cs := fs.String("s2cs", "", "s2cs binary (default: next to s2bench, ./bin, PATH)")
	s2b := fs.String("s2bench", "", "s2bench binary for the consumer process (default: this program if it is s2bench, else next to it, ./bin, PATH)")
	engine := fs.String("engine", "splice", "data-plane engine of both gateways")
	wanT := fs.String("wan", api.WANTLS, "WAN transport: tls, tcp or quic")
	direct := fs.Bool("direct", true, "then run the same workload straight to a consumer (no gateways) and print the ratio")
	if err := parseFlags(fs, args, connsUsage, stderr); err != nil {
		return nil, err
	}
	cfg := &connsConfig{conns: *conns, dialers: *dialers, timeout: *timeout, s2cs: *s2cs, s2bench: *s2b, engine: *engine, wan: *wanT, direct: *direct}
	sz, err := bytesize.Parse(*size)
	switch {
	case err != nil:
		return nil, usagef("--size %v", err)
	case sz < 1 || sz > bench.MaxSize:
		return nil, usagef("--size %s out of range: give 1B to %s", *size, bytesize.Format(bench.MaxSize))
	}
	cfg.size = int(sz)
	if cfg.bytes, err = bytesize.Parse(*total); err != nil {
		return nil, usagef("--bytes %v", err)
	}
	switch {
	case cfg.conns < 1 || cfg.conns > bench.MaxPairs:
		return nil, usagef("--conns %d out of range: give 1 to %d", cfg.conns, bench.MaxPairs)
	case cfg.bytes/int64(cfg.conns) < 2*int64(cfg.size):
		return nil, usagef("--bytes %s gives each of %d connections less than two %s messages: raise --bytes or lower --size", *total, cfg.conns, *size)
	case cfg.bytes > 1<<40:
		return nil, usagef("--bytes %s out of range: give at most 1TiB", *total)
	case cfg.dialers < 1 || cfg.dialers > 4096:
		return nil, usagef("--dialers %d out of range: give 1 to 4096", cfg.dialers)
	case cfg.timeout < 5*time.Second || cfg.timeout > time.Hour:
		return nil, usagef("--timeout %s out of range: give 5s to 1h", cfg.timeout)
	case cfg.wan != api.WANTLS && cfg.wan != api.WANTCP && cfg.wan != api.WANQUIC:
		return nil, usagef("--wan %q: use tls, tcp or quic", cfg.wan)
	}
	if cfg.s2cs == "" {
		if cfg.s2cs, err = localgw.FindBinary("s2cs"); err != nil {
			return nil, usagef("%v", err)
		}
	}
	if cfg.s2bench == "" {
		if cfg.s2bench, err = findSelf(); err != nil {
			return nil, usagef("%v", err)
		}
	}
	return cfg, nil
}

// findSelf returns the s2bench binary: this program when it is s2bench
// (not a test binary), else localgw's search.
func findSelf() (string, error) {
	if exe, err := os.Executable(); err == nil && strings.HasPrefix(baseName(exe), "s2bench") && !strings.HasSuffix(exe, ".test") {
		return exe, nil
	}
	return localgw.FindBinary("s2bench")
}

func baseName(p string) string { return p[strings.LastIndexByte(p, '/')+1:] }

// gatewayPorts is the port range localgw gives a gateway, in which the
// gateway plans its open files.
var gatewayPorts = ports.Range{Lo: 5100, Hi: 5199}

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

// checkConnsFit refuses a count the gateways cannot hold within the
// hard limit of open files, with the gateway's own arithmetic
// (gateway.Config.Files). The producer and the consumer process hold one
// per connection, never more than a gateway.
func checkConnsFit(cfg *connsConfig, hard int) error {
	gc := gateway.Config{ListenerIP: "127.0.0.1", PortRange: gatewayPorts, FileLimit: hard - 1, MaxActiveConns: gatewayCap(cfg.wan, cfg.conns)}
	if _, err := gc.Files(); err != nil {
		var ce *gateway.ConfigError
		errors.As(err, &ce)
		alt := ""
		if cfg.wan != api.WANQUIC {
			alt = "; over quic a connection holds one file, not two (--wan quic)"
		}
		return usagef("--conns %d over %s does not fit the gateways' limit of open files: s2cs --max_active_conns %s%s", cfg.conns, cfg.wan, ce.Problem, alt)
	}
	return nil
}

func runConns(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseConns(args, stderr)
	if err != nil {
		return err
	}
	return conns(ctx, cfg, stdout, stderr)
}

func conns(ctx context.Context, cfg *connsConfig, stdout, stderr io.Writer) (err error) {
	hard, err := procs.NoFileLimit()
	if err != nil {
		return err
	}
	if err := checkConnsFit(cfg, hard); err != nil {
		return err
	}
	if err := procs.RaiseNoFile(uint64(cfg.conns + 256)); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeoutCause(ctx, cfg.timeout, fmt.Errorf("the experiment did not finish within --timeout %s", cfg.timeout))
	defer cancel()

	ips, err := localgw.DistinctLoopbacks(1)
	if err != nil {
		return err
	}
	cons, err := startConsumerProcess(cfg.s2bench, ips[0], cfg.timeout)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := cons.stop(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	maxActive := gatewayCap(cfg.wan, cfg.conns)
	lp, err := localpair.Start(ctx, localpair.Config{S2CS: cfg.s2cs, Engine: cfg.engine, WAN: cfg.wan, Consumer: cons.addr,
		Args: []string{"--max_active_conns", strconv.Itoa(maxActive)}})
	if err != nil {
		return err
	}
	defer func() {
		if cerr := lp.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("clean up: %w", cerr))
		}
	}()
	per := cfg.bytes / int64(cfg.conns) / int64(cfg.size) * int64(cfg.size)
	fmt.Fprintf(stdout, "s2bench conns: %d connections at once over %s, engine %s, %s messages, %s per connection (%s in all)\n",
		cfg.conns, cfg.wan, cfg.engine, bytesize.Format(int64(cfg.size)), bytesize.Human(per), bytesize.Human(per*int64(cfg.conns)))
	fmt.Fprintf(stdout, "gateways: %s\n", lp.Describe())
	fmt.Fprintf(stdout, "open files: hard limit %d per process; gateways run with --max_active_conns %d (%d files per connection over %s); this producer process and the consumer process (pid %d) hold 1 per connection\n",
		hard, maxActive, gatewayCap(cfg.wan, 2), cfg.wan, cons.pid())

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
		return err
	}

	// Producers: each dials through a bounded number of connects in
	// flight, then waits at the gate until every connection is up.
	gate := make(chan struct{})
	var gateOnce sync.Once
	openGate := func() { gateOnce.Do(func() { close(gate) }) }
	defer openGate()
	sem := make(chan struct{}, cfg.dialers)
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
	h := bench.Hello{Mode: bench.Throughput, Spec: bench.Spec{Size: cfg.size, Bytes: per, Seed: rand.Uint64(), Run: rand.Uint32()},
		Pairs: cfg.conns, Path: record.PathGateways}
	h.Group = h.Spec.Run
	done := make(chan connsRun, 1)
	start := time.Now()
	go func() {
		res, err := bench.RunRemote(ctx, lp.Target(), h, bench.RunOptions{Timeout: cfg.timeout, Idle: cfg.timeout, Dial: dial, EachMessage: true})
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
	redials, err := waitActive(ctx, lp, int64(cfg.conns), done)
	if err != nil {
		return fmt.Errorf("open %d connections: %w", cfg.conns, err)
	}
	established := time.Since(start)
	open, err := rssOf()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "established: %d connections through both gateways in %.2f s: %.0f connections/s\n",
		cfg.conns, established.Seconds(), float64(cfg.conns)/established.Seconds())
	if redials > 0 {
		fmt.Fprintf(stdout, "  the inbound gateway reset %d WAN dials in its cap of connections in their handshake (before the first leg authenticated); the outbound dialled them again\n", redials)
	}
	for _, role := range []string{"outbound", "inbound"} {
		fmt.Fprintf(stdout, "  %-8s gateway RSS %.1f MB before, %.1f MB with all open: %.1f KiB per connection\n",
			role, mb(before[role]), mb(open[role]), perConnKiB(open[role]-before[role], cfg.conns))
	}

	// Transfer: every connection at once.
	watches := map[string]*procs.RSSWatch{}
	for role, pid := range pids {
		watches[role] = procs.WatchRSS(pid)
		defer watches[role].Stop()
	}
	cpu0, err := lp.CPU()
	if err != nil {
		return err
	}
	openGate()
	r = <-done
	got = true
	cpu1, cerr := lp.CPU()
	if r.err != nil {
		return fmt.Errorf("transfer: %w", r.err)
	}
	if err := checkConnsResult(r.res, h); err != nil {
		return err
	}
	s := r.res.Summary
	fmt.Fprintf(stdout, "transfer: %s verified on %d connections, aggregate goodput %.1f MB/s", bytesize.Human(s.Bytes), s.Pairs, s.GoodputBps/1e6)
	if cerr == nil && s.Bytes > 0 {
		fmt.Fprintf(stdout, ", gateways' CPU %.2f s/GB", (cpu1-cpu0).Seconds()/(float64(s.Bytes)/1e9))
	}
	fmt.Fprintln(stdout)
	for _, role := range []string{"outbound", "inbound"} {
		peak := watches[role].Peak()
		fmt.Fprintf(stdout, "  %-8s gateway RSS peak %.1f MB during the transfer: %.1f KiB per connection\n",
			role, mb(peak), perConnKiB(peak-before[role], cfg.conns))
	}
	if err := cons.wait(30 * time.Second); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "consumer: %s\n", cons.lastLine())
	if cfg.direct {
		d, err := connsDirect(ctx, cfg, ips[0], per)
		if err != nil {
			return fmt.Errorf("direct path: %w", err)
		}
		fmt.Fprintf(stdout, "direct: the same workload straight to a consumer process, aggregate goodput %.1f MB/s; gateways/direct %.2f\n",
			d/1e6, s.GoodputBps/d)
	}
	return nil
}

// connsDirect runs the workload of a conns run on the direct path: the
// same count of connections, each with its share, from this process
// straight to a new consumer process on ip, every message verified. It
// returns the aggregate goodput in bytes per second: what the machine
// does with that many connections without gateways, to tell the cost of
// the count from the cost of the gateways.
func connsDirect(ctx context.Context, cfg *connsConfig, ip string, per int64) (float64, error) {
	cons, err := startConsumerProcess(cfg.s2bench, ip, cfg.timeout)
	if err != nil {
		return 0, err
	}
	defer cons.stop()
	sem := make(chan struct{}, cfg.dialers)
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
	h := bench.Hello{Mode: bench.Throughput, Spec: bench.Spec{Size: cfg.size, Bytes: per, Seed: rand.Uint64(), Run: rand.Uint32()},
		Pairs: cfg.conns, Path: record.PathDirect}
	h.Group = h.Spec.Run
	res, err := bench.RunRemote(ctx, cons.addr.String(), h, bench.RunOptions{Timeout: cfg.timeout, Idle: cfg.timeout, Dial: dial, EachMessage: true})
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
// meets before the first leg authenticated, gateway/redial.go). It fails
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
// waits until it listens. timeout bounds the run's connections.
func startConsumerProcess(bin, ip string, timeout time.Duration) (*consumerProcess, error) {
	cmd := exec.Command(bin, "consumer", "--listen", net.JoinHostPort(ip, "0"), "--runs", "1",
		"--run_timeout", timeout.String(), "--idle_timeout", timeout.String())
	// Its first 4 KiB: a consumer that fails says so once per connection.
	cmd.Stderr = procs.LimitWriter(os.Stderr, 4<<10)
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
