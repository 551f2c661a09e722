package client

import (
	"net"
	"strconv"
	"strings"
	"testing"

	"scistream/internal/wan"
)

// TestSecretLen: the client checks secrets for the length gateways make
// them.
func TestSecretLen(t *testing.T) {
	if secretLen != wan.SecretLen {
		t.Fatalf("secretLen %d, wan.SecretLen %d", secretLen, wan.SecretLen)
	}
}

// FuzzValidHostPort: a listener the client accepts from a gateway and
// relays to the other is host:port of a port 1-65535, in characters a
// terminal prints and a command line keeps as one word.
func FuzzValidHostPort(f *testing.F) {
	for _, s := range []string{"127.0.0.1:5100", "[::1]:5100", "gw-1.example.org:443", "\x1b[2J:80", "a b:1", "h:0", "h:+80", ":80", "[fe80::1%eth0]:80"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !validHostPort(s) {
			return
		}
		h, p, err := net.SplitHostPort(s)
		if err != nil || h == "" {
			t.Fatalf("validHostPort(%q) but SplitHostPort: %q, %v", s, h, err)
		}
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			t.Fatalf("validHostPort(%q) with port %q", s, p)
		}
		for _, c := range s {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-_.:[]", c)) {
				t.Fatalf("validHostPort(%q) with %q in it", s, c)
			}
		}
	})
}
