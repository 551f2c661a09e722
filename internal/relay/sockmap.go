package relay

import (
	"errors"
	"net"

	"scistream/internal/sockmap"
)

// Sockmap redirects bytes inside the kernel with an eBPF SOCKHASH and an
// SK_SKB verdict program (package sockmap): no copy and no system call
// per chunk. It needs a loaded Redirector and plain TCP sockets on both
// sides: without a Redirector (the program could not be loaded), with a
// TLS or QUIC leg, or when the kernel maps are full, it falls back to
// Splice (which copies in user space for those legs).
type Sockmap struct {
	// R is the loaded program shared by every connection; nil means
	// "not available", and Copy uses Splice.
	R *sockmap.Redirector
	// Splice is the fallback, with its ring for QUIC legs.
	Splice Splice
}

// Name implements Engine.
func (Sockmap) Name() string { return "sockmap" }

// Copy implements Engine.
func (e Sockmap) Copy(dst, src net.Conn, count func(int64)) error {
	d, ok1 := dst.(*net.TCPConn)
	s, ok2 := src.(*net.TCPConn)
	if e.R == nil || !ok1 || !ok2 {
		return e.Splice.Copy(dst, src, count)
	}
	err := e.R.Copy(d, s, count)
	if errors.Is(err, sockmap.ErrFallback) {
		// Every byte moved so far was delivered and counted.
		return e.Splice.Copy(dst, src, count)
	}
	return err
}
