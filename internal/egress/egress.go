// Package egress decides which addresses a gateway may dial: the one
// place that stands between what a user's stream names (an application's
// address, a peer gateway's listeners) and a socket the gateway opens.
//
// A gateway sits on the edge of a facility; whatever a stream can make it
// dial, a user (or whoever stole a user's token) can reach from inside
// the facility's network. So a Policy is checked twice: when a request
// arrives (Check on every address a host name resolves to, so that the
// user hears of a refusal at once), and again at the connect(2) of every
// dial (Control, given to net.Dialer, which sees the address actually
// connected to: a name that resolves elsewhere the second time, DNS
// rebinding, is caught there).
//
// By default a Policy refuses what no stream should lead to from a
// gateway: loopback, link-local (169.254.0.0/16 and fe80::/10, which hold
// cloud metadata services), unspecified, multicast and broadcast
// addresses, and every address of the gateway host's own interfaces. An
// operator's list (s2cs --allow_targets, --allow_peers) replaces that
// default: an address is dialled only if the list holds it. Whatever the
// list says, unspecified, multicast and broadcast addresses, and the
// gateway's own endpoints (its control port, metrics listener, data-port
// range, shared WAN port: Self), are never dialled, so that no stream
// makes the gateway connect to itself: such a connection would come from
// the gateway's own address, which every allow-list of the host's subnet
// holds, and reach another user's listener or an endpoint the user may
// not read.
package egress

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// A Refusal is a Policy's answer to an address it does not dial.
type Refusal struct {
	// Addr is the address refused (its zone removed).
	Addr netip.AddrPort
	// Rule completes "it is ...": what the address is, e.g. "a loopback
	// address" or "this gateway's own control port".
	Rule string
	// Flag is the s2cs flag whose list would allow the address, or ""
	// if no list can (the address is the gateway's own endpoint, or one
	// no stream may lead to).
	Flag string
	// List is the policy's allow-list, as given, when it has one.
	List []netip.Prefix
}

func (r *Refusal) Error() string {
	return fmt.Sprintf("%s is %s, which this gateway does not dial%s", r.Addr, r.Rule, r.Hint())
}

// Hint completes the refusal's sentence: how the address could be
// allowed ("; give ..."), or that nothing allows it.
func (r *Refusal) Hint() string {
	switch {
	case r.Flag == "":
		return " whatever its allow-lists say"
	case r.List != nil:
		return fmt.Sprintf("; give an address in s2cs %s (%s), or ask the operator to add it there", r.Flag, joinPrefixes(r.List))
	}
	return fmt.Sprintf("; give another address, or ask the operator to list it in s2cs %s (e.g. %s 127.0.0.0/8 for applications on the gateway's own host)", r.Flag, r.Flag)
}

// Policy is what a gateway may dial for one purpose (applications, or
// peer gateways). Its methods may be called concurrently.
type Policy struct {
	allow []netip.Prefix // nil: the default rules
	flag  string
	self  *Self
}

// New returns the policy of the allow-list allow (nil for the default
// rules) whose refusals name flag, and which never dials self's
// endpoints. self may be nil (no endpoint of its own: tests).
func New(allow []netip.Prefix, flag string, self *Self) *Policy {
	if allow != nil {
		allow = slices.Clone(allow)
		for i, p := range allow {
			if p.Addr().Is4In6() && p.Bits() >= 96 {
				// An IPv4-mapped prefix holds the IPv4 addresses
				// Check sees (unmapped).
				p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
			}
			allow[i] = p.Masked()
		}
	}
	return &Policy{allow: allow, flag: flag, self: self}
}

// Check returns nil if the policy dials ap, else a *Refusal.
func (p *Policy) Check(ap netip.AddrPort) error {
	ip := ap.Addr().WithZone("").Unmap()
	ap = netip.AddrPortFrom(ip, ap.Port())
	refuse := func(rule, flag string) error {
		return &Refusal{Addr: ap, Rule: rule, Flag: flag, List: p.allow}
	}
	if rule := never(ip); rule != "" {
		return refuse(rule, "")
	}
	if what := p.self.holds(ap); what != "" {
		return refuse(what, "")
	}
	if p.allow != nil {
		for _, a := range p.allow {
			if a.Contains(ip) {
				return nil
			}
		}
		return refuse("outside the list "+p.flag+" gives", p.flag)
	}
	switch {
	case ip.IsLoopback():
		return refuse("a loopback address (this gateway's own host)", p.flag)
	case ip.IsLinkLocalUnicast():
		return refuse("a link-local address (where cloud metadata services answer)", p.flag)
	case p.self.local(ip):
		return refuse("an address of this gateway's own host", p.flag)
	}
	return nil
}

// never says what ip is if no list may allow it: "" if a list may.
func never(ip netip.Addr) string {
	switch {
	case !ip.IsValid():
		return "no address"
	case ip.IsUnspecified(), ip.Is4() && ip.As4()[0] == 0:
		// 0.0.0.0/8 is "this network": connect(2) to 0.0.0.0 reaches
		// the host itself.
		return "the unspecified address (this gateway's own host)"
	case ip == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return "the broadcast address"
	case ip.IsMulticast():
		return "a multicast address"
	}
	return ""
}

// Control checks the address a dial is about to connect to, for
// net.Dialer.Control (and ControlContext). A refusal fails the dial
// before any packet leaves.
func (p *Policy) Control(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("egress: %s address %q: %w", network, address, err)
	}
	return p.Check(ap)
}

// Describe says what the policy dials, for a log line.
func (p *Policy) Describe() string {
	if p.allow == nil {
		return "any unicast address but loopback, link-local and this host's own"
	}
	return joinPrefixes(p.allow)
}

func joinPrefixes(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

// ParseList reads an allow-list flag's value: comma-separated CIDR
// prefixes or single addresses. An empty value is an error: a flag given
// empty would otherwise silently mean "the default rules".
func ParseList(flag, s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			return nil, fmt.Errorf("%s %q holds an empty entry: give CIDR prefixes or addresses separated by commas, e.g. 10.1.0.0/16,192.0.2.7", flag, s)
		}
		if p, err := netip.ParsePrefix(f); err == nil {
			if p != p.Masked() {
				return nil, fmt.Errorf("%s: %s has bits set past its length: did you mean %s?", flag, f, p.Masked())
			}
			out = append(out, p)
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil || a.Zone() != "" {
			return nil, fmt.Errorf("%s: %q is neither a CIDR prefix nor an address, e.g. 10.1.0.0/16", flag, f)
		}
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

// An Endpoint is one of the gateway's own listeners: a port range on an
// address, which may be unspecified (every address of the host).
type Endpoint struct {
	// Addr is the address the listener is bound to.
	Addr netip.Addr
	// Lo and Hi are the ports, inclusive.
	Lo, Hi uint16
	// What names it, completing "it is ...", e.g. "this gateway's own
	// control port".
	What string
}

// Self is a gateway's own endpoints, which no Policy dials, and the
// addresses of its host. Its zero value holds no endpoint; its methods
// may be called concurrently and on a nil *Self (no endpoint, and the
// host's addresses read at each call).
type Self struct {
	// Interfaces returns the host's interface addresses. If nil,
	// net.InterfaceAddrs.
	Interfaces func() ([]net.Addr, error)

	mu        sync.Mutex // guards the following fields
	endpoints []Endpoint
	others    func() []netip.Addr // hosts of the facility's other nodes
	addrs     []netip.Addr        // the host's, as read at read
	read      time.Time
}

// Add adds an endpoint of the gateway's own.
func (s *Self) Add(e Endpoint) {
	e.Addr = e.Addr.WithZone("").Unmap()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.endpoints = append(s.endpoints, e)
}

// AddListener adds the endpoint of a listener the gateway serves, named
// what ("this gateway's own metrics listener").
func (s *Self) AddListener(a net.Addr, what string) {
	if ap, err := netip.ParseAddrPort(a.String()); err == nil {
		s.Add(Endpoint{Addr: ap.Addr(), Lo: ap.Port(), Hi: ap.Port(), What: what})
	}
}

// SetOthers sets what returns the addresses of the other nodes of the
// gateway's facility. They serve the same port range and shared WAN
// port, and a connection from this node comes from an address their
// allow-lists hold as much as this node's own: every endpoint holds on
// those addresses too.
func (s *Self) SetOthers(f func() []netip.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.others = f
}

// holds returns what ap is if it is one of s's endpoints, else "".
func (s *Self) holds(ap netip.AddrPort) string {
	if s == nil {
		return ""
	}
	s.mu.Lock()
	eps, others := s.endpoints, s.others
	s.mu.Unlock()
	port := ap.Port()
	var nodes []netip.Addr
	for _, e := range eps {
		if port < e.Lo || port > e.Hi {
			continue
		}
		switch {
		case e.Addr == ap.Addr():
			return e.What
		case e.Addr.IsUnspecified() && s.local(ap.Addr()):
			return e.What + " (it listens on every address of this host)"
		}
		if others != nil && nodes == nil {
			nodes = others()
		}
		if slices.Contains(nodes, ap.Addr()) {
			return e.What + " on another node of this gateway's facility"
		}
	}
	return ""
}

// ifaceTTL is how long the host's addresses are kept before they are
// read again.
const ifaceTTL = time.Second

// local reports whether ip is an address of the gateway's host:
// loopback, or held by one of its interfaces.
func (s *Self) local(ip netip.Addr) bool {
	if ip.IsLoopback() {
		return true
	}
	return slices.Contains(s.hostAddrs(), ip)
}

// hostAddrs returns the host's interface addresses, read again once
// ifaceTTL has passed since the last read.
func (s *Self) hostAddrs() []netip.Addr {
	if s == nil {
		return readAddrs(net.InterfaceAddrs)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if now := time.Now(); s.addrs == nil || now.Sub(s.read) > ifaceTTL {
		f := s.Interfaces
		if f == nil {
			f = net.InterfaceAddrs
		}
		s.addrs, s.read = readAddrs(f), now
	}
	return s.addrs
}

func readAddrs(f func() ([]net.Addr, error)) []netip.Addr {
	as, err := f()
	if err != nil {
		return []netip.Addr{} // none known; loopback is still refused
	}
	out := make([]netip.Addr, 0, len(as))
	for _, a := range as {
		var ip net.IP
		switch v := a.(type) {
		case *net.IPNet:
			ip = v.IP
		case *net.IPAddr:
			ip = v.IP
		}
		if na, ok := netip.AddrFromSlice(ip); ok {
			out = append(out, na.Unmap())
		}
	}
	return out
}
