package intake

import (
	"testing"

	"scistream/internal/api"
	"scistream/internal/stream"
)

func TestValidUID(t *testing.T) {
	for uid, want := range map[string]bool{
		NewUID():                               true,
		"0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b6c": true,
		"0F8E3C5A-4B1D-4C2E-9A7F-1D2E3F4A5B6C": false, // one spelling only: no case aliasing of keys
		"0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b6":  false,
		"0f8e3c5a_4b1d-4c2e-9a7f-1d2e3f4a5b6c": false,
		"../../../../etc/passwd/aaaaaaaaaaaaa": false, // path in a URL or a file name
		"":                                     false,
	} {
		if got := api.ValidUID(uid); got != want {
			t.Errorf("api.ValidUID(%q) = %v, want %v", uid, got, want)
		}
	}
}

func TestCheckHost(t *testing.T) {
	for h, ok := range map[string]bool{
		"127.0.0.1": true, "::1": true, "host.docker.internal": true, "rabbit-0.svc": true,
		"": false, "a..b": false, "exa mple": false, "evil/path": false, "x:80": false,
	} {
		if err := checkHost("remote_ip", h); (err == nil) != ok {
			t.Errorf("checkHost(%q) = %v, want ok=%v", h, err, ok)
		}
	}
}

func TestParsePrefix(t *testing.T) {
	for in, want := range map[string]string{
		"10.1.2.3/16": "10.1.0.0/16", "10.1.2.3": "10.1.2.3/32", "::ffff:10.0.0.1": "10.0.0.1/32", "fd00::1/64": "fd00::/64",
	} {
		p, err := stream.ParsePrefix(in)
		if err != nil || p.String() != want {
			t.Errorf("parsePrefix(%q) = %v, %v; want %s", in, p, err, want)
		}
	}
	for _, bad := range []string{"", "10.0.0.0/33", "host", "10.0.0.0/-1"} {
		if _, err := stream.ParsePrefix(bad); err == nil {
			t.Errorf("parsePrefix(%q) accepted", bad)
		}
	}
}

func TestOwnSubnet(t *testing.T) {
	if got := ownSubnet("127.0.0.2"); got != "127.0.0.0/8" {
		t.Errorf("ownSubnet(127.0.0.2) = %s, want the loopback interface's 127.0.0.0/8", got)
	}
	// 233.252.0.0/24 is MCAST-TEST-NET (RFC 6676): on no interface.
	if got := ownSubnet("233.252.0.77"); got != "233.252.0.77/32" {
		t.Errorf("ownSubnet of an address on no interface = %s, want the single address", got)
	}
}
