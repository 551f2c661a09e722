package handoff

import (
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
)

// Sockets are a process's listening sockets (TCP listeners, UDP
// sockets) on fixed ports, for a live upgrade: the old process hands
// them over (Items) and the new one, given them (Inherit), takes each
// (Listen, ListenPacket) where it would bind the same address again. A
// connection that arrives meanwhile waits in the socket's queue, for
// the new process to accept, instead of being refused while nobody
// listens. A socket on port 0 (any port) is neither kept nor taken: no
// later process asks for the port it got. The nil *Sockets binds
// without keeping anything. Its methods may be called concurrently.
type Sockets struct {
	mu        sync.Mutex          // guards the following
	inherited map[string]*os.File // by key, until taken
	held      map[string]filer    // by key, the last bound there
}

type filer interface{ File() (*os.File, error) }

// key is how a socket is known across processes: its network and the
// address it was asked for.
func key(network, addr string) string { return network + " " + addr }

// fixed reports whether addr names a port other than 0.
func fixed(addr string) bool {
	_, port, err := net.SplitHostPort(addr)
	return err == nil && port != "0" && port != ""
}

// Listen is net.Listen, taking the socket handed over for network and
// addr if there is one.
func (s *Sockets) Listen(network, addr string) (net.Listener, error) {
	if s == nil || !fixed(addr) {
		return net.Listen(network, addr)
	}
	var ln net.Listener
	if f := s.take(network, addr); f != nil {
		l, err := net.FileListener(f)
		f.Close()
		if err == nil {
			ln = l
		}
	}
	if ln == nil {
		l, err := net.Listen(network, addr)
		if err != nil {
			return nil, err
		}
		ln = l
	}
	s.hold(network, addr, ln.(filer))
	return ln, nil
}

// ListenPacket is net.ListenPacket, taking the socket handed over for
// network and addr if there is one.
func (s *Sockets) ListenPacket(network, addr string) (net.PacketConn, error) {
	if s == nil || !fixed(addr) {
		return net.ListenPacket(network, addr)
	}
	var pc net.PacketConn
	if f := s.take(network, addr); f != nil {
		c, err := net.FilePacketConn(f)
		f.Close()
		if err == nil {
			pc = c
		}
	}
	if pc == nil {
		c, err := net.ListenPacket(network, addr)
		if err != nil {
			return nil, err
		}
		pc = c
	}
	s.hold(network, addr, pc.(filer))
	return pc, nil
}

func (s *Sockets) take(network, addr string) *os.File {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := key(network, addr)
	f := s.inherited[k]
	delete(s.inherited, k)
	return f
}

func (s *Sockets) hold(network, addr string, c filer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held == nil {
		s.held = map[string]filer{}
	}
	s.held[key(network, addr)] = c
}

// Items returns the sockets still open, each a duplicate to hand over
// (KindListener, named by its network and address; close the files once
// passed on).
func (s *Sockets) Items() []Item {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Item
	for k, c := range s.held {
		f, err := c.File()
		if err != nil {
			delete(s.held, k) // closed: nothing to hand over
			continue
		}
		out = append(out, Item{Kind: KindListener, Name: k, File: f})
	}
	return out
}

// Inherit keeps the listeners of items for Listen and ListenPacket, and
// returns the other items.
func (s *Sockets) Inherit(items []Item) ([]Item, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inherited == nil {
		s.inherited = map[string]*os.File{}
	}
	var rest []Item
	var bad []string
	for _, it := range items {
		if it.Kind != KindListener {
			rest = append(rest, it)
			continue
		}
		network, addr, ok := strings.Cut(it.Name, " ")
		if it.File == nil || !ok || !fixed(addr) {
			if it.File != nil {
				it.File.Close()
			}
			bad = append(bad, fmt.Sprintf("%q", it.Name))
			continue
		}
		if old := s.inherited[key(network, addr)]; old != nil {
			old.Close()
		}
		s.inherited[key(network, addr)] = it.File
	}
	if len(bad) > 0 {
		return rest, fmt.Errorf("listeners handed over as %s: not a network and a fixed address", strings.Join(bad, ", "))
	}
	return rest, nil
}

// CloseUnused closes the sockets handed over that nothing took (a
// stream that ended meanwhile, a flag that changed), and returns their
// names.
func (s *Sockets) CloseUnused() []string {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var names []string
	for k, f := range s.inherited {
		f.Close()
		names = append(names, k)
	}
	s.inherited = nil
	return names
}
