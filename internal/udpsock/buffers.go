// Package udpsock makes a UDP socket what a QUIC leg wants of it: socket
// buffers of BufferSize (SetBuffers, within the system limits or, with
// CAP_NET_ADMIN, beyond them; a warning naming the fix when they stay
// smaller) and, on Linux, generic receive offload with raw batched
// system calls waiting in the runtime's poller (WithGRO).
package udpsock

import (
	"log/slog"
	"net"
	"syscall"
)

// BufferSize is the socket buffer size quic-go asks for on each side of
// a QUIC connection: smaller buffers drop packets at high rates, and every
// drop costs a loss-recovery round.
const BufferSize = 7 << 20

// SetBuffers raises c's receive and send buffers to BufferSize
// before quic-go takes the socket: first within the system limits
// (net.core.rmem_max, wmem_max), then, when the process has CAP_NET_ADMIN,
// beyond them (SO_RCVBUFFORCE/SO_SNDBUFFORCE, as quic-go itself does). It
// never changes a system setting. If the buffers stay smaller, it logs one
// warning that names the fix.
func SetBuffers(c *net.UDPConn, log *slog.Logger) {
	c.SetReadBuffer(BufferSize)
	c.SetWriteBuffer(BufferSize)
	raw, err := c.SyscallConn()
	if err != nil {
		return
	}
	var rcv, snd int
	raw.Control(func(fd uintptr) {
		rcv = raiseBuffer(int(fd), syscall.SO_RCVBUF, soRcvBufForce)
		snd = raiseBuffer(int(fd), syscall.SO_SNDBUF, soSndBufForce)
	})
	if msg := bufferWarning(rcv, snd); msg != "" {
		log.Warn(msg, "rcvbuf_kib", rcv>>10, "sndbuf_kib", snd>>10, "want_kib", BufferSize>>10)
	}
}

// raiseBuffer returns the buffer size the kernel reports for opt after
// forcing it with force if it was below BufferSize. (Linux reports
// twice the size set, to account for its bookkeeping; quic-go compares the
// reported value too.)
func raiseBuffer(fd, opt, force int) int {
	n, err := syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, opt)
	if err != nil {
		return 0
	}
	if n < BufferSize && force != 0 {
		syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, force, BufferSize)
		n, _ = syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, opt)
	}
	return n
}

// bufferWarning is the warning for buffers of rcv and snd bytes, or "".
func bufferWarning(rcv, snd int) string {
	if rcv >= BufferSize && snd >= BufferSize {
		return ""
	}
	return "UDP socket buffers are smaller than QUIC needs at high rates (7 MiB): " +
		"the system limit prevents more; raise it with " +
		"sysctl -w net.core.rmem_max=7500000 net.core.wmem_max=7500000 " +
		"(scripts/setup.sh does this on a test machine), or run s2cs with CAP_NET_ADMIN"
}
