package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"
)

// Readiness for a service manager (sd_notify(3)): under a systemd unit
// of Type=notify (deploy/systemd/s2cs@.service), NOTIFY_SOCKET names a
// datagram socket, and "systemctl start" returns, and the units ordered
// after the gateway start, only once s2cs says READY=1: when it has
// restored its streams and its control API accepts requests (what
// /healthz reports). Without NOTIFY_SOCKET nothing is sent.

// notifier sends states to the service manager. The nil *notifier sends
// nothing.
type notifier struct {
	addr *net.UnixAddr
}

// newNotifier returns the notifier of socket, NOTIFY_SOCKET's value: a
// path, or an abstract socket's name after '@'; nil if it is empty.
func newNotifier(socket string) *notifier {
	if socket == "" {
		return nil
	}
	if socket[0] == '@' {
		socket = "\x00" + socket[1:]
	}
	return &notifier{addr: &net.UnixAddr{Name: socket, Net: "unixgram"}}
}

// send sends state, e.g. "READY=1", as one datagram.
func (n *notifier) send(state string) error {
	if n == nil {
		return nil
	}
	c, err := net.DialUnix("unixgram", nil, n.addr)
	if err != nil {
		return fmt.Errorf("notify the service manager: %w", err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(state)); err != nil {
		return fmt.Errorf("notify the service manager: %w", err)
	}
	return nil
}

// notifyReady tells the service manager NOTIFY_SOCKET names, if any,
// READY=1 once ready reports true and STOPPING=1 when stop ends; addr is
// the control API's, for the unit's status line. Call the function it
// returns once the gateway stopped serving: it ends the watch and waits
// for it.
func notifyReady(stop context.Context, ready func() bool, addr string, log *slog.Logger) (done func()) {
	n := newNotifier(os.Getenv("NOTIFY_SOCKET"))
	if n == nil {
		return func() {}
	}
	serving, served := context.WithCancel(context.Background())
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		n.watch(serving, stop, ready, "control API on https://"+addr, log)
	}()
	return func() {
		served()
		<-watched
	}
}

// watch sends READY=1 once ready reports true, and STOPPING=1 when stop
// ends after that; it returns when serving ends. The gateway has
// no readiness event to wait on, so ready is polled: restoring streams
// takes milliseconds, and a poll costs nothing after it.
func (n *notifier) watch(serving, stop context.Context, ready func() bool, status string, log *slog.Logger) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !ready() {
		select {
		case <-serving.Done():
			return
		case <-tick.C:
		}
	}
	if err := n.send("READY=1\nSTATUS=" + status); err != nil {
		log.Warn("cannot tell the service manager s2cs is ready; it will time out waiting", "err", err)
		return
	}
	log.Info("told the service manager: ready")
	select {
	case <-serving.Done():
	case <-stop.Done():
		n.send("STOPPING=1")
	}
}
