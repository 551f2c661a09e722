package egress

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
)

// host is a fake host: loopback, a LAN address and a link-local one.
func host() *Self {
	return &Self{Interfaces: func() ([]net.Addr, error) {
		return []net.Addr{
			&net.IPNet{IP: net.ParseIP("127.0.0.1"), Mask: net.CIDRMask(8, 32)},
			&net.IPNet{IP: net.ParseIP("10.1.0.5"), Mask: net.CIDRMask(16, 32)},
			&net.IPNet{IP: net.ParseIP("fe80::1"), Mask: net.CIDRMask(64, 128)},
			&net.IPNet{IP: net.ParseIP("2001:db8::5"), Mask: net.CIDRMask(64, 128)},
		}, nil
	}}
}

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

// TestDefault is the default rules: every case a user's stream could
// use to make the gateway reach its own host or a metadata service.
func TestDefault(t *testing.T) {
	self := host()
	self.Add(Endpoint{Addr: netip.MustParseAddr("10.1.0.5"), Lo: 5100, Hi: 5199, What: "this gateway's own data-port range"})
	p := New(nil, "--allow_targets", self)
	for _, c := range []struct {
		addr string
		rule string // "" if allowed
		flag bool   // a list could allow it
	}{
		{"10.1.0.7:8080", "", false},                     // a host of the LAN
		{"192.0.2.1:443", "", false},                     // a host elsewhere
		{"[2001:db8::7]:80", "", false},                  // IPv6 elsewhere
		{"127.0.0.1:9090", "loopback", true},             // the metrics listener by another name (finding 1)
		{"127.9.9.9:22", "loopback", true},               // all of 127/8 is the host
		{"[::1]:22", "loopback", true},                   //
		{"[::ffff:127.0.0.1]:22", "loopback", true},      // mapped: the same socket
		{"169.254.169.254:80", "link-local", true},       // cloud metadata
		{"[fe80::1%eth0]:80", "link-local", true},        // zoned
		{"10.1.0.5:22", "this gateway's own host", true}, // the host's LAN address
		{"[2001:db8::5]:22", "this gateway's own host", true},
		{"10.1.0.5:5150", "data-port range", false}, // another user's listener (finding 1)
		{"0.0.0.0:5000", "unspecified", false},      // connect(0.0.0.0) is the host
		{"0.1.2.3:5000", "unspecified", false},      // 0/8
		{"[::]:5000", "unspecified", false},         //
		{"255.255.255.255:9", "broadcast", false},   //
		{"224.0.0.1:9", "multicast", false},         //
		{"[ff02::1]:9", "multicast", false},         //
	} {
		err := p.Check(ap(c.addr))
		if c.rule == "" {
			if err != nil {
				t.Errorf("%s refused: %v", c.addr, err)
			}
			continue
		}
		var r *Refusal
		if !errors.As(err, &r) {
			t.Errorf("%s: %v, want a refusal for %s", c.addr, err, c.rule)
			continue
		}
		if !strings.Contains(r.Rule, c.rule) {
			t.Errorf("%s: rule %q, want it to say %q", c.addr, r.Rule, c.rule)
		}
		if (r.Flag != "") != c.flag {
			t.Errorf("%s: flag %q: a list could allow it: %t", c.addr, r.Flag, c.flag)
		}
		if c.flag && !strings.Contains(err.Error(), "--allow_targets") {
			t.Errorf("%s: %q does not name the flag that allows it", c.addr, err)
		}
	}
}

// TestList is an operator's list: it replaces the default, but never
// opens the gateway's own endpoints.
func TestList(t *testing.T) {
	self := host()
	self.Add(Endpoint{Addr: netip.MustParseAddr("127.0.0.2"), Lo: 5000, Hi: 5000, What: "this gateway's own control port"})
	self.Add(Endpoint{Addr: netip.MustParseAddr("127.0.0.2"), Lo: 5100, Hi: 5110, What: "this gateway's own data-port range"})
	self.Add(Endpoint{Addr: netip.MustParseAddr("0.0.0.0"), Lo: 9090, Hi: 9090, What: "this gateway's own metrics listener"})
	list, err := ParseList("--allow_targets", "127.0.0.0/8, 10.2.0.0/16,192.0.2.7")
	if err != nil {
		t.Fatal(err)
	}
	p := New(list, "--allow_targets", self)
	for _, c := range []struct {
		addr string
		ok   bool
	}{
		{"127.0.0.1:8080", true},  // an application on the gateway's host
		{"127.0.0.3:5100", true},  // another gateway's range on another address
		{"10.2.3.4:80", true},     //
		{"192.0.2.7:80", true},    //
		{"192.0.2.8:80", false},   // outside
		{"10.1.0.7:80", false},    // the LAN, not listed
		{"127.0.0.2:5000", false}, // the control port
		{"127.0.0.2:5105", false}, // the range
		{"127.0.0.2:5111", true},  // past it
		{"127.0.0.5:9090", false}, // the metrics listener on every address
		{"[::ffff:127.0.0.2]:5000", false},
		{"0.0.0.0:8080", false},       // never
		{"169.254.169.254:80", false}, // not listed
	} {
		err := p.Check(ap(c.addr))
		if (err == nil) != c.ok {
			t.Errorf("%s: %v, want allowed %t", c.addr, err, c.ok)
		}
	}
	err = p.Check(ap("192.0.2.8:80"))
	if !strings.Contains(err.Error(), "127.0.0.0/8,10.2.0.0/16,192.0.2.7/32") || !strings.Contains(err.Error(), "--allow_targets") {
		t.Errorf("refusal %q does not give the list and the flag", err)
	}
	err = p.Check(ap("127.0.0.2:5000"))
	if !strings.Contains(err.Error(), "control port") || !strings.Contains(err.Error(), "whatever") {
		t.Errorf("refusal %q does not say the endpoint is never dialled", err)
	}
}

// TestOthers: the other nodes of a facility serve the same range; a
// stream must not reach another node's listeners either.
func TestOthers(t *testing.T) {
	self := host()
	self.Add(Endpoint{Addr: netip.MustParseAddr("10.1.0.5"), Lo: 5100, Hi: 5199, What: "this gateway's own data-port range"})
	self.SetOthers(func() []netip.Addr { return []netip.Addr{netip.MustParseAddr("10.1.0.6")} })
	p := New([]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, "--allow_targets", self)
	if err := p.Check(ap("10.1.0.6:5150")); err == nil || !strings.Contains(err.Error(), "another node") {
		t.Errorf("another node's listener: %v", err)
	}
	if err := p.Check(ap("10.1.0.6:8080")); err != nil {
		t.Errorf("another node's application: %v", err)
	}
}

// TestControl is the check at connect(2): a dial to a refused address
// fails before any packet leaves, whatever name led there.
func TestControl(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	p := New(nil, "--allow_peers", nil)
	d := net.Dialer{Control: p.Control}
	_, err = d.DialContext(context.Background(), "tcp", ln.Addr().String())
	var r *Refusal
	if !errors.As(err, &r) || r.Flag != "--allow_peers" {
		t.Fatalf("dial of a loopback listener: %v, want a refusal naming --allow_peers", err)
	}
	// "localhost" resolves at the dial: the check sees the address.
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	if _, err := d.DialContext(context.Background(), "tcp", net.JoinHostPort("localhost", port)); !errors.As(err, &r) {
		t.Fatalf("dial of localhost: %v, want a refusal", err)
	}
	open := New([]netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, "--allow_peers", nil)
	d = net.Dialer{Control: open.Control}
	c, err := d.DialContext(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("dial allowed by the list: %v", err)
	}
	c.Close()
}

func TestParseList(t *testing.T) {
	for _, bad := range []string{"", "10.0.0.0/8,", "10.0.0.1/8", "nonsense", "fe80::1%eth0", "10.0.0.0/33"} {
		if _, err := ParseList("--allow_targets", bad); err == nil || !strings.Contains(err.Error(), "--allow_targets") {
			t.Errorf("ParseList(%q): %v, want an error naming the flag", bad, err)
		}
	}
	l, err := ParseList("--allow_peers", "::ffff:10.0.0.0/104,2001:db8::/32")
	if err != nil {
		t.Fatal(err)
	}
	p := New(l, "--allow_peers", nil)
	if err := p.Check(ap("10.9.9.9:443")); err != nil {
		t.Errorf("a mapped prefix does not hold its IPv4 address: %v", err)
	}
	if err := p.Check(ap("[2001:db8::1]:443")); err != nil {
		t.Error(err)
	}
}

func FuzzCheck(f *testing.F) {
	f.Add("127.0.0.1:80")
	f.Add("[::ffff:127.0.0.1]:80")
	f.Add("[fe80::1%eth0]:80")
	self := host()
	self.Add(Endpoint{Addr: netip.MustParseAddr("0.0.0.0"), Lo: 5000, Hi: 5000, What: "control port"})
	p := New(nil, "--allow_targets", self)
	open := New([]netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}, "--allow_targets", self)
	f.Fuzz(func(t *testing.T, s string) {
		a, err := netip.ParseAddrPort(s)
		if err != nil {
			return
		}
		ip := a.Addr().WithZone("").Unmap()
		if open.Check(a) == nil && (ip.IsUnspecified() || ip.IsMulticast() || a.Port() == 5000 && (ip.IsLoopback() || ip == netip.MustParseAddr("10.1.0.5"))) {
			t.Fatalf("%s allowed by the widest list", s)
		}
		if p.Check(a) == nil && (ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip == netip.MustParseAddr("10.1.0.5")) {
			t.Fatalf("%s allowed by the default rules", s)
		}
	})
}
