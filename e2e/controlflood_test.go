package e2e

import (
	"context"
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestControlPortFlood: a stranger opens 3,000 silent TCP connections to
// the control port of a gateway limited to 2,048 open files, from one
// address, and holds them. (Before the control port's gate, they took
// every file: the user's request timed out and every stream's listeners
// failed with "too many open files".) The gateway resets all but its
// share at once; a user's request from another address is answered
// within 2 s; a stream created before the flood still accepts an
// application connection and carries its bytes, and none of its
// listeners runs out of files.
func TestControlPortFlood(t *testing.T) {
	p := newPair(t, pairOpts{prefix: []string{"sh", "-c", `ulimit -n 2048 && exec "$0" "$@"`}})
	app := newSink(t, "127.0.0.1", nil)
	so := p.wire("alice", app.host(), app.port(), 1)
	sendOne(t, so.Listeners[0], app, "before the flood")

	const n = 3000
	d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 4, 77)}}
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	// A connection the gateway resets over the address's share may be
	// reset before its dial returns (its whole refusal can run first on
	// a starved machine): it reached the gateway all the same.
	deadline := time.Now().Add(time.Minute)
	var lastErr error
	reached := 0
	for i := 0; i < n && time.Now().Before(deadline); i++ {
		c, err := d.Dial("tcp", p.cons.Addr)
		switch {
		case err == nil:
			held = append(held, c)
			reached++
		case errors.Is(err, syscall.ECONNRESET):
			reached++
		default:
			lastErr = err
		}
	}
	t.Logf("the flood: %d connections opened, %d more reset before their dial returned", len(held), reached-len(held))
	if reached < n/2 {
		t.Fatalf("only %d of %d flood connections reached the gateway: the flood did not happen (last failure: %v)", reached, n, lastErr)
	}

	c, err := p.cons.Client(p.tokens["alice"])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	start := time.Now()
	info, err := c.Info(ctx)
	took := time.Since(start)
	cancel()
	if err != nil || info.Identity != "alice" {
		t.Fatalf("the user's request during the flood: %v (after %v)", err, took)
	}
	t.Logf("the user's request during the flood answered in %v", took.Round(time.Millisecond))
	sendOne(t, so.Listeners[0], app, "during the control port flood")

	// What the gateway still holds of the flood: its per-address share,
	// once it has taken from its accept queue what the kernel queued
	// there (a starved gateway takes a moment; each one over its share
	// it resets at once).
	open := held
	eventually(t, 30*time.Second, "the gateway to hold no more than its share (64) of one address's silent connections", func() bool {
		var still []net.Conn
		for _, c := range open {
			c.SetReadDeadline(time.Now().Add(time.Millisecond))
			if _, err := c.Read(make([]byte, 1)); err != nil {
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					still = append(still, c)
				}
			}
		}
		open = still
		return len(open) <= 64
	})
	if log := p.cons.Log(); strings.Contains(log, "too many open files") {
		t.Errorf("the gateway ran out of open files:\n%s", log)
	}
}
