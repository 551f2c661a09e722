package relay

import (
	"errors"
	"net"

	"scistream/internal/sockmap"
)

// sockmapEngine redirects bytes inside the kernel with an eBPF SOCKHASH and an
// SK_SKB verdict program (package sockmap): no copy and no system call
// per chunk. It needs a loaded Redirector and plain TCP sockets on both
// sides: without a Redirector (the program could not be loaded), with a
// TLS or QUIC leg, or when the kernel maps are full, it falls back to
// splice (which copies in user space for those legs).
type sockmapEngine struct {
	// r is the loaded program shared by every connection; nil means
	// "not available", and Copy uses fallback.
	r *sockmap.Redirector
	// fallback is the splice engine of the same Engines, with its ring
	// for QUIC legs.
	fallback splice
}

// Name implements Engine.
func (sockmapEngine) Name() string { return "sockmap" }

// Copy implements Engine.
func (e sockmapEngine) Copy(dst, src net.Conn, count func(int64)) error {
	d, ok1 := dst.(*net.TCPConn)
	s, ok2 := src.(*net.TCPConn)
	if e.r == nil || !ok1 || !ok2 {
		return e.fallback.Copy(dst, src, count)
	}
	err := e.r.Copy(d, s, count)
	if errors.Is(err, sockmap.ErrFallback) {
		// Every byte moved so far was delivered and counted.
		return e.fallback.Copy(dst, src, count)
	}
	return err
}
