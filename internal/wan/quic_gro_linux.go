//go:build linux

package wan

import (
	"encoding/binary"
	"net"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
)

// groConn is a UDP socket with generic receive offload (UDP_GRO) on: the
// kernel hands over a run of same-size datagrams from one sender (what a
// GSO send produces) as one buffer plus the segment size, and ReadBatch
// splits it again into the datagrams quic-go expects. quic-go reads a
// Transport.Conn through ReadBatch when it has one (see its batchConn), and
// sends with GSO itself. One receive system call then brings up to 64 KiB
// of packets instead of one 1.4 KiB datagram, and the kernel no longer
// splits each GSO send on the receiving side: per-datagram receive cost is
// the largest cost of a QUIC leg at high rates.
//
// ReadBatch is called from quic-go's single read loop only.
type groConn struct {
	*net.UDPConn
	pc   *ipv4.PacketConn
	msgs []ipv4.Message // coalesced buffers of the last read

	n    int // messages in msgs from the last read
	next int // message being split
	off  int // offset of its next segment
	seg  int // its segment size
}

const (
	groBatch   = 8
	groBufSize = 64 << 10 // the largest UDP payload fits
	groOOBSize = 256
)

// withGRO turns on UDP_GRO on c and returns the connection quic-go should
// use, or c itself if the kernel lacks GRO.
func withGRO(c *net.UDPConn) net.PacketConn {
	raw, err := c.SyscallConn()
	if err != nil {
		return c
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_UDP, unix.UDP_GRO, 1)
	}); err != nil || serr != nil {
		return c
	}
	g := &groConn{UDPConn: c, pc: ipv4.NewPacketConn(c), msgs: make([]ipv4.Message, groBatch)}
	for i := range g.msgs {
		g.msgs[i].Buffers = [][]byte{make([]byte, groBufSize)}
		g.msgs[i].OOB = make([]byte, groOOBSize)
	}
	return g
}

// ReadBatch fills ms with single datagrams, splitting coalesced ones. Each
// datagram's control messages (ECN bits, packet info) are passed on
// without the GRO one.
func (g *groConn) ReadBatch(ms []ipv4.Message, flags int) (int, error) {
	if g.next >= g.n {
		for i := range g.msgs {
			g.msgs[i].Buffers[0] = g.msgs[i].Buffers[0][:groBufSize]
			g.msgs[i].OOB = g.msgs[i].OOB[:groOOBSize]
		}
		n, err := g.pc.ReadBatch(g.msgs, flags)
		if n <= 0 || err != nil {
			return n, err
		}
		g.n, g.next, g.off = n, 0, 0
		g.seg = g.prepare(0)
	}
	k := 0
	for k < len(ms) && g.next < g.n {
		m := &g.msgs[g.next]
		end := min(g.off+g.seg, m.N)
		out := &ms[k]
		out.N = copy(out.Buffers[0], m.Buffers[0][g.off:end])
		out.NN = 0
		if m.NN <= len(out.OOB) {
			out.NN = copy(out.OOB, m.OOB[:m.NN])
		}
		out.Flags = m.Flags
		out.Addr = m.Addr
		k++
		g.off = end
		if g.off >= m.N {
			g.next++
			g.off = 0
			if g.next < g.n {
				g.seg = g.prepare(g.next)
			}
		}
	}
	return k, nil
}

// prepare removes the GRO control message of message i and returns its
// segment size (the whole datagram if it was not coalesced; at least 1).
func (g *groConn) prepare(i int) int {
	m := &g.msgs[i]
	seg := 0
	oob := m.OOB[:m.NN]
	kept := oob[:0]
	for len(oob) > 0 {
		h, body, rest, err := unix.ParseOneSocketControlMessage(oob)
		if err != nil {
			break
		}
		whole := oob[:len(oob)-len(rest)]
		if h.Level == unix.SOL_UDP && h.Type == unix.UDP_GRO {
			switch len(body) {
			case 2:
				seg = int(binary.NativeEndian.Uint16(body))
			case 4, 8:
				seg = int(binary.NativeEndian.Uint32(body))
			}
		} else {
			kept = append(kept, whole...) // moves left, never past what is read next
		}
		oob = rest
	}
	m.NN = len(kept)
	if seg <= 0 {
		seg = m.N
	}
	return max(seg, 1)
}
