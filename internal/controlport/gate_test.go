package controlport

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"scistream/internal/certs"
	"scistream/internal/waitfor"
)

// testPort is a control port of a gate on loopback: a real TLS listener
// served by net/http with the gate's hooks. A request with the header
// "Authorization: ok" authenticates; any other is answered 401.
type testPort struct {
	gate *Gate
	addr string
	cfg  *tls.Config
}

func startPort(t *testing.T, l Limits, split bool) *testPort {
	t.Helper()
	id, _, _, err := certs.LoadOrGenerate(t.TempDir(), []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := NewGate(l, slog.New(slog.NewTextHandler(io.Discard, nil)))
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "ok" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		Authenticated(r.Context())
		io.WriteString(w, "hello")
	})
	newSrv := func() *http.Server {
		return &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
			ConnState: g.ConnState, ConnContext: ConnContext, ErrorLog: slogDiscard()}
	}
	srv := newSrv()
	cfg := &tls.Config{Certificates: []tls.Certificate{id.TLS}}
	var wg sync.WaitGroup
	var cl net.Listener
	if split {
		cl = g.ListenSplit(ln, cfg, 64<<10, 10*time.Second, newSrv(), &wg)
	} else {
		cl = g.Listen(ln, cfg, 64<<10)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		srv.Serve(cl)
	}()
	t.Cleanup(func() {
		srv.Close()
		cl.Close()
		wg.Wait()
		waitfor.Must(t, 10*time.Second, "every control connection's place given back", func() bool {
			tr, st := g.Conns()
			return tr == 0 && st == 0
		})
	})
	return &testPort{gate: g, addr: ln.Addr().String(), cfg: &tls.Config{InsecureSkipVerify: true}}
}

func slogDiscard() *log.Logger { return log.New(io.Discard, "", 0) }

// dialFrom opens a TCP connection to addr from the loopback address src.
func dialFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// get sends GET / over a new TLS connection from src with auth as its
// Authorization header and returns the status, or an error.
func (p *testPort) get(t *testing.T, src, auth string) (int, net.Conn, error) {
	t.Helper()
	c := dialFrom(t, src, p.addr)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	tc := tls.Client(c, p.cfg)
	if _, err := fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: gw\r\nAuthorization: %s\r\n\r\n", auth); err != nil {
		return 0, nil, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		return 0, nil, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	c.SetDeadline(time.Time{})
	return resp.StatusCode, tc, nil
}

// refusedFrom reports whether a connection from src to addr is reset or
// closed by the server without a byte (within 5 s); the reset may come
// before the dial returns.
func refusedFrom(t *testing.T, src, addr string) bool {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return true
	}
	defer c.Close()
	return refused(c)
}

// refused reports whether the server reset or closed c without a byte
// (within 5 s).
func refused(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// TestGateCaps: silent connections from one address take at most its
// share and the rest are reset at once; strangers from many addresses
// take at most their part; a source that authenticated lately still
// gets in, and a connection that authenticates moves to the trusted
// part. Each refusal is counted.
func TestGateCaps(t *testing.T) {
	p := startPort(t, Limits{Total: 8, Trusted: 4, PerSource: 2, FirstRequest: time.Minute}, false)
	// A user calls once from 127.0.0.9 (trusted from now on).
	if code, c, err := p.get(t, "127.0.0.9", "ok"); err != nil || code != 200 {
		t.Fatalf("first request: %d, %v", code, err)
	} else {
		c.Close()
	}
	waitfor.Must(t, 5*time.Second, "the user's connection closed", func() bool { tr, st := p.gate.Conns(); return tr+st == 0 })
	// A flood from .2: two held, the third reset.
	for i := range 2 {
		dialFrom(t, "127.0.0.2", p.addr)
		waitfor.Must(t, 5*time.Second, "the flood's connection admitted", func() bool { _, st := p.gate.Conns(); return st == i+1 })
	}
	if !refusedFrom(t, "127.0.0.2", p.addr) {
		t.Fatal("a third silent connection from one address was held")
	}
	// .3 and .4 fill the strangers' part (4); .5 is refused.
	dialFrom(t, "127.0.0.3", p.addr)
	dialFrom(t, "127.0.0.3", p.addr)
	waitfor.Must(t, 5*time.Second, "the strangers' part full", func() bool { _, st := p.gate.Conns(); return st == 4 })
	if !refusedFrom(t, "127.0.0.5", p.addr) {
		t.Fatal("a stranger past the strangers' part was held")
	}
	// The user from .9 is trusted: answered though the strangers' part is full.
	code, uc, err := p.get(t, "127.0.0.9", "ok")
	if err != nil || code != 200 {
		t.Fatalf("trusted user during the flood: %d, %v", code, err)
	}
	if tr, st := p.gate.Conns(); tr != 1 || st != 4 {
		t.Fatalf("conns trusted %d strangers %d; want 1 and 4", tr, st)
	}
	uc.Close()
	got := p.gate.RefusedSince()
	if got["per_source"] != 1 || got["total"] != 1 {
		t.Fatalf("refusals %v; want one per_source and one total", got)
	}
}

// TestGateAuthenticatedMoves: a stranger's connection that
// authenticates leaves the strangers' part for the trusted one, so the
// next stranger fits.
func TestGateAuthenticatedMoves(t *testing.T) {
	p := startPort(t, Limits{Total: 4, Trusted: 2, PerSource: 2, FirstRequest: time.Minute}, false)
	code, c, err := p.get(t, "127.0.0.7", "ok")
	if err != nil || code != 200 {
		t.Fatalf("request: %d %v", code, err)
	}
	if tr, st := p.gate.Conns(); tr != 1 || st != 0 {
		t.Fatalf("after authenticating: trusted %d strangers %d; want 1, 0", tr, st)
	}
	c.Close()
}

// TestGateDeadlines: a connection that sends nothing is closed at the
// first-request deadline; one that made an unauthenticated request and
// sits idle is closed at StrangerIdle; an authenticated one stays (the
// server's own idle timeout, minutes, holds it).
func TestGateDeadlines(t *testing.T) {
	for _, split := range []bool{false, true} {
		t.Run(fmt.Sprintf("split=%v", split), func(t *testing.T) {
			p := startPort(t, Limits{FirstRequest: 300 * time.Millisecond, StrangerIdle: 300 * time.Millisecond}, split)
			silent := dialFrom(t, "127.0.0.2", p.addr)
			if !refused(silent) {
				t.Fatal("a silent connection outlived the first-request deadline")
			}
			code, stranger, err := p.get(t, "127.0.0.3", "no")
			if err != nil || code != 401 {
				t.Fatalf("stranger's request: %d %v", code, err)
			}
			code, user, err := p.get(t, "127.0.0.4", "ok")
			if err != nil || code != 200 {
				t.Fatalf("user's request: %d %v", code, err)
			}
			if !refused(stranger) {
				t.Fatal("an idle unauthenticated connection outlived StrangerIdle")
			}
			// The user's connection sat idle as long as the stranger's
			// did, and longer: still served.
			user.SetDeadline(time.Now().Add(5 * time.Second))
			fmt.Fprintf(user, "GET / HTTP/1.1\r\nHost: gw\r\nAuthorization: ok\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(user), nil)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("the authenticated connection after an idle spell: %v %v", resp, err)
			}
			waitfor.Must(t, 5*time.Second, "both closes counted", func() bool {
				r := p.gate.RefusedSince()
				return r["first_request"] == 1 && r["stranger_idle"] == 1
			})
		})
	}
}

// TestGateConcurrentUsers: many users of one address at once (a
// workflow engine's burst) within its share are all answered.
func TestGateConcurrentUsers(t *testing.T) {
	p := startPort(t, Limits{}, false)
	var wg sync.WaitGroup
	errs := make(chan error, 60)
	for range 60 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, c, err := p.get(t, "127.0.0.1", "ok")
			if err == nil && code != 200 {
				err = fmt.Errorf("status %d", code)
			}
			if c != nil {
				c.Close()
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestLimitsValidate(t *testing.T) {
	for _, c := range []struct {
		l   Limits
		bad string
	}{
		{Limits{}, ""},
		{Limits{Total: 2}, ""},
		{Limits{Total: 1}, "leaves no room"},
		{Limits{Total: 8, Trusted: 8}, "not below"},
		{Limits{PerSource: -1}, "negative"},
	} {
		err := c.l.Validate()
		if (err == nil) != (c.bad == "") || err != nil && !strings.Contains(err.Error(), c.bad) {
			t.Errorf("%+v: %v; want %q", c.l, err, c.bad)
		}
	}
}
