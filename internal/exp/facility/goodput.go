package facility

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"scistream/internal/api"
	"scistream/internal/bench"
	"scistream/internal/bytesize"
	"scistream/internal/client"
	"scistream/internal/exp/record"
	"scistream/internal/exp/workload"
	"scistream/internal/localgw"
)

// facSetup is one configuration of the goodput experiment: a consumer
// and a producer facility of k nodes each and the stream wired through
// them.
type facSetup struct {
	k          int
	cons, prod *facNodes
	inS, outS  *api.Stream
	// consUsed and prodUsed count the distinct nodes serving the
	// stream's channels on each side.
	consUsed, prodUsed int
}

func (s *facSetup) path() string { return "nodes" + strconv.Itoa(s.k) }

// cpu is the CPU time of every node of both facilities.
func (s *facSetup) cpu() (time.Duration, error) {
	c, err := s.cons.cpu()
	if err != nil {
		return 0, err
	}
	p, err := s.prod.cpu()
	return c + p, err
}

// close releases the stream (producer side first) and stops the nodes.
func (s *facSetup) close() error {
	var errs []error
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for _, side := range []struct {
		f  *facNodes
		st *api.Stream
	}{{s.prod, s.outS}, {s.cons, s.inS}} {
		if side.st == nil || side.f.live(-1) < 0 {
			continue
		}
		if _, err := side.f.cls[side.f.live(-1)].Release(ctx, side.st.UID); err != nil {
			errs = append(errs, fmt.Errorf("release on %s: %w", side.f.name, err))
		}
	}
	for _, f := range []*facNodes{s.prod, s.cons} {
		if f != nil {
			errs = append(errs, f.stop())
		}
	}
	return errors.Join(errs...)
}

// wireFacilities wires a stream of numConn channels from the producer
// facility's first node to consumer through the consumer facility's
// first node, as s2uc stream does.
func wireFacilities(ctx context.Context, cons, prod *facNodes, consumer *net.TCPAddr, numConn int, wan string) (*api.Stream, *api.Stream, error) {
	return client.Wire(ctx, cons.cls[0], prod.cls[0],
		&api.InboundRequest{RemoteIP: consumer.IP.String(), ReceiverPorts: []int{consumer.Port}, NumConn: numConn, WAN: wan},
		api.OutboundRequest{NumConn: numConn, Allow: []string{"127.0.0.0/8"}}, nil)
}

// nodesUsed counts the distinct nodes serving chans; a channel without
// a node fails.
func nodesUsed(chans []api.Channel) (int, error) {
	seen := map[string]bool{}
	for _, c := range chans {
		if c.Node == "" {
			return 0, fmt.Errorf("channel %d is served by no node", c.Channel)
		}
		seen[c.Node] = true
	}
	return len(seen), nil
}

// roundRobin is a bench.RunOptions.Dial that connects each producer to
// the next of targets in turn: the run's connections spread evenly over
// a stream's channels.
func roundRobin(targets []string, timeout time.Duration) func(context.Context, string) (*net.TCPConn, error) {
	var next atomic.Int64
	return func(ctx context.Context, _ string) (*net.TCPConn, error) {
		addr := targets[int(next.Add(1)-1)%len(targets)]
		d := net.Dialer{Timeout: timeout}
		nc, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return nc.(*net.TCPConn), nil
	}
}

func facGoodput(ctx context.Context, cfg *Config, env *facEnv, stdout io.Writer) (recs []Record, err error) {
	ips, err := localgw.DistinctLoopbacks(1)
	if err != nil {
		return nil, err
	}
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.ParseIP(ips[0])})
	if err != nil {
		return nil, fmt.Errorf("consumer listener: %w", err)
	}
	defer ln.Close()
	var setups []*facSetup
	defer func() {
		for _, s := range setups {
			if cerr := s.close(); cerr != nil {
				err = errors.Join(err, fmt.Errorf("clean up: %w", cerr))
			}
		}
	}()
	fmt.Fprintf(stdout, "\ngoodput: one stream of %d channels through facilities of %v nodes each, %d connections spread over its channels, %s of %s messages per run\n",
		cfg.NumConn, cfg.Nodes, cfg.Conns, bytesize.Format(cfg.Bytes), bytesize.Format(int64(cfg.Size)))
	for _, k := range cfg.Nodes {
		s := &facSetup{k: k}
		setups = append(setups, s)
		if s.cons, err = env.startFacNodes(ctx, fmt.Sprintf("gp%d-cons", k), k); err != nil {
			return nil, err
		}
		if s.prod, err = env.startFacNodes(ctx, fmt.Sprintf("gp%d-prod", k), k); err != nil {
			return nil, err
		}
		if s.inS, s.outS, err = wireFacilities(ctx, s.cons, s.prod, ln.Addr().(*net.TCPAddr), cfg.NumConn, cfg.WAN); err != nil {
			return nil, fmt.Errorf("%d node(s): wire the stream: %w", k, err)
		}
		if s.consUsed, err = nodesUsed(s.inS.Channels); err == nil {
			s.prodUsed, err = nodesUsed(s.outS.Channels)
		}
		if err != nil {
			return nil, fmt.Errorf("%d node(s), stream %s: %w", k, s.inS.UID, err)
		}
		fmt.Fprintf(stdout, "  %d node(s) per facility: consumer side pids %v, producer side pids %v; stream %s on %d+%d nodes, producers connect to %v\n",
			k, s.cons.pids(), s.prod.pids(), s.outS.UID, s.consUsed, s.prodUsed, s.outS.Listeners)
	}

	tag, seed := rand.Uint32(), rand.Uint64()
	per := cfg.Bytes / int64(cfg.Conns) / int64(cfg.Size) * int64(cfg.Size)
	total := cfg.Reps * (1 + len(setups))
	for rep := 1; rep <= cfg.Reps; rep++ {
		for i := -1; i < len(setups); i++ {
			var s *facSetup
			path := record.PathDirect
			if i >= 0 {
				s, path = setups[i], setups[i].path()
			}
			h := bench.Hello{Mode: bench.Throughput, Spec: bench.Spec{Size: cfg.Size, Bytes: per, Seed: seed, Run: tag},
				Group: tag, Pairs: cfg.Conns, Path: path}
			tag += uint32(cfg.Conns)
			rec, rerr := facGoodputRun(ctx, cfg, ln, s, h)
			rec.Rep = rep
			fr := Record{Experiment: "goodput", Rep: rep, NumConn: cfg.NumConn, Run: &rec}
			if s != nil {
				fr.Nodes, fr.ConsNodesUsed, fr.ProdNodesUsed = s.k, s.consUsed, s.prodUsed
			}
			recs = append(recs, fr)
			fmt.Fprintf(stdout, "run %d/%d %-8s rep %d %9.1f MB/s%s%s  %s\n", len(recs), total, path, rep, rec.GoodputMBps, record.CPUText(rec), record.PairsText(rec), record.Status(ctx, rerr))
			if rerr != nil {
				return recs, fmt.Errorf("%s run %d: %w", path, rep, rerr)
			}
		}
	}
	printFacGoodput(stdout, recs)
	return recs, nil
}

// facGoodputRun runs h once: directly to ln when s is nil, else through
// s's stream with the producers spread over its channels; it checks
// that every connection took that path and measures the CPU time of
// every node of s.
func facGoodputRun(ctx context.Context, cfg *Config, ln *net.TCPListener, s *facSetup, h bench.Hello) (record.Record, error) {
	rec := record.Record{Path: h.Path, SizeBytes: h.Spec.Size, Pairs: h.Pairs, Mode: h.Mode.String(), Workload: workload.Fixed, Engine: cfg.Engine, WAN: cfg.WAN}
	o := bench.RunOptions{Timeout: cfg.RunTimeout}
	var cpu0 time.Duration
	if s != nil {
		o.Dial = roundRobin(s.outS.Listeners, 30*time.Second)
		var err error
		if cpu0, err = s.cpu(); err != nil {
			return rec, err
		}
	}
	res, err := bench.Run(ctx, ln, ln.Addr().String(), h, o)
	rec.Fill(res)
	if s != nil && rec.Bytes > 0 {
		if cpu1, cerr := s.cpu(); cerr == nil {
			sec := (cpu1 - cpu0).Seconds()
			perGB := sec / (float64(rec.Bytes) / 1e9)
			rec.GwCPUS, rec.GwCPUSPerGB = &sec, &perGB
		}
	}
	if err == nil {
		for i, p := range res.Pairs {
			switch {
			case s == nil && p.Recv.Remote != p.Send.Local:
				err = fmt.Errorf("direct run, pair %d: the consumer saw %s, not the producer %s", i, p.Recv.Remote, p.Send.Local)
			case s != nil && p.Recv.Remote == p.Send.Local:
				err = fmt.Errorf("%s run, pair %d: the consumer saw the producer %s itself", h.Path, i, p.Send.Local)
			case p.Recv.Measure.Messages != p.Send.Messages || p.Recv.Measure.Bytes != p.Send.Bytes:
				err = fmt.Errorf("pair %d: verified %d messages, %d bytes; the producer sent %d, %d", i, p.Recv.Measure.Messages, p.Recv.Measure.Bytes, p.Send.Messages, p.Send.Bytes)
			}
			if err != nil {
				break
			}
		}
	}
	if err == nil && res.Summary.GoodputBps <= 0 {
		err = errors.New("run too short to time (every message arrived at once): raise --bytes")
	}
	if err != nil {
		rec.Error = err.Error()
		return rec, err
	}
	rec.IntegrityOK = true
	return rec, nil
}

// printFacGoodput prints one row per path: the median, least and
// greatest goodput over the repetitions, the median CPU per GB of every
// node together, and the ratio to the direct path's median.
func printFacGoodput(w io.Writer, recs []Record) {
	var order []string
	byPath := map[string][]Record{}
	for _, r := range recs {
		if r.Run == nil {
			continue
		}
		if _, ok := byPath[r.Run.Path]; !ok {
			order = append(order, r.Run.Path)
		}
		byPath[r.Run.Path] = append(byPath[r.Run.Path], r)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "path\tnodes/side\tchannels on (cons+prod)\truns\tgoodput MB/s\tmin\tmax\tnodes' cpu_s/GB\tvs direct\t")
	var direct float64
	for _, p := range order {
		rs := byPath[p]
		var gp, cpu []float64
		for _, r := range rs {
			if r.Run.IntegrityOK {
				gp = append(gp, r.Run.GoodputMBps)
				if r.Run.GwCPUSPerGB != nil {
					cpu = append(cpu, *r.Run.GwCPUSPerGB)
				}
			}
		}
		med := bench.Median(gp)
		lo, hi := bench.MinMax(gp)
		nodes, on, cpuS, ratio := "-", "-", "-", ""
		if p == record.PathDirect {
			direct = med
		} else {
			nodes, on = strconv.Itoa(rs[0].Nodes), fmt.Sprintf("%d+%d", rs[0].ConsNodesUsed, rs[0].ProdNodesUsed)
			if len(cpu) > 0 {
				cpuS = fmt.Sprintf("%.2f", bench.Median(cpu))
			}
			if direct > 0 {
				ratio = fmt.Sprintf("%.3f", med/direct)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%.1f\t%.1f\t%.1f\t%s\t%s\t\n", p, nodes, on, len(rs), med, lo, hi, cpuS, ratio)
	}
	tw.Flush()
	fmt.Fprintln(w, "(goodput = 10^6 payload bytes/s at the consumer, every message verified, median over the runs; nodes' cpu_s/GB = user+system")
	fmt.Fprintln(w, " CPU seconds of every node of both facilities together per 10^9 payload bytes. All nodes share this host's cores and")
	fmt.Fprintln(w, " its loopback, so more nodes cannot add goodput here; what they cost per GB is what a node of its own would spend.")
	fmt.Fprintln(w, " With one NIC per node, a stream's channels on k nodes can carry up to k times one node's rate, when the channels")
	fmt.Fprintln(w, " carry similar shares and the peer facility and the WAN have the capacity.)")
}
