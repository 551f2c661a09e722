package stream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"scistream/internal/api"
	"scistream/internal/relay"
	"scistream/internal/wan"
)

func TestEndKinds(t *testing.T) {
	if numKinds != len(api.EndKinds()) {
		t.Fatalf("numKinds = %d, api.EndKinds has %d", numKinds, len(api.EndKinds()))
	}
	for i, k := range api.EndKinds() {
		if kindIndex(k) != i {
			t.Fatalf("kindIndex(%s) = %d, want %d", k, kindIndex(k), i)
		}
	}
}

// TestRelayEnd: each way a relayed connection fails gets its kind; an
// application's reset and the peer's are not errors, a lost peer is.
func TestRelayEnd(t *testing.T) {
	op := func(side relay.Side, err error) error {
		return fmt.Errorf("wrapped: %w", &relay.Error{Conn: side, Op: "read", Err: err})
	}
	for _, c := range []struct {
		err  error
		kind string
	}{
		{op(relay.A, syscall.ECONNRESET), api.EndAppReset},
		{op(relay.A, &net.OpError{Op: "write", Err: os.NewSyscallError("write", syscall.EPIPE)}), api.EndAppReset},
		{op(relay.A, syscall.ETIMEDOUT), api.EndAppReset},
		{op(relay.B, syscall.ECONNRESET), api.EndPeerReset},
		{op(relay.B, &quic.StreamError{StreamID: 4, ErrorCode: 1, Remote: true}), api.EndPeerReset},
		{op(relay.B, &quic.ApplicationError{ErrorCode: 0, Remote: true}), api.EndPeerReset},
		{op(relay.B, wan.ErrTruncated), api.EndWANLost},
		{op(relay.B, &quic.IdleTimeoutError{}), api.EndWANLost},
		{op(relay.B, &quic.StatelessResetError{}), api.EndWANLost},
		{op(relay.B, syscall.EHOSTUNREACH), api.EndWANLost},
		{op(relay.B, os.ErrDeadlineExceeded), api.EndTimeout},
		// Forwarding the end of stream to a socket closed by a reset
		// or a timeout (the kernel's ENOTCONN): the application's end
		// is broken, the leg is lost; not the gateway's fault.
		{op(relay.A, fmt.Errorf("forward end of stream: %w", &net.OpError{Op: "close", Err: os.NewSyscallError("shutdown", syscall.ENOTCONN)})), api.EndAppReset},
		{op(relay.B, fmt.Errorf("forward end of stream: %w", &net.OpError{Op: "close", Err: os.NewSyscallError("shutdown", syscall.ENOTCONN)})), api.EndWANLost},
		{op(relay.B, &quic.StreamError{StreamID: 4, ErrorCode: 1, Remote: false}), api.EndGatewayFault},
		{op(relay.A, syscall.EMFILE), api.EndGatewayFault},
		{op(relay.Unknown, syscall.ECONNRESET), api.EndGatewayFault},
		{errors.New("not a relay error"), api.EndGatewayFault},
	} {
		if got := relayEnd(c.err); got != c.kind {
			t.Errorf("relayEnd(%v) = %s, want %s", c.err, got, c.kind)
		}
	}
	for _, k := range []string{api.EndAppReset, api.EndPeerReset} {
		if api.IsErrorKind(k) {
			t.Errorf("%s counts as an error", k)
		}
	}
	for _, k := range []string{api.EndWANLost, api.EndDialFailed, api.EndTimeout, api.EndGatewayFault} {
		if !api.IsErrorKind(k) {
			t.Errorf("%s does not count as an error", k)
		}
	}
}

func TestDialEnd(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-ctx.Done()
	_, timeout := (&net.Dialer{}).DialContext(ctx, "tcp", "192.0.2.1:9")
	for _, c := range []struct {
		err  error
		kind string
	}{
		{refused, api.EndDialFailed},
		{fmt.Errorf("tls handshake: %w", errors.New("remote error: tls: bad certificate")), api.EndDialFailed},
		{timeout, api.EndTimeout},
		{fmt.Errorf("dial quic: %w", context.DeadlineExceeded), api.EndTimeout},
	} {
		if got := dialEnd(c.err); got != c.kind {
			t.Errorf("dialEnd(%v) = %s, want %s", c.err, got, c.kind)
		}
	}
}

// TestEndsCounters: counts add up by kind, errors leave the
// applications' resets out, and the last reason of each kind is kept.
func TestEndsCounters(t *testing.T) {
	var e ends
	t0 := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	e.count(api.EndAppReset, errors.New("first"), t0)
	e.count(api.EndAppReset, errors.New("second"), t0.Add(time.Second))
	e.count(api.EndWANLost, errors.New(string(make([]byte, 1000))), t0.Add(2*time.Second))
	var s api.Stats
	e.fill(&s)
	if s.AbortedConns != 3 || s.Errors != 1 || s.AbortedByKind[api.EndAppReset] != 2 || s.AbortedByKind[api.EndWANLost] != 1 || len(s.AbortedByKind) != 2 {
		t.Fatalf("stats %+v", s)
	}
	if l := s.LastErrors[api.EndAppReset]; l.Reason != "second" || !l.Time.Equal(t0.Add(time.Second)) {
		t.Fatalf("last app_reset %+v", l)
	}
	if l := s.LastErrors[api.EndWANLost]; len(l.Reason) > 310 {
		t.Fatalf("a long reason kept whole: %d bytes", len(l.Reason))
	}
}

// TestOutage (issue 27, finding 4): answers and failures by turns are
// one outage, its start and end said once, its turns counted as flaps; a
// failure after recoverAfter of answers is a new outage.
func TestOutage(t *testing.T) {
	var o outage
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	if !o.fail(now) {
		t.Fatal("the first failure does not start an outage")
	}
	if o.fail(now) {
		t.Fatal("a second failure started another outage")
	}
	for i := range 116 {
		now = now.Add(250 * time.Millisecond)
		if back := o.ok(now); back != (i == 0) {
			t.Fatalf("turn %d: the end said %v; want it said at the first answer only", i, back)
		}
		now = now.Add(250 * time.Millisecond)
		if o.fail(now) {
			t.Fatalf("turn %d: a failure a moment after an answer started another outage", i)
		}
	}
	if n := o.flapped(); n != 116 {
		t.Fatalf("%d flaps counted, want 116", n)
	}
	now = now.Add(time.Second)
	o.ok(now)
	if o.fail(now.Add(recoverAfter - time.Millisecond)) {
		t.Fatal("a failure within recoverAfter of the answer started a new outage")
	}
	o.ok(now.Add(recoverAfter))
	if !o.fail(now.Add(2*recoverAfter + time.Millisecond)) {
		t.Fatal("a failure after recoverAfter of answers is not a new outage")
	}
	if !o.ok(now.Add(3 * recoverAfter)) {
		t.Fatal("the new outage's end not said")
	}
}

// TestOutageSaidOnce: the log says an outage of a peer that answers and
// fails by turns once, and its end once, not at every turn.
func TestOutageSaidOnce(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	st := &Stream{}
	for range 50 {
		st.wanDown(log, "cannot reach the peer gateway", errors.New("refused"))
		st.wanUp(log)
	}
	if n := strings.Count(buf.String(), "level=WARN"); n != 1 {
		t.Errorf("%d warnings, want 1:\n%s", n, buf.String())
	}
	if n := strings.Count(buf.String(), "answers again"); n != 1 {
		t.Errorf("the end said %d times, want once:\n%s", n, buf.String())
	}
	if n := st.ends.peer.flapped(); n != 49 {
		t.Errorf("%d flaps, want 49", n)
	}
}
