package carry

import (
	"sync"
)

// The bytes a connection holds: on the sending side those read from its
// application and not yet acknowledged by the peer (sent or not), on the
// receiving side those received in order and not yet written to its
// application. Both are held in chunks, taken from the pools below as
// bytes come and given back as they leave: a connection with nothing in
// flight holds no buffer at all. A connection's first chunks are small
// (a request-reply exchange needs little); a connection that keeps data
// in flight gets large ones (few frames, few system calls). A read that
// fills a small chunk moves its bytes into a larger one and reads on
// (regrow), so that a message goes in one frame, and the next burst
// starts with a chunk of the size the last one needed (sendBuf.fresh).

// maxChunk is the largest chunk class, and so the largest data frame
// (MaxData): a receiver reads each frame into one chunk.
const maxChunk = 1 << 20

// chunkSizes are the chunk classes, smallest first.
var chunkSizes = [...]int{16 << 10, 64 << 10, 256 << 10, maxChunk}

// topClass is the largest class a sender of window bytes reads into: a
// quarter of the window at most (a small window is not held in one
// chunk much larger than itself), the smallest class at least.
func topClass(window int) int {
	k := 0
	for i, size := range chunkSizes {
		if size <= window/4 {
			k = i
		}
	}
	return k
}

// chunkPools hold free chunks of each class.
type chunkPools [len(chunkSizes)]sync.Pool

func newChunkPools() *chunkPools {
	p := new(chunkPools)
	for i, size := range chunkSizes {
		p[i].New = func() any {
			b := make([]byte, size)
			return &b
		}
	}
	return p
}

// class returns the index of the smallest class that holds n bytes, or
// the largest.
func class(n int) int {
	for i, size := range chunkSizes {
		if n <= size {
			return i
		}
	}
	return len(chunkSizes) - 1
}

// Budget bounds the bytes every connection of a gateway holds in chunks
// at once: the per-gateway budget of resend and receive buffers. A
// sender past it waits (backpressure: its application is not read);
// a receiver never waits (Force: the window it granted bounds it). Its
// methods may be called concurrently.
type Budget struct {
	max int64 // 0: no bound

	mu   sync.Mutex // guards the following
	held int64
	wait chan struct{} // closed and replaced when bytes are given back
	// peak is the most held at once.
	peak int64
}

// NewBudget returns a budget of max bytes (0: unbounded, only counted).
func NewBudget(max int64) *Budget { return &Budget{max: max, wait: make(chan struct{})} }

// TryTake takes n bytes if the budget has room for them (or holds
// nothing: a chunk larger than the budget still moves), and reports
// whether it did: a sender that gets false waits for bytes given back
// (its application is not read meanwhile).
func (b *Budget) TryTake(n int64) bool {
	if b == nil {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.max != 0 && b.held+n > b.max && b.held != 0 {
		return false
	}
	b.held += n
	b.peak = max(b.peak, b.held)
	return true
}

// Force takes n bytes whatever the budget holds: a receiver's, which
// the window it granted bounds, so that what the peer may send is
// always read.
func (b *Budget) Force(n int64) {
	if b == nil {
		return
	}
	b.mu.Lock()
	b.held += n
	b.peak = max(b.peak, b.held)
	b.mu.Unlock()
}

// Give gives back n bytes.
func (b *Budget) Give(n int64) {
	if b == nil || n == 0 {
		return
	}
	b.mu.Lock()
	b.held -= n
	close(b.wait)
	b.wait = make(chan struct{})
	b.mu.Unlock()
}

// Held returns the bytes held now and the most held at once.
func (b *Budget) Held() (now, peak int64) {
	if b == nil {
		return 0, 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.held, b.peak
}

// chunk is one buffer of a connection's bytes: buf[off:n] holds the
// bytes from position pos.
type chunk struct {
	bp  *[]byte
	pos uint64 // position of buf[off]
	off int
	n   int
	// pins counts the writes of its bytes under way: it is not given
	// back while one runs (the peer may acknowledge bytes before the
	// write that carried them returned, or a resumed leg resend them).
	pins  int
	freed bool // dropped from its buffer; given back once unpinned
}

func (c *chunk) buf() []byte   { return *c.bp }
func (c *chunk) end() uint64   { return c.pos + uint64(c.n-c.off) }
func (c *chunk) room() []byte  { return (*c.bp)[c.n:] }
func (c *chunk) bytes() []byte { return (*c.bp)[c.off:c.n] }

// sendBuf holds one direction's bytes from the position the peer
// received (acked) to the last read from the application (end). The
// caller holds the connection's lock around every method; the chunk
// being filled (outside the lock, by a read of the application) is
// pinned, so that an ack does not free it under the read.
type sendBuf struct {
	pools  *chunkPools
	budget *Budget
	chunks []*chunk
	acked  uint64 // the peer received every byte below
	end    uint64 // the next position read from the application
	grow   int    // class of the next chunk taken
	// fresh is the class of the first chunk after the buffer emptied:
	// the smallest at first, then that which held a burst's first
	// read (regrow), one smaller again after a burst that began with
	// less than a quarter of it. A request-reply exchange of 16 KiB
	// messages so reads each one once, into a 64 KiB chunk.
	fresh   int
	top     int    // the largest class it takes (topClass)
	filling *chunk // the chunk a read fills now, or nil
}

// held returns the bytes held.
func (s *sendBuf) held() int { return int(s.end - s.acked) }

// tail returns the chunk the application's next bytes go into, taking a
// new one if the last is full (or there is none), and pins it; nil if
// the budget has no room for a new one now (wait on it, then try again).
func (s *sendBuf) tail() *chunk {
	if n := len(s.chunks); n > 0 && len(s.chunks[n-1].room()) > 0 {
		s.filling = s.chunks[n-1]
		return s.filling
	}
	k := s.grow
	if len(s.chunks) == 0 {
		k = s.fresh // a connection that emptied its buffer starts small again
	}
	if !s.budget.TryTake(int64(chunkSizes[k])) {
		return nil
	}
	c := &chunk{bp: s.pools[k].Get().(*[]byte), pos: s.end}
	s.chunks = append(s.chunks, c)
	s.grow = min(k+1, s.top)
	s.filling = c
	return c
}

// regrowMax is the largest chunk regrow makes: what a burst of an
// application's write (a message and its header) is likely to fit in.
const regrowMax = 256 << 10

// regrow replaces c, the buffer's last chunk, which a read just filled,
// by a chunk of the next class holding its bytes, so that the read that
// follows continues them in the same chunk: a message a little larger
// than the chunk it started in (16 KiB and its header in a first 16 KiB
// chunk) then goes out as one data frame, which the peer writes to its
// application in one write. It does so only while none of c's bytes was
// sent (sent is the next position to send), c is not pinned, the next
// class is at most regrowMax and s.top, and the budget has room; it
// reports whether it did.
func (s *sendBuf) regrow(c *chunk, sent uint64) bool {
	k := class(len(c.buf())) + 1
	if k >= len(chunkSizes) || k > s.top || chunkSizes[k] > regrowMax || c.pins > 0 || sent > c.pos || len(c.room()) > 0 ||
		len(s.chunks) == 0 || s.chunks[len(s.chunks)-1] != c {
		return false
	}
	if !s.budget.TryTake(int64(chunkSizes[k])) {
		return false
	}
	bp := s.pools[k].Get().(*[]byte)
	n := copy(*bp, c.bytes())
	old := *c
	c.bp, c.off, c.n = bp, 0, n
	s.give(&old)
	s.grow = min(k+1, s.top)
	if len(s.chunks) == 1 {
		s.fresh = k // a burst's first read filled its chunk
	}
	return true
}

// filled unpins the chunk tail gave, into which n bytes were read.
func (s *sendBuf) filled(c *chunk, n int) {
	s.filling = nil
	if c.n == 0 && n > 0 && n < len(c.buf())/4 && len(s.chunks) == 1 {
		s.fresh = max(s.fresh-1, 0) // a burst's first read, small for its chunk
	}
	c.n += n
	s.end += uint64(n)
	s.trim()
}

// slice returns the bytes held from position pos, at most max of them,
// contiguous in one chunk, and pins that chunk for the write of them
// (unpin gives it back); nil if none are held there.
func (s *sendBuf) slice(pos uint64, max int) ([]byte, *chunk) {
	for _, c := range s.chunks {
		if pos >= c.pos && pos < c.end() {
			b := c.bytes()[pos-c.pos:]
			if len(b) > max {
				b = b[:max]
			}
			c.pins++
			return b, c
		}
	}
	return nil, nil
}

// unpin ends the write of bytes of c that slice pinned.
func (s *sendBuf) unpin(c *chunk) {
	if c.pins--; c.pins == 0 && c.freed {
		s.give(c)
	}
}

// ack drops the bytes below pos (the peer received them).
func (s *sendBuf) ack(pos uint64) {
	if pos > s.acked {
		s.acked = min(pos, s.end)
		s.trim()
	}
}

// trim frees the chunks wholly below acked, but the one being filled,
// and drops the acknowledged front of the first.
func (s *sendBuf) trim() {
	for len(s.chunks) > 0 {
		c := s.chunks[0]
		if c.end() > s.acked {
			d := int(s.acked - c.pos)
			c.off += d
			c.pos = s.acked
			return
		}
		if c == s.filling {
			c.off, c.pos = c.n, s.acked
			return
		}
		s.chunks = s.chunks[1:]
		s.free(c)
	}
}

// free drops c from the buffer: it is given back now, or by the last
// unpin of a write under way.
func (s *sendBuf) free(c *chunk) {
	c.freed = true
	if c.pins == 0 {
		s.give(c)
	}
}

func (s *sendBuf) give(c *chunk) {
	s.budget.Give(int64(len(c.buf())))
	s.pools[class(len(c.buf()))].Put(c.bp)
	c.bp = nil
}

// release gives back every chunk (the connection ended; nothing fills
// one any more).
func (s *sendBuf) release() {
	for _, c := range s.chunks {
		s.free(c)
	}
	s.chunks, s.filling = nil, nil
}

// backlog holds the bytes received in order that the application has
// not taken yet, oldest first.
type backlog struct {
	pools  *chunkPools
	budget *Budget
	chunks []*chunk
	n      int // bytes held
}

// take returns a chunk to read a data frame of n bytes into (its class's
// size or more).
func (b *backlog) take(n int) *chunk {
	k := class(n)
	b.budget.Force(int64(chunkSizes[k]))
	return &chunk{bp: b.pools[k].Get().(*[]byte)}
}

// put gives back a chunk take gave that holds nothing (any more).
func (b *backlog) put(c *chunk) {
	b.budget.Give(int64(len(c.buf())))
	b.pools[class(len(c.buf()))].Put(c.bp)
}

// push keeps c, holding bytes not yet written to the application.
func (b *backlog) push(c *chunk) {
	b.chunks = append(b.chunks, c)
	b.n += c.n - c.off
}

// front returns the oldest bytes held, or nil.
func (b *backlog) front() []byte {
	if len(b.chunks) == 0 {
		return nil
	}
	return b.chunks[0].bytes()
}

// consume drops n bytes from the front.
func (b *backlog) consume(n int) {
	b.n -= n
	for n > 0 {
		c := b.chunks[0]
		k := min(n, c.n-c.off)
		c.off += k
		n -= k
		if c.off == c.n {
			b.chunks = b.chunks[1:]
			b.put(c)
		}
	}
}

// release gives back every chunk.
func (b *backlog) release() {
	for _, c := range b.chunks {
		b.put(c)
	}
	b.chunks, b.n = nil, 0
}
