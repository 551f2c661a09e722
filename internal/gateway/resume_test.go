package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"scistream/internal/api"
	"scistream/internal/client"
	"scistream/internal/intake"
	"scistream/internal/metricstest"
	"scistream/internal/store"
	"scistream/internal/waitfor"
)

// TestResumeWindowRequest: resume_window_s, on either side's request,
// absent is the gateway's default (the record keeps it absent, so that
// the default applies as it is), 0 and the maximum are taken as given,
// and a negative or a larger one is refused naming the field, the
// maximum and the operator's flag; the view says the window the stream
// waits, the info the default and the maximum.
func TestResumeWindowRequest(t *testing.T) {
	s := newTestServer(t, func(c *Config) {
		c.AllowTCPWAN = true
		c.Resume.Window, c.Resume.WindowMax = 20*time.Second, 2*time.Minute
	})
	var info api.Info
	callOK(t, s, "GET", "/v1/info", aliceToken, "", 200, &info)
	if info.ResumeWindowDefaultS != 20 || info.ResumeWindowMaxS != 120 {
		t.Fatalf("info: resume_window_default_s %d, resume_window_max_s %d; want 20, 120", info.ResumeWindowDefaultS, info.ResumeWindowMaxS)
	}
	bodies := map[string]func(window string) (string, string){
		"inbound": func(window string) (string, string) {
			return "/v1/streams/inbound", `{"remote_ip":"127.0.0.1","receiver_ports":[9],"num_conn":1` + field(window) + "}"
		},
		"outbound": func(window string) (string, string) {
			return "/v1/streams/outbound", `{"uid":"` + intake.NewUID() + `","num_conn":1,"peer_listeners":["192.0.2.1:5100"],"secret":"` +
				strings.Repeat("A", 43) + `=","wan":"tcp"` + field(window) + "}"
		},
	}
	for side, body := range bodies {
		for window, want := range map[string]int{"": 20, "0": 0, "120": 120, "7": 7} {
			var v api.Stream
			path, b := body(window)
			callOK(t, s, "POST", path, aliceToken, b, 201, &v)
			if v.ResumeWindowS == nil || *v.ResumeWindowS != want {
				t.Errorf("%s, resume_window_s %q: the stream's view says %v, want %d", side, window, deref(v.ResumeWindowS), want)
			}
			// Stored as asked, so a restart keeps it; absent stays
			// absent.
			rec, err := s.cfg.Store.Get(store.Key{Owner: "alice", UID: v.UID})
			if err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprint(deref(rec.ResumeWindowS)); window == "" && rec.ResumeWindowS != nil || window != "" && got != window {
				t.Errorf("%s, resume_window_s %q: the stored record keeps %s", side, window, got)
			}
			callOK(t, s, "DELETE", "/v1/streams/"+v.UID, aliceToken, "", 200, nil)
		}
		for window, mention := range map[string]string{
			"121":     "resume_window_s 121 exceeds this gateway's maximum of 120 seconds: give 0 to 120, or ask the operator to raise s2cs --resume_window_max",
			"-1":      "resume_window_s -1 is negative: give the seconds a connection waits for a new WAN leg, 0 to 120 (0: do not wait)",
			"9999999": "maximum of 120",
			"1e9":     "resume_window_s",
			"1.5":     "resume_window_s",
			`"30"`:    "resume_window_s",
		} {
			path, b := body(window)
			callErr(t, s, "POST", path, aliceToken, b, 400, api.CodeInvalidArgument, mention)
		}
	}
	// A record from before the field takes the gateway's default, and a
	// restored one whose window exceeds a lowered maximum, the maximum.
	if got := s.env.ResumeWindowFor(&store.Record{}); got != 20*time.Second {
		t.Errorf("record without resume_window_s: waits %s, want the default 20s", got)
	}
	if got := s.env.ResumeWindowFor(&store.Record{ResumeWindowS: intp(3600)}); got != 2*time.Minute {
		t.Errorf("record with resume_window_s 3600 under a maximum of 2m: waits %s, want 2m", got)
	}
}

func field(window string) string {
	if window == "" {
		return ""
	}
	return `,"resume_window_s":` + window
}

func deref(p *int) any {
	if p == nil {
		return "absent"
	}
	return *p
}

// TestResumeParked: the WAN leg of a live connection between two
// in-process gateways is cut (a proxy between them resets it, and every
// dial, until told to heal): both sides park the connection and say so
// (stats, GET /v1/status's health, the metrics, promtool-checked), keep
// reading their applications into the resume buffer, and when the path
// heals resume it, every byte through once and in order, and count it.
// A stream with a short window is reset at both applications when the
// window runs out, and counted; one that asked for no window has resume
// off, and its connection is reset at once, as before.
func TestResumeParked(t *testing.T) {
	readers := func(c *Config) { c.Roles = mustPolicy(t, "user any\nreader identity alice\n") }
	p := startPair(t, readers, readers)
	app, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()

	t.Run("resumed", func(t *testing.T) {
		px := newCutProxy(t)
		c := px.connect(t, p, app, nil)
		c.exchange(t, nil, []byte("before the cut"), nil, []byte("the answer before"))
		sides := p.streams(t, c.uid)
		sides.waitFor(t, "both sides to say their connection resumes", func(s *api.Stats) bool { return s.Resume == api.ResumeOn })
		for _, v := range sides.views(t) {
			if v.ResumeWindowS == nil || *v.ResumeWindowS != 30 {
				t.Errorf("%s side's resume_window_s %v, want the default 30", v.Role, v.ResumeWindowS)
			}
		}

		px.cut(true)
		sides.waitFor(t, "both sides to park the connection", func(s *api.Stats) bool { return s.ParkedConns == 1 && s.ActiveConns == 1 })
		// Parked, both applications are still read: what they write
		// waits in the resume buffer.
		during, answer := bytes.Repeat([]byte("d"), 300<<10), bytes.Repeat([]byte("a"), 200<<10)
		c.prod.Write(during)
		c.cons.Write(answer)
		waitfor.Must(t, 20*time.Second, "the producer's gateway to hold what its application wrote", func() bool {
			return p.prod.srv.obs.Health().ResumeBufferBytes >= int64(len(during))
		})
		waitfor.Must(t, 20*time.Second, "the consumer's gateway to hold what its application wrote", func() bool {
			return p.cons.srv.obs.Health().ResumeBufferBytes >= int64(len(answer))
		})
		for _, g := range []*testGW{p.prod, p.cons} {
			var st api.GatewayStatus
			code, b := get(t, "https://"+g.addr+"/v1/status", g.cert, aliceToken)
			if code != http.StatusOK || json.Unmarshal(b, &st) != nil {
				t.Fatalf("GET /v1/status: %d %s", code, b)
			}
			if h := st.Health; h.ParkedConns != 1 || h.ResumeBufferBytes == 0 || h.ResumeBufferPeak < h.ResumeBufferBytes || h.ResumeBufferCapacity != 1<<30 {
				t.Errorf("GET /v1/status's health while parked: parked_conns %d, resume buffer %d (peak %d) of %d; want 1, some, at least that, 1GiB",
					h.ParkedConns, h.ResumeBufferBytes, h.ResumeBufferPeak, h.ResumeBufferCapacity)
			}
			if len(st.Streams) != 1 || st.Streams[0].Stats == nil || st.Streams[0].Stats.ParkedConns != 1 {
				t.Errorf("GET /v1/status's stream while parked: %+v", st.Streams)
			}
			m := scrapeGW(t, g)
			role := map[*testGW]string{p.prod: "outbound", p.cons: "inbound"}[g]
			l := metricstest.Labels{"uid": c.uid, "role": role}
			for _, want := range []struct {
				name string
				l    metricstest.Labels
				v    float64
			}{
				{"scistream_stream_parked_conns", l, 1},
				{"scistream_parked_conns", nil, 1},
				{"scistream_stream_info", metricstest.Labels{"uid": c.uid, "resume": api.ResumeOn, "state": "connected"}, 1},
				{"scistream_stream_resume_expired_total", l, 0},
				{"scistream_resume_buffer_capacity_bytes", nil, 1 << 30},
			} {
				if got := m.Value(t, want.name, want.l); got != want.v {
					t.Errorf("%s gateway while parked: %s%v = %g, want %g", role, want.name, want.l, got, want.v)
				}
			}
			if held, peak := m.Value(t, "scistream_resume_buffer_bytes", nil), m.Value(t, "scistream_resume_buffer_peak_bytes", nil); held == 0 || peak < held {
				t.Errorf("%s gateway while parked: resume buffer %g bytes held, peak %g; want some, and a peak of at least that", role, held, peak)
			}
		}

		px.cut(false)
		sides.waitFor(t, "both sides to resume the connection", func(s *api.Stats) bool { return s.ParkedConns == 0 && s.ResumedLegs >= 1 })
		// Every byte once, in order: the ones of the outage, then more.
		after, answerAfter := []byte("after the cut"), []byte("the answer after")
		c.exchange(t, during, after, answer, answerAfter)
		for _, v := range sides.views(t) {
			s := v.Stats
			if s.ParkedSeconds <= 0 || s.ResumeExpired != 0 || s.AbortedConns != 0 || s.ActiveConns != 1 {
				t.Errorf("%s side after the resume: parked %gs, %d expired, %d aborted, %d active; want some time parked, none expired or aborted, still 1 active",
					v.Role, s.ParkedSeconds, s.ResumeExpired, s.AbortedConns, s.ActiveConns)
			}
			g := map[api.Role]*testGW{api.RoleOutbound: p.prod, api.RoleInbound: p.cons}[v.Role]
			m := scrapeGW(t, g)
			l := metricstest.Labels{"uid": c.uid, "role": string(v.Role)}
			if got := m.Value(t, "scistream_stream_resumed_legs_total", l); got < 1 {
				t.Errorf("%s: scistream_stream_resumed_legs_total %g, want at least 1", v.Role, got)
			}
			if got := m.Value(t, "scistream_stream_parked_seconds_total", l); got <= 0 {
				t.Errorf("%s: scistream_stream_parked_seconds_total %g, want more than 0", v.Role, got)
			}
			if got := m.Value(t, "scistream_stream_resent_bytes_total", l); got < 0 {
				t.Errorf("%s: scistream_stream_resent_bytes_total %g", v.Role, got)
			}
			if got := m.Value(t, "scistream_stream_parked_conns", l) + m.Value(t, "scistream_parked_conns", nil); got != 0 {
				t.Errorf("%s: parked connections after the resume: %g, want 0", v.Role, got)
			}
		}
		// Ended in order, the connection gives its buffers back.
		c.end(t)
		for name, g := range map[string]*testGW{"producer": p.prod, "consumer": p.cons} {
			waitfor.Must(t, 20*time.Second, "the "+name+"'s gateway to hold no resume buffer once the connection ended", func() bool {
				return g.srv.obs.Health().ResumeBufferBytes == 0
			})
		}
	})

	t.Run("expired", func(t *testing.T) {
		px := newCutProxy(t)
		c := px.connect(t, p, app, intp(2))
		c.exchange(t, nil, []byte("before the cut"), nil, []byte("the answer before"))
		sides := p.streams(t, c.uid)
		sides.waitFor(t, "both sides to say their connection resumes", func(s *api.Stats) bool { return s.Resume == api.ResumeOn })
		px.cut(true)
		// Past the window, both applications are reset, as a lost leg
		// did before.
		for name, conn := range map[string]net.Conn{"producer": c.prod, "consumer": c.cons} {
			if err := readsReset(conn); err != nil {
				t.Errorf("the %s's connection after the window: %v", name, err)
			}
		}
		sides.waitFor(t, "both sides to count the connection reset after the window", func(s *api.Stats) bool {
			return s.ResumeExpired == 1 && s.ParkedConns == 0 && s.ActiveConns == 0 && s.AbortedByKind[api.EndWANLost] == 1
		})
		for _, g := range []*testGW{p.prod, p.cons} {
			if got := scrapeGW(t, g).Value(t, "scistream_stream_resume_expired_total", metricstest.Labels{"uid": c.uid}); got != 1 {
				t.Errorf("scistream_stream_resume_expired_total %g, want 1", got)
			}
		}
	})

	t.Run("off", func(t *testing.T) {
		px := newCutProxy(t)
		c := px.connect(t, p, app, intp(0))
		c.exchange(t, nil, []byte("before the cut"), nil, []byte("the answer before"))
		sides := p.streams(t, c.uid)
		sides.waitFor(t, "both sides to say their connections do not resume", func(s *api.Stats) bool { return s.Resume == api.ResumeOff })
		px.cut(true)
		for name, conn := range map[string]net.Conn{"producer": c.prod, "consumer": c.cons} {
			if err := readsReset(conn); err != nil {
				t.Errorf("the %s's connection of a stream without resume, its leg cut: %v", name, err)
			}
		}
		sides.waitFor(t, "both sides to count the lost connection, not parked", func(s *api.Stats) bool {
			return s.AbortedConns == 1 && s.ActiveConns == 0 && s.ParkedConns == 0
		})
		for _, v := range sides.views(t) {
			if v.Stats.ResumeExpired != 0 || v.Stats.ResumedLegs != 0 || v.Stats.ParkedSeconds != 0 {
				t.Errorf("%s side of a stream without resume: %d expired, %d resumed, %gs parked; want none", v.Role, v.Stats.ResumeExpired, v.Stats.ResumedLegs, v.Stats.ParkedSeconds)
			}
		}
		m := scrapeGW(t, p.prod)
		if got := m.Value(t, "scistream_stream_info", metricstest.Labels{"uid": c.uid, "resume": api.ResumeOff}); got != 1 {
			t.Errorf("scistream_stream_info{resume=off} %g, want 1", got)
		}
	})
}

// readsReset reads c until it ends, and says how unless with a reset
// (or an error other than an orderly end, EOF).
func readsReset(c net.Conn) error {
	c.SetReadDeadline(time.Now().Add(time.Minute))
	_, err := io.Copy(io.Discard, c)
	switch {
	case err == nil:
		return errors.New("ended in order (EOF), want a reset")
	case os.IsTimeout(err):
		return fmt.Errorf("not ended within a minute: %w", err)
	}
	return nil
}

// cutProxy stands between two gateways on the WAN: it relays every
// connection to its target until cut, which resets every connection it
// relays and, until healed, every one that arrives (a path that broke).
type cutProxy struct {
	ln *net.TCPListener

	mu     sync.Mutex // guards the following
	target string
	broken bool
	conns  map[*net.TCPConn]struct{}
	wg     sync.WaitGroup
}

func newCutProxy(t *testing.T) *cutProxy {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	px := &cutProxy{ln: ln, conns: map[*net.TCPConn]struct{}{}}
	px.wg.Add(1)
	go func() {
		defer px.wg.Done()
		for {
			c, err := ln.AcceptTCP()
			if err != nil {
				return
			}
			px.wg.Add(1)
			go func() {
				defer px.wg.Done()
				px.relay(c)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		px.cut(true)
		px.wg.Wait()
	})
	return px
}

func abort(c *net.TCPConn) {
	c.SetLinger(0)
	c.Close()
}

// relay relays c to the target, unless the path is broken.
func (px *cutProxy) relay(c *net.TCPConn) {
	px.mu.Lock()
	target, broken := px.target, px.broken
	px.mu.Unlock()
	if broken || target == "" {
		abort(c)
		return
	}
	d, err := net.DialTimeout("tcp", target, 10*time.Second)
	if err != nil {
		abort(c)
		return
	}
	up := d.(*net.TCPConn)
	px.mu.Lock()
	if px.broken {
		px.mu.Unlock()
		abort(c)
		abort(up)
		return
	}
	px.conns[c], px.conns[up] = struct{}{}, struct{}{}
	px.mu.Unlock()
	var wg sync.WaitGroup
	pipe := func(to, from *net.TCPConn) {
		defer wg.Done()
		if _, err := io.Copy(to, from); err != nil {
			abort(to)
			abort(from)
			return
		}
		to.CloseWrite()
	}
	wg.Add(2)
	go pipe(up, c)
	go pipe(c, up)
	wg.Wait()
	px.mu.Lock()
	delete(px.conns, c)
	delete(px.conns, up)
	px.mu.Unlock()
	c.Close()
	up.Close()
}

// cut breaks the path (resets every connection, and every one that
// comes), or heals it.
func (px *cutProxy) cut(broken bool) {
	px.mu.Lock()
	defer px.mu.Unlock()
	px.broken = broken
	if broken {
		for c := range px.conns {
			abort(c)
		}
	}
}

// proxied is one application connection through a stream whose WAN legs
// go through a cutProxy.
type proxied struct {
	uid        string
	prod, cons *net.TCPConn // the producer's end (outbound) and the consumer's (inbound)
}

// connect wires a stream of p whose outbound side dials the inbound
// listener through px, both sides asking for the resume window window
// (nil: the default), and makes one connection through it.
func (px *cutProxy) connect(t *testing.T, p *gwPair, app *net.TCPListener, window *int) *proxied {
	t.Helper()
	inS, outS, err := client.Wire(context.Background(), p.in, p.out,
		&api.InboundRequest{RemoteIP: "127.0.0.1", ReceiverPorts: []int{app.Addr().(*net.TCPAddr).Port}, NumConn: 1, ResumeWindowS: window},
		api.OutboundRequest{NumConn: 1, Allow: []string{"127.0.0.0/8"}, ResumeWindowS: window}, []string{px.ln.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	px.mu.Lock()
	px.target = inS.Listeners[0]
	px.mu.Unlock()
	d, err := net.Dial("tcp", outS.Listeners[0])
	if err != nil {
		t.Fatal(err)
	}
	prod := d.(*net.TCPConn)
	t.Cleanup(func() { prod.Close() })
	app.SetDeadline(time.Now().Add(30 * time.Second))
	cons, err := app.AcceptTCP()
	if err != nil {
		t.Fatalf("the application's accept: %v", err)
	}
	t.Cleanup(func() { cons.Close() })
	return &proxied{uid: inS.UID, prod: prod, cons: cons}
}

// exchange writes to from the producer and back from the consumer, and
// checks that each end reads, whole and in order, what the other wrote
// before (earlier: during an outage) and then these.
func (c *proxied) exchange(t *testing.T, earlierTo, to, earlierBack, back []byte) {
	t.Helper()
	var wg sync.WaitGroup
	for _, d := range []struct {
		at   *net.TCPConn
		want []byte
		name string
	}{{c.cons, append(slices.Clone(earlierTo), to...), "to the consumer"}, {c.prod, append(slices.Clone(earlierBack), back...), "back to the producer"}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.at.SetReadDeadline(time.Now().Add(time.Minute))
			got := make([]byte, len(d.want))
			if _, err := io.ReadFull(d.at, got); err != nil {
				t.Errorf("%s: read %v", d.name, err)
				return
			}
			if sha256.Sum256(got) != sha256.Sum256(d.want) {
				t.Errorf("%s: %d bytes arrived other than sent (first %.40q)", d.name, len(got), got)
			}
		}()
	}
	c.prod.Write(to)
	c.cons.Write(back)
	wg.Wait()
}

// end ends the connection in order: each side closes its writing, reads
// the other's end.
func (c *proxied) end(t *testing.T) {
	t.Helper()
	c.prod.CloseWrite()
	c.cons.CloseWrite()
	for name, conn := range map[string]*net.TCPConn{"producer": c.prod, "consumer": c.cons} {
		conn.SetReadDeadline(time.Now().Add(time.Minute))
		if n, err := io.Copy(io.Discard, conn); err != nil || n != 0 {
			t.Errorf("the %s's end: %d more bytes, %v; want an orderly end", name, n, err)
		}
	}
}

// sides are the two views of one stream on a gwPair.
type sides struct {
	p   *gwPair
	uid string
}

func (p *gwPair) streams(t *testing.T, uid string) sides { return sides{p: p, uid: uid} }

func (s sides) views(t *testing.T) []*api.Stream {
	t.Helper()
	var out []*api.Stream
	for _, c := range []*client.Client{s.p.out, s.p.in} {
		v, err := c.Get(context.Background(), s.uid)
		if err != nil {
			t.Fatal(err)
		}
		if v.Stats == nil {
			t.Fatalf("stream %s on %s has no stats", s.uid, c.Addr())
		}
		out = append(out, v)
	}
	return out
}

// waitFor waits until cond holds of both sides' stats.
func (s sides) waitFor(t *testing.T, what string, cond func(*api.Stats) bool) {
	t.Helper()
	var last []*api.Stream
	if !waitfor.Cond(30*time.Second, func() bool {
		last = s.views(t)
		return cond(last[0].Stats) && cond(last[1].Stats)
	}) {
		for _, v := range last {
			t.Logf("%s side: %+v", v.Role, *v.Stats)
		}
		t.Fatalf("timed out waiting for %s", what)
	}
}
