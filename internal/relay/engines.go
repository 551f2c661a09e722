package relay

import (
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
)

// spliceChunk bounds one splice(2) round so byte counters (and so live
// rates) advance while a long transfer runs.
const spliceChunk = 1 << 20

// Splice moves bytes between two TCP sockets with splice(2) through a
// kernel pipe: no copy to user space. When either side is not a plain TCP
// socket (a TLS leg) it falls back to Buffer.
type Splice struct{}

// Name implements Engine.
func (Splice) Name() string { return "splice" }

// Copy implements Engine.
func (Splice) Copy(dst, src net.Conn, count func(int64)) error {
	d, ok1 := dst.(*net.TCPConn)
	s, ok2 := src.(*net.TCPConn)
	if !ok1 || !ok2 {
		return Buffer{}.Copy(dst, src, count)
	}
	// (*net.TCPConn).ReadFrom uses splice(2) when its source is a
	// *net.TCPConn, also behind an *io.LimitedReader; the limit lets us
	// count progress in chunks.
	lr := &io.LimitedReader{R: s}
	for {
		lr.N = spliceChunk
		n, err := d.ReadFrom(lr)
		if n > 0 {
			count(n)
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return nil // EOF
		}
	}
}

// DefaultBufferSize is the per-direction buffer of the Buffer engine.
const DefaultBufferSize = 256 << 10

var bufPool = sync.Pool{New: func() any {
	b := make([]byte, DefaultBufferSize)
	return &b
}}

// Buffer copies through a pooled user-space buffer. It works for every
// kind of connection (TLS legs use it) and is the reference engine.
type Buffer struct{}

// Name implements Engine.
func (Buffer) Name() string { return "buffer" }

// Copy implements Engine.
func (Buffer) Copy(dst, src net.Conn, count func(int64)) error {
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	for {
		n, rerr := src.Read(buf)
		if n > 0 {
			w, werr := dst.Write(buf[:n])
			if w > 0 {
				count(int64(w))
			}
			if werr != nil {
				return werr
			}
		}
		if rerr != nil {
			if errors.Is(rerr, io.EOF) {
				return nil
			}
			return rerr
		}
	}
}

func isReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}
