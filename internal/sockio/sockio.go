// Package sockio reads, writes and splices the non-blocking TCP sockets of
// the relay's hot path with raw system calls, waiting for readiness
// through the Go runtime's network poller.
//
// Why not (*net.TCPConn).Read and Write: those enter the system call
// through the runtime's blocking-syscall path (entersyscall/exitsyscall),
// which on a busy proxy keeps the runtime's monitor thread waking every
// 20 us to look for processors stuck in system calls, and hands
// processors between threads. A call on a non-blocking socket never
// blocks (it returns EAGAIN and we wait in the poller), so it is safe to
// issue it as a raw system call: the thread keeps its processor while the
// kernel works on the call (tens to hundreds of microseconds for a large
// write on loopback, which also runs the receiver's TCP processing), and
// never sleeps in it. Callers bound the size of one call (relay: 1 MiB).
// Writes of less than 64 KiB (smallWrite), a request-reply exchange's,
// and splices out of less than 32 KiB that came after a wait
// (smallSplice) take the runtime's path: its wake-ups shorten the
// exchange's round trip.
//
// A splice pipe beyond the per-user pipe allowance of an unprivileged
// process (fs.pipe-user-pages-soft, 64 MiB by default) gets only a few
// pages: NewPipe reports the size it got, and splicing still works, in
// smaller steps. Deadlines, Close from another
// goroutine and the poller's wake-ups behave exactly as for net.Conn,
// because the waiting is done by syscall.RawConn.
//
// Each Conn has independent read and write state: one goroutine may read
// while another writes, as the relay's two directions do. Calls of one
// kind (reads, or writes) must not overlap. No call allocates.
package sockio

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Conn is the raw view of one TCP socket.
type Conn struct {
	c  *net.TCPConn
	rc syscall.RawConn
	rd op // reads and splices out of the socket
	wr op // writes and splices into the socket
}

// op is the state of one kind of call; fn is built once so that passing
// it to RawConn does not allocate on every call.
type op struct {
	fn   func(fd uintptr) bool
	kind int
	// nowait makes fn report done on EAGAIN too (TryRead, TryWrite):
	// it never waits in the poller.
	nowait bool
	// small marks a write call of less than smallWrite in all (not the
	// rest of a larger one after a partial write), or a splice out that
	// smallSplice takes.
	small bool
	buf   []byte // read, write
	pipe  int    // splices: the pipe end
	len   int    // splices: bytes to move
	n     int    // result
	errno syscall.Errno
	pfd   [1]pollFd // opWaitWrite
	peek  [1]byte   // opPeek
	woke  bool      // opPeek: the first look is done (so fn runs again only after a wake-up)
	// waited says the call waited in the poller (read by SpliceIn: the
	// pipe's bytes came after a pause, as a request-reply exchange's do).
	waited bool
}

// pollFd is struct pollfd.
type pollFd struct {
	fd             int32
	events, revent int16
}

const pollOut = 0x4 // POLLOUT

const (
	opRead = iota
	opWrite
	opSpliceIn  // socket -> pipe
	opSpliceOut // pipe -> socket
	opWaitWrite // no call: ready once the socket reports room (POLLOUT) or an error
	opPeek      // ready once the socket has a byte to read (MSG_PEEK), its end or an error
)

const spliceFlags = 0x1 | 0x2 // SPLICE_F_MOVE | SPLICE_F_NONBLOCK

// smallWrite is the size below which a write call enters the kernel through
// the runtime's blocking-syscall path after all (syscall.Syscall): such a
// write is a message or a few of a request-reply exchange, not a batch
// of a bulk flow (256 KiB to 1 MiB). There the monitor thread's wake-ups
// are what the exchange wants: it keeps the process's threads from
// sleeping between messages, so the next one is taken sooner (16 KiB
// requests through a TLS gateway pair: p50 128-133 us against 152-177
// with raw writes, in the same runs; bulk TLS goodput and CPU per GB
// unchanged, docs/performance.md).
const smallWrite = 64 << 10

// smallSplice is smallWrite for a splice out of a pipe whose bytes came
// after a wait (the source was idle: a message of an exchange, or a
// bulk flow's sender that fell behind): 16 KiB requests through a plain
// TCP gateway pair, which splices, p50 median 87-89 us against 118-120
// with raw splices (the naive Go splice pair 80-90 in the same runs).
// Half of smallWrite, as a pipe that took one segment of a bulk flow on
// loopback (up to 64 KiB less its headers) holds just under it: at 64
// KiB, and without the wait, bulk plaintext took 0.35 CPU s/GB against
// 0.30.
const smallSplice = 32 << 10

func (o *op) init() {
	o.fn = func(fd uintptr) bool {
		for {
			var r uintptr
			var e syscall.Errno
			switch o.kind {
			case opRead:
				r, _, e = syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&o.buf[0])), uintptr(len(o.buf)))
			case opWrite:
				if o.small {
					r, _, e = syscall.Syscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&o.buf[0])), uintptr(len(o.buf)))
				} else {
					r, _, e = syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&o.buf[0])), uintptr(len(o.buf)))
				}
			case opSpliceIn:
				r, _, e = syscall.RawSyscall6(syscall.SYS_SPLICE, fd, 0, uintptr(o.pipe), 0, uintptr(o.len), spliceFlags)
			case opSpliceOut:
				if o.small {
					r, _, e = syscall.Syscall6(syscall.SYS_SPLICE, uintptr(o.pipe), 0, fd, 0, uintptr(o.len), spliceFlags)
				} else {
					r, _, e = syscall.RawSyscall6(syscall.SYS_SPLICE, uintptr(o.pipe), 0, fd, 0, uintptr(o.len), spliceFlags)
				}
			case opPeek:
				if o.woke {
					// Called again after the poller woke: the socket
					// became readable (or ended) since the first look
					// found it empty. The caller's read that follows
					// sees which, so looking again would cost a
					// system call a message for nothing.
					r, e = 1, 0
					break
				}
				o.woke = true
				r, _, e = syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&o.peek[0])), 1,
					syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
			case opWaitWrite:
				o.pfd = [1]pollFd{{fd: int32(fd), events: pollOut}}
				r, _, e = syscall.RawSyscall(syscall.SYS_POLL, uintptr(unsafe.Pointer(&o.pfd[0])), 1, 0)
				if e == 0 && r == 0 {
					e = syscall.EAGAIN // no room yet
				}
			}
			if e == syscall.EINTR {
				continue
			}
			o.n, o.errno = int(r), e
			if e == syscall.EAGAIN && !o.nowait {
				o.waited = true
			}
			return e != syscall.EAGAIN || o.nowait // false: wait in the poller, then retry
		}
	}
}

// New returns the raw view of c. c must stay open while the Conn is used.
func New(c *net.TCPConn) (*Conn, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	s := &Conn{c: c, rc: rc}
	s.rd.init()
	s.wr.init()
	return s, nil
}

func (s *Conn) opError(op string, e syscall.Errno) error {
	return &net.OpError{Op: op, Net: "tcp", Source: s.c.LocalAddr(), Addr: s.c.RemoteAddr(), Err: os.NewSyscallError(op, e)}
}

// Read reads into b, waiting until at least one byte is available. It
// returns io.EOF at the end of the stream.
func (s *Conn) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	o := &s.rd
	o.kind, o.buf = opRead, b
	err := s.rc.Read(o.fn)
	o.buf = nil
	if err != nil {
		return 0, err
	}
	switch {
	case o.errno != 0:
		return 0, s.opError("read", o.errno)
	case o.n == 0:
		return 0, io.EOF
	}
	return o.n, nil
}

// ErrWouldBlock is what TryRead returns when no byte is available
// without waiting.
var ErrWouldBlock = errors.New("sockio: no data available without waiting")

// TryRead reads into b what is available now, without waiting: it
// returns ErrWouldBlock when nothing is. With WaitReadable, a caller
// can hold a read buffer only while there is something to read.
func (s *Conn) TryRead(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	o := &s.rd
	o.kind, o.buf, o.nowait = opRead, b, true
	err := s.rc.Read(o.fn)
	n, errno := o.n, o.errno
	o.buf, o.nowait = nil, false
	switch {
	case err != nil:
		return 0, err
	case errno == syscall.EAGAIN:
		return 0, ErrWouldBlock
	case errno != 0:
		return 0, s.opError("read", errno)
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// WaitReadable is the package's WaitReadable for s's socket (without
// its allocation: it takes the place of a read), but cheaper by a
// system call when it has to wait: once the poller wakes it, it returns
// without looking again, so the read that follows may, rarely, find
// nothing yet (TryRead's ErrWouldBlock: wait again). A caller that
// reads after it, as its callers do, sees the end or error too.
func (s *Conn) WaitReadable() error {
	o := &s.rd
	o.kind, o.woke = opPeek, false
	err := s.rc.Read(o.fn)
	n, errno := o.n, o.errno
	switch {
	case err != nil:
		return err
	case errno != 0:
		return &net.OpError{Op: "read", Net: "tcp", Source: s.c.LocalAddr(), Addr: s.c.RemoteAddr(), Err: os.NewSyscallError("recvfrom", errno)}
	case n == 0:
		return io.EOF
	}
	return nil
}

// WaitReadable waits until c has a byte to read, or its end or an error,
// without reading it, under c's read deadline. A goroutine waiting here
// has a shallow stack and holds nothing else: a server can keep a
// connection that has said nothing yet for next to nothing, and start its
// handshake (with its buffers and state) only once the peer speaks.
func WaitReadable(c *net.TCPConn) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var errno syscall.Errno
	var n uintptr
	var b [1]byte
	err = rc.Read(func(fd uintptr) bool {
		n, _, errno = syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), 1,
			syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
		return errno != syscall.EAGAIN
	})
	switch {
	case err != nil:
		return err
	case errno != 0:
		return &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError("recvfrom", errno)}
	case n == 0:
		return io.EOF
	}
	return nil
}

// Reset reports whether the kernel has closed c's socket while this
// process still holds it (TCP state CLOSE) before this side sent its own
// FIN: then a reset (or a timeout) ended it. Call it only while this side
// has not shut down its writes: an orderly close in which this side sent
// its FIN last also ends in CLOSE (after the peer's FIN alone the state is
// CLOSE_WAIT).
//
// The kernel reports a reset's error to one call only: a write racing a
// read takes it, and the read then returns 0, which reads as an orderly
// end of stream. A reader that may meet such a race asks Reset before it
// takes an end of stream for orderly.
func Reset(c *net.TCPConn) bool {
	rc, err := c.SyscallConn()
	if err != nil {
		return false
	}
	var closed bool
	rc.Control(func(fd uintptr) {
		info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		closed = err == nil && info.State == tcpClose
	})
	return closed
}

// tcpClose is TCP_CLOSE of the kernel's enum of TCP states.
const tcpClose = 7

// Ended reports, without reading c, whether c's connection is over
// although this side never ended it: nil while it is open, also after the
// peer's FIN (CLOSE_WAIT: what came before it is still there to read);
// the error the kernel holds for the socket once it closed it (ECONNRESET
// after a reset, ETIMEDOUT when keepalive or retransmission gave up;
// ECONNRESET if a call already took the error); net.ErrClosed if this
// process closed c. It takes the socket's pending error, as a read
// would. Call it only while this side has not shut down its writes (see
// Reset).
//
// It is for a connection held unread on purpose: a gateway that keeps
// a peer's bytes waiting in the socket asks it now and then whether the
// peer is still there.
func Ended(c *net.TCPConn) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return net.ErrClosed
	}
	var ended syscall.Errno
	err = rc.Control(func(fd uintptr) {
		info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		if err != nil || info.State != tcpClose {
			return
		}
		ended = syscall.ECONNRESET
		if e, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ERROR); err == nil && e != 0 {
			ended = syscall.Errno(e)
		}
	})
	switch {
	case err != nil:
		return net.ErrClosed
	case ended != 0:
		return &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError("read", ended)}
	}
	return nil
}

// Write writes all of b, waiting for room in the socket as needed.
func (s *Conn) Write(b []byte) (int, error) {
	o := &s.wr
	o.small = len(b) < smallWrite
	done := 0
	for done < len(b) {
		o.kind, o.buf = opWrite, b[done:]
		err := s.rc.Write(o.fn)
		o.buf = nil
		if err != nil {
			return done, err
		}
		if o.errno != 0 {
			return done, s.opError("write", o.errno)
		}
		done += o.n
	}
	return done, nil
}

// TryWrite writes what of b the socket takes now, without waiting: it
// returns ErrWouldBlock when it takes nothing. A caller that must not
// wait on the socket (a reader of frames that hands the rest to a
// writer, internal/carry) writes with it.
func (s *Conn) TryWrite(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	o := &s.wr
	o.kind, o.buf, o.nowait, o.small = opWrite, b, true, len(b) < smallWrite
	err := s.rc.Write(o.fn)
	n, errno := o.n, o.errno
	o.buf, o.nowait = nil, false
	switch {
	case err != nil:
		return 0, err
	case errno == syscall.EAGAIN:
		return 0, ErrWouldBlock
	case errno != 0:
		return 0, s.opError("write", errno)
	}
	return n, nil
}

// Pipe is a kernel pipe that carries spliced bytes between two sockets.
type Pipe struct {
	r, w int
	size int // capacity in bytes
	n    int // bytes in the pipe
	// waited: the last SpliceIn waited for its bytes (smallSplice).
	waited bool
}

// NewPipe returns a pipe of the given capacity, or of the largest the
// system grants (at least the default 64 KiB: an unprivileged process
// over its pipe-buffer allowance gets the default).
func NewPipe(size int) (*Pipe, error) {
	var fds [2]int
	if err := syscall.Pipe2(fds[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		return nil, os.NewSyscallError("pipe2", err)
	}
	p := &Pipe{r: fds[0], w: fds[1]}
	if size > 0 {
		fcntl(p.w, syscall.F_SETPIPE_SZ, size) // best effort
	}
	got, err := fcntl(p.w, syscall.F_GETPIPE_SZ, 0)
	if err != nil || got <= 0 {
		got = 64 << 10
	}
	p.size = got
	return p, nil
}

func fcntl(fd, cmd, arg int) (int, error) {
	r, _, e := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), uintptr(cmd), uintptr(arg))
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

// Size returns the pipe's capacity in bytes.
func (p *Pipe) Size() int { return p.size }

// Len returns the bytes in the pipe.
func (p *Pipe) Len() int { return p.n }

// Close closes both ends of the pipe, discarding what it holds.
func (p *Pipe) Close() error {
	return errors.Join(syscall.Close(p.r), syscall.Close(p.w))
}

// WaitWritable waits until s has room in its send buffer (the poller's
// notion: the socket reports POLLOUT), or an error is pending on it, or
// s's write deadline passes. It writes nothing.
func (s *Conn) WaitWritable() error {
	o := &s.wr
	o.kind = opWaitWrite
	return s.rc.Write(o.fn)
}

// SpliceIn moves bytes from s into the empty part of p, waiting until s
// has some. It returns 0, io.EOF at the end of the stream.
func (s *Conn) SpliceIn(p *Pipe) (int, error) {
	room := p.size - p.n
	if room <= 0 {
		return 0, errors.New("sockio: splice into a full pipe")
	}
	o := &s.rd
	o.kind, o.pipe, o.len, o.waited = opSpliceIn, p.w, room, false
	err := s.rc.Read(o.fn)
	p.waited = o.waited
	if err != nil {
		return 0, err
	}
	switch {
	case o.errno != 0:
		return 0, s.opError("splice", o.errno)
	case o.n == 0:
		return 0, io.EOF
	}
	p.n += o.n
	return o.n, nil
}

// SpliceOut moves bytes from p into s, waiting for room in s as needed,
// until p is empty or an error occurs. It returns the bytes moved.
func (s *Conn) SpliceOut(p *Pipe) (int, error) {
	o := &s.wr
	o.small = p.n < smallSplice && p.waited
	done := 0
	for p.n > 0 {
		o.kind, o.pipe, o.len = opSpliceOut, p.r, p.n
		if err := s.rc.Write(o.fn); err != nil {
			return done, err
		}
		if o.errno != 0 {
			return done, s.opError("splice", o.errno)
		}
		p.n -= o.n
		done += o.n
	}
	return done, nil
}
