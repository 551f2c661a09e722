package localpair

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"time"

	"scistream/internal/bench"
	"scistream/internal/exp/progress"
	"scistream/internal/exp/record"
)

// Route is where a run over one path goes.
type Route struct {
	LN     *net.TCPListener // the consumer's listener; required
	Target string           // where the producers connect; required
	// Peer, if set, is the IP address the consumer must see every
	// connection come from (the testbed's producer or consumer gateway);
	// empty: any.
	Peer string
	// CPU, if set, returns the CPU time used so far by the proxies of
	// this path; nil: the pair's gateways' on the gateway path, none on
	// another.
	CPU func() (time.Duration, error)
}

// Route returns compare's route for path: the pair's one consumer
// listener, reached through the gateways (record.PathGateways) or else
// directly.
func (lp *Pair) Route(path string) Route {
	if path == record.PathGateways {
		return Route{LN: lp.Consumer, Target: lp.Target()}
	}
	return Route{LN: lp.Consumer, Target: lp.Consumer.Addr().String()}
}

// RunPath runs h once over rt, bounded by o, and checks that every
// connection took h.Path: directly (record.PathDirect), the consumer sees
// the producer's own address; through the gateways
// (record.PathGateways), it sees a gateway, the gateways counted every
// byte of the run (a warning on stderr if not), and the record holds
// their view of its rate; with rt.Peer, the consumer sees that address.
// On the gateway path, and wherever rt.CPU is set, it also measures the
// proxies' CPU time. prog shows the run's progress under label. The
// record holds what was measured also when the run failed.
func RunPath(ctx context.Context, lp *Pair, h bench.Hello, rt Route, o bench.RunOptions, prog *progress.Display, label string, stderr io.Writer) (record.Record, error) {
	rec := record.Record{Path: h.Path, SizeBytes: h.Spec.Size, Pairs: h.Pairs, Mode: h.Mode.String(), RateMsgsPerS: h.Rate}
	if o.Duration > 0 {
		rec.DurationS = o.Duration.Seconds()
	}
	gw := h.Path == record.PathGateways
	cpuOf := rt.CPU
	if cpuOf == nil && gw {
		cpuOf = lp.CPU
	}
	var (
		sent0, recv0 int64
		cpu0         time.Duration
		err          error
	)
	if gw {
		if sent0, recv0, err = lp.WANBytes(ctx); err != nil {
			return rec, fmt.Errorf("stream statistics: %w", err)
		}
	}
	if cpuOf != nil {
		if cpu0, err = cpuOf(); err != nil {
			return rec, err
		}
	}
	var counter atomic.Int64
	want := h.Spec.Bytes * int64(h.Pairs)
	prog.Start(label, &counter, want)
	o.Progress = &counter
	res, err := bench.Run(ctx, rt.LN, rt.Target, h, o)
	prog.End()
	rec.Fill(res)
	if cpuOf != nil {
		if cpu1, cerr := cpuOf(); cerr == nil && rec.Bytes > 0 {
			s := (cpu1 - cpu0).Seconds()
			perGB := s / (float64(rec.Bytes) / 1e9)
			rec.GwCPUS, rec.GwCPUSPerGB = &s, &perGB
		}
	}
	if err != nil {
		rec.Error = err.Error()
		return rec, err
	}
	var wire int64
	for i, p := range res.Pairs {
		host, _, _ := net.SplitHostPort(p.Recv.Remote)
		switch {
		case h.Path == record.PathDirect && p.Recv.Remote != p.Send.Local:
			err = fmt.Errorf("direct run, pair %d: the consumer saw %s, not the producer %s", i, p.Recv.Remote, p.Send.Local)
		case h.Path != record.PathDirect && p.Recv.Remote == p.Send.Local:
			err = fmt.Errorf("%s run, pair %d: the consumer saw the producer %s itself", h.Path, i, p.Send.Local)
		case rt.Peer != "" && host != rt.Peer:
			err = fmt.Errorf("%s run, pair %d: the consumer saw %s, want %s", h.Path, i, p.Recv.Remote, rt.Peer)
		case p.Recv.Measure.Messages != p.Send.Messages || p.Recv.Measure.Bytes != p.Send.Bytes:
			err = fmt.Errorf("pair %d: verified %d messages, %d bytes; the producer sent %d, %d", i, p.Recv.Measure.Messages, p.Recv.Measure.Bytes, p.Send.Messages, p.Send.Bytes)
		case !h.Spec.Open() && p.Send.Messages != h.Spec.Messages():
			err = fmt.Errorf("pair %d: sent %d messages, want %d", i, p.Send.Messages, h.Spec.Messages())
		}
		if err != nil {
			rec.Error = err.Error()
			return rec, err
		}
		wire += bench.HelloLen + p.Send.Bytes + p.Send.Messages*bench.HeaderLen
		if h.Spec.Open() {
			wire += bench.HeaderLen
		}
	}
	if res.Summary.GoodputBps <= 0 {
		err = fmt.Errorf("run too short to time (every message arrived at once): raise --bytes")
		rec.Error = err.Error()
		return rec, err
	}
	if gw {
		sent1, recv1, err := lp.WANBytes(ctx)
		if err != nil {
			return rec, fmt.Errorf("stream statistics: %w", err)
		}
		if sent1-sent0 != wire || recv1-recv0 != wire {
			fmt.Fprintf(stderr, "s2bench: warning: the gateways counted %d bytes sent and %d received on the WAN for this run; the run carried %d\n",
				sent1-sent0, recv1-recv0, wire)
		}
		if out, in, err := lp.runRates(ctx, wire); err != nil {
			rec.GwRateNote = err.Error()
		} else {
			setGwRates(&rec, out, in)
		}
		if rec.GwOutSteadyMBps != nil {
			ratio := (*rec.GwOutSteadyMBps + *rec.GwInSteadyMBps) / 2 / (rec.GoodputMBps * float64(wire) / float64(rec.Bytes))
			rec.GwOverGoodput = &ratio
		}
		if rec.GwRateNote != "" && ctx.Err() == nil {
			fmt.Fprintf(stderr, "s2bench: the gateways' rates of this run: %s\n", rec.GwRateNote)
		}
	}
	rec.IntegrityOK = true
	return rec, nil
}
