package relay

import (
	"errors"
	"syscall"
	"testing"
	"time"

	"scistream/internal/loopback"
)

// TestCloseWriteAfterReset: forwarding the end of stream to a socket the
// peer reset, whose reset a read took already, fails as the peer's reset
// (the kernel says ENOTCONN), so the gateway counts it as the peer's and
// not as its own fault.
func TestCloseWriteAfterReset(t *testing.T) {
	c, peer := loopback.TCPPair(t)
	peer.SetLinger(0)
	peer.Close()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read after the peer's reset: %v, want ECONNRESET", err)
	}
	err := closeWrite(c)
	if !errors.Is(err, syscall.ECONNRESET) || !errors.Is(err, syscall.ENOTCONN) {
		t.Fatalf("closeWrite after the reset: %v, want the peer's reset (ECONNRESET, from ENOTCONN)", err)
	}
	// An open socket's end of stream is no error.
	c2, peer2 := loopback.TCPPair(t)
	if err := closeWrite(c2); err != nil {
		t.Fatalf("closeWrite of an open socket: %v", err)
	}
	peer2.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := peer2.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("the peer read %d, %v after closeWrite; want the end of stream", n, err)
	}
}
