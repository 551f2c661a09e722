package sockmap_test

import (
	"encoding/binary"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"scistream/internal/relay/relaytest"
	"scistream/internal/sockmap"
	"scistream/internal/waitfor"
)

// tcpSeqs returns c's next sequence number to send (write_seq) and to
// receive (rcv_nxt), read in TCP repair mode (CAP_NET_ADMIN).
func tcpSeqs(tb testing.TB, c *net.TCPConn) (snd, rcv uint32) {
	tb.Helper()
	const sendQueue, recvQueue = 2, 1 // TCP_SEND_QUEUE, TCP_RECV_QUEUE
	rc, err := c.SyscallConn()
	if err != nil {
		tb.Fatal(err)
	}
	var ferr error
	rc.Control(func(fd uintptr) {
		set := func(opt, v int) {
			if ferr == nil {
				ferr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, opt, v)
			}
		}
		get := func() uint32 {
			if ferr != nil {
				return 0
			}
			v, err := unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_QUEUE_SEQ)
			ferr = err
			return uint32(v)
		}
		set(unix.TCP_REPAIR, 1)
		set(unix.TCP_REPAIR_QUEUE, sendQueue)
		snd = get()
		set(unix.TCP_REPAIR_QUEUE, recvQueue)
		rcv = get()
		set(unix.TCP_REPAIR, 0)
	})
	if ferr != nil {
		tb.Fatalf("TCP repair mode: %v", ferr)
	}
	return snd, rcv
}

// injectSegment sends, from from's address to to's, a TCP segment with
// the given sequence number and payload, as a retransmission would
// carry it (a raw socket: CAP_NET_RAW).
func injectSegment(tb testing.TB, from, to *net.TCPAddr, seq, ack uint32, payload []byte) {
	tb.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_TCP)
	if err != nil {
		tb.Fatalf("raw socket: %v", err)
	}
	defer unix.Close(fd)
	seg := make([]byte, 20+len(payload))
	binary.BigEndian.PutUint16(seg[0:], uint16(from.Port))
	binary.BigEndian.PutUint16(seg[2:], uint16(to.Port))
	binary.BigEndian.PutUint32(seg[4:], seq)
	binary.BigEndian.PutUint32(seg[8:], ack)
	seg[12] = 5 << 4      // data offset: 20 bytes, no options
	seg[13] = 0x10 | 0x08 // ACK, PSH
	binary.BigEndian.PutUint16(seg[14:], 65535)
	copy(seg[20:], payload)
	// Checksum over the pseudo header and the segment.
	var sum uint32
	add := func(b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(binary.BigEndian.Uint16(b[i:]))
		}
		if len(b)%2 == 1 {
			sum += uint32(b[len(b)-1]) << 8
		}
	}
	add(from.IP.To4())
	add(to.IP.To4())
	sum += unix.IPPROTO_TCP + uint32(len(seg))
	add(seg)
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(seg[16:], ^uint16(sum))
	sa := &unix.SockaddrInet4{}
	copy(sa.Addr[:], to.IP.To4())
	if err := unix.Sendto(fd, seg, 0, sa); err != nil {
		tb.Fatalf("inject segment: %v", err)
	}
}

// A retransmitted segment that overlaps bytes already received (a
// retransmission collapsed from segments of which the receiver had the
// first ones: seen under load on loopback, where spurious retransmits
// are common) is queued whole by TCP, which skips the old part when it
// reads; the kernel's sockmap path (tcp_read_skb) hands the program the
// whole skb, so before the fix the old bytes reached the consumer twice
// (s2bench: "payload corrupted", every 1 GiB run in ten or so). Here the
// producer's retransmission is made by hand: a segment repeating the
// last 3000 bytes the relay received plus the next 1000, which the
// producer then sends itself (a second overlap). With the consumer
// stalled, the segment arrives while the direction passes bytes to user
// space.
func TestRetransmittedOverlapNotDuplicated(t *testing.T) {
	t.Run("redirecting", func(t *testing.T) { testOverlap(t, false) })
	t.Run("passing", func(t *testing.T) { testOverlap(t, true) })
}

func testOverlap(t *testing.T, stalled bool) {
	const (
		old     = 3000
		ahead   = 1000
		rest    = 1 << 20
		writeSz = 64 << 10
	)
	first := int64(1 << 20)
	cfg := sockmap.Config{}
	if stalled {
		first, cfg.Window = 256<<10, 64<<10
	}
	r := newRedirector(t, cfg)
	s := relaytest.Start(t, sockmapEngine(t, r))
	deadline(s.A, s.B)
	if stalled {
		// A small egress send buffer: with the consumer stalled, the
		// 256 KiB below cannot all fit into RB and B's receive buffer,
		// so the program must pass some to user space (it redirects only
		// what RB has room for).
		if err := s.RB.SetWriteBuffer(16 << 10); err != nil {
			t.Fatal(err)
		}
	}
	total := int64(first + rest)
	pattern := func(off, n int64) []byte {
		b := make([]byte, n+16)
		base := off &^ 7
		for i := int64(0); i < int64(len(b)); i += 8 {
			binary.BigEndian.PutUint64(b[i:], uint64(base+i))
		}
		return b[off-base : off-base+n]
	}
	read := make(chan error, 1)
	start := make(chan struct{})
	go func() {
		<-start
		_, err := patternRead(s.B, total, func(int) int { return 1 << 20 }, func(int) {})
		read <- err
	}()
	if !stalled {
		close(start)
	}
	for off := int64(0); off < first; off += writeSz {
		if _, err := s.A.Write(pattern(off, writeSz)); err != nil {
			t.Fatal(err)
		}
	}
	// Wait until the relay took every byte and A's send queue is empty,
	// so the segment below is a pure retransmission from A's view.
	if !waitfor.Cond(10*time.Second, func() bool {
		return (stalled || s.AB() == first) && ioctl(t, s.A, unix.SIOCOUTQ) == 0
	}) {
		t.Fatalf("relay moved %d of %d bytes; A's send queue %d", s.AB(), first, ioctl(t, s.A, unix.SIOCOUTQ))
	}
	// Each direction is put in the kernel as its copy starts; on a
	// starved machine the second may not have yet.
	if !waitfor.Cond(10*time.Second, func() bool { return r.Stats().Redirected == 2 }) {
		t.Fatalf("the kernel path is not set up: %+v", r.Stats())
	}
	if stalled {
		// Copy counts a pass when it takes the passed bytes: poll for it.
		if !waitfor.Cond(5*time.Second, func() bool { return r.Stats().Passes > 0 }) {
			t.Fatalf("the direction never passed to user space (%+v): the passing path is not exercised", r.Stats())
		}
	}
	snd, rcv := tcpSeqs(t, s.A)
	injectSegment(t, s.A.LocalAddr().(*net.TCPAddr), s.RA.LocalAddr().(*net.TCPAddr),
		snd-old, rcv, pattern(first-old, old+ahead))
	if stalled {
		close(start)
	}
	for off := int64(first); off < total; off += writeSz {
		if _, err := s.A.Write(pattern(off, min(writeSz, total-off))); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.A.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if err := <-read; err != nil {
		t.Fatalf("consumer: %v (stats %+v)", err, r.Stats())
	}
	s.B.CloseWrite()
	if err := s.Wait(t); err != nil {
		t.Fatalf("Relay = %v", err)
	}
	st := r.Stats()
	t.Logf("stats %+v", st)
	if st.Trimmed < old+ahead {
		t.Fatalf("trimmed %d bytes, want at least %d: the overlap did not take the kernel path", st.Trimmed, old+ahead)
	}
}
