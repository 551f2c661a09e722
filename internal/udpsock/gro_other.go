//go:build !linux

package udpsock

import "net"

// WithGRO returns c: receive offload is used on Linux only.
func WithGRO(c *net.UDPConn) net.PacketConn { return c }
