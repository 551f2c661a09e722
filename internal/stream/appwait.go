package stream

import (
	"log/slog"
	"net"
	"syscall"
	"time"

	"scistream/internal/appwait"
	"scistream/internal/relay"
	"scistream/internal/store"
)

// A late application (internal/appwait): the inbound stream's dial of
// the application waits for it while the stream says to, within the
// gateway's egress policy.

// AppWaitFor returns how long a connection of the inbound stream rec
// waits for its application: the record's wait (the gateway's default
// for a record written before it had one), capped by the gateway's
// maximum now in force.
func (e *Env) AppWaitFor(rec *store.Record) time.Duration {
	if rec.AppWaitS == nil {
		return e.AppWait
	}
	return min(time.Duration(*rec.AppWaitS)*time.Second, e.AppWaitMax)
}

// dialApp dials the application at target for the authenticated WAN leg
// w, waiting for it up to wait (appwait.Dialer.Dial), until the stream
// stops; the wait counts in st.WaitingApp and is said once per outage
// (appAway).
func (st *Stream) dialApp(log *slog.Logger, w net.Conn, target string, wait time.Duration) (net.Conn, error) {
	d := appwait.Dialer{Control: st.appControl, Waiting: &st.WaitingApp, Away: func(target string, wait time.Duration, err error) {
		st.appAway(log, target, wait, err)
	}}
	return d.Dial(st.ctx, w, target, wait)
}

// appControl checks the address a dial of the application is about to
// connect to against the gateway's target policy (a name the request
// gave may resolve elsewhere now), then sets the socket up as
// resetOnCloseFromStart says.
func (st *Stream) appControl(network, address string, c syscall.RawConn) error {
	if err := st.env.Targets.Control(network, address, c); err != nil {
		return err
	}
	return resetOnCloseFromStart(network, address, c)
}

// resetOnCloseFromStart sets SO_LINGER 0 on the application's socket
// before it connects, as relay.ResetOnClose does after: should the
// gateway die between the application's accept and that call, the
// kernel then closes the connection with a reset, never the clean end
// of a stream that was cut (e2e TestPooledStream met that window).
func resetOnCloseFromStart(_, _ string, c syscall.RawConn) error {
	return relay.ResetOnCloseRaw(c)
}
