package peerdial

import (
	"context"
	"errors"
	"io"
	"net"
	"scistream/internal/loopback"
	"scistream/internal/waitfor"
	"sync"
	"syscall"
	"testing"
	"time"
)

// helloServer is a real TCP listener standing for one node of a peer
// facility: it greets every connection with "ok" unless hung, in which
// case it accepts and stays silent (a node whose kernel still completes
// handshakes but whose process is stopped).
type helloServer struct {
	ln       net.Listener
	accepted chan net.Conn
}

func newHelloServer(t *testing.T, hung bool) *helloServer {
	t.Helper()
	s, err := listenHello(t, "127.0.0.1:0", hung)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// listenHello starts a helloServer on addr, stopped when the test ends.
// Safe to call from any goroutine of the test.
func listenHello(t *testing.T, addr string, hung bool) (*helloServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := &helloServer{ln: ln, accepted: make(chan net.Conn, 16)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if !hung {
				c.Write([]byte("ok"))
			}
			s.accepted <- c
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		close(s.accepted)
		for c := range s.accepted {
			c.Close()
		}
	})
	return s, nil
}

func (s *helloServer) addr() string { return s.ln.Addr().String() }

// helloDial dials target and waits for its greeting, honouring ctx as
// wan.Dial does.
func helloDial(ctx context.Context, target string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", target)
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { c.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	b := make([]byte, 2)
	if _, err := io.ReadFull(c, b); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// raceResult runs Race in a goroutine so that a test fails instead of
// hanging when it does not return.
func raceResult(t *testing.T, wg *sync.WaitGroup, targets []string, stagger time.Duration) (net.Conn, string, error) {
	t.Helper()
	type res struct {
		c   net.Conn
		at  string
		err error
	}
	ch := make(chan res, 1)
	wg.Add(1) // the caller's own goroutine, as a stream's connection is
	go func() {
		defer wg.Done()
		c, at, err := Race(context.Background(), wg, targets, stagger, helloDial)
		ch <- res{c, at, err}
	}()
	select {
	case r := <-ch:
		return r.c, r.at, r.err
	case <-time.After(20 * time.Second):
		t.Fatalf("Race(%v, stagger %s) did not return", targets, stagger)
		return nil, "", nil
	}
}

func waitGroupDone(t *testing.T, wg *sync.WaitGroup) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	waitfor.Must(t, 10*time.Second, "every dial Race started returns", func() bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	})
}

// TestRaceDial: the first node is hung, refuses, or answers; Race
// goes on to the next as soon as a dial fails, after the stagger while
// one stays silent, and not at all when the first answers; the dials it
// no longer needs are cancelled, and a connection one makes anyway is
// closed.
func TestRaceDial(t *testing.T) {
	t.Run("hung first", func(t *testing.T) {
		hung, good := newHelloServer(t, true), newHelloServer(t, false)
		var wg sync.WaitGroup
		c, at, err := raceResult(t, &wg, []string{hung.addr(), good.addr()}, 50*time.Millisecond)
		if err != nil || at != good.addr() {
			t.Fatalf("Race = %q, %v; want the answering node %s", at, err, good.addr())
		}
		c.Close()
		waitGroupDone(t, &wg) // the hung dial was cancelled
	})
	t.Run("refused first", func(t *testing.T) {
		good := newHelloServer(t, false)
		var wg sync.WaitGroup
		// An hour's stagger: only the refusal can start the second dial.
		c, at, err := raceResult(t, &wg, []string{loopback.RefusedAddr(t), good.addr()}, time.Hour)
		if err != nil || at != good.addr() {
			t.Fatalf("Race = %q, %v; want the answering node %s", at, err, good.addr())
		}
		c.Close()
		waitGroupDone(t, &wg)
	})
	t.Run("first answers", func(t *testing.T) {
		first, second := newHelloServer(t, false), newHelloServer(t, false)
		var dialled sync.Map // target -> struct{}: every target Race dialled
		dial := func(ctx context.Context, target string) (net.Conn, error) {
			dialled.Store(target, struct{}{})
			return helloDial(ctx, target)
		}
		var wg sync.WaitGroup
		wg.Add(1)
		c, at, err := Race(context.Background(), &wg, []string{first.addr(), second.addr()}, time.Hour, dial)
		wg.Done()
		if err != nil || at != first.addr() {
			t.Fatalf("Race = %q, %v; want the first node %s", at, err, first.addr())
		}
		c.Close()
		waitGroupDone(t, &wg)
		if _, ok := dialled.Load(second.addr()); ok {
			t.Fatal("the second node was dialled while the first answered")
		}
	})
	t.Run("all fail", func(t *testing.T) {
		var wg sync.WaitGroup
		first := loopback.RefusedAddr(t)
		_, _, err := raceResult(t, &wg, []string{first, loopback.RefusedAddr(t), loopback.RefusedAddr(t)}, time.Hour)
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("Race of three refusing nodes: %v; want the first's refusal", err)
		}
		var oe *net.OpError
		if !errors.As(err, &oe) || oe.Addr == nil || oe.Addr.String() != first {
			t.Fatalf("Race's error %v names %v; want the first target %s", err, oe, first)
		}
		waitGroupDone(t, &wg)
	})
	t.Run("taken over meanwhile", func(t *testing.T) {
		// The first node is hung; the second refuses until it takes the
		// channel over, after its first refusal: Race, still waiting
		// on the first, tries it again and gets it.
		hung := newHelloServer(t, true)
		second := loopback.RefusedAddr(t)
		var once sync.Once
		dial := func(ctx context.Context, target string) (net.Conn, error) {
			c, err := helloDial(ctx, target)
			if target == second && err != nil {
				once.Do(func() {
					if _, err := listenHello(t, second, false); err != nil {
						t.Error(err)
					}
				})
			}
			return c, err
		}
		var wg sync.WaitGroup
		wg.Add(1)
		c, at, err := Race(context.Background(), &wg, []string{hung.addr(), second}, 20*time.Millisecond, dial)
		wg.Done()
		if err != nil || at != second {
			t.Fatalf("Race = %q, %v; want the node that took the channel over, %s", at, err, second)
		}
		c.Close()
		waitGroupDone(t, &wg)
	})
	t.Run("late connection closed", func(t *testing.T) {
		slow, good := newHelloServer(t, false), newHelloServer(t, false)
		release := make(chan struct{})
		// The slow node's dial ignores cancellation and connects after
		// the race is won: Race must close what it made.
		dial := func(ctx context.Context, target string) (net.Conn, error) {
			if target == slow.addr() {
				<-release
				return helloDial(context.Background(), target)
			}
			return helloDial(ctx, target)
		}
		var wg sync.WaitGroup
		wg.Add(1)
		c, at, err := Race(context.Background(), &wg, []string{slow.addr(), good.addr()}, 10*time.Millisecond, dial)
		wg.Done()
		if err != nil || at != good.addr() {
			t.Fatalf("Race = %q, %v; want %s", at, err, good.addr())
		}
		c.Close()
		close(release)
		waitGroupDone(t, &wg)
		sc := <-slow.accepted
		sc.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadAll(sc); err != nil {
			t.Fatalf("the late connection was not closed: %v", err)
		}
	})
}
