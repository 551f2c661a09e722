package ports_test

import (
	"net"
	"slices"
	"strconv"
	"testing"
)

// udpBindable reports whether UDP port on host can be bound right now.
func udpBindable(host string, port int) bool {
	c, err := net.ListenPacket("udp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// TestListenWithUDP: a QUIC stream's ports are bound for TCP and UDP on
// the same number; a port whose UDP side is taken is skipped; Release
// frees both sides.
func TestListenWithUDP(t *testing.T) {
	a, host, r := newAlloc(t, 4)
	foreign, err := net.ListenPacket("udp", net.JoinHostPort(host, strconv.Itoa(r.Lo)))
	if err != nil {
		t.Fatal(err)
	}
	defer foreign.Close()
	lns, err := a.ListenWithUDP(2)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := portsOf(lns), []int{r.Lo + 1, r.Lo + 2}; !slices.Equal(got, want) {
		t.Fatalf("ports %v, want %v (r.Lo's UDP is held by another program)", got, want)
	}
	for _, ln := range lns {
		accepts(t, ln, host)
		uc := a.UDP(ln)
		if uc == nil {
			t.Fatalf("no UDP socket for port %d", portOf(ln))
		}
		if p := uc.LocalAddr().(*net.UDPAddr).Port; p != portOf(ln) {
			t.Fatalf("UDP socket on port %d, TCP on %d", p, portOf(ln))
		}
		if udpBindable(host, portOf(ln)) {
			t.Fatalf("UDP port %d bindable while allocated", portOf(ln))
		}
	}
	plain, err := a.Listen(1)
	if err != nil {
		t.Fatal(err)
	}
	if a.UDP(plain[0]) != nil {
		t.Fatal("Listen (TCP only) reported a UDP socket")
	}
	a.Release(plain[0])
	for _, ln := range lns {
		p := portOf(ln)
		a.Release(ln)
		a.Release(ln) // twice is harmless
		if !udpBindable(host, p) || !bindable(host, p) {
			t.Fatalf("port %d not free for TCP and UDP after Release", p)
		}
		if a.UDP(ln) != nil {
			t.Fatal("UDP still reported after Release")
		}
	}
	if n := a.InUse(); n != 0 {
		t.Fatalf("%d ports in use after releasing all", n)
	}
}

// TestListenPortsWithUDPAllOrNone: restoring a QUIC stream binds exactly
// its ports for TCP and UDP, or none of them.
func TestListenPortsWithUDPAllOrNone(t *testing.T) {
	a, host, r := newAlloc(t, 3)
	foreign, err := net.ListenPacket("udp", net.JoinHostPort(host, strconv.Itoa(r.Lo+1)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.ListenPortsWithUDP([]int{r.Lo, r.Lo + 1}); err == nil {
		t.Fatal("ListenPortsWithUDP succeeded with a UDP port held elsewhere")
	}
	if a.InUse() != 0 || !bindable(host, r.Lo) || !udpBindable(host, r.Lo) {
		t.Fatal("a failed ListenPortsWithUDP kept a port")
	}
	foreign.Close()
	lns, err := a.ListenPortsWithUDP([]int{r.Lo + 1, r.Lo})
	if err != nil {
		t.Fatal(err)
	}
	releaseAll(t, a, lns)
	if got := portsOf(lns); !slices.Equal(got, []int{r.Lo + 1, r.Lo}) {
		t.Fatalf("ports %v", got)
	}
	for _, ln := range lns {
		if a.UDP(ln) == nil {
			t.Fatalf("no UDP socket on restored port %d", portOf(ln))
		}
	}
}
