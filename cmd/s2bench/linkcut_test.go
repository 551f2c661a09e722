package main

import (
	"context"
	"crypto/sha256"
	"io"
	"net"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"scistream/internal/api"
	"scistream/internal/client"
	"scistream/internal/exp/localpair"
	"scistream/internal/netbed"
	"scistream/internal/waitfor"
)

// TestTestbedLinkCut cuts the WAN link of the namespace testbed (the WAN
// router's link to the consumer gateway goes down) while one stream
// carries two connections and another stream is idle. The connections
// wait for the link (their resume window, 5 s here) once both gateways
// found their leg silent (the producer's, whose bytes go unacknowledged,
// within the leg timeout; the consumer's, which only receives, within
// the keepalive plus the leg timeout); with no link back by then both
// applications of every affected connection see a reset (not an end of
// stream, not a hang); once the link is up again both streams, still
// wired, carry new connections intact.
func TestTestbedLinkCut(t *testing.T) {
	bin := needTestbed(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	tb, err := netbed.Up(ctx, netbed.Config{Name: testbedName(), Preset: netbed.Preset{Name: "ci", RTT: 2 * time.Millisecond, RateBps: 1_000_000_000},
		DelayLine: []string{bin, "testbed", "delayline"}, StateRoot: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Down()

	// The consumer, in its namespace: every connection it accepts is
	// read to its end; the end (an error, or io.EOF) is reported.
	var ln *net.TCPListener
	if err := netbed.Do(tb.NS(netbed.Consumer), func() (err error) {
		ln, err = net.ListenTCP("tcp", &net.TCPAddr{IP: net.ParseIP(tb.ConsumerLAN())})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type end struct {
		n   int64
		sum [32]byte
		err error
	}
	ends := make(chan end, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				h := sha256.New()
				n, err := io.Copy(h, c)
				var e end
				e.n, e.err = n, err
				copy(e.sum[:], h.Sum(nil))
				ends <- e
			}()
		}
	}()

	lp, err := localpair.Start(ctx, localpair.Config{
		S2CS: s2csBin, Engine: "splice", WAN: api.WANTLS, Consumer: ln.Addr().(*net.TCPAddr),
		NetNS: [2]string{tb.NS(netbed.ConsumerGW), tb.NS(netbed.ProducerGW)},
		IPs:   [2]string{tb.ConsumerGWWAN(), tb.ProducerGWWAN()},
		Allow: tb.LANASubnet(), Args: []string{"--resume_window=5s"},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer lp.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	_, idle, err := client.Wire(ctx, lp.InC, lp.OutC,
		&api.InboundRequest{RemoteIP: tb.ConsumerLAN(), ReceiverPorts: []int{port}, NumConn: 1},
		api.OutboundRequest{NumConn: 1, Allow: []string{tb.LANASubnet()}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	dial := func(addr string) *net.TCPConn {
		t.Helper()
		var c net.Conn
		if err := netbed.Do(tb.NS(netbed.Producer), func() (err error) {
			c, err = (&net.Dialer{Timeout: 10 * time.Second}).DialContext(ctx, "tcp", addr)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c.(*net.TCPConn)
	}
	// sendAndCheck carries 1 MiB over a fresh connection to addr and
	// checks the consumer got it whole.
	sendAndCheck := func(what, addr string) {
		t.Helper()
		c := dial(addr)
		c.SetDeadline(time.Now().Add(time.Minute))
		msg := make([]byte, 1<<20)
		for i := range msg {
			msg[i] = byte(i * 7)
		}
		if _, err := c.Write(msg); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		c.CloseWrite()
		select {
		case e := <-ends:
			if e.err != nil || e.n != int64(len(msg)) || e.sum != sha256.Sum256(msg) {
				t.Fatalf("%s: the consumer got %d bytes, %v, checksum match %v", what, e.n, e.err, e.sum == sha256.Sum256(msg))
			}
		case <-time.After(time.Minute):
			t.Fatalf("%s: the consumer got nothing", what)
		}
	}
	sendAndCheck("the busy stream before the cut", lp.Target())
	sendAndCheck("the idle stream before the cut", idle.Listeners[0])
	peerUp := func(want string) func() bool {
		return func() bool {
			for _, uid := range []string{lp.OutS.UID, idle.UID} {
				for _, c := range []*client.Client{lp.InC, lp.OutC} {
					s, err := c.Get(ctx, uid)
					if err != nil || s.Stats == nil || s.Stats.Peer != want {
						return false
					}
				}
			}
			return true
		}
	}
	waitfor.Must(t, time.Minute, "both gateways to see their peer up on both streams", peerUp(api.PeerUp))

	// Two connections that never stop writing.
	var wg sync.WaitGroup
	var sent [2]atomic.Int64
	werrs := make(chan error, 2)
	for i := range 2 {
		c := dial(lp.Target())
		c.SetWriteDeadline(time.Now().Add(2 * time.Minute))
		wg.Add(1)
		go func() {
			defer wg.Done()
			chunk := make([]byte, 64<<10)
			for {
				n, err := c.Write(chunk)
				sent[i].Add(int64(n))
				if err != nil {
					werrs <- err
					return
				}
			}
		}()
	}
	waitfor.Must(t, time.Minute, "both connections to carry data", func() bool {
		return sent[0].Load() > 4<<20 && sent[1].Load() > 4<<20
	})

	cut := time.Now()
	if out, err := exec.Command("ip", "-n", tb.NS(netbed.WANRouter), "link", "set", "east", "down").CombinedOutput(); err != nil {
		t.Fatalf("cut the link: %v: %s", err, out)
	}
	// The consumer's gateway finds the leg silent within 15 s (the
	// keepalive, 5 s, and the leg timeout, 10 s, checked every 2.5 s),
	// then waits out the resume window (5 s): about 22 s, with room.
	const bound = 45 * time.Second
	for i := range 2 {
		select {
		case e := <-ends:
			if e.err == nil {
				t.Errorf("consumer %d read a clean end of stream after %d bytes while its producer kept writing", i, e.n)
			}
		case <-time.After(bound - time.Since(cut)):
			t.Fatalf("consumer %d heard nothing %s after the link was cut", i, bound)
		}
		select {
		case err := <-werrs:
			if os.IsTimeout(err) {
				t.Errorf("producer %d: writes hung: %v", i, err)
			}
		case <-time.After(bound - time.Since(cut)):
			t.Fatalf("producer %d: writes never failed %s after the link was cut", i, bound)
		}
	}
	wg.Wait()
	t.Logf("both ends of both connections saw an error %.1f s after the cut", time.Since(cut).Seconds())
	waitfor.Must(t, 10*time.Second, "both gateways to see their peer down", peerUp(api.PeerDown))

	if out, err := exec.Command("ip", "-n", tb.NS(netbed.WANRouter), "link", "set", "east", "up").CombinedOutput(); err != nil {
		t.Fatalf("restore the link: %v: %s", err, out)
	}
	sendAndCheck("the idle stream after the cut", idle.Listeners[0])
	sendAndCheck("the busy stream after the cut", lp.Target())
	waitfor.Must(t, time.Minute, "both gateways to see their peer up again", peerUp(api.PeerUp))
	for _, uid := range []string{lp.OutS.UID, idle.UID} {
		for _, c := range []*client.Client{lp.InC, lp.OutC} {
			if s, err := c.Get(ctx, uid); err != nil || s.State != api.StateConnected {
				t.Errorf("stream %s on %s after the cut: %+v, %v; want it still connected", uid, c.Addr(), s, err)
			}
		}
	}
}

// TestTestbedLinkDown takes the long WAN's link down (the WAN router's
// link to the consumer gateway, no reset: packets just stop) twice during
// one 96 MiB transfer: for 5 s, which the leg rides out (its TCP
// resends once the link is back), and for 20 s, past the leg timeout, so
// both gateways lose the leg and the outbound one joins a new one once
// the link is back. The transfer completes byte-exact, neither
// application sees a reset, and the outbound side counts the leg it
// resumed. It logs the consumer's pause at each outage and the part of
// it after the link's return: what the recovery costs.
func TestTestbedLinkDown(t *testing.T) {
	bin := needTestbed(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	preset, err := netbed.LookupPreset("longwan")
	if err != nil {
		t.Fatal(err)
	}
	tb, err := netbed.Up(ctx, netbed.Config{Name: testbedName(), Preset: preset,
		DelayLine: []string{bin, "testbed", "delayline"}, StateRoot: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Down()

	// The consumer: one connection, read to its end, with its digest
	// and the largest gap between two reads since the last mark.
	var ln *net.TCPListener
	if err := netbed.Do(tb.NS(netbed.Consumer), func() (err error) {
		ln, err = net.ListenTCP("tcp", &net.TCPAddr{IP: net.ParseIP(tb.ConsumerLAN())})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var got atomic.Int64
	var readsMu sync.Mutex
	var reads []time.Time // when each read returned bytes
	type result struct {
		n   int64
		sum [32]byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- result{err: err}
			return
		}
		defer c.Close()
		h := sha256.New()
		buf := make([]byte, 256<<10)
		var r result
		for {
			c.SetReadDeadline(time.Now().Add(2 * time.Minute))
			k, err := c.Read(buf)
			now := time.Now()
			if k > 0 {
				readsMu.Lock()
				reads = append(reads, now)
				readsMu.Unlock()
				h.Write(buf[:k])
				r.n += int64(k)
				got.Store(r.n)
			}
			if err != nil {
				if err != io.EOF {
					r.err = err
				}
				break
			}
		}
		copy(r.sum[:], h.Sum(nil))
		done <- r
	}()
	// firstReadAfter is the time of the consumer's first read after t.
	firstReadAfter := func(t time.Time) (time.Time, bool) {
		readsMu.Lock()
		defer readsMu.Unlock()
		for i := len(reads) - 1; i >= 0 && reads[i].After(t); i-- {
			if i == 0 || !reads[i-1].After(t) {
				return reads[i], true
			}
		}
		return time.Time{}, false
	}
	// lastReadBefore is the time of its last read before t.
	lastReadBefore := func(t time.Time) time.Time {
		readsMu.Lock()
		defer readsMu.Unlock()
		for i := len(reads) - 1; i >= 0; i-- {
			if !reads[i].After(t) {
				return reads[i]
			}
		}
		return time.Time{}
	}

	lp, err := localpair.Start(ctx, localpair.Config{
		S2CS: s2csBin, Engine: "splice", WAN: api.WANTLS, Consumer: ln.Addr().(*net.TCPAddr),
		NetNS: [2]string{tb.NS(netbed.ConsumerGW), tb.NS(netbed.ProducerGW)},
		IPs:   [2]string{tb.ConsumerGWWAN(), tb.ProducerGWWAN()},
		Allow: tb.LANASubnet(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer lp.Close()
	var conn net.Conn
	if err := netbed.Do(tb.NS(netbed.Producer), func() (err error) {
		conn, err = (&net.Dialer{Timeout: 10 * time.Second}).DialContext(ctx, "tcp", lp.Target())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const total = 96 << 20
	data := make([]byte, total)
	for i := range data {
		data[i] = byte(i*31 + i>>13)
	}
	sendErr := make(chan error, 1)
	go func() {
		conn.SetWriteDeadline(time.Now().Add(3 * time.Minute))
		_, err := conn.Write(data)
		if err == nil {
			err = conn.(*net.TCPConn).CloseWrite()
		}
		sendErr <- err
	}()
	link := func(state string) {
		t.Helper()
		if out, err := exec.Command("ip", "-n", tb.NS(netbed.WANRouter), "link", "set", "east", state).CombinedOutput(); err != nil {
			t.Fatalf("link %s: %v: %s", state, err, out)
		}
	}
	for i, o := range []struct {
		at   int64
		down time.Duration
	}{{total / 5, 5 * time.Second}, {total / 2, 20 * time.Second}} {
		waitfor.Must(t, 2*time.Minute, "the consumer to have its share before the outage", func() bool { return got.Load() >= o.at })
		link("down")
		down := time.Now()
		// The outage's length is the fault itself, not a wait for
		// something to be ready.
		select {
		case <-time.After(o.down):
		case <-ctx.Done():
			t.Fatal("the test ran out of time during the outage")
		}
		link("up")
		back := time.Now()
		var first time.Time
		waitfor.Must(t, time.Minute, "bytes to flow again after the link came back", func() bool {
			var ok bool
			first, ok = firstReadAfter(back)
			return ok
		})
		t.Logf("outage %d (%s down): the consumer's pause %.2f s, of which %.0f ms after the link came back (RTT %s)",
			i+1, o.down, first.Sub(lastReadBefore(down)).Seconds(), float64(first.Sub(back).Microseconds())/1000, preset.RTT.Round(time.Millisecond))
	}
	if err := <-sendErr; err != nil {
		t.Fatalf("the producer's writes failed: %v (the consumer had %d bytes)", err, got.Load())
	}
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		t.Fatalf("the consumer never saw the end (%d bytes)", got.Load())
	}
	if r.err != nil || r.n != total || r.sum != sha256.Sum256(data) {
		t.Fatalf("the consumer got %d bytes of %d (%v), digest match %v", r.n, total, r.err, r.sum == sha256.Sum256(data))
	}
	st, err := lp.OutC.Get(ctx, lp.OutS.UID)
	if err != nil {
		t.Fatal(err)
	}
	if s := st.Stats; s.Resume != api.ResumeOn || s.ResumedLegs < 1 || s.AbortedConns != 0 {
		t.Errorf("the outbound side: resume %q, %d legs resumed, %d connections aborted; want on, at least 1 (the 12 s outage), none", s.Resume, s.ResumedLegs, s.AbortedConns)
	}
}
