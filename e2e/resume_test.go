package e2e

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"scistream/internal/api"
	"scistream/internal/client"
	"scistream/internal/localgw"
)

// Streams that outlive their WAN connection (issue 37): two gateways,
// each in a network namespace of the lab (legacy12_cmdline_test.go's),
// the applications in the test's; the WAN leg between the gateways is
// broken the way a facility sees it break, and the applications must
// see a pause, not a reset, and every byte once, in order.

// resumePair is two gateways in namespaces of a lab, and the stream
// between them.
type resumePair struct {
	l          *lab
	prod, cons *localgw.Gateway
	consNS     string
	in, out    *client.Client
	token      string
}

func newResumePair(t *testing.T, args ...string) *resumePair {
	t.Helper()
	return newResumePairOf(t, args, args)
}

// newResumePairOf is newResumePair with arguments for each gateway: the
// producer's (outbound) and the consumer's (inbound).
func newResumePairOf(t *testing.T, prodArgs, consArgs []string) *resumePair {
	t.Helper()
	if _, err := exec.LookPath("iptables"); err != nil {
		missing(t, "no iptables (the Debian package iptables)")
	}
	l := newLab(t)
	p := &resumePair{l: l, token: localgw.NewToken()}
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := localgw.WriteTokens(tokens, map[string]string{"alice": p.token}); err != nil {
		t.Fatal(err)
	}
	start := func(name string, args []string) (*localgw.Gateway, string) {
		ns, ip := l.host(name)
		g, err := localgw.Start(context.Background(), localgw.Options{
			S2CS: bins.s2cs, ListenerIP: ip, StateDir: filepath.Join(t.TempDir(), name), TokensFile: tokens,
			Prefix: []string{"ip", "netns", "exec", ns}, ReadyTimeout: 30 * time.Second,
			Args: append([]string{"--allow_targets", l.hostIP + "/32", "--allow_peers", l.net + ".0/24"}, args...),
		})
		if err != nil {
			t.Fatalf("start the %s gateway: %v", name, err)
		}
		t.Cleanup(func() {
			g.Stop()
			if t.Failed() {
				t.Logf("%s gateway log:\n%s", name, lastLines(g.Log(), 80))
			}
		})
		return g, ns
	}
	p.prod, _ = start("prod", prodArgs)
	p.cons, p.consNS = start("cons", consArgs)
	var err error
	if p.in, err = p.cons.Client(p.token); err != nil {
		t.Fatal(err)
	}
	if p.out, err = p.prod.Client(p.token); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.in.Close(); p.out.Close() })
	return p
}

// wire makes a stream to the consumer at port on the test's lab
// address, paced at rate bits per second (0: best effort).
func (p *resumePair) wire(t *testing.T, port int, rate int64) (in, out *api.Stream) {
	t.Helper()
	return p.wireOver(t, port, rate, "", 0)
}

// wireOver is wire with WAN legs of wan ("": the default, TLS), pooled
// (pool idle legs a channel) if pool > 0.
func (p *resumePair) wireOver(t *testing.T, port int, rate int64, wan string, pool int) (in, out *api.Stream) {
	t.Helper()
	in, out, err := client.Wire(context.Background(), p.in, p.out,
		&api.InboundRequest{RemoteIP: p.l.hostIP, ReceiverPorts: []int{port}, NumConn: 1, Rate: rate, WAN: wan},
		api.OutboundRequest{NumConn: 1, Allow: []string{p.l.hostIP + "/32"}, WANPool: pool}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return in, out
}

// reject resets every TCP segment to the consumer gateway's port for d,
// as a stateful firewall that lost its state does (iptables REJECT
// --reject-with tcp-reset, in the gateway's namespace only); during,
// if not nil, is called once the rule is in place (a held producer's
// release).
func (p *resumePair) reject(t *testing.T, port int, d time.Duration, during func()) {
	t.Helper()
	rule := []string{"-p", "tcp", "--dport", strconv.Itoa(port), "-j", "REJECT", "--reject-with", "tcp-reset"}
	ipt := func(op string) {
		t.Helper()
		cmd := exec.Command("ip", append([]string{"netns", "exec", p.consNS, "iptables", op, "INPUT"}, rule...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("iptables %s: %v\n%s", op, err, out)
		}
	}
	ipt("-I")
	if during != nil {
		during()
	}
	time.Sleep(d) // the outage's length is the fault itself, not a wait for something
	ipt("-D")
}

// timedSink is a consumer: it reads one connection to its end, with the
// digest and the largest gap between two reads.
type timedSink struct {
	ln   net.Listener
	done chan timedResult
	n    atomic.Int64
}

type timedResult struct {
	n      int64
	sum    [32]byte
	maxGap time.Duration
	err    error
}

func newTimedSink(t *testing.T, ip string) *timedSink {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	s := &timedSink{ln: ln, done: make(chan timedResult, 1)}
	go func() {
		c, err := ln.Accept()
		if err != nil {
			s.done <- timedResult{err: err}
			return
		}
		defer c.Close()
		h := sha256.New()
		buf := make([]byte, 256<<10)
		var r timedResult
		last := time.Now()
		for {
			c.SetReadDeadline(time.Now().Add(2 * time.Minute))
			k, err := c.Read(buf)
			now := time.Now()
			if k > 0 {
				if r.n > 0 {
					r.maxGap = max(r.maxGap, now.Sub(last))
				}
				last = now
				h.Write(buf[:k])
				r.n += int64(k)
				s.n.Store(r.n)
			}
			if err != nil {
				if !errors.Is(err, io.EOF) {
					r.err = err
				}
				break
			}
		}
		copy(r.sum[:], h.Sum(nil))
		s.done <- r
	}()
	t.Cleanup(func() { ln.Close() })
	return s
}

func (s *timedSink) port() int { return s.ln.Addr().(*net.TCPAddr).Port }

// TestResumeAfterWANReset: a paced 200 MB transfer whose WAN leg a
// firewall resets for a second, twice: the transfer completes byte-exact,
// neither application sees a reset, and the gateways count the legs
// they resumed. (Before framed legs, both applications were reset: the
// producer at once, at 70 MB of 200, the consumer seconds later.)
func TestResumeAfterWANReset(t *testing.T) {
	t.Run("fresh", func(t *testing.T) { resumeAfterWANReset(t, 0) })
	// On a pooled leg (wan_pool) the connection's first leg is a
	// session of a warm leg; the legs that replace it are its own.
	t.Run("pooled", func(t *testing.T) { resumeAfterWANReset(t, 1) })
}

func resumeAfterWANReset(t *testing.T, pool int) {
	p := newResumePair(t)
	app := newTimedSink(t, p.l.hostIP)
	in, out := p.wireOver(t, app.port(), 400e6, "", pool) // 50 MB/s: 4 s for 200 MB
	_, portS, _ := net.SplitHostPort(in.Listeners[0])
	port, _ := strconv.Atoi(portS)
	conn, err := dialFrom(p.l.hostIP, out.Listeners[0])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const total = 200 << 20
	holds := []int64{total / 5, total / 2}
	pr := produce(conn, total, 37, holds...)
	for _, at := range holds {
		eventually(t, time.Minute, fmt.Sprintf("the consumer to have %d MB", at>>20), func() bool { return app.n.Load() >= at })
		p.reject(t, port, time.Second, pr.release)
	}
	r := pr.result(app)
	pr.check(t, r)
	t.Logf("the consumer's largest pause: %v", r.maxGap.Round(time.Millisecond))
	st, err := p.out.Get(context.Background(), out.UID)
	if err != nil {
		t.Fatal(err)
	}
	if s := st.Stats; s.Resume != api.ResumeOn || s.ResumedLegs < 2 || s.AbortedConns != 0 {
		t.Errorf("the outbound side: resume %q, %d legs resumed, %d connections aborted; want on, at least 2, none", s.Resume, s.ResumedLegs, s.AbortedConns)
	}
	if s := st.Stats; pool > 0 && s.LegsCreated+s.LegsReused == 0 {
		t.Errorf("the outbound side counts no pooled leg: %+v", s)
	}
	if s, err := p.in.Get(context.Background(), in.UID); err != nil || s.Stats.AbortedConns != 0 {
		t.Errorf("the inbound side aborted connections: %+v %v", s.Stats, err)
	}
}

// TestResumeWindowRunsOut: a WAN leg lost for longer than the resume
// window: both applications are reset (never a clean end, never
// silence), and both gateways count the connection among those the
// window ran out on.
func TestResumeWindowRunsOut(t *testing.T) {
	p := newResumePair(t, "--resume_window=2s")
	app := newTimedSink(t, p.l.hostIP)
	in, out := p.wire(t, app.port(), 80e6) // 10 MB/s: it is still sending when the path breaks
	_, portS, _ := net.SplitHostPort(in.Listeners[0])
	port, _ := strconv.Atoi(portS)
	conn, err := dialFrom(p.l.hostIP, out.Listeners[0])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	werr := make(chan error, 1)
	go func() {
		conn.SetWriteDeadline(time.Now().Add(time.Minute))
		werr <- writeRandom(conn, 1<<30, 38)
	}()
	eventually(t, time.Minute, "the consumer to have 4 MB", func() bool { return app.n.Load() >= 4<<20 })
	start := time.Now()
	p.reject(t, port, 5*time.Second, nil)
	r := <-app.done
	if r.err == nil {
		t.Fatalf("the consumer read a clean end after %d bytes; want a reset", r.n)
	}
	select {
	case err := <-werr:
		if err == nil {
			t.Fatal("the producer's writes all succeeded")
		}
	case <-time.After(time.Minute):
		t.Fatal("the producer's writes never failed")
	}
	t.Logf("both applications reset %v after the path broke (window 2s)", time.Since(start).Round(100*time.Millisecond))
	for _, side := range []struct {
		c   *client.Client
		uid string
	}{{p.out, out.UID}, {p.in, in.UID}} {
		var st *api.Stream
		eventually(t, 30*time.Second, "the side to count the connection", func() bool {
			st, err = side.c.Get(context.Background(), side.uid)
			return err == nil && st.Stats.AbortedConns == 1
		})
		if st.Stats.AbortedByKind[api.EndWANLost] != 1 {
			t.Errorf("%s: aborted by kind %v; want one wan_lost", side.c.Addr(), st.Stats.AbortedByKind)
		}
	}
	ost, err1 := p.out.Get(context.Background(), out.UID)
	ist, err2 := p.in.Get(context.Background(), in.UID)
	if err1 != nil || err2 != nil || ost.Stats.ResumeExpired != 1 || ist.Stats.ResumeExpired != 1 {
		t.Errorf("connections the window ran out on: outbound %d, inbound %d (%v %v); want one each", ost.Stats.ResumeExpired, ist.Stats.ResumeExpired, err1, err2)
	}
}

// production is a producer writing random bytes on one connection.
type production struct {
	wg    sync.WaitGroup
	total int64
	sum   [32]byte
	err   error
	held  chan struct{} // a receive for each hold, from release
	ended chan struct{} // closed once the producer returned
}

// produce writes total random bytes of seed on conn, then half-closes
// it, within two minutes. At each offset of holds (ascending) it stops
// until release is called: a fault meant to hit the transfer mid-way
// is put in place while the producer holds, so that the transfer cannot
// end before the fault, however slow the machine.
func produce(conn *net.TCPConn, total int64, seed uint64, holds ...int64) *production {
	pr := &production{total: total, held: make(chan struct{}), ended: make(chan struct{})}
	pr.wg.Add(1)
	go func() {
		defer pr.wg.Done()
		defer close(pr.ended)
		conn.SetWriteDeadline(time.Now().Add(2 * time.Minute))
		h := sha256.New()
		w := &holdingWriter{w: io.MultiWriter(h, conn), holds: holds, held: pr.held, conn: conn}
		pr.err = writeRandom(w, total, seed)
		copy(pr.sum[:], h.Sum(nil))
		if pr.err == nil {
			pr.err = conn.CloseWrite()
		}
	}()
	return pr
}

// release lets the producer go on from the hold it is at (or the next
// it comes to), unless it returned (its writes failed).
func (pr *production) release() {
	select {
	case pr.held <- struct{}{}:
	case <-pr.ended:
	}
}

// holdingWriter is w, stopped at each offset of holds until held
// receives; conn's write deadline starts again after each hold.
type holdingWriter struct {
	w     io.Writer
	holds []int64
	held  chan struct{}
	conn  *net.TCPConn
	n     int64
}

func (h *holdingWriter) Write(b []byte) (int, error) {
	done := 0
	for len(h.holds) > 0 && h.n+int64(len(b)) >= h.holds[0] {
		k := int(h.holds[0] - h.n)
		m, err := h.w.Write(b[:k])
		h.n += int64(m)
		done += m
		if err != nil {
			return done, err
		}
		b = b[k:]
		h.holds = h.holds[1:]
		select {
		case <-h.held:
		case <-time.After(2 * time.Minute):
			return done, errors.New("the test never released the producer's hold")
		}
		h.conn.SetWriteDeadline(time.Now().Add(2 * time.Minute))
	}
	m, err := h.w.Write(b)
	h.n += int64(m)
	return done + m, err
}

// result waits for the producer, then for app's end.
func (pr *production) result(app *timedSink) timedResult {
	pr.wg.Wait()
	return <-app.done
}

// check fails t unless the producer wrote everything and the consumer
// got every byte once, in order (r, its result).
func (pr *production) check(t *testing.T, r timedResult) {
	t.Helper()
	if pr.err != nil {
		t.Fatalf("the producer's writes failed: %v (the consumer had %d bytes)", pr.err, r.n)
	}
	if r.err != nil || r.n != pr.total || r.sum != pr.sum {
		t.Fatalf("the consumer got %d bytes of %d (%v), digest match %v", r.n, pr.total, r.err, r.sum == pr.sum)
	}
}
