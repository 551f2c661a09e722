package relay

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"scistream/internal/sockio"
)

// maxChunk bounds one read, write or splice, so byte counters (and so
// live rates) advance while a long transfer runs, and a ring's reader gets
// room back while its writer works through a large backlog.
const maxChunk = 1 << 20

// PipeSize is the kernel pipe the splice engine asks for per direction
// of a connection: one splice(2) moves up to this much. The system may
// grant less (fs.pipe-max-size, or the per-user pipe allowance).
const PipeSize = 1 << 20

// splice moves bytes between two TCP sockets with splice(2) through one
// kernel pipe per direction: no copy to user space. It issues the calls
// itself, as raw system calls on the non-blocking sockets (package
// sockio), and waits for readiness in the runtime's poller.
//
// When either side is not a plain TCP socket (a TLS leg), or no pipe can
// be had, it copies through a user-space buffer in one goroutine
// (read, then write): on those legs the bytes must pass through user space
// anyway, and a single goroutine costs the least CPU per byte. A side that
// is Pipelined (a QUIC stream) is copied through ring instead, the buffer
// engine's ring with a reader and a writer goroutine.
type splice struct {
	// ring copies to and from Pipelined connections: rings of the
	// buffer engine's size (Options.BufferSize) while the budget allows
	// (Options.RingBudget), smaller ones beyond.
	ring *rings
	// pipes caps the pipes held at once (Options.MaxPipes).
	pipes *allowance
	// bufs are the user-space copy loop's buffers (Options.CopyBudget).
	bufs *copyBufs
}

// allowance counts what is held of a capped resource.
type allowance struct {
	max int64 // negative: no cap
	n   atomic.Int64
}

// take reserves one unit, or reports false if the cap is reached.
func (a *allowance) take() bool {
	for {
		n := a.n.Load()
		if a.max >= 0 && n >= a.max {
			return false
		}
		if a.n.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

func (a *allowance) give() { a.n.Add(-1) }

// Pipelined is implemented by connections whose Write returns only once
// the transport has taken every byte into its own packets (a QUIC stream:
// quic-go frames the caller's buffer in place). Copying into one with a
// single goroutine stops reading the other side for as long as each Write
// takes; with a ring filled by a reader while the writer waits, a QUIC
// leg measured 3-8% less CPU per GB and equal or higher goodput in three
// alternating rounds (docs/performance.md).
type Pipelined interface {
	PipelinedCopy()
}

func isPipelined(c net.Conn) bool {
	_, ok := c.(Pipelined)
	return ok
}

// Name implements Engine.
func (splice) Name() string { return "splice" }

// Copy implements Engine.
func (e splice) Copy(dst, src net.Conn, count func(int64)) error {
	d, ok1 := dst.(*net.TCPConn)
	s, ok2 := src.(*net.TCPConn)
	if !ok1 || !ok2 {
		if isPipelined(dst) || isPipelined(src) {
			return e.ring.Copy(dst, src, count)
		}
		return e.bufs.copyLoop(dst, src, count)
	}
	ds, err := sockio.New(d)
	if err != nil {
		return err
	}
	ss, err := sockio.New(s)
	if err != nil {
		return err
	}
	if !e.pipes.take() {
		return e.bufs.copyLoop(dst, src, count) // the gateway's open files are planned
	}
	defer e.pipes.give()
	p, err := sockio.NewPipe(PipeSize)
	if err != nil {
		return e.bufs.copyLoop(dst, src, count) // e.g. out of descriptors: still relay
	}
	defer p.Close()
	for {
		if _, err := ss.SpliceIn(p); err != nil {
			if err == io.EOF {
				return nil
			}
			return readError(err)
		}
		// SpliceIn takes at most the pipe's size (<= maxChunk by
		// default), so one count covers a bounded chunk.
		n, err := ds.SpliceOut(p)
		if n > 0 {
			count(int64(n))
		}
		if err != nil {
			return writeError(err)
		}
	}
}

// endpoint reads or writes one side of a connection: the raw socket for
// plain TCP, the net.Conn otherwise (TLS).
type endpoint interface {
	Read([]byte) (int, error)
	Write([]byte) (int, error)
}

func endpointOf(c net.Conn) endpoint {
	if t, ok := c.(*net.TCPConn); ok {
		if s, err := sockio.New(t); err == nil {
			return s
		}
	}
	return c
}

// tryReader is a source that can say it has nothing to read without
// waiting (sockio.Conn, a TLS WAN leg): copyLoop then holds its buffer
// only while there is something to copy.
type tryReader interface {
	TryRead([]byte) (int, error) // sockio.ErrWouldBlock when nothing is available now
	WaitReadable() error
}

// copyLoop copies src to dst in one goroutine through a pooled buffer,
// taken for one read and its write at a time and sized by how many
// copies run at once (copyBufs). From a source that can tell (tryReader)
// it takes the buffer only once bytes are there: a connection that waits
// for its peer holds no buffer, so ten thousand mostly waiting
// connections share a few (measured with s2bench conns,
// docs/performance.md).
func (bufs *copyBufs) copyLoop(dst, src net.Conn, count func(int64)) error {
	bufs.start()
	defer bufs.stop()
	r, w := endpointOf(src), endpointOf(dst)
	tr, _ := r.(tryReader)
	var bp *[]byte
	defer func() {
		if bp != nil {
			bufs.put(bp)
		}
	}()
	idle := false // the last read found nothing
	for {
		if idle {
			// Nothing held: wait for bytes first. (Only after a
			// read found none: a TLS leg may hold records already
			// read from its socket.) At an end of stream the next
			// read reports it, with its TLS meaning; any other
			// error ends the copy here.
			if err := tr.WaitReadable(); err != nil && err != io.EOF {
				return readError(err)
			}
			idle = false
		}
		bp = bufs.get()
		var n int
		var rerr error
		if tr != nil {
			n, rerr = tr.TryRead(*bp)
			if rerr == sockio.ErrWouldBlock {
				bufs.put(bp)
				bp, idle = nil, true
				continue
			}
		} else {
			n, rerr = r.Read(*bp)
		}
		var m int
		var werr error
		if n > 0 {
			m, werr = w.Write((*bp)[:n])
		}
		// The buffer goes back before count, which may wait (a rate
		// paces the copy); the next read takes one of the size the
		// count of copies gives then.
		bufs.put(bp)
		bp = nil
		if m > 0 {
			count(int64(m))
		}
		if werr != nil {
			return writeError(werr)
		}
		if rerr != nil {
			if errors.Is(rerr, io.EOF) {
				return nil
			}
			return readError(rerr)
		}
	}
}

// DefaultBufferSize is the buffer engine's ring per direction of a
// connection when none is configured.
const DefaultBufferSize = 4 << 20

// Bounds of a configured ring size.
const (
	MinBufferSize = 64 << 10
	MaxBufferSize = 1 << 30
)

// buffer copies each direction through a user-space circular buffer (a
// ring) of a configurable size, with a reader goroutine filling it and a
// writer goroutine (the caller of Copy) draining it, so a stall on one
// side does not stall the other until the ring is full. It works for
// every kind of connection, is the reference design, and is where
// per-byte policies (rate limits, accounting) belong. Its rings are
// reused across connections.
type buffer struct {
	size int        // of each direction's ring, in bytes
	pool *sync.Pool // of *[]byte rings of size bytes
}

// newBuffer returns a buffer engine with rings of size bytes, which
// must lie within MinBufferSize and MaxBufferSize.
func newBuffer(size int) buffer {
	return buffer{size: size, pool: &sync.Pool{New: func() any {
		b := make([]byte, size)
		return &b
	}}}
}

// Name implements Engine.
func (buffer) Name() string { return "buffer" }

// Copy implements Engine.
func (e buffer) Copy(dst, src net.Conn, count func(int64)) error {
	bp := e.pool.Get().(*[]byte)
	defer e.pool.Put(bp)
	rg := &ring{buf: *bp, data: make(chan struct{}, 1), space: make(chan struct{}, 1), exited: make(chan struct{})}
	go rg.fill(endpointOf(src))
	err := rg.drain(endpointOf(dst), count)
	if err != nil {
		// The reader may wait in src.Read: make it return now. Relay
		// aborts both connections on this error anyway.
		rg.stop.Store(true)
		notify(rg.space)
		src.SetReadDeadline(time.Unix(1, 0))
	}
	<-rg.exited
	return err
}

// ring is the circular buffer of one direction. The reader goroutine
// (fill) owns w and writes only into free space; the writer (drain) owns
// r and reads only filled space. written and read publish them.
type ring struct {
	buf           []byte
	written, read atomic.Int64 // totals, never wrap
	stop          atomic.Bool  // the writer failed: fill must return
	rerr          error        // fill's final error (io.EOF at end), valid once finished is set
	finished      atomic.Bool
	data, space   chan struct{} // wake drain, wake fill (capacity 1)
	exited        chan struct{} // closed when fill returns
}

func notify(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func (rg *ring) fill(src endpoint) {
	defer close(rg.exited)
	size := int64(len(rg.buf))
	w := rg.written.Load()
	for !rg.stop.Load() {
		free := size - (w - rg.read.Load())
		if free == 0 {
			<-rg.space
			continue
		}
		start := w % size
		end := min(size, start+free, start+maxChunk)
		n, err := src.Read(rg.buf[start:end])
		if n > 0 {
			w += int64(n)
			rg.written.Store(w)
			notify(rg.data)
		}
		if err != nil {
			rg.rerr = err
			rg.finished.Store(true)
			notify(rg.data)
			return
		}
	}
}

func (rg *ring) drain(dst endpoint, count func(int64)) error {
	size := int64(len(rg.buf))
	r := rg.read.Load()
	for {
		avail := rg.written.Load() - r
		if avail == 0 {
			if rg.finished.Load() {
				// fill stored written before finished: re-check.
				if rg.written.Load() != r {
					continue
				}
				if errors.Is(rg.rerr, io.EOF) {
					return nil
				}
				return readError(rg.rerr)
			}
			<-rg.data
			continue
		}
		if rg.finished.Load() && !errors.Is(rg.rerr, io.EOF) {
			return readError(rg.rerr) // the source failed: the stream is broken anyway
		}
		start := r % size
		end := min(size, start+avail, start+maxChunk)
		n, err := dst.Write(rg.buf[start:end])
		if n > 0 {
			r += int64(n)
			rg.read.Store(r)
			notify(rg.space)
			count(int64(n))
		}
		if err != nil {
			return writeError(err)
		}
	}
}

func isReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}
