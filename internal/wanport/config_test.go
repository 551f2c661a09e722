package wanport

import (
	"testing"
)

// TestSharedAlike: the shared WAN port's settings that the nodes of a
// facility compare are those given, not the defaults each node fills in
// from its own address, so nodes without a router (each advertising
// itself) join one facility; a differing domain or router does not.
func TestSharedAlike(t *testing.T) {
	a := Config{Port: 8443}
	if d := (Config{Port: 8443, Domain: DefaultDomain}).Shared(); d != a.Shared() {
		t.Errorf("the default domain given: %q, not given: %q; want the same", d, a.Shared())
	}
	for _, other := range []Config{
		{Port: 8443, Domain: "f.example.org"},
		{Port: 8443, Advertise: "wan.example.org:443"},
		{Port: 9443},
		{Port: 8443, ProxyProtocol: true},
		{},
	} {
		if other.Shared() == a.Shared() {
			t.Errorf("%+v: %q, the same as a node without it", other, other.Shared())
		}
	}
	if s := (Config{}).Shared(); s != "" {
		t.Errorf("no shared port: %q, want empty", s)
	}
	if d := (Config{Port: 8443}).WithDefaults("10.0.0.11"); d.Advertise != "10.0.0.11:8443" || d.Domain != DefaultDomain {
		t.Errorf("defaults for 10.0.0.11: %+v", d)
	}
	if d := (Config{}).WithDefaults("10.0.0.11"); d.Advertise != "" || d.Domain != "" {
		t.Errorf("no port: defaults %+v, want none", d)
	}
}
