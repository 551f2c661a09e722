//go:build linux

package udpsock

import (
	"encoding/binary"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
	"unsafe"

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
// Both directions issue their system calls (recvmmsg, sendmsg) raw on the
// non-blocking socket and wait in the runtime's poller, as package sockio
// does for TCP: through net.UDPConn and x/net every call enters the
// runtime's blocking-syscall path, which keeps its monitor thread waking
// every 20 us to take processors back from threads in system calls (11%
// of a QUIC gateway's CPU in a profile, plus the thread hand-offs).
//
// ReadBatch is called from quic-go's single read loop only; WriteMsgUDP
// from any goroutine.
type groConn struct {
	*net.UDPConn
	raw  syscall.RawConn
	msgs []ipv4.Message // coalesced buffers of the last read
	mm   []mmsghdr      // recvmmsg's view of msgs
	iov  []unix.Iovec
	sa   []unix.RawSockaddrAny
	addr []*net.UDPAddr // the last address parsed per slot, reused while the sender is the same
	rfn  func(fd uintptr) bool
	rn   int
	rerr syscall.Errno

	n    int // messages in msgs from the last read
	next int // message being split
	off  int // offset of its next segment
	seg  int // its segment size

	wmu  sync.Mutex // guards the following: one sendmsg at a time
	wmsg unix.Msghdr
	wiov unix.Iovec
	wsa  unix.RawSockaddrAny
	wfn  func(fd uintptr) bool
	werr syscall.Errno
	v6   bool // the socket is AF_INET6 (IPv4 peers as mapped addresses)
}

// mmsghdr is struct mmsghdr.
type mmsghdr struct {
	hdr unix.Msghdr
	len uint32
}

const (
	groBatch   = 8
	groBufSize = 64 << 10 // the largest UDP payload fits
	groOOBSize = 256
)

// WithGRO turns on UDP_GRO on c and returns the connection quic-go should
// use, or c itself if the kernel lacks GRO.
func WithGRO(c *net.UDPConn) net.PacketConn {
	raw, err := c.SyscallConn()
	if err != nil {
		return c
	}
	var serr error
	domain := 0
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_UDP, unix.UDP_GRO, 1)
		if serr == nil {
			domain, serr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_DOMAIN)
		}
	}); err != nil || serr != nil {
		return c
	}
	g := &groConn{
		UDPConn: c, raw: raw, v6: domain == unix.AF_INET6,
		msgs: make([]ipv4.Message, groBatch), mm: make([]mmsghdr, groBatch), iov: make([]unix.Iovec, groBatch),
		sa: make([]unix.RawSockaddrAny, groBatch), addr: make([]*net.UDPAddr, groBatch),
	}
	for i := range g.msgs {
		g.msgs[i].Buffers = [][]byte{make([]byte, groBufSize)}
		g.msgs[i].OOB = make([]byte, groOOBSize)
		g.iov[i].Base = &g.msgs[i].Buffers[0][0]
		g.mm[i].hdr.Iov = &g.iov[i]
		g.mm[i].hdr.SetIovlen(1)
		g.mm[i].hdr.Name = (*byte)(unsafe.Pointer(&g.sa[i]))
		g.mm[i].hdr.Control = &g.msgs[i].OOB[0]
	}
	g.rfn = func(fd uintptr) bool {
		for {
			r, _, e := syscall.RawSyscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&g.mm[0])), uintptr(len(g.mm)), 0, 0, 0)
			if e == syscall.EINTR {
				continue
			}
			g.rn, g.rerr = int(r), e
			return e != syscall.EAGAIN
		}
	}
	g.wfn = func(fd uintptr) bool {
		for {
			_, _, e := syscall.RawSyscall(unix.SYS_SENDMSG, fd, uintptr(unsafe.Pointer(&g.wmsg)), 0)
			if e == syscall.EINTR {
				continue
			}
			g.werr = e
			return e != syscall.EAGAIN
		}
	}
	return g
}

// readRaw receives up to len(g.msgs) (coalesced) datagrams with one
// recvmmsg, waiting in the poller until there is one.
func (g *groConn) readRaw() (int, error) {
	for i := range g.mm {
		h := &g.mm[i].hdr
		g.iov[i].SetLen(groBufSize)
		h.Namelen = uint32(unsafe.Sizeof(g.sa[i]))
		h.SetControllen(groOOBSize)
		h.Flags = 0
		g.mm[i].len = 0
	}
	if err := g.raw.Read(g.rfn); err != nil {
		return 0, err
	}
	if g.rerr != 0 {
		return 0, &net.OpError{Op: "read", Net: "udp", Source: g.LocalAddr(), Err: os.NewSyscallError("recvmmsg", g.rerr)}
	}
	for i := 0; i < g.rn; i++ {
		m, h := &g.msgs[i], &g.mm[i].hdr
		m.Buffers[0] = m.Buffers[0][:groBufSize]
		m.OOB = m.OOB[:groOOBSize]
		m.N, m.NN, m.Flags = int(g.mm[i].len), int(h.Controllen), int(h.Flags)
		m.Addr = g.sender(i)
	}
	return g.rn, nil
}

// sender returns the source address of slot i's datagram, reusing the
// slot's previous *net.UDPAddr when it is the same (quic-go only reads it).
func (g *groConn) sender(i int) net.Addr {
	var ip net.IP
	var port int
	switch g.sa[i].Addr.Family {
	case unix.AF_INET:
		a := (*unix.RawSockaddrInet4)(unsafe.Pointer(&g.sa[i]))
		ip, port = a.Addr[:], int(binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&a.Port))[:]))
	case unix.AF_INET6:
		a := (*unix.RawSockaddrInet6)(unsafe.Pointer(&g.sa[i]))
		ip, port = a.Addr[:], int(binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&a.Port))[:]))
		if a.Scope_id != 0 {
			// Link-local with a zone: rare on a WAN leg; no reuse.
			return &net.UDPAddr{IP: append(net.IP(nil), ip...), Port: port, Zone: zoneName(int(a.Scope_id))}
		}
	default:
		return nil
	}
	if p := g.addr[i]; p != nil && p.Port == port && p.Zone == "" && len(p.IP) == len(ip) && p.IP.Equal(ip) {
		return p
	}
	p := &net.UDPAddr{IP: append(net.IP(nil), ip...), Port: port}
	g.addr[i] = p
	return p
}

func zoneName(index int) string {
	if ifi, err := net.InterfaceByIndex(index); err == nil {
		return ifi.Name
	}
	return strconv.Itoa(index)
}

// WriteMsgUDP sends b with the control messages oob (GSO segment size,
// ECN, packet info from quic-go) to addr in one raw sendmsg, waiting in
// the poller while the socket's buffer is full.
func (g *groConn) WriteMsgUDP(b, oob []byte, addr *net.UDPAddr) (n, oobn int, err error) {
	if addr == nil || len(b) == 0 {
		return g.UDPConn.WriteMsgUDP(b, oob, addr)
	}
	g.wmu.Lock()
	defer g.wmu.Unlock()
	g.wmsg = unix.Msghdr{Name: (*byte)(unsafe.Pointer(&g.wsa))}
	if ip4 := addr.IP.To4(); ip4 != nil && !g.v6 {
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(&g.wsa))
		*sa = unix.RawSockaddrInet4{Family: unix.AF_INET}
		copy(sa.Addr[:], ip4)
		binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:], uint16(addr.Port))
		g.wmsg.Namelen = unix.SizeofSockaddrInet4
	} else if g.v6 && addr.Zone == "" && len(addr.IP) > 0 {
		sa := (*unix.RawSockaddrInet6)(unsafe.Pointer(&g.wsa))
		*sa = unix.RawSockaddrInet6{Family: unix.AF_INET6}
		copy(sa.Addr[:], addr.IP.To16()) // an IPv4 peer as ::ffff:a.b.c.d
		binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:], uint16(addr.Port))
		g.wmsg.Namelen = unix.SizeofSockaddrInet6
	} else {
		return g.UDPConn.WriteMsgUDP(b, oob, addr) // IPv6 to an IPv4 socket, zones: let net decide
	}
	g.wiov.Base = &b[0]
	g.wiov.SetLen(len(b))
	g.wmsg.Iov = &g.wiov
	g.wmsg.SetIovlen(1)
	if len(oob) > 0 {
		g.wmsg.Control = &oob[0]
		g.wmsg.SetControllen(len(oob))
	}
	err = g.raw.Write(g.wfn)
	g.wmsg, g.wiov = unix.Msghdr{}, unix.Iovec{} // drop the references to b and oob
	if err != nil {
		return 0, 0, err
	}
	if g.werr != 0 {
		return 0, 0, &net.OpError{Op: "write", Net: "udp", Source: g.LocalAddr(), Addr: addr, Err: os.NewSyscallError("sendmsg", g.werr)}
	}
	return len(b), len(oob), nil
}

// ReadBatch fills ms with single datagrams, splitting coalesced ones. Each
// datagram's control messages (ECN bits, packet info) are passed on
// without the GRO one.
func (g *groConn) ReadBatch(ms []ipv4.Message, flags int) (int, error) {
	if g.next >= g.n {
		n, err := g.readRaw()
		if n <= 0 || err != nil {
			return n, err
		}
		g.n, g.next, g.off = n, 0, 0
		g.seg = g.prepare(0)
	}
	k := 0
	_ = flags // quic-go passes none; recvmmsg waits in the poller
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
