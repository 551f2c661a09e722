// Package loopback gives tests connected sockets on 127.0.0.1, on ports
// the kernel picks, each closed when the test ends.
package loopback

import (
	"net"
	"testing"
)

// TCPPair returns the two ends of a TCP connection on 127.0.0.1: client
// dialed, server was accepted. tb's cleanup closes both (closing one
// again there is harmless, so a test may close either earlier). No
// deadline is set: a test that could block on an end sets its own.
// If the kernel refuses a socket, TCPPair fails tb with Fatal.
func TCPPair(tb testing.TB) (client, server *net.TCPConn) {
	tb.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	client, err = net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { client.Close() })
	// The kernel completes the handshake on the listener's backlog, so
	// Accept after Dial returns without a second goroutine.
	server, err = ln.AcceptTCP()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { server.Close() })
	return client, server
}

// RefusedAddr returns an address on 127.0.0.1 where nothing listens: a
// connection to it is refused, until something binds its port again
// (the kernel may give it to another socket later). If the kernel
// refuses a socket, RefusedAddr fails tb with Fatal.
func RefusedAddr(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	a := ln.Addr().String()
	ln.Close()
	return a
}
