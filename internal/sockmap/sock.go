package sockmap

import (
	"fmt"
	"net"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// sock is the kernel-side view of one TCP socket that Copy needs.
type sock struct {
	c  *net.TCPConn
	rc syscall.RawConn
}

func newSock(c *net.TCPConn) (sock, error) {
	rc, err := c.SyscallConn()
	return sock{c: c, rc: rc}, err
}

// control runs f on the socket's descriptor; it fails once the
// connection is closed.
func (s sock) control(f func(fd int) error) error {
	var ferr error
	if err := s.rc.Control(func(fd uintptr) { ferr = f(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

// cookie returns the socket's cookie, its key in the maps.
func (s sock) cookie() (uint64, error) {
	var v uint64
	err := s.control(func(fd int) error {
		var err error
		v, err = unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_COOKIE)
		return err
	})
	return v, err
}

// fd runs f with the descriptor (the map update needs it).
func (s sock) fd(f func(fd int) error) error { return s.control(f) }

// errDead reports a socket that can no longer send: reset or closed. It
// matches syscall.ECONNRESET, so relay.IsRoutine classes it as the
// ordinary end of a connection, as it does for the other engines.
var errDead = fmt.Errorf("egress socket closed or reset: %w", syscall.ECONNRESET)

// sent returns how many bytes have entered the socket's send path since
// it was created, as bytes_acked (TCP_INFO) + SIOCOUTQ. The two come from
// two system calls; bytes_acked is read before and after SIOCOUTQ:
//
//   - exact: when the two bytes_acked agree, no ACK moved snd_una while
//     SIOCOUTQ (write_seq - snd_una) was read, so the sum is write_seq
//     minus a constant;
//   - otherwise the first bytes_acked plus the later SIOCOUTQ is a lower
//     bound, because bytes only ever enter the socket.
//
// It retries a few times for an exact value and reports whether it got one.
func (s sock) sent() (n uint64, exact bool, err error) {
	err = s.control(func(fd int) error {
		for i := range 8 {
			a1, st, err := ackedState(fd)
			if err != nil {
				return err
			}
			if st == stateClose {
				return errDead
			}
			q, err := unix.IoctlGetInt(fd, unix.SIOCOUTQ)
			if err != nil {
				return fmt.Errorf("SIOCOUTQ: %w", err)
			}
			a2, _, err := ackedState(fd)
			if err != nil {
				return err
			}
			n = a1 + uint64(q)
			if a1 == a2 {
				exact = true
				return nil
			}
			if i > 3 {
				runtime.Gosched()
			}
		}
		return nil
	})
	return n, exact, err
}

// Linux TCP state numbers (include/net/tcp_states.h).
const stateClose = 7

func ackedState(fd int) (uint64, uint8, error) {
	ti, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
	if err != nil {
		return 0, 0, fmt.Errorf("TCP_INFO: %w", err)
	}
	return ti.Bytes_acked, ti.State, nil
}

// unread returns the bytes waiting in the receive queue (SIOCINQ) and an
// upper bound of the bytes user space ever read from the socket
// (bytes_received - SIOCINQ, read in that order).
func (s sock) unread() (inq int, consumed uint64, err error) {
	err = s.control(func(fd int) error {
		q, err := unix.IoctlGetInt(fd, unix.SIOCINQ)
		if err != nil {
			return fmt.Errorf("SIOCINQ: %w", err)
		}
		ti, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
		if err != nil {
			return fmt.Errorf("TCP_INFO: %w", err)
		}
		inq = q
		consumed = ti.Bytes_received - uint64(q)
		return nil
	})
	return inq, consumed, err
}

func ioctlOutq(fd int) (int, error) { return unix.IoctlGetInt(fd, unix.SIOCOUTQ) }
