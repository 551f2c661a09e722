package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"
)

// RunOptions bound one run.
type RunOptions struct {
	// Timeout bounds the whole run. If zero, 5 minutes.
	Timeout time.Duration
	// Idle bounds every wait for progress: the connection reaching the
	// consumer, each read and each write. If zero, 30 seconds.
	Idle time.Duration
}

func (o *RunOptions) defaults() {
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Minute
	}
	if o.Idle <= 0 {
		o.Idle = 30 * time.Second
	}
}

// RunResult is the outcome of one run.
type RunResult struct {
	// Measure is what the consumer measured (of the verified messages,
	// also when the run failed).
	Measure
	// Consumer is the remote address of the connection the consumer
	// accepted: the producer itself, or the gateway in front of it.
	Consumer string
	// Producer is the local address of the producer's connection.
	Producer string
}

// Run sends the workload of spec over one TCP connection: a producer
// dials target and sends every message as fast as it can, then half-closes
// and waits for the consumer's end of stream; a consumer accepts exactly
// one connection on ln, verifies every byte as it arrives (count, order,
// content) and closes when the producer's end of stream arrives. The
// connection is aborted (TCP reset) at the first integrity error, which
// Run returns (IsIntegrity reports it). Every wait is bounded by o, and
// cancelling ctx ends the run at once.
func Run(ctx context.Context, ln *net.TCPListener, target string, spec Spec, o RunOptions) (*RunResult, error) {
	o.defaults()
	gen, err := NewGenerator(spec)
	if err != nil {
		return nil, err
	}
	ver, err := NewVerifier(spec)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	end, _ := ctx.Deadline()
	r := &RunResult{}

	type consumed struct {
		remote string
		err    error
	}
	cons := make(chan consumed, 1)
	go func() {
		remote, err := consume(ctx, ln, ver, o.Idle, end)
		cons <- consumed{remote, err}
	}()

	local, perr := produce(ctx, target, gen, o.Idle, end)
	if perr != nil {
		cancel() // the consumer may still wait for a connection
	}
	c := <-cons
	r.Measure, r.Consumer, r.Producer = ver.Measure(), c.remote, local
	switch {
	case c.err != nil && IsIntegrity(c.err):
		return r, c.err // the producer's error is only its consequence
	case c.err != nil && perr != nil:
		return r, errors.Join(perr, c.err)
	case c.err != nil:
		return r, c.err
	case perr != nil:
		return r, perr
	}
	return r, nil
}

// timeoutError names which bound expired.
func timeoutError(ctx context.Context, what string, idle time.Duration, end time.Time, err error) error {
	switch {
	case ctx.Err() != nil && context.Cause(ctx) != context.DeadlineExceeded:
		return fmt.Errorf("%s: %w", what, context.Cause(ctx))
	case !time.Now().Before(end):
		return fmt.Errorf("%s: run did not finish in time (%w)", what, err)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("%s: no progress for %s", what, idle)
	}
	return fmt.Errorf("%s: %w", what, err)
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func consume(ctx context.Context, ln *net.TCPListener, ver *Verifier, idle time.Duration, end time.Time) (string, error) {
	ln.SetDeadline(earliest(time.Now().Add(idle), end))
	stop := context.AfterFunc(ctx, func() { ln.SetDeadline(time.Unix(1, 0)) })
	c, err := ln.AcceptTCP()
	stop()
	if err != nil {
		return "", timeoutError(ctx, "consumer: waiting for the connection", idle, end, err)
	}
	defer c.Close()
	remote := c.RemoteAddr().String()
	stopC := context.AfterFunc(ctx, func() { c.Close() })
	defer stopC()

	bufSize := min(max(HeaderLen+ver.m.spec.Size, 64<<10), 1<<20)
	buf := make([]byte, bufSize)
	start := time.Now()
	// Every read but the last brings at least one byte and the verifier
	// refuses more than the run's bytes: the loop ends within that count.
	for limit := ver.m.spec.WireBytes() + 1; limit >= 0; limit-- {
		c.SetReadDeadline(earliest(time.Now().Add(idle), end))
		n, err := c.Read(buf)
		at := time.Since(start)
		if n > 0 {
			if ferr := ver.Feed(buf[:n], at); ferr != nil {
				abort(c)
				return remote, ferr
			}
		}
		if errors.Is(err, io.EOF) {
			if ferr := ver.Finish(); ferr != nil {
				abort(c)
				return remote, ferr
			}
			return remote, nil
		}
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, os.ErrDeadlineExceeded) {
				return remote, timeoutError(ctx, "consumer: read", idle, end, err)
			}
			return remote, fmt.Errorf("consumer: read after %d of %d messages: %w", ver.Messages(), ver.msgs, err)
		}
	}
	return remote, errors.New("consumer: read loop exceeded its bound")
}

func produce(ctx context.Context, target string, gen *Generator, idle time.Duration, end time.Time) (string, error) {
	d := net.Dialer{Timeout: idle}
	nc, err := d.DialContext(ctx, "tcp", target)
	if err != nil {
		return "", fmt.Errorf("producer: connect to %s: %w", target, err)
	}
	c := nc.(*net.TCPConn)
	defer c.Close()
	local := c.LocalAddr().String()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()

	w := &deadlineWriter{c: c, idle: idle, end: end}
	if _, err := Produce(w, gen); err != nil {
		return local, timeoutError(ctx, "producer: write", idle, end, err)
	}
	if err := c.CloseWrite(); err != nil {
		return local, fmt.Errorf("producer: half-close: %w", err)
	}
	// The consumer closes once it has verified the whole stream: wait
	// for that end of stream, expecting no data.
	c.SetReadDeadline(earliest(time.Now().Add(idle), end))
	var b [1]byte
	n, err := c.Read(b[:])
	switch {
	case n > 0:
		return local, errors.New("producer: the consumer side sent data; expected only end of stream")
	case errors.Is(err, io.EOF):
		return local, nil
	}
	return local, timeoutError(ctx, "producer: waiting for the consumer's end of stream", idle, end, err)
}

type deadlineWriter struct {
	c    *net.TCPConn
	idle time.Duration
	end  time.Time
}

func (w *deadlineWriter) Write(p []byte) (int, error) {
	w.c.SetWriteDeadline(earliest(time.Now().Add(w.idle), w.end))
	return w.c.Write(p)
}

// abort closes c with a TCP reset, so the far side sees an error rather
// than a clean end of stream.
func abort(c *net.TCPConn) {
	c.SetLinger(0)
	c.Close()
}
