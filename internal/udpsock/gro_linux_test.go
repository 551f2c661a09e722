//go:build linux

package udpsock

import (
	"bytes"
	"net"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
)

// TestGROSplitsDatagrams: datagrams that arrive coalesced (a GSO send of
// ten segments) and one that arrives alone come out of ReadBatch as the
// eleven datagrams that were sent, in order, in batches smaller than the
// coalesced run, with the ECN control message kept and the GRO one gone.
func TestGROSplitsDatagrams(t *testing.T) {
	rc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	pc := WithGRO(rc)
	g, ok := pc.(*groConn)
	if !ok {
		t.Skip("kernel without UDP_GRO")
	}
	raw, _ := rc.SyscallConn()
	raw.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_RECVTOS, 1) })

	sc, err := net.DialUDP("udp4", nil, rc.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	const seg = 1000
	var want [][]byte
	burst := make([]byte, 0, 10*seg)
	for i := range 10 {
		n := seg
		if i == 9 {
			n = 500 // a short last segment
		}
		d := bytes.Repeat([]byte{byte('a' + i)}, n)
		want = append(want, d)
		burst = append(burst, d...)
	}
	oob := make([]byte, unix.CmsgSpace(2))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
	h.Level, h.Type = unix.SOL_UDP, unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	oob[unix.CmsgLen(0)] = byte(seg & 0xff) // little-endian uint16 (amd64, arm64)
	oob[unix.CmsgLen(0)+1] = byte(seg >> 8)
	if _, _, err := sc.WriteMsgUDP(burst, oob, nil); err != nil {
		t.Skipf("GSO send: %v", err)
	}
	single := []byte("single datagram")
	sc.Write(single)
	want = append(want, single)

	rc.SetReadDeadline(time.Now().Add(5 * time.Second))
	var got [][]byte
	coalesced := false
	for len(got) < len(want) {
		ms := make([]ipv4.Message, 4)
		for i := range ms {
			ms[i].Buffers = [][]byte{make([]byte, 1452)}
			ms[i].OOB = make([]byte, 128)
		}
		n, err := g.ReadBatch(ms, 0)
		if err != nil {
			t.Fatalf("ReadBatch after %d datagrams: %v", len(got), err)
		}
		if len(got) == 0 && g.msgs[0].N == len(burst) && g.seg == seg {
			coalesced = true // the whole burst came in one receive
		}
		for _, m := range ms[:n] {
			got = append(got, bytes.Clone(m.Buffers[0][:m.N]))
			if m.Addr == nil {
				t.Fatal("datagram without a source address")
			}
			sawTOS := false
			cm := m.OOB[:m.NN]
			for len(cm) > 0 {
				h, _, rest, err := unix.ParseOneSocketControlMessage(cm)
				if err != nil {
					t.Fatalf("control messages passed on are malformed: %v", err)
				}
				if h.Level == unix.SOL_UDP && h.Type == unix.UDP_GRO {
					t.Fatal("the GRO control message was passed on")
				}
				sawTOS = sawTOS || h.Level == unix.IPPROTO_IP && h.Type == unix.IP_TOS
				cm = rest
			}
			if !sawTOS {
				t.Fatal("the IP_TOS (ECN) control message was dropped")
			}
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%d datagrams, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("datagram %d: %d bytes %.10q..., want %d bytes %.10q...", i, len(got[i]), got[i], len(want[i]), want[i])
		}
	}
	if !coalesced {
		t.Log("the kernel delivered the burst uncoalesced; splitting was not exercised")
	}
}

// FuzzGROSplit feeds the splitter arbitrary receive results (datagram
// length and control-message bytes, as the kernel would hand them over,
// but unchecked): it must not panic, must hand out exactly the bytes
// received, in order, in pieces no larger than the segment size, and pass
// on only well-formed control messages, never the GRO one.
func FuzzGROSplit(f *testing.F) {
	gro := func(seg int, size int) []byte {
		b := make([]byte, unix.CmsgSpace(size))
		h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
		h.Level, h.Type = unix.SOL_UDP, unix.UDP_GRO
		h.SetLen(unix.CmsgLen(size))
		for i := 0; i < size && i < 4; i++ {
			b[unix.CmsgLen(0)+i] = byte(seg >> (8 * i))
		}
		return b
	}
	tos := make([]byte, unix.CmsgSpace(1))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&tos[0]))
	h.Level, h.Type = unix.IPPROTO_IP, unix.IP_TOS
	h.SetLen(unix.CmsgLen(1))
	f.Add(uint16(10000), append(gro(1000, 4), tos...))
	f.Add(uint16(1500), append(tos, gro(1500, 2)...))
	f.Add(uint16(3), gro(0, 8))
	f.Add(uint16(0), []byte{})
	f.Add(uint16(700), []byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, n uint16, oob []byte) {
		if len(oob) > groOOBSize {
			oob = oob[:groOOBSize]
		}
		g := &groConn{msgs: make([]ipv4.Message, 1)}
		m := &g.msgs[0]
		m.Buffers = [][]byte{make([]byte, groBufSize)}
		for i := range int(n) {
			m.Buffers[0][i] = byte(i*7 + i>>8)
		}
		m.N = int(n)
		m.OOB = make([]byte, groOOBSize)
		m.NN = copy(m.OOB, oob)
		g.n, g.next, g.off = 1, 0, 0
		g.seg = g.prepare(0)
		seg := g.seg
		var got []byte
		for calls := 0; g.next < g.n; calls++ {
			if calls > int(n)+1 {
				t.Fatal("splitting makes no progress")
			}
			ms := make([]ipv4.Message, 3)
			for i := range ms {
				ms[i].Buffers = [][]byte{make([]byte, groBufSize)}
				ms[i].OOB = make([]byte, 128)
			}
			k, err := g.ReadBatch(ms, 0)
			if err != nil || k < 1 || k > len(ms) {
				t.Fatalf("ReadBatch = %d, %v", k, err)
			}
			for _, o := range ms[:k] {
				if o.N > seg {
					t.Fatalf("piece of %d bytes, segment size %d", o.N, seg)
				}
				got = append(got, o.Buffers[0][:o.N]...)
				cm := o.OOB[:o.NN]
				for len(cm) > 0 {
					h, _, rest, err := unix.ParseOneSocketControlMessage(cm)
					if err != nil {
						t.Fatalf("malformed control messages passed on: %v", err)
					}
					if h.Level == unix.SOL_UDP && h.Type == unix.UDP_GRO {
						t.Fatal("the GRO control message was passed on")
					}
					cm = rest
				}
			}
			if n == 0 {
				break
			}
		}
		if !bytes.Equal(got, m.Buffers[0][:n]) {
			t.Fatalf("split gives %d bytes, received %d (or altered)", len(got), n)
		}
	})
}

// WriteMsgUDP's raw sendmsg reaches IPv4 peers from an IPv4 socket and
// from a dual-stack one (as a mapped address), IPv6 peers from the
// dual-stack one, and carries control messages (a GSO segment size): the
// receiver sees the datagrams, from the sending socket's port.
func TestRawWriteMsgUDP(t *testing.T) {
	recv := func(t *testing.T, network string, ip net.IP) *net.UDPConn {
		c, err := net.ListenUDP(network, &net.UDPAddr{IP: ip})
		if err != nil {
			t.Skipf("listen %s %s: %v", network, ip, err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	send := func(t *testing.T, network string) (*groConn, int) {
		c, err := net.ListenUDP(network, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		g, ok := WithGRO(c).(*groConn)
		if !ok {
			t.Skip("kernel without UDP_GRO")
		}
		return g, c.LocalAddr().(*net.UDPAddr).Port
	}
	for _, tc := range []struct {
		name, from, to string
		ip             net.IP
	}{
		{"v4 to v4", "udp4", "udp4", net.IPv4(127, 0, 0, 1)},
		{"dual-stack to v4", "udp", "udp4", net.IPv4(127, 0, 0, 1)},
		{"dual-stack to v6", "udp", "udp6", net.IPv6loopback},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := recv(t, tc.to, tc.ip)
			g, port := send(t, tc.from)
			to := r.LocalAddr().(*net.UDPAddr)
			if n, _, err := g.WriteMsgUDP([]byte("one datagram"), nil, to); err != nil || n != 12 {
				t.Fatalf("WriteMsgUDP = %d, %v", n, err)
			}
			// Three segments of 5 bytes in one GSO send.
			oob := make([]byte, unix.CmsgSpace(2))
			h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
			h.Level, h.Type = unix.SOL_UDP, unix.UDP_SEGMENT
			h.SetLen(unix.CmsgLen(2))
			oob[unix.CmsgLen(0)] = 5 // little-endian uint16 (amd64, arm64)
			if _, _, err := g.WriteMsgUDP([]byte("aaaaabbbbbccccc"), oob, to); err != nil {
				t.Fatalf("GSO WriteMsgUDP: %v", err)
			}
			r.SetReadDeadline(time.Now().Add(5 * time.Second))
			buf := make([]byte, 100)
			for _, want := range []string{"one datagram", "aaaaa", "bbbbb", "ccccc"} {
				n, from, err := r.ReadFromUDP(buf)
				if err != nil || string(buf[:n]) != want || from.Port != port {
					t.Fatalf("received %q from %v (%v); want %q from port %d", buf[:n], from, err, want, port)
				}
			}
		})
	}
}
