package loopback_test

import (
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"scistream/internal/leakcheck"
	"scistream/internal/loopback"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// TCPPair's ends are the two ends of one connection on 127.0.0.1, both
// ways, and the test's cleanup closes them.
func TestTCPPair(t *testing.T) {
	leakcheck.Check(t)
	var client, server *net.TCPConn
	ok := t.Run("pair", func(t *testing.T) {
		client, server = loopback.TCPPair(t)
		if client.RemoteAddr().String() != server.LocalAddr().String() || server.RemoteAddr().String() != client.LocalAddr().String() {
			t.Fatalf("client %s -> %s, server %s -> %s: not one connection",
				client.LocalAddr(), client.RemoteAddr(), server.LocalAddr(), server.RemoteAddr())
		}
		if ip := client.RemoteAddr().(*net.TCPAddr).IP; !ip.Equal(net.IPv4(127, 0, 0, 1)) {
			t.Fatalf("connected to %s, want 127.0.0.1", ip)
		}
		for _, c := range [][2]*net.TCPConn{{client, server}, {server, client}} {
			c[1].SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := c[0].Write([]byte("hi")); err != nil {
				t.Fatal(err)
			}
			if b, err := io.ReadAll(io.LimitReader(c[1], 2)); err != nil || string(b) != "hi" {
				t.Fatalf("%s read %q, %v", c[1].LocalAddr(), b, err)
			}
		}
	})
	if !ok {
		return
	}
	for _, c := range []*net.TCPConn{client, server} {
		if _, err := c.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("write after the test ended: %v, want net.ErrClosed", err)
		}
	}
}

// RefusedAddr's address is on 127.0.0.1 and refuses a connection.
func TestRefusedAddr(t *testing.T) {
	a := loopback.RefusedAddr(t)
	if host, _, err := net.SplitHostPort(a); err != nil || host != "127.0.0.1" {
		t.Fatalf("RefusedAddr = %q; want an address on 127.0.0.1", a)
	}
	c, err := net.DialTimeout("tcp", a, 10*time.Second)
	if err == nil {
		c.Close()
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial %s: %v; want the connection refused", a, err)
	}
}
