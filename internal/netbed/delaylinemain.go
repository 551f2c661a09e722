package netbed

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"
)

// DelayLineMain is the delay-line process: it runs in a router's
// namespace, attaches to the TUN device and forwards until ctx ends
// (SIGTERM). It prints "delayline: ready pid PID" once attached, and its
// counters when it ends.
func DelayLineMain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("delayline", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg DelayLineConfig
	fs.StringVar(&cfg.Dev, "dev", "", "TUN device")
	fs.DurationVar(&cfg.Delay, "delay", 0, "one-way delay")
	fs.IntVar(&cfg.QueueBytes, "queue_bytes", 0, "bytes held at most (drop-tail); 0: 64 MiB")
	fs.Float64Var(&cfg.Loss, "loss", 0, "probability of losing a packet, 0..1")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "seed of the random losses")
	fs.Int64Var(&cfg.FlowRate, "flow_rate", 0, "police each TCP flow to this many bits per second, each direction (0: none)")
	fs.String("testbed", "", "name of the testbed (marks the process as its own)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	d, err := OpenDelayLine(cfg)
	if err != nil {
		return err
	}
	defer d.Close()
	fmt.Fprintf(stdout, "delayline: ready pid %d on %s, delay %s, loss %g, queue %d bytes, per-flow rate %d bit/s\n", os.Getpid(), cfg.Dev, cfg.Delay, cfg.Loss, cfg.QueueBytes, cfg.FlowRate)
	start := time.Now()
	err = d.Run(ctx)
	s := d.Stats()
	fmt.Fprintf(stdout, "delayline: stopped after %s: %d packets forwarded, %d dropped (queue full), %d lost (random), %d policed (over the flow's rate), %d late by >100us\n",
		time.Since(start).Round(time.Millisecond), s.Forwarded, s.Dropped, s.Lost, s.Policed, s.Late)
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
