package relay

import (
	"net"
	"sync"
	"sync/atomic"
)

// copyBufs hands out the user-space copy loop's buffers, sized by need: a
// gateway's copies share a budget of memory (Options.CopyBudget), so each
// of a few bulk connections copies through a whole batch of TLS records
// (512 KiB) while each of thousands gets a smaller buffer, and the
// buffers held at once (by copies in their read and write, or preempted
// between them: a flow that always has data never waits) stay within
// about the budget instead of growing with the count of connections.
type copyBufs struct {
	budget int64        // bytes; the buffers of all copies at once
	active atomic.Int64 // copy loops running
	pools  [len(copyBufSizes)]sync.Pool
}

// copyBufSizes are the buffer sizes, largest first: a whole batch of TLS
// records (two sizes: 512 KiB for a few connections halved the system
// calls per byte through a TLS gateway pair against 256 KiB; its CPU per
// GB moved within the spread between runs, docs/performance.md), a few,
// one, and a quarter of one for when thousands of connections share the budget
// (measured with s2bench conns --conns 9000: the inbound gateway's peak
// fell from 87 to 49 KiB per connection, and goodput and CPU per GB
// improved too).
var copyBufSizes = [...]int{512 << 10, 256 << 10, 64 << 10, 16 << 10, 4 << 10}

// DefaultCopyBudget is Options.CopyBudget when zero: 512 KiB buffers for
// up to 64 copies at once (32 connections, both directions), 256 KiB for
// up to 128.
const DefaultCopyBudget = 32 << 20

func newCopyBufs(budget int64) *copyBufs {
	c := &copyBufs{budget: budget}
	for i, size := range copyBufSizes {
		c.pools[i].New = func() any {
			b := make([]byte, size)
			return &b
		}
	}
	return c
}

// start counts a copy loop in; stop counts it out.
func (c *copyBufs) start() { c.active.Add(1) }
func (c *copyBufs) stop()  { c.active.Add(-1) }

// get returns a buffer for one read and write: the largest size that the
// budget gives each running copy, at least the smallest size.
func (c *copyBufs) get() *[]byte {
	per := c.budget / max(c.active.Load(), 1)
	i := len(copyBufSizes) - 1
	for j, size := range copyBufSizes {
		if int64(size) <= per {
			i = j
			break
		}
	}
	return c.pools[i].Get().(*[]byte)
}

// put gives back a buffer get returned.
func (c *copyBufs) put(b *[]byte) {
	for i, size := range copyBufSizes {
		if cap(*b) == size {
			c.pools[i].Put(b)
			return
		}
	}
}

// rings are the buffer engine's rings by size, for the splice engine's
// copies to and from Pipelined connections (QUIC legs): each copy holds
// its ring for the connection's life, so the rings share a budget
// (Options.RingBudget) as the copy loop's buffers do: the configured
// size (Options.BufferSize) while the budget gives that much to every
// copy running, then 1 MiB, 256 KiB, 64 KiB and 16 KiB (measured with
// s2bench conns --wan quic --conns 10000: a 64 KiB floor left each
// gateway's peak at 80 KiB per connection, 16 KiB at 60-64).
type rings struct {
	budget int64
	active atomic.Int64
	bySize []buffer // largest first
}

// DefaultRingBudget is Options.RingBudget when zero: 4 MiB rings (the
// default BufferSize) for up to 128 copies at once.
const DefaultRingBudget = 512 << 20

func newRings(budget int64, size int) *rings {
	r := &rings{budget: budget, bySize: []buffer{newBuffer(size)}}
	for _, s := range []int{1 << 20, 256 << 10, 64 << 10, 16 << 10} {
		if s < size {
			r.bySize = append(r.bySize, newBuffer(s))
		}
	}
	return r
}

// Copy copies src to dst through a ring sized by how many such copies
// run at once.
func (r *rings) Copy(dst, src net.Conn, count func(int64)) error {
	n := r.active.Add(1)
	defer r.active.Add(-1)
	return r.pick(n).Copy(dst, src, count)
}

// pick is the ring of a copy while n run: the largest the budget gives
// each, at least the smallest.
func (r *rings) pick(n int64) buffer {
	per := r.budget / max(n, 1)
	for _, b := range r.bySize {
		if int64(b.size) <= per {
			return b
		}
	}
	return r.bySize[len(r.bySize)-1]
}
