package relay_test

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"scistream/internal/leakcheck"
	"scistream/internal/loopback"
	"scistream/internal/relay"
	"scistream/internal/relay/relaytest"
	"scistream/internal/sockio"
	"scistream/internal/waitfor"
)

// TestErrorSays: when one application resets its connection mid-transfer,
// Relay's error names that application's connection, for every engine, and
// the other application sees a reset too.
func TestErrorSays(t *testing.T) {
	for _, e := range engines {
		for _, who := range []relay.Side{relay.A, relay.B} {
			t.Run(e.Name()+"/"+who.String(), func(t *testing.T) {
				leakcheck.Check(t)
				s := relaytest.Start(t, e)
				deadline(s.A)
				deadline(s.B)
				chunk := make([]byte, 256<<10)
				if _, err := s.A.Write(chunk); err != nil {
					t.Fatal(err)
				}
				if _, err := io.ReadFull(s.B, make([]byte, 1)); err != nil {
					t.Fatal(err)
				}
				dead, other := s.A, s.B
				if who == relay.B {
					dead, other = s.B, s.A
				}
				dead.SetLinger(0)
				dead.Close()
				err := s.Wait(t)
				var re *relay.Error
				if !errors.As(err, &re) || re.Conn != who || re.Op != "read" && re.Op != "write" {
					t.Fatalf("Relay = %#v (%v); want a *relay.Error on %s, reading or writing", err, err, who)
				}
				if !relay.IsRoutine(err) {
					t.Fatalf("an application's reset is not routine: %v", err)
				}
				if _, err := io.Copy(io.Discard, other); !errors.Is(err, syscall.ECONNRESET) {
					t.Fatalf("the other application read %v, want a reset", err)
				}
			})
		}
	}
}

// TestResetOnClose: an armed connection that is closed (as the kernel
// closes it when the process dies) ends with a reset, also through NetConn
// wrappers; an unarmed one with an orderly EOF.
func TestResetOnClose(t *testing.T) {
	c, peer := loopback.TCPPair(t)
	deadline(peer)
	relay.ResetOnClose(&wrapped{Conn: c})
	c.Write([]byte("partial"))
	c.Close()
	if _, err := io.ReadAll(peer); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("peer of an armed connection read %v, want a reset", err)
	}
	c2, peer2 := loopback.TCPPair(t)
	deadline(peer2)
	c2.Write([]byte("whole"))
	c2.Close()
	if b, err := io.ReadAll(peer2); err != nil || string(b) != "whole" {
		t.Fatalf("peer of an unarmed connection read %q, %v", b, err)
	}
	relay.ResetOnClose(noSocket{}) // no TCP socket: nothing to arm, no panic
}

// TestResetOnCloseListener: a connection accepted on an armed listener
// is armed before anything calls ResetOnClose on it (as when the process
// dies right after the handshake): closing it resets the peer.
func TestResetOnCloseListener(t *testing.T) {
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := relay.ResetOnCloseListener(ln); err != nil {
		t.Fatal(err)
	}
	peer, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	deadline(peer)
	c, err := ln.AcceptTCP()
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("partial"))
	c.Close()
	if _, err := io.ReadAll(peer); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("peer of a connection accepted on an armed listener read %v, want a reset", err)
	}
}

type noSocket struct{ net.Conn }

func (noSocket) NetConn() net.Conn { return nil }

// TestOrderlyEndDelivers: when both directions end in order, Relay disarms
// ResetOnClose before it closes, so bytes still queued in its sockets
// reach the application, followed by EOF; an armed close would discard
// them with a reset.
func TestOrderlyEndDelivers(t *testing.T) {
	for _, e := range engines {
		t.Run(e.Name(), func(t *testing.T) {
			leakcheck.Check(t)
			A, ra := loopback.TCPPair(t)
			rb, B := loopback.TCPPair(t)
			deadline(A)
			deadline(B)
			relay.ResetOnClose(ra)
			relay.ResetOnClose(rb)
			// Room for the whole message in rb's send queue while B does
			// not read: Relay finishes with bytes still queued there.
			rb.SetWriteBuffer(4 << 20)
			B.SetReadBuffer(32 << 10)
			done := make(chan error, 1)
			go func() { done <- relay.Relay(e, ra, rb, func(int64) {}, func(int64) {}) }()
			msg := make([]byte, 1<<20)
			rand.Read(msg)
			B.CloseWrite()
			if _, err := A.Write(msg); err != nil {
				t.Fatal(err)
			}
			A.CloseWrite()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("Relay = %v", err)
				}
			case <-time.After(testTimeout):
				t.Fatal("Relay did not finish while the consumer waited")
			}
			got, err := io.ReadAll(B)
			if err != nil || !bytes.Equal(got, msg) {
				t.Fatalf("consumer read %d of %d bytes, then %v; want all, then EOF", len(got), len(msg), err)
			}
			if b, err := io.ReadAll(A); err != nil || len(b) != 0 {
				t.Fatalf("producer read %q, %v; want a clean EOF", b, err)
			}
		})
	}
}

// TestResetTakenByAWrite: when a reset's error has already been taken by
// a write (the kernel reports it to one call only, and reads then return
// a plain end of stream), Relay still forwards a reset, never an orderly
// end that would make the broken stream look complete.
func TestResetTakenByAWrite(t *testing.T) {
	for _, e := range engines {
		t.Run(e.Name(), func(t *testing.T) {
			leakcheck.Check(t)
			A, ra := loopback.TCPPair(t)
			rb, B := loopback.TCPPair(t)
			deadline(B)
			A.SetLinger(0)
			A.Close()
			waitfor.Must(t, testTimeout, "the reset to arrive", func() bool { return sockio.Reset(ra) })
			if _, err := ra.Write([]byte("x")); err == nil {
				t.Fatal("a write to a reset socket succeeded")
			}
			done := make(chan error, 1)
			go func() { done <- relay.Relay(e, ra, rb, func(int64) {}, func(int64) {}) }()
			if _, err := io.ReadAll(B); !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("B read %v, want a reset: the producer's reset became an orderly end", err)
			}
			var re *relay.Error
			if err := <-done; !errors.As(err, &re) || re.Conn != relay.A {
				t.Fatalf("Relay = %v, want a *relay.Error on a", err)
			}
		})
	}
}

// TestSimultaneousClose: both applications end their sides at the same
// moment, many times over: Relay ends in order every time. (The check
// that turns a reset's stolen error back into a reset once mistook the
// other direction's orderly close, completing between its two reads, for
// a reset: 11 of 40 benchmark runs.)
func TestSimultaneousClose(t *testing.T) {
	for _, e := range engines {
		t.Run(e.Name(), func(t *testing.T) {
			leakcheck.Check(t)
			for i := range 100 {
				s := relaytest.Start(t, e)
				deadline(s.A)
				deadline(s.B)
				go s.A.CloseWrite()
				s.B.CloseWrite()
				if err := s.Wait(t); err != nil {
					t.Fatalf("round %d: Relay = %v, want an orderly end", i, err)
				}
			}
		})
	}
}
