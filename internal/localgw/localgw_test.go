package localgw

import "testing"

// TestControlAddr: the control address announced on stdout, or, for a
// gateway bound to every address, the one it advertises.
func TestControlAddr(t *testing.T) {
	for _, c := range []struct{ rest, want string }{
		{"127.0.0.5:5000 (listener_ip 127.0.0.5, data ports 5100-5199, engine splice)", "127.0.0.5:5000"},
		{"0.0.0.0:5000 (listener_ip 10.1.2.3, data ports 5100-5200, engine splice)", "10.1.2.3:5000"},
		{"[::]:5007 (listener_ip 10.1.2.3, data ports 5100-5200, engine splice)", "10.1.2.3:5007"},
		{"0.0.0.0:5000", "0.0.0.0:5000"},
		{"", ""},
	} {
		if got := controlAddr(c.rest); got != c.want {
			t.Errorf("controlAddr(%q) = %q, want %q", c.rest, got, c.want)
		}
	}
}
