// Package tcpbuf says how large the kernel lets TCP autotuning grow one
// socket's buffers (net.ipv4.tcp_rmem and tcp_wmem, their third value),
// which bounds what one WAN leg carries on a long path: a connection
// keeps at most about half its receive buffer in flight (the kernel
// keeps the rest for its overhead), and while a lost segment is resent
// the receiver also holds a round trip of later bytes out of order in
// the same buffer. A distribution's defaults (6 MiB receive, 4 MiB send)
// hold one connection to about 20 MiB/s at 100 ms, whatever the link.
package tcpbuf

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Recommended is the limit below which Limits.Low says so: 64 MiB, the
// one ESnet's host tuning gives a 10 Gbit/s data transfer node on
// paths to 100 ms.
const Recommended = 64 << 20

// Limits are the largest receive and send buffers autotuning gives one
// TCP socket (0: unknown).
type Limits struct {
	Recv, Send int64
}

// Read returns the host's limits, from /proc/sys/net/ipv4 (of this
// process's network namespace).
func Read() Limits {
	return Limits{Recv: readMax("tcp_rmem"), Send: readMax("tcp_wmem")}
}

func readMax(name string) int64 {
	b, err := os.ReadFile("/proc/sys/net/ipv4/" + name)
	if err != nil {
		return 0
	}
	n, err := ParseMax(string(b))
	if err != nil {
		return 0
	}
	return n
}

// ParseMax returns the third of a tcp_rmem or tcp_wmem value's three
// numbers ("min default max").
func ParseMax(s string) (int64, error) {
	f := strings.Fields(s)
	if len(f) != 3 {
		return 0, fmt.Errorf("tcp buffer sizes %q: want three numbers (min default max)", s)
	}
	n, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("tcp buffer sizes %q: the max is not a positive number", s)
	}
	return n, nil
}

// Low reports whether a known limit is below Recommended.
func (l Limits) Low() bool {
	return l.Recv > 0 && l.Recv < Recommended || l.Send > 0 && l.Send < Recommended
}

// Rate is about the most one connection carries per second at rtt
// seconds of round trip under these limits (half the smaller buffer a
// round trip), in bytes; 0 if a limit is unknown.
func (l Limits) Rate(rtt float64) float64 {
	if l.Recv <= 0 || l.Send <= 0 || rtt <= 0 {
		return 0
	}
	return float64(min(l.Recv, l.Send)) / 2 / rtt
}

// Fix is the command that raises both limits to Recommended.
const Fix = "sysctl -w net.ipv4.tcp_rmem='4096 131072 67108864' net.ipv4.tcp_wmem='4096 16384 67108864'"
