package wan

import (
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// bytesReceived is how many bytes c's TCP connection received from the
// peer (TCP_INFO), or false if c is not a TCP socket or cannot say.
func bytesReceived(c net.Conn) (uint64, bool) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return 0, false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0, false
	}
	var n uint64
	var serr error
	if err := rc.Control(func(fd uintptr) {
		var ti *unix.TCPInfo
		ti, serr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		if serr == nil {
			n = ti.Bytes_received
		}
	}); err != nil || serr != nil {
		return 0, false
	}
	return n, true
}

// RTTOf is the smoothed round-trip time the kernel measured on leg c's
// TCP connection (TCP_INFO), through the leg's wrappers (NetConn), or
// false if c does not stand on a TCP socket (QUIC) or cannot say.
func RTTOf(c net.Conn) (time.Duration, bool) {
	t := TCPOf(c)
	if t == nil {
		return 0, false
	}
	rc, err := t.SyscallConn()
	if err != nil {
		return 0, false
	}
	var rtt time.Duration
	var serr error
	if err := rc.Control(func(fd uintptr) {
		var ti *unix.TCPInfo
		ti, serr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		if serr == nil {
			rtt = time.Duration(ti.Rtt) * time.Microsecond
		}
	}); err != nil || serr != nil || rtt == 0 {
		return 0, false
	}
	return rtt, true
}
