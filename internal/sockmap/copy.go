package sockmap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"time"

	"github.com/cilium/ebpf"
)

// ErrFallback is returned (wrapped) by Copy when it did not set up the
// kernel redirect. Every byte Copy moved before returning it has been
// delivered to dst and counted; the caller continues the copy in user
// space.
var ErrFallback = errors.New("sockmap redirect not set up")

// Timing of the user-space side. These are polls of kernel state that has
// no readiness notification (how far the egress socket has taken the
// redirected bytes), not synchronisation between our own goroutines.
const (
	minPoll      = 250 * time.Microsecond // credit refresh while bytes flow
	maxPoll      = 50 * time.Millisecond  // idle connections, and the longest a dead egress goes unnoticed
	maxDrainPoll = 2 * time.Millisecond
	// lostAfter: redirected bytes that neither reach the egress socket nor
	// wait behind a full send queue for this long were dropped by the
	// kernel (egress psock torn down): abort rather than end cleanly.
	lostAfter = 5 * time.Second
	// prepRounds bounds the user-space copies made while waiting for an
	// empty receive queue before the socket is handed to the program.
	prepRounds = 256
	gateWait   = 2 * time.Second // for the opposite direction to prepare its socket
	countChunk = 1 << 20         // largest single count() call, so live rates move
	bufSize    = 256 << 10
)

// Copy moves src's bytes to dst until src's end of stream (returning nil
// once every byte has entered dst's send queue, so the caller may shut
// dst's write half) or an error. Bytes are redirected in the kernel; see
// the package documentation for the protocol and why it neither loses,
// reorders nor duplicates a byte. count receives the bytes that entered
// dst, in chunks of at most 1 MiB, from the calling goroutine.
//
// Copy returns an error wrapping ErrFallback, having moved and counted
// some bytes or none, when it could not hand the sockets to the kernel
// (map full, Redirector closed, a busy receive queue, src already past
// its FIN); the caller then copies the rest itself.
//
// The opposite direction must run concurrently, as relay.Relay does:
// each direction waits (up to 2 s, then falls back) until the other has
// prepared its ingress socket before putting that socket in a map.
func (r *Redirector) Copy(dst, src *net.TCPConn, count func(int64)) error {
	if !r.acquire() {
		return fmt.Errorf("%w: redirector closed", ErrFallback)
	}
	defer r.release()
	// passFrom starts at no possible st.redirected, so a pass before
	// anything was redirected counts too.
	c := &copier{r: r, count: count, window: uint64(r.cfg.Window), passFrom: math.MaxUint64}
	var err error
	if c.src, err = newSock(src); err == nil {
		c.dst, err = newSock(dst)
	}
	if err != nil {
		err = fmt.Errorf("%w: %v", ErrFallback, err)
	} else {
		err = c.run()
	}
	if errors.Is(err, ErrFallback) {
		r.stats.fallbacks.Add(1)
	}
	return err
}

type copier struct {
	r        *Redirector
	src, dst sock
	count    func(int64)
	window   uint64

	srcKey, dstKey uint64
	buf            []byte
	base           uint64 // dst's sent() when the redirect began (exact)
	userRead       uint64 // bytes read from src in user space since then
	userWritten    uint64 // bytes written to dst in user space since then
	counted        uint64 // bytes reported to count since then
	limit, resume  uint64 // current ctl values
	passFrom       uint64 // st.redirected when the current pass began
	queued         uint64 // redirected bytes not yet in dst at the last look (Stats.KernelQueued)
	inMaps         bool
}

func (c *copier) run() error {
	var err error
	if c.srcKey, err = c.src.cookie(); err != nil {
		return fmt.Errorf("%w: %v", ErrFallback, err)
	}
	if c.dstKey, err = c.dst.cookie(); err != nil {
		return fmt.Errorf("%w: %v", ErrFallback, err)
	}
	c.buf = make([]byte, bufSize)
	dstGate := c.r.gate(c.dstKey)
	defer c.r.leaveGate(c.dstKey)
	done, err := c.prepare()
	c.r.open(c.srcKey)
	defer c.r.leaveGate(c.srcKey)
	if done || err != nil {
		return err
	}
	// dst enters a map only once the opposite direction has prepared
	// it: relay.Relay runs both at once.
	gw := time.NewTimer(gateWait)
	select {
	case <-dstGate:
		gw.Stop()
	case <-gw.C:
		c.r.dropGate(c.dstKey)
		return fmt.Errorf("%w: the opposite direction did not start", ErrFallback)
	}
	if err := c.enter(); err != nil {
		c.leave()
		return err
	}
	err = c.loop()
	c.leave()
	return err
}

// prepare makes sure no byte of src's receive queue was ever partly read
// by user space before the program sees the queue: the program takes
// whole skbs, so a partly read one would be duplicated. That holds when
// user space never read from src, or when the queue is empty (a fully
// read skb has left the queue; later skbs are whole). Otherwise it copies
// what is queued in user space and looks again. done reports src's end of
// stream met here (every byte delivered).
func (c *copier) prepare() (done bool, err error) {
	for range prepRounds {
		inq, consumed, err := c.src.unread()
		if err != nil {
			return false, fmt.Errorf("%w: %v", ErrFallback, err)
		}
		if inq == 0 || consumed == 0 {
			return false, nil
		}
		n, rerr := c.src.c.Read(c.buf[:min(inq, len(c.buf))])
		if n > 0 {
			w, werr := c.dst.c.Write(c.buf[:n])
			c.r.stats.userBytes.Add(int64(w))
			c.countChunks(int64(w))
			if werr != nil {
				return false, werr
			}
		}
		if rerr == io.EOF {
			return true, nil
		}
		if rerr != nil {
			return false, rerr
		}
	}
	return false, fmt.Errorf("%w: receive queue never empty", ErrFallback)
}

// enter records dst's baseline and puts both sockets in the maps.
func (c *copier) enter() error {
	var exact bool
	var err error
	// Nothing writes to dst now, so an exact reading comes as soon as
	// no ACK lands between the two TCP_INFO calls.
	for i := 0; !exact; i++ {
		if c.base, exact, err = c.dst.sent(); err != nil {
			return err
		}
		if i > 100 && !exact {
			return fmt.Errorf("%w: egress counters never settled", ErrFallback)
		}
	}
	c.inMaps = true
	if err := c.putState(state{}); err != nil {
		return fmt.Errorf("%w: state map: %v", ErrFallback, err)
	}
	if err := c.putCtl(c.window, math.MaxUint64); err != nil {
		return fmt.Errorf("%w: control map: %v", ErrFallback, err)
	}
	if err := c.dst.fd(func(fd int) error {
		return c.r.targets.Update(c.dstKey, uint32(fd), ebpf.UpdateAny)
	}); err != nil {
		return fmt.Errorf("%w: add egress socket: %v", ErrFallback, err)
	}
	if err := c.src.fd(func(fd int) error {
		return c.r.hold.Update(c.srcKey, uint32(fd), ebpf.UpdateAny)
	}); err != nil {
		return fmt.Errorf("%w: hold ingress socket: %v", ErrFallback, err)
	}
	if err := c.attach(); err != nil {
		return fmt.Errorf("%w: %v", ErrFallback, err)
	}
	c.r.stats.redirected.Add(1)
	return nil
}

// attach hands src to the program. Whole skbs already queued are taken
// by the program at the next arrival or at our next read (the kernel runs
// the verdict over a non-empty receive queue before reading).
func (c *copier) attach() error {
	if err := c.src.fd(func(fd int) error {
		return c.r.verdict.Update(c.srcKey, uint32(fd), ebpf.UpdateAny)
	}); err != nil {
		return fmt.Errorf("add ingress socket: %v", err)
	}
	return nil
}

// detach takes src away from the program, only once nothing can arrive
// any more (after its FIN) or to abort: taking it out while skbs arrive
// drops them (see pass). It then waits out a verdict that may still be
// running on another CPU: that runs under the socket's spinlock, which
// the TCP_INFO in unread takes too. After detach the state counters are
// final.
func (c *copier) detach() error {
	if err := c.r.verdict.Delete(c.srcKey); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("sockmap: remove ingress socket: %w", err)
	}
	_, _, err := c.src.unread()
	return err
}

// leave takes src out of the program's map first (no more verdicts), then
// drops the rest. Sockets the kernel already removed (closed) are fine.
func (c *copier) leave() {
	if !c.inMaps {
		return
	}
	c.r.verdict.Delete(c.srcKey)
	c.setQueued(0)
	if st, err := c.state(); err == nil {
		c.r.stats.kernelBytes.Add(int64(st.redirected))
		c.r.stats.trimmed.Add(int64(st.trimmed))
	}
	c.r.targets.Delete(c.dstKey)
	c.r.hold.Delete(c.srcKey)
	c.r.ctl.Delete(c.srcKey)
	c.r.st.Delete(c.srcKey)
	c.src.c.SetReadDeadline(time.Time{})
	c.inMaps = false
}

func (c *copier) putCtl(limit, resume uint64) error {
	c.limit, c.resume = limit, resume
	var v [ctlSize]byte
	binary.NativeEndian.PutUint64(v[ctlPeer:], c.dstKey)
	binary.NativeEndian.PutUint64(v[ctlLimit:], limit)
	binary.NativeEndian.PutUint64(v[ctlResume:], resume)
	binary.NativeEndian.PutUint64(v[ctlOffset:], c.base+c.userWritten)
	binary.NativeEndian.PutUint64(v[ctlWindow:], c.window)
	return c.r.ctl.Update(c.srcKey, v[:], ebpf.UpdateAny)
}

type state struct{ seen, redirected, passing, trimmed, broken uint64 }

// errBroken: the program met a retransmitted overlap it could not trim.
var errBroken = errors.New("sockmap: the kernel could not trim a retransmitted segment's repeated bytes: aborting rather than deliver them twice")

func (c *copier) state() (state, error) {
	var v [stSize]byte
	if err := c.r.st.Lookup(c.srcKey, v[:]); err != nil {
		return state{}, fmt.Errorf("read redirect state: %w", err)
	}
	st := state{
		seen:       binary.NativeEndian.Uint64(v[stSeen:]),
		redirected: binary.NativeEndian.Uint64(v[stRedirected:]),
		passing:    binary.NativeEndian.Uint64(v[stPassing:]),
		trimmed:    binary.NativeEndian.Uint64(v[stTrimmed:]),
		broken:     binary.NativeEndian.Uint64(v[stBroken:]),
	}
	if st.broken != 0 {
		return st, errBroken
	}
	return st, nil
}

// putState writes the program's state; only before src is attached, as
// the program writes it in place.
func (c *copier) putState(st state) error {
	var v [stSize]byte
	binary.NativeEndian.PutUint64(v[stSeen:], st.seen)
	binary.NativeEndian.PutUint64(v[stRedirected:], st.redirected)
	binary.NativeEndian.PutUint64(v[stPassing:], st.passing)
	return c.r.st.Update(c.srcKey, v[:], ebpf.UpdateAny)
}

// loop waits on src: bytes the program passed to user space (the queue
// ahead of dst is full), the end of stream, or an error; between them it
// refreshes the credit from dst's progress and reports that progress to
// count.
func (c *copier) loop() error {
	poll := minPoll
	for {
		c.src.c.SetReadDeadline(time.Now().Add(poll))
		n, err := c.src.c.Read(c.buf)
		switch {
		case n > 0:
			if err := c.pass(n); err != nil {
				return err
			}
			poll = minPoll
			continue
		case errors.Is(err, os.ErrDeadlineExceeded):
			moved, err := c.refresh()
			if err != nil {
				return err
			}
			switch {
			case moved >= c.window/4:
				poll = max(poll/2, minPoll)
			case moved == 0:
				poll = min(poll*2, maxPoll)
			}
			continue
		case err == io.EOF:
			return c.finish()
		case err != nil:
			return err
		}
	}
}

// pass handles n bytes the program passed to user space, now in c.buf.
// The program stopped redirecting at the first passed skb (passing is
// sticky), so st.redirected no longer moves: wait until every redirected
// byte has entered dst, write the passed bytes behind them, then tell the
// program it may resume once it has seen no byte beyond those user space
// has read (seen == redirected + userRead). If more bytes were passed
// meanwhile, they are read next and the same happens again.
//
// src stays attached throughout: taking it out of the map while bytes
// arrive loses them (the kernel clears the psock's verdict program before
// it restores the socket's data_ready callback, and an skb arriving in
// between is dropped).
func (c *copier) pass(n int) error {
	st, err := c.state()
	if err != nil {
		return err
	}
	c.userRead += uint64(n)
	// Every byte user space reads must have been passed by the program.
	if st.passing == 0 || c.userRead > st.seen-st.redirected {
		return fmt.Errorf("sockmap: kernel handed user space %d bytes the program did not pass (seen %d, redirected %d, read %d): aborting rather than risk reordering",
			n, st.seen, st.redirected, c.userRead)
	}
	if st.redirected != c.passFrom {
		c.passFrom = st.redirected
		c.r.stats.passes.Add(1)
	}
	if err := c.drain(st.redirected); err != nil {
		return err
	}
	if err := c.write(n); err != nil {
		return err
	}
	c.report(c.base + st.redirected + c.userWritten)
	// The queue ahead of dst is empty now: a full window is allowed.
	return c.putCtl(st.redirected+c.window, st.redirected+c.userRead)
}

// tail copies what is left in src's receive queue, up to its end of
// stream, once src is detached for good and every byte before the queue
// has been delivered (all redirected bytes drained into dst, all passed
// bytes read and written). It uses splice(2): while src still has a psock
// (the hold map, or the opposite direction's targets map), recvmsg goes
// through tcp_bpf, which reads only the psock's queue and reports the end
// of stream while bytes still wait in TCP's receive queue; splice reads
// TCP's receive queue itself.
func (c *copier) tail() error {
	c.src.c.SetReadDeadline(time.Time{})
	lr := &io.LimitedReader{R: c.src.c}
	for {
		lr.N = countChunk
		n, err := c.dst.c.ReadFrom(lr)
		if n > 0 {
			c.userWritten += uint64(n)
			c.r.stats.userBytes.Add(n)
			c.report(c.base + c.userWritten + c.redirectedFinal())
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
	}
}

func (c *copier) write(n int) error {
	w, err := c.dst.c.Write(c.buf[:n])
	c.userWritten += uint64(w)
	c.r.stats.userBytes.Add(int64(w))
	return err
}

// refresh raises the credit as dst takes redirected bytes and reports
// progress. It returns the bytes that entered dst since the last report.
func (c *copier) refresh() (uint64, error) {
	st, err := c.state()
	if err != nil {
		return 0, err
	}
	sent, _, err := c.dst.sent()
	if err != nil {
		return 0, fmt.Errorf("sockmap egress: %w", err)
	}
	before := c.counted
	c.report(sent)
	redirectedIn := sent - c.base - c.userWritten
	if st.redirected >= redirectedIn {
		c.setQueued(st.redirected - redirectedIn)
	}
	if l := redirectedIn + c.window; l > c.limit {
		if err := c.putCtl(l, c.resume); err != nil {
			return 0, err
		}
	}
	return c.counted - before, nil
}

// finish runs at src's end of stream: every byte before the FIN has been
// redirected or read (user space sees EOF only then); wait until the
// redirected ones have entered dst.
func (c *copier) finish() error {
	if err := c.detach(); err != nil {
		return err
	}
	st, err := c.state()
	if err != nil {
		return err
	}
	if c.userRead != st.seen-st.redirected {
		return fmt.Errorf("sockmap: end of stream with %d bytes read in user space, %d passed", c.userRead, st.seen-st.redirected)
	}
	if err := c.drain(st.redirected); err != nil {
		return err
	}
	// Normally nothing is left; but tcp_bpf reports the end of stream
	// by the psock's queue, so make sure TCP's own queue is empty too.
	return c.tail()
}

// drain waits until dst has taken all redirected bytes (redirected in
// total since the start) and every byte user space wrote.
func (c *copier) drain(redirected uint64) error {
	target := c.base + redirected + c.userWritten
	wait := 10 * time.Microsecond
	last, lastChange := uint64(0), time.Now()
	for {
		sent, exact, err := c.dst.sent()
		if err != nil {
			return fmt.Errorf("sockmap egress: %w", err)
		}
		c.report(min(sent, target))
		if sent >= target {
			c.setQueued(0)
			if sent > target && exact {
				return fmt.Errorf("sockmap: egress took %d bytes, only %d were sent to it", sent-c.base, target-c.base)
			}
			return nil
		}
		if sent != last {
			last, lastChange = sent, time.Now()
		} else if time.Since(lastChange) > lostAfter && c.dstIdle() {
			return fmt.Errorf("sockmap: %d redirected bytes never reached the egress socket", target-sent)
		}
		time.Sleep(wait)
		wait = min(wait*2, maxDrainPoll)
	}
}

// setQueued updates this direction's share of Stats.KernelQueued.
func (c *copier) setQueued(q uint64) {
	c.r.stats.queued.Add(int64(q) - int64(c.queued))
	c.queued = q
}

// dstIdle reports that dst's send queue is empty, so bytes still missing
// are not waiting for a slow receiver.
func (c *copier) dstIdle() bool {
	q := -1
	c.dst.control(func(fd int) error {
		var err error
		q, err = ioctlOutq(fd)
		return err
	})
	return q == 0
}

// report advances count to sent (dst's absolute counter).
func (c *copier) report(sent uint64) {
	if sent < c.base {
		return
	}
	if d := sent - c.base; d > c.counted {
		c.countChunks(int64(d - c.counted))
		c.counted = d
	}
}

func (c *copier) countChunks(n int64) {
	for n > 0 {
		k := min(n, countChunk)
		c.count(k)
		n -= k
	}
}

func (c *copier) redirectedFinal() uint64 {
	st, _ := c.state()
	return st.redirected
}
