package legpool_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"io"
	"syscall"
	"testing"
	"time"

	"scistream/internal/api"
	"scistream/internal/legpool"
	"scistream/internal/loopback"
	"scistream/internal/relay"
	"scistream/internal/relay/relaytest"
	"scistream/internal/wan"
	"scistream/internal/wan/wantest"
)

// pooledPair dials a pooled leg of channel 1 and returns both ends.
func pooledPair(t *testing.T) (d, a *legpool.Pooled) {
	t.Helper()
	dl, al := wantest.Legs(t, api.WANTLS)
	dl.Channel, al.Channel = 1, 1
	addr, next := wantest.AcceptLegs(t, al)
	d, err := legpool.DialPooled(context.Background(), addr, dl)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Abort)
	r := next(t)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	a, err = legpool.NewPooledAcceptor(r.Conn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Abort)
	return d, a
}

// TestPooledSessions: one pooled leg carries sessions one after another,
// each with its bytes both ways and its half-closes, and is clean at
// both ends after each.
func TestPooledSessions(t *testing.T) {
	d, a := pooledPair(t)
	for i := range 3 {
		up, down := make([]byte, 3<<20+i), make([]byte, 100_000*i)
		rand.Read(up)
		rand.Read(down)
		ds, err := d.Open()
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			as, err := a.Next()
			if err != nil {
				done <- err
				return
			}
			got, err := io.ReadAll(as)
			if err == nil && !bytes.Equal(got, up) {
				err = errors.New("acceptor read other bytes")
			}
			if err == nil {
				_, err = as.Write(down)
			}
			if err == nil {
				err = as.CloseWrite()
			}
			as.Close()
			if err == nil && !as.Clean() {
				err = errors.New("acceptor's session not clean")
			}
			done <- err
		}()
		if _, err := ds.Write(up); err != nil {
			t.Fatal(err)
		}
		ds.CloseWrite()
		got, err := io.ReadAll(ds)
		if err != nil || !bytes.Equal(got, down) {
			t.Fatalf("session %d: dialer read %d bytes (%v), want %d", i, len(got), err, len(down))
		}
		if err := <-done; err != nil {
			t.Fatalf("session %d: %v", i, err)
		}
		ds.Close()
		if !ds.Clean() || !d.Idle() {
			t.Fatalf("session %d: dialer's leg not idle after a clean session", i)
		}
	}
	// Quit: the acceptor sees an orderly end.
	if !d.Quit() {
		t.Fatal("Quit on an idle leg refused")
	}
	if _, err := a.Next(); err != io.EOF {
		t.Fatalf("acceptor after Quit: %v, want io.EOF", err)
	}
}

// TestPooledAbort: a session closed before both sides ended resets the
// whole leg: the peer's session fails, and neither leg serves again.
func TestPooledAbort(t *testing.T) {
	d, a := pooledPair(t)
	ds, err := d.Open()
	if err != nil {
		t.Fatal(err)
	}
	ds.Write([]byte("partial"))
	as, err := a.Next()
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 7)
	if _, err := io.ReadFull(as, b); err != nil {
		t.Fatal(err)
	}
	ds.Close() // neither direction ended: the leg is reset
	if ds.Clean() {
		t.Fatal("a session closed mid-stream reported clean")
	}
	as.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := as.Read(b); err == nil || err == io.EOF {
		t.Fatalf("acceptor read %v after the dialer's abort, want a reset", err)
	}
	as.Close()
	if as.Clean() {
		t.Fatal("the acceptor's broken session reported clean")
	}
	if _, err := d.Open(); err == nil {
		t.Fatal("a reset leg opened another session")
	}
	if _, err := a.Next(); err == nil {
		t.Fatal("a reset leg accepted another session")
	}
}

// TestPooledGarbage: an acceptor that reads a frame out of place resets
// the leg rather than guess.
func TestPooledGarbage(t *testing.T) {
	d, a := pooledPair(t)
	// A data frame on an idle leg, written under the leg's TLS.
	d.Conn().Write([]byte{'D', 0, 0, 1, 'x'})
	if _, err := a.Next(); !errors.Is(err, legpool.ErrFrame) {
		t.Fatalf("data on an idle leg: %v, want ErrFrame", err)
	}
	if _, err := d.Conn().Read(make([]byte, 1)); err == nil || err == io.EOF {
		t.Fatalf("dialer after the acceptor refused a frame: %v, want a reset", err)
	}
}

// TestPooledRelay: relay.Relay moves a session as any leg, half-closes
// and all, and the leg comes back clean; an application's reset aborts
// the leg and reaches the other application as a reset.
func TestPooledRelay(t *testing.T) {
	d, a := pooledPair(t)
	eng := relaytest.Engine(t, "splice", relay.Options{})
	for round := range 2 {
		ds, err := d.Open()
		if err != nil {
			t.Fatal(err)
		}
		// The acceptor relays its session to a consumer that echoes.
		appA, appB := loopback.TCPPair(t)
		go func() {
			io.Copy(appB, appB)
			appB.CloseWrite()
		}()
		errc := make(chan error, 1)
		go func() {
			as, err := a.Next()
			if err != nil {
				errc <- err
				return
			}
			errc <- relay.Relay(eng, appA, as, func(int64) {}, func(int64) {})
			if !as.Clean() {
				errc <- errors.New("acceptor's session not clean after an orderly relay")
			}
			close(errc)
		}()
		msg := bytes.Repeat([]byte{byte(round)}, 1<<20)
		go func() { ds.Write(msg); ds.CloseWrite() }()
		got, err := io.ReadAll(ds)
		if err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("round %d: echo through the relay: %d bytes, %v", round, len(got), err)
		}
		ds.Close()
		for err := range errc {
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
	}
	// An application reset mid-session resets the leg.
	ds, _ := d.Open()
	appA, appB := loopback.TCPPair(t)
	errc := make(chan error, 1)
	go func() {
		as, err := a.Next()
		if err != nil {
			errc <- err
			return
		}
		errc <- relay.Relay(eng, appA, as, func(int64) {}, func(int64) {})
	}()
	ds.Write([]byte("x"))
	appB.SetLinger(0)
	io.ReadFull(appB, make([]byte, 1))
	appB.Close()
	if err := <-errc; err == nil {
		t.Fatal("relay ended in order after the application's reset")
	}
	ds.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := ds.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, wan.ErrTruncated) {
		t.Fatalf("dialer's session after the far application's reset: %v, want a reset", err)
	}
}

// TestFramedSession: two gateways of this release negotiate
// wan.ALPNFramedPools, so a session carries positioned frames
// (Framed, with the leg's Binding for its resume key); WriteFrame puts
// a frame's header and payload in one 'D' frame; and Close of a
// session whose reader still waits on it (a framed connection that
// left it for a leg of its own) does not wait for that read: it resets
// the leg, the read ends, and the leg is not clean.
func TestFramedSession(t *testing.T) {
	d, a := pooledPair(t)
	ds, err := d.Open()
	if err != nil {
		t.Fatal(err)
	}
	as, err := a.Next()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []*legpool.Session{ds, as} {
		if !wan.Framed(s) || s.Answers() || len(wan.BindingOf(s)) == 0 {
			t.Fatalf("a session between two gateways of this release: framed %v, answers %v, binding %d bytes; want framed, no raw answer, a binding",
				wan.Framed(s), s.Answers(), len(wan.BindingOf(s)))
		}
	}
	if !bytes.Equal(wan.BindingOf(ds), wan.BindingOf(as)) {
		t.Fatal("the two ends of a session have different bindings: their resume keys would differ")
	}
	hdr, payload := []byte("header:"), bytes.Repeat([]byte{7}, 100_000)
	if n, err := ds.WriteFrame(hdr, payload); err != nil || n != len(hdr)+len(payload) {
		t.Fatalf("WriteFrame: %d, %v", n, err)
	}
	got := make([]byte, len(hdr)+len(payload))
	if _, err := io.ReadFull(as, got); err != nil || !bytes.Equal(got, append(hdr, payload...)) {
		t.Fatalf("the acceptor read %v, other bytes than the frame's header and payload", err)
	}
	// A frame that is all header (a reset with its reason) goes too.
	reset := bytes.Repeat([]byte("r"), 300)
	if _, err := ds.WriteFrame(reset, nil); err != nil {
		t.Fatalf("WriteFrame of a 300-byte header: %v", err)
	}
	if got, err := wantest.ReadFull(t, as, len(reset)); err != nil || !bytes.Equal(got, reset) {
		t.Fatalf("the acceptor read %v, other bytes than the 300-byte header", err)
	}
	read := make(chan error, 1)
	go func() {
		_, err := as.Read(make([]byte, 1))
		read <- err
	}()
	// The reader is blocked (nothing more comes); Close must not wait
	// for it. (If the goroutine has not reached Read yet, Close finds
	// the session unclean all the same: no 'F' came.)
	closed := make(chan struct{})
	go func() { as.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close waited for the read under way")
	}
	if err := <-read; err == nil {
		t.Fatal("the read of a closed, unclean session returned no error")
	}
	if as.Clean() {
		t.Fatal("a session closed with a read under way and no 'F' is clean")
	}
	if _, err := ds.Read(make([]byte, 1)); err == nil {
		t.Fatal("the dialer's session reads on after the acceptor reset the leg")
	}
}

// TestPooledToEarlierRelease: against an acceptor of the release before
// wan.ALPNFramedPools (it offers wan.ALPNFramed and wan.ALPNAnswers),
// the leg is framed but its sessions are not: they carry the raw bytes
// after the acceptor's answer, as that release expects.
func TestPooledToEarlierRelease(t *testing.T) {
	dl, al := wantest.Legs(t, api.WANTLS)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		Certificates: []tls.Certificate{*al.Cert}, MinVersion: tls.VersionTLS13, ClientAuth: tls.RequireAnyClientCert,
		NextProtos: []string{wan.ALPNFramed, wan.ALPNAnswers},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	proto := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			proto <- err.Error()
			return
		}
		defer c.Close()
		tc := c.(*tls.Conn)
		err = tc.Handshake()
		proto <- tc.ConnectionState().NegotiatedProtocol
		if err == nil {
			io.Copy(io.Discard, tc) // the preface, then whatever comes
		}
	}()
	d, err := legpool.DialPooled(context.Background(), ln.Addr().String(), dl)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Abort()
	if p := <-proto; p != wan.ALPNFramed {
		t.Fatalf("negotiated %q with an acceptor of the earlier release; want %q", p, wan.ALPNFramed)
	}
	s, err := d.Open()
	if err != nil {
		t.Fatal(err)
	}
	if wan.Framed(s) || !s.Answers() || !s.LegFramed() {
		t.Fatalf("a session to an acceptor of the earlier release: framed %v, answers %v, leg framed %v; want raw bytes after its answer on a framed leg", wan.Framed(s), s.Answers(), s.LegFramed())
	}
}
