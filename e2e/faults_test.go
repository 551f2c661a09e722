package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"scistream/internal/api"
	"scistream/internal/bench"
	"scistream/internal/client"
	"scistream/internal/localgw"
)

// Fault tests: what a facility will do to the gateways. Each is bounded
// in count and time.

// TestGatewayKill kills either gateway with SIGKILL while 20 streams carry
// data (two connections each): every application connection, on both
// sides, ends with an error, never a clean end short of what was sent;
// the surviving gateway says it lost its peer once per stream (the
// stream's watch leg ends without a word), and reports the peer down; and
// once the gateway is started again, every stream carries data again and
// the survivor sees its peer up.
func TestGatewayKill(t *testing.T) {
	for _, wan := range []string{"tls", "tcp"} {
		for _, victim := range []string{"consumer", "producer"} {
			t.Run(wan+"/"+victim, func(t *testing.T) { gatewayKill(t, wan, victim) })
		}
	}
}

func gatewayKill(t *testing.T, wan, victim string) {
	const streams, perStream = 20, 2
	p := newPair(t, pairOpts{args: []string{"--insecure_tcp_wan"}})
	app := newSink(t, "127.0.0.1", nil)
	var sos []streamOut
	for range streams {
		sos = append(sos, p.wire("alice", app.host(), app.port(), 1, "--wan", wan))
	}

	// Producers that never stop writing: whatever a consumer reads, a
	// clean end of stream is always short of what was sent.
	type producer struct {
		c    *net.TCPConn
		sent atomic.Int64
		err  chan error
	}
	var prods []*producer
	for _, so := range sos {
		for range perStream {
			c, err := dialFrom("", so.Listeners[0])
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetWriteDeadline(time.Now().Add(2 * time.Minute))
			pr := &producer{c: c, err: make(chan error, 1)}
			prods = append(prods, pr)
			go func() {
				chunk := make([]byte, 32<<10)
				for {
					n, err := c.Write(chunk)
					pr.sent.Add(int64(n))
					if err != nil {
						pr.err <- err
						return
					}
				}
			}()
		}
	}
	eventually(t, time.Minute, "every connection to carry 1 MiB", func() bool {
		for _, pr := range prods {
			if pr.sent.Load() < 1<<20 {
				return false
			}
		}
		return app.accepted.Load() == streams*perStream
	})

	// Each gateway knows its peer is there (the stream's watch leg is
	// up) before one of them dies.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	clients := map[string]*client.Client{}
	for name, g := range map[string]*localgw.Gateway{"producer": p.prod, "consumer": p.cons} {
		c, err := g.Client(p.tokens["alice"])
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients[name] = c
	}
	eventually(t, time.Minute, "both gateways to see their peer up on every stream", func() bool {
		for _, so := range sos {
			for _, c := range clients {
				st, err := c.Get(ctx, so.UID)
				if err != nil || st.Stats == nil || st.Stats.Peer != api.PeerUp {
					return false
				}
			}
		}
		return true
	})

	dead, survivor := &p.cons, p.prod
	c := clients["producer"]
	if victim == "producer" {
		dead, survivor = &p.prod, p.cons
		c = clients["consumer"]
	}
	(*dead).Kill()

	// Both sides: every consumer read ends with an error, every
	// producer's write fails.
	for i := range prods {
		r := app.next(t, time.Minute)
		if r.err == nil {
			t.Errorf("a consumer read a clean end of stream after %d bytes, while its producer kept writing (consumer %d)", r.n, i)
		}
	}
	for i, pr := range prods {
		select {
		case err := <-pr.err:
			if os.IsTimeout(err) {
				t.Errorf("producer %d: writes hung after %d bytes: %v", i, pr.sent.Load(), err)
			}
		case <-time.After(time.Minute):
			t.Fatalf("producer %d: writes never failed after the %s gateway died", i, victim)
		}
	}
	if t.Failed() {
		return
	}

	// The survivor counted the loss, and said it once per stream.
	for _, so := range sos {
		var st *api.Stream
		var err error
		eventually(t, 30*time.Second, "the surviving gateway to end the connections and see its peer down", func() bool {
			st, err = c.Get(ctx, so.UID)
			return err == nil && st.Stats != nil && st.Stats.ActiveConns == 0 && st.Stats.Peer == api.PeerDown
		})
		// A data leg of a dead peer ends with a reset when the dead
		// process had bytes unread, or without close_notify: either
		// way an abort, never an orderly end.
		lost, reset := st.Stats.AbortedByKind[api.EndWANLost], st.Stats.AbortedByKind[api.EndPeerReset]
		if lost+reset != perStream || st.Stats.AbortedConns != perStream {
			t.Errorf("survivor's counts for stream %s: %v; want its %d connections aborted as wan_lost or peer_reset", so.UID, st.Stats.AbortedByKind, perStream)
		}
	}
	if n := strings.Count(survivor.Log(), "lost the peer gateway"); n != streams {
		t.Errorf("the surviving gateway said it lost its peer %d times, want once per stream (%d):\n%s", n, streams, survivor.Log())
	}

	// Started again, the gateway restores every stream: each carries a
	// fresh connection end to end.
	p.restart(dead, false)
	for i, so := range sos {
		conn, err := dialFrom("", so.Listeners[0])
		if err != nil {
			t.Fatalf("stream %d after the restart: %v", i, err)
		}
		conn.SetDeadline(time.Now().Add(time.Minute))
		sum := sendRandom(t, conn, 256<<10, uint64(i))
		conn.CloseWrite()
		if r := app.next(t, time.Minute); r.err != nil || r.n != 256<<10 || r.sum != sum {
			t.Fatalf("stream %d after the restart: consumer got %d bytes, %v, checksum match %v", i, r.n, r.err, r.sum == sum)
		}
		conn.Close()
	}
	eventually(t, 30*time.Second, "the survivor to see its peer up again", func() bool {
		st, err := c.Get(ctx, sos[0].UID)
		return err == nil && st.Stats != nil && st.Stats.Peer == api.PeerUp
	})
	if !strings.Contains(survivor.Log(), "the peer gateway answers again") {
		t.Errorf("the survivor never said its peer answers again:\n%s", survivor.Log())
	}
}

// TestPeerDownSaidOnce: a dead peer gateway that fails every fresh
// connection is said once per stream, not once per connection, and each
// connection counts as a failed dial.
func TestPeerDownSaidOnce(t *testing.T) {
	p := newPair(t, pairOpts{})
	app := newSink(t, "127.0.0.1", nil)
	so := p.wire("alice", app.host(), app.port(), 1)
	p.cons.Kill()
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := dialFrom("", so.Listeners[0])
			if err != nil {
				// The gateway may reset it before the connect returns.
				if !errors.Is(err, syscall.ECONNRESET) {
					t.Error(err)
				}
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(time.Minute))
			// The reset reaches whichever call comes first: a write
			// that takes it leaves the read a plain EOF.
			_, werr := c.Write([]byte(fmt.Sprint("connection ", i)))
			_, rerr := c.Read(make([]byte, 1))
			reset := func(err error) bool { return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) }
			if !reset(werr) && !reset(rerr) {
				t.Errorf("connection %d through a gateway whose peer is dead: write %v, read %v; want a reset", i, werr, rerr)
			}
		}()
	}
	wg.Wait()
	out := p.mustS2UC("alice", "status", so.UID, "--s2cs", p.prod.Addr, "--server_cert", p.prod.CertFile, "--output", "json")
	var st api.Stream
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatal(err)
	}
	if st.Stats.AbortedByKind[api.EndDialFailed] != 10 || st.Stats.Errors != 10 {
		t.Fatalf("outbound side after 10 connections to a dead peer: %+v", st.Stats)
	}
	if n := strings.Count(p.prod.Log(), "cannot reach the peer gateway"); n != 1 {
		t.Fatalf("said %d times that the peer cannot be reached, want once:\n%s", n, p.prod.Log())
	}
}

// TestStrangerFlood: 3,000 stranger connections from two addresses hit
// the inbound gateway's WAN listener while a stream carries 64 MiB: the
// stream arrives intact, the gateway's memory stays bounded, and its log
// gets no line per refused connection.
func TestStrangerFlood(t *testing.T) {
	p := newPair(t, pairOpts{})
	app := newSink(t, "127.0.0.1", nil)
	so := p.wire("alice", app.host(), app.port(), 1)
	c, err := p.cons.Client(p.tokens["alice"])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	in, err := c.Get(context.Background(), so.UID)
	if err != nil {
		t.Fatal(err)
	}
	rssBefore := rssOf(p.cons.PID())

	var wg sync.WaitGroup
	var opened, peak atomic.Int64
	stopFlood := make(chan struct{})
	for src := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 3, byte(10+src))}}
			var held []net.Conn
			defer func() {
				for _, c := range held {
					c.Close()
				}
			}()
			for range 1500 {
				c, err := d.Dial("tcp", in.Listeners[0])
				if err == nil {
					opened.Add(1)
					held = append(held, c)
				}
				if r := rssOf(p.cons.PID()); r > peak.Load() {
					peak.Store(r)
				}
			}
			<-stopFlood
		}()
	}
	conn, err := dialFrom("", so.Listeners[0])
	if err != nil {
		t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(2 * time.Minute))
	sum := sendRandom(t, conn, 64<<20, 11)
	conn.CloseWrite()
	r := app.next(t, 2*time.Minute)
	close(stopFlood)
	wg.Wait()
	if r.err != nil || r.n != 64<<20 || r.sum != sum {
		t.Fatalf("under the flood the consumer got %d bytes, %v, checksum match %v", r.n, r.err, r.sum == sum)
	}
	if opened.Load() < 1000 {
		t.Fatalf("only %d stranger connections opened: the flood did not happen", opened.Load())
	}
	if grew := peak.Load() - rssBefore; grew > 32<<20 {
		t.Errorf("the inbound gateway grew by %.1f MB under %d stranger connections", float64(grew)/1e6, opened.Load())
	}
	if n := strings.Count(p.cons.Log(), "WAN connection refused"); n != 0 {
		t.Errorf("%d log lines for single refused connections, want only summaries:\n%s", n, p.cons.Log())
	}
	var st api.Stream
	if err := json.Unmarshal([]byte(p.mustS2UC("alice", "status", so.UID, "--s2cs", p.cons.Addr, "--server_cert", p.cons.CertFile, "--output", "json")), &st); err != nil {
		t.Fatal(err)
	}
	if st.Stats.RejectedConns < 1000 {
		t.Errorf("the inbound side counted %d refused connections of the flood", st.Stats.RejectedConns)
	}
}

// rssOf returns a process's resident memory in bytes, 0 if unknown.
func rssOf(pid int) int64 {
	rss, _ := bench.ProcessRSS(pid)
	return rss
}

// TestDiskFull: the consumer gateway's state directory (a small tmpfs)
// fills up while a stream carries data. New requests fail with
// unavailable, never internal or a crash; a release still ends its
// stream and reports it ended; the running stream carries every byte; and
// once space is free again, requests work and the release is on disk
// (a restart does not bring the released stream back).
func TestDiskFull(t *testing.T) {
	mnt := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs (needs root and CAP_SYS_ADMIN): %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", mnt).Run() })
	p := newPair(t, pairOpts{consState: mnt})
	app := newSink(t, "127.0.0.1", nil)
	running := p.wire("alice", app.host(), app.port(), 1)
	doomed := p.wire("alice", app.host(), app.port(), 1)
	in, err := p.cons.Client(p.tokens["alice"])
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	ctx := context.Background()

	// The running stream: 64 MiB, half before the disk fills, half after.
	conn, err := dialFrom("", running.Listeners[0])
	if err != nil {
		t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(2 * time.Minute))
	h := sha256.New()
	send := func(seed uint64) {
		if err := writeRandom(io.MultiWriter(conn, h), 32<<20, seed); err != nil {
			t.Fatal(err)
		}
	}
	send(1)

	filler := filepath.Join(mnt, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := f.Write(make([]byte, 64<<10)); err != nil {
			break // ENOSPC: full
		}
	}
	f.Close()

	// Requests while full: each either works (the database had free
	// pages) or fails with unavailable; within 50, one fails.
	var unavailable int
	for i := 0; i < 50 && unavailable == 0; i++ {
		s, err := in.Inbound(ctx, &api.InboundRequest{RemoteIP: "127.0.0.1", ReceiverPorts: []int{9}, NumConn: 1})
		var ae *api.Error
		switch {
		case err == nil:
			in.Release(ctx, s.UID)
		case errors.As(err, &ae) && ae.Code == api.CodeUnavailable:
			unavailable++
			if !strings.Contains(ae.Message, "retry") {
				t.Errorf("unavailable without a hint: %q", ae.Message)
			}
		default:
			t.Fatalf("request %d on a full disk: %v, want success or unavailable", i, err)
		}
	}
	if unavailable == 0 {
		t.Fatal("50 requests on a full disk all succeeded: the disk never filled for the gateway")
	}
	rel, err := in.Release(ctx, doomed.UID)
	if err != nil || rel.State != api.StateReleased {
		t.Fatalf("release on a full disk: %+v, %v; want the stream released", rel, err)
	}
	if st, err := in.Get(ctx, doomed.UID); err != nil || st.State != api.StateReleased {
		t.Fatalf("status of the stream released on a full disk: %+v, %v", st, err)
	}

	send(2)
	conn.CloseWrite()
	if r := app.next(t, time.Minute); r.err != nil || r.n != 64<<20 || !bytes.Equal(r.sum[:], h.Sum(nil)) {
		t.Fatalf("the running stream across the full disk: consumer got %d bytes, %v, checksum match %v", r.n, r.err, bytes.Equal(r.sum[:], h.Sum(nil)))
	}

	// Space again: requests work, and the release reaches the disk.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "a request to work once space is free", func() bool {
		s, err := in.Inbound(ctx, &api.InboundRequest{RemoteIP: "127.0.0.1", ReceiverPorts: []int{9}, NumConn: 1})
		if err == nil {
			in.Release(ctx, s.UID)
		}
		return err == nil
	})
	if strings.Contains(p.cons.Log(), "could not store the end of a stream") {
		// The release's write did not fit (it may, in the database's
		// free pages): the janitor stores it once there is room.
		eventually(t, 30*time.Second, "the gateway to store the release it could not store", func() bool {
			return strings.Contains(p.cons.Log(), "stored the end of a stream after all")
		})
	}
	p.restart(&p.cons, true)
	in2, err := p.cons.Client(p.tokens["alice"])
	if err != nil {
		t.Fatal(err)
	}
	defer in2.Close()
	if st, err := in2.Get(ctx, doomed.UID); err != nil || st.State != api.StateReleased {
		t.Fatalf("after a restart the stream released on a full disk is %+v, %v; want released", st, err)
	}
	if st, err := in2.Get(ctx, running.UID); err != nil || st.State != api.StateConnected {
		t.Fatalf("after a restart the running stream is %+v, %v; want connected", st, err)
	}
}
