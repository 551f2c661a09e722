package ports_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"scistream/internal/ports"
)

func TestParseRange(t *testing.T) {
	cases := []struct {
		in   string
		want ports.Range
		ok   bool
	}{
		{"5100-5199", ports.Range{5100, 5199}, true},
		{"5100", ports.Range{5100, 5100}, true},
		{" 5100 - 5199 ", ports.Range{5100, 5199}, true},
		{"1-65535", ports.Range{1, 65535}, true},
		{"65535", ports.Range{65535, 65535}, true},
		{"7-7", ports.Range{7, 7}, true},
		{"0-10", ports.Range{}, false},
		{"0", ports.Range{}, false},
		{"10-5", ports.Range{}, false},
		{"1-65536", ports.Range{}, false},
		{"65536", ports.Range{}, false},
		{"", ports.Range{}, false},
		{"-", ports.Range{}, false},
		{"-5", ports.Range{}, false},
		{"5-", ports.Range{}, false},
		{"1-2-3", ports.Range{}, false},
		{"a-b", ports.Range{}, false},
		{"5100:5199", ports.Range{}, false},
		{"5100 5199", ports.Range{}, false},
		{"0x10-0x20", ports.Range{}, false},
		{"-1--5", ports.Range{}, false},
		{"99999999999999999999", ports.Range{}, false},
	}
	for _, c := range cases {
		got, err := ports.ParseRange(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("ParseRange(%q) = %v, %v; want %v, ok=%v", c.in, got, err, c.want, c.ok)
		}
	}
	r := ports.Range{5100, 5199}
	if r.String() != "5100-5199" || r.Size() != 100 {
		t.Fatalf("String %q Size %d", r.String(), r.Size())
	}
	if back, err := ports.ParseRange(r.String()); err != nil || back != r {
		t.Fatalf("ParseRange(String()) = %v, %v", back, err)
	}
}

// testRange returns a loopback address of its own (127.x.y.z, so that
// tests cannot collide with each other or with other programs' listeners
// on 127.0.0.1) and n consecutive ports that were all free on it a moment
// ago, below the usual ephemeral range.
func testRange(t *testing.T, n int) (string, ports.Range) {
	t.Helper()
	for range 50 {
		host := fmt.Sprintf("127.%d.%d.%d", rand.IntN(254)+1, rand.IntN(256), rand.IntN(254)+1)
		lo := 20000 + rand.IntN(12000-n)
		r := ports.Range{Lo: lo, Hi: lo + n - 1}
		var held []net.Listener
		ok := true
		for p := r.Lo; p <= r.Hi; p++ {
			ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(p)))
			if err != nil {
				ok = false
				break
			}
			held = append(held, ln)
		}
		for _, ln := range held {
			ln.Close()
		}
		if ok {
			return host, r
		}
	}
	t.Fatal("no free port range found")
	return "", ports.Range{}
}

func newAlloc(t *testing.T, n int) (*ports.Allocator, string, ports.Range) {
	t.Helper()
	host, r := testRange(t, n)
	a := ports.New(host, r)
	return a, host, r
}

func portOf(ln net.Listener) int { return ln.Addr().(*net.TCPAddr).Port }

func portsOf(lns []*net.TCPListener) []int {
	var out []int
	for _, ln := range lns {
		out = append(out, portOf(ln))
	}
	return out
}

func releaseAll(t *testing.T, a *ports.Allocator, lns []*net.TCPListener) {
	t.Cleanup(func() {
		for _, ln := range lns {
			a.Release(ln)
		}
	})
}

// hold binds port on host outside any allocator.
func hold(t *testing.T, host string, port int) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		t.Fatalf("hold %s:%d: %v", host, port, err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// bindable reports whether port on host can be bound right now.
func bindable(host string, port int) bool {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return false
	}
	ln.Close()
	return true
}

// accepts checks that ln is a working listener on host.
func accepts(t *testing.T, ln *net.TCPListener, host string) {
	t.Helper()
	if got := ln.Addr().(*net.TCPAddr).IP.String(); got != host {
		t.Fatalf("listener on %s, want %s", got, host)
	}
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			c.Close()
		}
		done <- err
	}()
	c, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", ln.Addr(), err)
	}
	c.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("accept: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("accept timed out")
	}
}

func TestListenLowestFree(t *testing.T) {
	a, host, r := newAlloc(t, 8)
	lns, err := a.Listen(3)
	if err != nil {
		t.Fatal(err)
	}
	releaseAll(t, a, lns)
	if got, want := portsOf(lns), []int{r.Lo, r.Lo + 1, r.Lo + 2}; !slices.Equal(got, want) {
		t.Fatalf("ports %v, want %v", got, want)
	}
	for _, ln := range lns {
		accepts(t, ln, host)
	}
	more, err := a.Listen(1)
	if err != nil {
		t.Fatal(err)
	}
	releaseAll(t, a, more)
	if portOf(more[0]) != r.Lo+3 {
		t.Fatalf("next port %d, want %d", portOf(more[0]), r.Lo+3)
	}
	if a.InUse() != 4 {
		t.Fatalf("InUse = %d, want 4", a.InUse())
	}
	if l0, err := a.Listen(0); err != nil || len(l0) != 0 {
		t.Fatalf("Listen(0) = %v, %v", l0, err)
	}
}

func TestListenSkipsForeignPort(t *testing.T) {
	a, host, r := newAlloc(t, 5)
	hold(t, host, r.Lo)
	hold(t, host, r.Lo+2)
	lns, err := a.Listen(2)
	if err != nil {
		t.Fatal(err)
	}
	releaseAll(t, a, lns)
	if got, want := portsOf(lns), []int{r.Lo + 1, r.Lo + 3}; !slices.Equal(got, want) {
		t.Fatalf("ports %v, want %v", got, want)
	}
}

func TestListenExhaustedAllOrNone(t *testing.T) {
	a, host, r := newAlloc(t, 4)
	first, err := a.Listen(2)
	if err != nil {
		t.Fatal(err)
	}
	releaseAll(t, a, first)
	hold(t, host, r.Lo+3)

	// Only r.Lo+2 is free: asking for two must fail and leave it unbound.
	got, err := a.Listen(2)
	if !errors.Is(err, ports.ErrExhausted) {
		t.Fatalf("Listen(2) = %v, %v; want ErrExhausted", portsOf(got), err)
	}
	if got != nil {
		t.Fatalf("listeners returned with error: %v", portsOf(got))
	}
	if a.InUse() != 2 {
		t.Fatalf("InUse = %d, want 2", a.InUse())
	}
	if !bindable(host, r.Lo+2) {
		t.Fatal("failed Listen left a port bound")
	}

	// More than the whole range.
	if _, err := a.Listen(r.Size() + 1); !errors.Is(err, ports.ErrExhausted) {
		t.Fatalf("Listen(size+1) error %v", err)
	}
	if a.InUse() != 2 || !bindable(host, r.Lo+2) {
		t.Fatal("failed Listen changed the allocator")
	}

	// The one free port is still allocatable.
	one, err := a.Listen(1)
	if err != nil {
		t.Fatal(err)
	}
	releaseAll(t, a, one)
	if portOf(one[0]) != r.Lo+2 {
		t.Fatalf("port %d, want %d", portOf(one[0]), r.Lo+2)
	}
	if _, err := a.Listen(1); !errors.Is(err, ports.ErrExhausted) {
		t.Fatalf("full range: error %v", err)
	}
}

func TestReleaseReuses(t *testing.T) {
	a, host, r := newAlloc(t, 3)
	lns, err := a.Listen(3)
	if err != nil {
		t.Fatal(err)
	}
	releaseAll(t, a, lns[:1])
	releaseAll(t, a, lns[2:])
	a.Release(lns[1])
	if a.InUse() != 2 {
		t.Fatalf("InUse = %d, want 2", a.InUse())
	}
	if _, err := lns[1].Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("released listener still open: %v", err)
	}
	again, err := a.Listen(1)
	if err != nil {
		t.Fatal(err)
	}
	releaseAll(t, a, again)
	if portOf(again[0]) != r.Lo+1 {
		t.Fatalf("port %d, want the released %d", portOf(again[0]), r.Lo+1)
	}
	accepts(t, again[0], host)
}

func TestDoubleReleaseKeepsNewOwner(t *testing.T) {
	a, host, r := newAlloc(t, 3)
	old, err := a.Listen(1)
	if err != nil {
		t.Fatal(err)
	}
	a.Release(old[0])
	a.Release(old[0]) // harmless before reuse
	if a.InUse() != 0 {
		t.Fatalf("InUse = %d, want 0", a.InUse())
	}
	owner, err := a.Listen(1)
	if err != nil {
		t.Fatal(err)
	}
	releaseAll(t, a, owner)
	if portOf(owner[0]) != r.Lo {
		t.Fatalf("port %d, want %d", portOf(owner[0]), r.Lo)
	}

	a.Release(old[0]) // stale: must not free the new owner's port

	if a.InUse() != 1 {
		t.Fatalf("InUse = %d after stale Release, want 1", a.InUse())
	}
	accepts(t, owner[0], host)
	next, err := a.Listen(1)
	if err != nil {
		t.Fatal(err)
	}
	releaseAll(t, a, next)
	if portOf(next[0]) != r.Lo+1 {
		t.Fatalf("next port %d, want %d (r.Lo still owned)", portOf(next[0]), r.Lo+1)
	}
	if _, err := a.ListenPorts([]int{r.Lo}); err == nil {
		t.Fatal("ListenPorts handed out the new owner's port")
	}
}

func TestListenPorts(t *testing.T) {
	t.Run("exact ports", func(t *testing.T) {
		a, host, r := newAlloc(t, 5)
		lns, err := a.ListenPorts([]int{r.Lo + 3, r.Lo + 1})
		if err != nil {
			t.Fatal(err)
		}
		releaseAll(t, a, lns)
		if got, want := portsOf(lns), []int{r.Lo + 3, r.Lo + 1}; !slices.Equal(got, want) {
			t.Fatalf("ports %v, want %v", got, want)
		}
		for _, ln := range lns {
			accepts(t, ln, host)
		}
		// Listen works around the restored ports.
		more, err := a.Listen(2)
		if err != nil {
			t.Fatal(err)
		}
		releaseAll(t, a, more)
		if got, want := portsOf(more), []int{r.Lo, r.Lo + 2}; !slices.Equal(got, want) {
			t.Fatalf("ports %v, want %v", got, want)
		}
		if l0, err := a.ListenPorts(nil); err != nil || len(l0) != 0 {
			t.Fatalf("ListenPorts(nil) = %v, %v", l0, err)
		}
	})

	cases := []struct {
		name  string
		ports func(r ports.Range) []int
		setup func(t *testing.T, a *ports.Allocator, host string, r ports.Range)
	}{
		{"below range", func(r ports.Range) []int { return []int{r.Lo, r.Lo - 1} }, nil},
		{"above range", func(r ports.Range) []int { return []int{r.Lo, r.Hi + 1} }, nil},
		{"zero", func(r ports.Range) []int { return []int{r.Lo, 0} }, nil},
		{"duplicate in request", func(r ports.Range) []int { return []int{r.Lo, r.Lo + 1, r.Lo} }, nil},
		{"in use by allocator", func(r ports.Range) []int { return []int{r.Lo, r.Lo + 2} },
			func(t *testing.T, a *ports.Allocator, _ string, r ports.Range) {
				lns, err := a.ListenPorts([]int{r.Lo + 2})
				if err != nil {
					t.Fatal(err)
				}
				releaseAll(t, a, lns)
			}},
		{"held by another program", func(r ports.Range) []int { return []int{r.Lo, r.Lo + 1, r.Lo + 2} },
			func(t *testing.T, _ *ports.Allocator, host string, r ports.Range) { hold(t, host, r.Lo+2) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, host, r := newAlloc(t, 4)
			if c.setup != nil {
				c.setup(t, a, host, r)
			}
			before := a.InUse()
			lns, err := a.ListenPorts(c.ports(r))
			if err == nil {
				releaseAll(t, a, lns)
				t.Fatalf("ListenPorts succeeded: %v", portsOf(lns))
			}
			if lns != nil {
				t.Fatal("listeners returned with an error")
			}
			if a.InUse() != before {
				t.Fatalf("InUse %d -> %d: not all-or-none", before, a.InUse())
			}
			if !bindable(host, r.Lo) || !bindable(host, r.Lo+1) {
				t.Fatal("failed ListenPorts left a port bound")
			}
		})
	}
}

func TestConcurrentListenRelease(t *testing.T) {
	const workers, rounds = 8, 20
	a, _, _ := newAlloc(t, workers)
	var wg sync.WaitGroup
	var mu sync.Mutex
	owned := map[int]bool{}
	errc := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				lns, err := a.Listen(1)
				if err != nil {
					errc <- err
					return
				}
				p := portOf(lns[0])
				mu.Lock()
				if owned[p] {
					mu.Unlock()
					errc <- fmt.Errorf("port %d handed out twice", p)
					return
				}
				owned[p] = true
				mu.Unlock()
				mu.Lock()
				delete(owned, p)
				mu.Unlock()
				a.Release(lns[0])
				a.Release(lns[0])
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	if a.InUse() != 0 {
		t.Fatalf("InUse = %d after all released", a.InUse())
	}
}
