package conns

import (
	"errors"
	"strings"
	"testing"
)

// TestConnsFit checks the file-descriptor arithmetic that refuses a
// count the gateways cannot hold (the gateway's own, gateway.Config.Files):
// with a hard limit of 20,000, 10,000 over TLS do not fit (2 files per
// connection), over QUIC they do (1).
func TestConnsFit(t *testing.T) {
	for _, c := range []struct {
		conns int
		wan   string
		want  string // "" if it fits
	}{
		{10000, "tls", "give at most 9131"},
		{9131, "tls", ""},
		{9131, "tcp", ""},
		{10000, "quic", ""},
		{18262, "quic", ""},
		{18263, "quic", "give at most 9131"},
	} {
		err := CheckFit(Config{Conns: c.conns, WAN: c.wan, Engine: "splice"}, 20000)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%d over %s: %v", c.conns, c.wan, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%d over %s: got %v, want an error with %q", c.conns, c.wan, err, c.want)
		case c.want != "" && !errors.As(err, new(*FitError)):
			t.Errorf("%d over %s: %T, want a *FitError (a usage error of s2bench)", c.conns, c.wan, err)
		}
	}
}
