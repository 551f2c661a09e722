//go:build linux

package wan

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
	pc := withGRO(rc)
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
