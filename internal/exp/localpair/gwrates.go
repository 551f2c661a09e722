package localpair

import (
	"context"
	"errors"
	"fmt"
	"time"

	"scistream/internal/api"
	"scistream/internal/exp/record"
)

// The gateways' own view of a gateway run, printed next to s2bench's
// goodput: each gateway samples the stream's byte counters every
// --rate_interval and keeps the steady state of each run of samples in
// which bytes moved, ramp-up and tail left out (api.Rates). A gateway run
// of compare is one such run on both gateways, in the forward direction
// (the outbound gateway's to_wan, the inbound one's from_wan), as long as
// the stream was idle for a sample before and after it, which the direct
// run between two gateway runs sees to. The gateways count the bytes on
// the wire (message headers and the run header included), so their rate
// is set against the goodput scaled to those bytes.

// gwRun is what one gateway saw of a run.
type gwRun struct {
	steady  api.RateStat
	samples int64 // of the run, ramp-up and tail included
	trim    int   // samples left out at each end
}

// runRates waits until both gateways closed the run of samples that
// carried the last gateway run (wire bytes forward) and returns what
// they saw. It gives up, with an error that says why, if the gateways'
// last run carried other than wire bytes (the run stalled for a whole
// sampling interval, which split it, or runs closer than an interval
// merged), or if no idle sample closes the run within three sampling
// intervals and a second.
func (lp *Pair) runRates(ctx context.Context, wire int64) (out, in gwRun, err error) {
	var deadline time.Time
	for {
		o, err1 := lp.OutC.Get(ctx, lp.OutS.UID)
		i, err2 := lp.InC.Get(ctx, lp.InS.UID)
		if err := errors.Join(err1, err2); err != nil {
			return out, in, err
		}
		if o.Stats == nil || o.Stats.Rates == nil || i.Stats == nil || i.Stats.Rates == nil {
			return out, in, errors.New("the gateways report no rates (an s2cs older than s2bench?)")
		}
		or, ir := o.Stats.Rates, i.Stats.Rates
		if deadline.IsZero() {
			deadline = time.Now().Add(time.Duration(3*max(or.IntervalS, ir.IntervalS)*float64(time.Second)) + time.Second)
		}
		ro, ri := or.ToWAN.LastRun, ir.FromWAN.LastRun
		if ro != nil && ri != nil && ro.Ended && ri.Ended {
			if ro.Bytes != wire || ri.Bytes != wire {
				return out, in, fmt.Errorf("the gateways' last run of samples carried %d and %d bytes, the run %d: it stalled for a whole sampling interval (which splits it), or runs less than an interval apart merged", ro.Bytes, ri.Bytes, wire)
			}
			return gwRun{ro.Steady, ro.Samples, or.TrimSamples}, gwRun{ri.Steady, ri.Samples, ir.TrimSamples}, nil
		}
		if time.Now().After(deadline) {
			return out, in, errors.New("the gateways did not see the run end (no idle sample after it)")
		}
		select {
		case <-ctx.Done():
			return out, in, ctx.Err()
		case <-time.After(time.Duration(or.IntervalS * float64(time.Second) / 4)):
		}
	}
}

// setGwRates puts what the gateways saw of the run into rec.
func setGwRates(rec *record.Record, out, in gwRun) {
	if out.steady.Samples == 0 || in.steady.Samples == 0 {
		rec.GwRateNote = fmt.Sprintf("the run lasted %d samples, too few for a steady state (%d left out at each end): raise --bytes or lower --rate_interval", min(out.samples, in.samples), out.trim)
		return
	}
	f := func(x float64) *float64 { x /= 1e6; return &x }
	rec.GwOutSteadyMBps, rec.GwOutSteadySDMBps = f(out.steady.MeanBps), f(out.steady.StddevBps)
	rec.GwInSteadyMBps, rec.GwInSteadySDMBps = f(in.steady.MeanBps), f(in.steady.StddevBps)
	rec.GwSteadySamples = min(out.steady.Samples, in.steady.Samples)
}
