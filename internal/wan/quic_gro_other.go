//go:build !linux

package wan

import "net"

// withGRO returns c: receive offload is used on Linux only.
func withGRO(c *net.UDPConn) net.PacketConn { return c }
