// Package appwait dials a stream's application for a WAN leg that came,
// and waits for a late one: the inbound gateway's dial of the
// application, tried again while the stream's wait lasts.
//
// Producer and consumer start whenever their jobs do; a producer that
// connects before the consumer listens must not lose its bytes. When the
// dial of the application fails (refused, unreachable, timed out), the
// connection's goroutine dials again with backoff (appRetryMin, doubling
// up to appRetryMax) until the stream's wait (app_wait_s) has passed
// since the first dial. Meanwhile nothing reads the WAN leg: the
// producer's bytes, and its end if it already closed, wait in the
// sockets' buffers (on a QUIC leg, in the stream's flow-control window),
// and once those are full the producer's writes block (TCP backpressure);
// the gateway holds no buffer for them. When the application answers,
// the relay starts as for any connection and delivers everything, in
// order, the end included.
//
// A waiting connection costs its goroutine, its sockets and one timer. It
// counts in Dialer.Waiting (the stream's Stats.WaitingConns), not in
// ActiveConns (which counts relayed connections). Between dials it asks whether the leg is still there
// (wan.Ended, no read): a producer that gave up or a peer gateway that
// released its side ends the wait, counted as the abort it is
// (peer_reset, wan_lost); a release or shutdown of this stream ends it at
// once (the context Dial is given). When the wait runs out, the WAN leg is
// aborted, so the producer reads a reset, never a clean end, and the
// abort counts as dial_failed with the reason ("application
// 10.0.0.2:5000 not reachable for 30s: connect: connection refused").
// The outage is logged at warn once per stream until the application
// answers again (Dialer.Away; the stream's ends.go), however many
// connections wait.
package appwait

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"scistream/internal/egress"
	"scistream/internal/relay"
	"scistream/internal/wan"
)

const (
	// appRetryMin is the pause after a connection's first failed dial of
	// the application; it doubles after each further one, up to
	// appRetryMax: a consumer that starts a moment late is reached within
	// a few tens of milliseconds, and thousands of waiting connections
	// cost at most one dial each per second.
	appRetryMin = 50 * time.Millisecond
	appRetryMax = time.Second
	// appDialTimeout bounds one dial of the application. While a
	// connection waits, a dial also ends with the wait, but is given at
	// least appRetryMax: a last dial with no time left would fail with a
	// timeout and hide why the application could not be reached.
	appDialTimeout = 10 * time.Second
)

// Error ends a wait for an application that never answered.
type Error struct {
	target string
	wait   time.Duration
	err    error // of the last dial
}

func (e *Error) Error() string {
	// The dial's error names the target again: say only its cause.
	cause := e.err
	var oe *net.OpError
	if errors.As(cause, &oe) && oe.Err != nil {
		cause = oe.Err
	}
	return fmt.Sprintf("application %s not reachable for %s: %v", e.target, e.wait, cause)
}

func (e *Error) Unwrap() error { return e.err }

// Dialer dials a stream's application. Its zero value dials with no
// policy and counts nothing; it may be used concurrently.
type Dialer struct {
	// Control is the Control of every dial's net.Dialer (the gateway's
	// target policy, the socket's setup). Nil: none.
	Control func(network, address string, c syscall.RawConn) error
	// Waiting counts the connections waiting for the application now.
	// Nil: not counted.
	Waiting *atomic.Int64
	// Away is told when a connection starts to wait, at its first
	// failed dial, with that dial's error. Nil: not told.
	Away func(target string, wait time.Duration, err error)
}

// Dial dials the application at target for the authenticated WAN leg
// w, waiting for it up to wait as described above, until ctx ends. It
// returns the application's connection, or what ended the attempt: the
// dial's error when wait is zero or ctx ended, an *Error when the wait
// ran out, or a *relay.Error on w (relay.B) when the leg ended meanwhile.
// It never reads w.
func (d *Dialer) Dial(ctx context.Context, w net.Conn, target string, wait time.Duration) (net.Conn, error) {
	deadline := time.Now().Add(wait)
	backoff := appRetryMin
	var timer *time.Timer // set once the connection waits
	defer func() {
		if timer != nil {
			timer.Stop()
			if d.Waiting != nil {
				d.Waiting.Add(-1)
			}
		}
	}()
	for {
		nd := net.Dialer{Timeout: appDialTimeout, Control: d.Control}
		if wait > 0 {
			nd.Deadline = deadline
			if least := time.Now().Add(appRetryMax); least.After(deadline) {
				nd.Deadline = least
			}
		}
		app, err := nd.DialContext(ctx, "tcp", target)
		var refused *egress.Refusal
		if err == nil || wait == 0 || ctx.Err() != nil || errors.As(err, &refused) {
			// A target the policy refuses stays refused: no wait.
			return app, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, &Error{target: target, wait: wait, err: err}
		}
		if timer == nil {
			if d.Waiting != nil {
				d.Waiting.Add(1)
			}
			if d.Away != nil {
				d.Away(target, wait, err)
			}
			timer = time.NewTimer(min(backoff, left))
		} else {
			timer.Reset(min(backoff, left))
		}
		select {
		case <-ctx.Done(): // released or shut down
			return nil, err
		case <-timer.C:
		}
		backoff = min(2*backoff, appRetryMax)
		if err := wan.Ended(w); err != nil {
			return nil, &relay.Error{Conn: relay.B, Op: "read", Err: fmt.Errorf("while the connection waited for the application %s: %w", target, err)}
		}
	}
}
