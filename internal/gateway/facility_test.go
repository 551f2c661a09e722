package gateway

import (
	"testing"
)

// TestSharedWANAlike: the shared WAN port's settings that the nodes of a
// facility compare are those given, not the defaults each node fills in
// from its own address, so nodes without a router (each advertising
// itself) join one facility; a differing domain or router does not.
func TestSharedWANAlike(t *testing.T) {
	a := Config{ListenerIP: "10.0.0.11", WANPort: 8443}
	b := Config{ListenerIP: "10.0.0.12", WANPort: 8443}
	if a.sharedWAN() != b.sharedWAN() {
		t.Errorf("two nodes on their own addresses: %q and %q; want the same", a.sharedWAN(), b.sharedWAN())
	}
	if d := (Config{ListenerIP: "10.0.0.11", WANPort: 8443, WANDomain: DefaultWANDomain}).sharedWAN(); d != a.sharedWAN() {
		t.Errorf("the default domain given: %q, not given: %q; want the same", d, a.sharedWAN())
	}
	for _, other := range []Config{
		{ListenerIP: "10.0.0.12", WANPort: 8443, WANDomain: "f.example.org"},
		{ListenerIP: "10.0.0.12", WANPort: 8443, WANAdvertise: "wan.example.org:443"},
		{ListenerIP: "10.0.0.12", WANPort: 9443},
		{ListenerIP: "10.0.0.12", WANPort: 8443, WANProxyProtocol: true},
		{ListenerIP: "10.0.0.12"},
	} {
		if other.sharedWAN() == a.sharedWAN() {
			t.Errorf("%+v: %q, the same as a node without it", other, other.sharedWAN())
		}
	}
	if s := (Config{}).sharedWAN(); s != "" {
		t.Errorf("no shared port: %q, want empty", s)
	}
}
