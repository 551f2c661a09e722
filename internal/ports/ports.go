// Package ports hands out TCP listeners on ports from a fixed range.
//
// A port counts as allocated only once the OS has let us bind it: the
// allocator walks the range from the lowest free port and binds each
// candidate, so a port held by another program is skipped rather than
// handed out. Released ports return to the pool and are reused.
package ports

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"

	"scistream/internal/handoff"
)

// ErrExhausted is returned when no port in the range can be bound.
var ErrExhausted = errors.New("port range exhausted")

// ErrInUse is wrapped by ListenPorts's error for a port this allocator
// has handed out already.
var ErrInUse = errors.New("in use by another stream")

// Range is an inclusive port range.
type Range struct{ Lo, Hi int }

// ParseRange parses "LO-HI" (inclusive) or a single port.
func ParseRange(s string) (Range, error) {
	lo, hi, found := strings.Cut(strings.TrimSpace(s), "-")
	if !found {
		hi = lo
	}
	l, err1 := strconv.Atoi(strings.TrimSpace(lo))
	h, err2 := strconv.Atoi(strings.TrimSpace(hi))
	if err1 != nil || err2 != nil {
		return Range{}, fmt.Errorf("port range %q: want LO-HI, e.g. 5100-5199", s)
	}
	r := Range{l, h}
	if l < 1 || h > 65535 || l > h {
		return Range{}, fmt.Errorf("port range %q: want 1 <= LO <= HI <= 65535", s)
	}
	return r, nil
}

func (r Range) String() string { return fmt.Sprintf("%d-%d", r.Lo, r.Hi) }

// Size is the number of ports in the range.
func (r Range) Size() int { return r.Hi - r.Lo + 1 }

// Allocator binds listeners on ports of one range and address.
type Allocator struct {
	host string
	rng  Range
	mu   sync.Mutex // guards used, udp and skip
	used map[int]*net.TCPListener
	udp  map[int]*net.UDPConn // bound with used[port]
	skip func(port int) bool  // ports held elsewhere (SetSkip)
	// sockets binds, taking the sockets a process before handed over
	// (SetSockets).
	sockets *handoff.Sockets
}

// SetSockets makes the allocator bind through s: a port whose socket
// the process before handed over (a live upgrade) is taken as it is,
// and the sockets bound are kept for the next hand-over.
func (a *Allocator) SetSockets(s *handoff.Sockets) {
	a.mu.Lock()
	a.sockets = s
	a.mu.Unlock()
}

// SetSkip makes Listen and ListenWithUDP pass over every port for which
// held reports true: ports that other nodes of a facility hold for their
// streams, free here but not to be handed out. ListenPorts binds any
// port it is given. held is called with the allocator's lock held and
// must not call back into it.
func (a *Allocator) SetSkip(held func(port int) bool) {
	a.mu.Lock()
	a.skip = held
	a.mu.Unlock()
}

// New returns an allocator binding host (an IP address) in rng.
func New(host string, rng Range) *Allocator {
	return &Allocator{host: host, rng: rng, used: map[int]*net.TCPListener{}, udp: map[int]*net.UDPConn{}}
}

// Listen binds n listeners on the lowest free ports of the range. It binds
// all or none.
func (a *Allocator) Listen(n int) ([]*net.TCPListener, error) { return a.listen(n, false) }

// ListenWithUDP is Listen that also binds a UDP socket on each port (see
// UDP).
func (a *Allocator) ListenWithUDP(n int) ([]*net.TCPListener, error) { return a.listen(n, true) }

// ListenPorts binds exactly the given ports (used to restore streams after
// a restart). It binds all or none.
func (a *Allocator) ListenPorts(ports []int) ([]*net.TCPListener, error) {
	return a.listenPorts(ports, false)
}

// ListenPortsWithUDP is ListenPorts that also binds a UDP socket on each
// port.
func (a *Allocator) ListenPortsWithUDP(ports []int) ([]*net.TCPListener, error) {
	return a.listenPorts(ports, true)
}

// UDP returns the UDP socket bound on ln's port by ListenWithUDP or
// ListenPortsWithUDP, or nil. It stays owned by the allocator: Release
// closes it.
func (a *Allocator) UDP(ln *net.TCPListener) *net.UDPConn {
	a.mu.Lock()
	defer a.mu.Unlock()
	port := ln.Addr().(*net.TCPAddr).Port
	if a.used[port] != ln {
		return nil
	}
	return a.udp[port]
}

func (a *Allocator) listen(n int, withUDP bool) ([]*net.TCPListener, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []*net.TCPListener
	for p := a.rng.Lo; p <= a.rng.Hi && len(out) < n; p++ {
		if a.used[p] != nil || a.skip != nil && a.skip(p) {
			continue
		}
		ln, err := a.bind(p, withUDP)
		if err != nil {
			continue // held by someone else: skip it
		}
		out = append(out, ln)
	}
	if len(out) < n {
		for _, ln := range out {
			a.releaseLocked(ln)
		}
		return nil, fmt.Errorf("%w: %d listener(s) wanted, %d free in %s", ErrExhausted, n, len(out), a.rng)
	}
	return out, nil
}

func (a *Allocator) listenPorts(ports []int, withUDP bool) ([]*net.TCPListener, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []*net.TCPListener
	for _, p := range ports {
		var err error
		var ln *net.TCPListener
		switch {
		case p < a.rng.Lo || p > a.rng.Hi:
			err = fmt.Errorf("port %d is outside the range %s", p, a.rng)
		case a.used[p] != nil:
			err = fmt.Errorf("port %d is already %w", p, ErrInUse)
		default:
			ln, err = a.bind(p, withUDP)
		}
		if err != nil {
			for _, ln := range out {
				a.releaseLocked(ln)
			}
			return nil, err
		}
		out = append(out, ln)
	}
	return out, nil
}

// bind binds port (for TCP, and UDP if withUDP) and records it as used.
// a.mu must be held.
func (a *Allocator) bind(port int, withUDP bool) (*net.TCPListener, error) {
	addr := net.JoinHostPort(a.host, strconv.Itoa(port))
	ln, err := a.sockets.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	if withUDP {
		uc, err := a.sockets.ListenPacket("udp", addr)
		if err != nil {
			ln.Close()
			return nil, fmt.Errorf("port %d: udp: %w", port, err)
		}
		a.udp[port] = uc.(*net.UDPConn)
	}
	a.used[port] = ln.(*net.TCPListener)
	return ln.(*net.TCPListener), nil
}

// Release closes a listener and returns its port to the pool. It is safe
// to call more than once.
func (a *Allocator) Release(ln *net.TCPListener) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.releaseLocked(ln)
}

func (a *Allocator) releaseLocked(ln *net.TCPListener) {
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	if a.used[port] == ln { // a second Release must not free a reused port
		delete(a.used, port)
		if uc := a.udp[port]; uc != nil {
			uc.Close()
			delete(a.udp, port)
		}
	}
}

// InUse returns the number of ports currently allocated.
func (a *Allocator) InUse() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.used)
}
