package gateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"scistream/internal/api"
	"scistream/internal/auth"
	"scistream/internal/client"
	"scistream/internal/intake"
	"scistream/internal/localgw"
	"scistream/internal/store"
	"scistream/internal/stream"
	"scistream/internal/waitfor"
)

// lateEnv is a stream between two in-process gateways whose application
// does not listen yet: its address is reserved (a fresh loopback address
// and a port the kernel chose), the test listens there when it wants.
type lateEnv struct {
	prod, cons *testGW
	in, out    *client.Client
	uid        string
	outL       []string // the outbound gateway's listeners (for the producer)
	appAddr    string   // where the application will listen
	consLog    *logLines
}

// newLateEnv wires a stream of numConn channels over wanT; wait is the
// request's app_wait_s (nil: absent).
func newLateEnv(t *testing.T, wanT string, wait *int, numConn int) *lateEnv {
	t.Helper()
	tokens, err := auth.ParseTokens(strings.NewReader(auth.HashToken(aliceToken) + " alice\n"))
	if err != nil {
		t.Fatal(err)
	}
	e := &lateEnv{consLog: &logLines{}}
	tcpWAN := func(c *Config) { c.AllowTCPWAN = true }
	e.prod = startGW(t, tokens, tcpWAN)
	e.cons = startGW(t, tokens, tcpWAN, func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(io.MultiWriter(testWriter{t}, e.consLog), &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	waitReady(t, e.prod)
	waitReady(t, e.cons)
	ln, err := net.Listen("tcp", net.JoinHostPort(localgw.RandomLoopback(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	e.appAddr = ln.Addr().String()
	ln.Close()
	host, port, _ := net.SplitHostPort(e.appAddr)
	p, _ := strconv.Atoi(port)
	e.in, _ = client.New(client.Config{Addr: e.cons.addr, ServerCert: e.cons.cert, Token: aliceToken})
	e.out, _ = client.New(client.Config{Addr: e.prod.addr, ServerCert: e.prod.cert, Token: aliceToken})
	t.Cleanup(func() { e.in.Close(); e.out.Close() })
	inS, outS, err := client.Wire(context.Background(), e.in, e.out,
		&api.InboundRequest{RemoteIP: host, ReceiverPorts: []int{p}, NumConn: numConn, WAN: wanT, AppWaitS: wait},
		api.OutboundRequest{NumConn: numConn, Allow: []string{"127.0.0.0/8"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.uid, e.outL = inS.UID, outS.Listeners
	return e
}

// stream returns the running stream on g.
func (e *lateEnv) stream(t *testing.T, g *testGW) *stream.Stream {
	t.Helper()
	for _, st := range g.srv.live() {
		if st.UID == e.uid {
			return st
		}
	}
	t.Fatalf("stream %s does not run on %s", e.uid, g.addr)
	return nil
}

// producer connects to the outbound listener ch.
func (e *lateEnv) producer(t *testing.T, ch int) *net.TCPConn {
	t.Helper()
	c, err := net.Dial("tcp", e.outL[ch])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(time.Minute))
	return c.(*net.TCPConn)
}

// waiting waits until n connections of the stream wait for the
// application on the consumer's gateway.
func (e *lateEnv) waiting(t *testing.T, n int64) {
	t.Helper()
	st := e.stream(t, e.cons)
	waitfor.Must(t, 20*time.Second, strconv.FormatInt(n, 10)+" connections waiting for the application", func() bool { return st.WaitingApp.Load() == n })
}

// viewWait returns the app_wait_s of the stream's inbound view, -1 if
// absent.
func (e *lateEnv) viewWait(t *testing.T) int {
	t.Helper()
	v, err := e.in.Get(context.Background(), e.uid)
	if err != nil {
		t.Fatal(err)
	}
	if v.AppWaitS == nil {
		return -1
	}
	return *v.AppWaitS
}

func intp(n int) *int { return &n }

// mustReset fails t unless reading c ends with a reset: the producer
// must never take a connection that was cut for a complete one.
func mustReset(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	b, err := io.ReadAll(c)
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("producer read %d bytes, then %v; want a reset (ECONNRESET), never a clean end", len(b), err)
	}
}

// TestLateApplication: the producer connects, sends and closes before
// the application listens; the connection waits, unread, and once the
// application listens it gets every byte in order and the end, and the
// producer reads the application's clean end. Over each WAN transport,
// with the gateway's default wait (the request gives none).
func TestLateApplication(t *testing.T) {
	payload := make([]byte, 4<<20)
	rand.Read(payload)
	for _, w := range []string{api.WANTLS, api.WANTCP, api.WANQUIC} {
		t.Run(w, func(t *testing.T) {
			e := newLateEnv(t, w, nil, 1)
			if got := e.viewWait(t); got != int(intake.DefaultAppWait/time.Second) {
				t.Fatalf("inbound view's app_wait_s %d; want the default, %d", got, int(intake.DefaultAppWait/time.Second))
			}
			c := e.producer(t, 0)
			sent := make(chan error, 1)
			go func() {
				_, err := c.Write(payload)
				if err == nil {
					err = c.CloseWrite()
				}
				sent <- err
			}()
			e.waiting(t, 1)
			st := e.stream(t, e.cons)
			if st.FromWAN.Load() != 0 || st.Active.Load() != 0 {
				t.Fatalf("while the connection waits: %d bytes read from the WAN, %d active; want none read (the bytes wait in the sockets)", st.FromWAN.Load(), st.Active.Load())
			}
			if s := st.Stats(); s.WaitingConns != 1 || s.ActiveConns != 0 {
				t.Fatalf("stats while waiting: waiting_conns %d, active_conns %d; want 1, 0", s.WaitingConns, s.ActiveConns)
			}

			ln, err := net.Listen("tcp", e.appAddr)
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			ln.(*net.TCPListener).SetDeadline(time.Now().Add(30 * time.Second))
			a, err := ln.Accept()
			if err != nil {
				t.Fatalf("the gateway did not dial the application once it listened: %v", err)
			}
			defer a.Close()
			a.SetDeadline(time.Now().Add(time.Minute))
			got, err := io.ReadAll(a)
			if err != nil || !bytes.Equal(got, payload) {
				t.Fatalf("application read %d of %d bytes (identical: %v), then %v; want all, in order, then a clean EOF",
					len(got), len(payload), sha256.Sum256(got) == sha256.Sum256(payload), err)
			}
			if err := <-sent; err != nil {
				t.Fatalf("producer's send: %v", err)
			}
			a.Close()
			if b, err := io.ReadAll(c); err != nil || len(b) != 0 {
				t.Fatalf("producer read %d bytes, %v after the application closed; want a clean EOF", len(b), err)
			}
			waitfor.Must(t, 10*time.Second, "the relay to end", func() bool { return st.Active.Load() == 0 && st.Total.Load() == 1 })
			if s := st.Stats(); s.WaitingConns != 0 || s.AbortedConns != 0 {
				t.Fatalf("stats after the connection: %+v; want none waiting, none aborted", s)
			}
			if !e.consLog.has("cannot reach the application") || !e.consLog.has("the application answers again") {
				t.Fatalf("the outage and the recovery were not logged:\n%s", e.consLog)
			}
		})
	}
}

// TestAppWaitExpires: when the wait runs out, the producer's connection
// is reset (never ended cleanly), even though it had sent its end; the
// abort counts as dial_failed with the reason; many connections ending
// so log the outage once.
func TestAppWaitExpires(t *testing.T) {
	for _, w := range []string{api.WANTLS, api.WANQUIC} {
		t.Run(w, func(t *testing.T) {
			e := newLateEnv(t, w, intp(1), 2)
			if got := e.viewWait(t); got != 1 {
				t.Fatalf("inbound view's app_wait_s %d, want 1", got)
			}
			const n = 4
			var cs []*net.TCPConn
			for i := range n {
				c := e.producer(t, i%2)
				if _, err := c.Write([]byte("early bytes")); err != nil {
					t.Fatal(err)
				}
				c.CloseWrite()
				cs = append(cs, c)
			}
			start := time.Now()
			for _, c := range cs {
				mustReset(t, c)
			}
			if el := time.Since(start); el > 15*time.Second {
				t.Fatalf("resets came %s after the connections, for a wait of 1s", el)
			}
			st := e.stream(t, e.cons)
			waitfor.Must(t, 10*time.Second, "every abort to be counted", func() bool { return st.Stats().AbortedConns == n })
			s := st.Stats()
			reason := s.LastErrors[api.EndDialFailed].Reason
			if s.AbortedByKind[api.EndDialFailed] != n || s.WaitingConns != 0 || !strings.Contains(reason, "not reachable for 1s") || !strings.Contains(reason, "connection refused") {
				t.Fatalf("consumer's gateway after the wait ran out: %+v; want %d dial_failed, the last saying \"not reachable for 1s: ... connection refused\"", s, n)
			}
			if k := e.consLog.count("cannot reach the application"); k != 1 {
				t.Fatalf("the outage was said %d times at warn, want once:\n%s", k, e.consLog)
			}
		})
	}
}

// TestAppWaitZero: app_wait_s 0 means no wait: one dial, and the
// producer's connection is reset at once.
func TestAppWaitZero(t *testing.T) {
	e := newLateEnv(t, api.WANTLS, intp(0), 1)
	c := e.producer(t, 0)
	start := time.Now()
	if _, err := c.Write([]byte("x")); err != nil {
		// On a starved machine the reset can come before the write,
		// which then takes it (a later read would see a clean end).
		if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
			t.Fatalf("producer's write: %v; want it to pass, or to meet the reset", err)
		}
	} else {
		mustReset(t, c)
	}
	st := e.stream(t, e.cons)
	waitfor.Must(t, 10*time.Second, "the abort to be counted", func() bool { return st.Stats().AbortedByKind[api.EndDialFailed] == 1 })
	if st.WaitingApp.Load() != 0 || e.consLog.has("WAN connections wait for it") {
		t.Fatalf("a stream that does not wait had a connection wait (waiting %d)", st.WaitingApp.Load())
	}
	// A stream that waited would reset after the default wait (30 s); a
	// bound well under it holds on a starved machine too.
	if el := time.Since(start); el > intake.DefaultAppWait/2 {
		t.Fatalf("reset %s after the connection; a stream that does not wait resets at once, long before the default wait (%s)", el, intake.DefaultAppWait)
	}
}

// TestAppWaitProducerGivesUp: a producer that resets its connection
// while it waits ends the wait at once: it counts as the peer's reset,
// the application later finds no stale connection, and nothing waits.
func TestAppWaitProducerGivesUp(t *testing.T) {
	for _, w := range []string{api.WANTLS, api.WANTCP, api.WANQUIC} {
		t.Run(w, func(t *testing.T) {
			e := newLateEnv(t, w, intp(600), 1)
			c := e.producer(t, 0)
			c.Write([]byte("abandoned"))
			e.waiting(t, 1)
			c.SetLinger(0)
			c.Close()
			e.waiting(t, 0)
			st := e.stream(t, e.cons)
			// The wait ends before the abort is counted: wait for it.
			waitfor.Cond(10*time.Second, func() bool { return st.Stats().AbortedConns >= 1 })
			if s := st.Stats(); s.AbortedByKind[api.EndPeerReset] != 1 || s.AbortedConns != 1 {
				t.Fatalf("after the producer gave up: %+v; want one peer_reset", s)
			}
			// The stream still works: the next connection, with the
			// application there, goes through.
			ln, err := net.Listen("tcp", e.appAddr)
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			c2 := e.producer(t, 0)
			c2.Write([]byte("second"))
			c2.CloseWrite()
			ln.(*net.TCPListener).SetDeadline(time.Now().Add(30 * time.Second))
			a, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			a.SetDeadline(time.Now().Add(30 * time.Second))
			if got, err := io.ReadAll(a); err != nil || string(got) != "second" {
				t.Fatalf("application read %q, %v; want only the second connection's bytes", got, err)
			}
		})
	}
}

// TestAppWaitRelease: connections waiting for the application are reset
// at once, not at the end of their wait, when the consumer's side of the
// stream is released (stop waits for their goroutines; TestMain checks
// none is left), and when the producer's side is (the inbound side sees
// the peer's resets and stops waiting).
func TestAppWaitRelease(t *testing.T) {
	for _, side := range []string{"inbound", "outbound"} {
		t.Run(side, func(t *testing.T) {
			e := newLateEnv(t, api.WANTLS, intp(600), 2)
			var cs []*net.TCPConn
			for i := range 6 {
				c := e.producer(t, i%2)
				c.Write([]byte("waiting"))
				cs = append(cs, c)
			}
			e.waiting(t, 6)
			st := e.stream(t, e.cons)
			cl := e.in
			if side == "outbound" {
				cl = e.out
			}
			start := time.Now()
			if _, err := cl.Release(context.Background(), e.uid); err != nil {
				t.Fatal(err)
			}
			for _, c := range cs {
				mustReset(t, c)
			}
			if side == "inbound" {
				// Released: stop waited for every goroutine.
				if n := st.WaitingApp.Load(); n != 0 {
					t.Fatalf("%d connections still wait after the release", n)
				}
			} else {
				e.waiting(t, 0)
				// A connection stops counting as waiting before its
				// end is counted: wait for the count.
				waitfor.Must(t, 10*time.Second, "6 peer_reset on the inbound side", func() bool {
					return st.Stats().AbortedByKind[api.EndPeerReset] == 6
				})
				if s := st.Stats(); s.AbortedByKind[api.EndPeerReset] != 6 || s.AbortedConns != 6 {
					t.Fatalf("inbound side after the outbound side's release: %+v; want 6 peer_reset", s)
				}
			}
			if el := time.Since(start); el > 20*time.Second {
				t.Fatalf("the release took %s to reset the waiting connections", el)
			}
		})
	}
}

// TestAppWaitRequest: app_wait_s absent is the gateway's default, 0 and
// the maximum are taken as given, and a negative or a larger one is
// refused naming the field and the limit; the gateway's info tells
// both.
func TestAppWaitRequest(t *testing.T) {
	s := newTestServer(t, func(c *Config) { c.AppWaitDefault, c.AppWaitMax = 20*time.Second, 2*time.Minute })
	var info api.Info
	callOK(t, s, "GET", "/v1/info", aliceToken, "", 200, &info)
	if info.AppWaitDefaultS != 20 || info.AppWaitMaxS != 120 {
		t.Fatalf("info: app_wait_default_s %d, app_wait_max_s %d; want 20, 120", info.AppWaitDefaultS, info.AppWaitMaxS)
	}
	body := func(wait string) string {
		b := `{"remote_ip":"127.0.0.1","receiver_ports":[9],"num_conn":1`
		if wait != "" {
			b += `,"app_wait_s":` + wait
		}
		return b + "}"
	}
	for wait, want := range map[string]int{"": 20, "0": 0, "120": 120, "7": 7} {
		var v api.Stream
		callOK(t, s, "POST", "/v1/streams/inbound", aliceToken, body(wait), 201, &v)
		if v.AppWaitS == nil || *v.AppWaitS != want {
			t.Errorf("app_wait_s %q: the stream's view says %v, want %d", wait, v.AppWaitS, want)
		}
		// Stored, so a restart keeps it.
		rec, err := s.cfg.Store.Get(store.Key{Owner: "alice", UID: v.UID})
		if err != nil {
			t.Fatal(err)
		}
		if rec.AppWaitS == nil || *rec.AppWaitS != want {
			t.Errorf("app_wait_s %q: the stored record keeps %v, want %d", wait, rec.AppWaitS, want)
		}
		callOK(t, s, "DELETE", "/v1/streams/"+v.UID, aliceToken, "", 200, nil)
	}
	for wait, mention := range map[string]string{
		"121":     "app_wait_s 121 exceeds this gateway's maximum of 120 seconds",
		"-1":      "app_wait_s -1 is negative",
		"1e9":     "app_wait_s",
		"1.5":     "app_wait_s",
		`"30"`:    "app_wait_s",
		"9999999": "maximum of 120",
	} {
		callErr(t, s, "POST", "/v1/streams/inbound", aliceToken, body(wait), 400, api.CodeInvalidArgument, mention)
	}
	// A record from before the field takes the gateway's default, and a
	// restored one whose wait exceeds a lowered maximum, the maximum.
	e := s.env
	if got := e.AppWaitFor(&store.Record{Role: api.RoleInbound}); got != 20*time.Second {
		t.Errorf("record without app_wait_s: waits %s, want the default 20s", got)
	}
	if got := e.AppWaitFor(&store.Record{Role: api.RoleInbound, AppWaitS: intp(3600)}); got != 2*time.Minute {
		t.Errorf("record with app_wait_s 3600 under a maximum of 2m: waits %s, want 2m", got)
	}
}
