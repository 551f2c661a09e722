package tcpbuf

import (
	"math"
	"testing"
)

func TestParseMax(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"4096\t131072\t6291456\n", 6291456, true},
		{"4096 16384 4194304", 4194304, true},
		{"4096 16384", 0, false},
		{"4096 16384 x", 0, false},
		{"4096 16384 0", 0, false},
		{"4096 16384 -5", 0, false},
		{"", 0, false},
	} {
		got, err := ParseMax(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("ParseMax(%q) = %d, %v; want %d (ok %v)", c.in, got, err, c.want, c.ok)
		}
	}
}

func TestLimits(t *testing.T) {
	debian := Limits{Recv: 6 << 20, Send: 4 << 20}
	if !debian.Low() {
		t.Error("a distribution's default limits are not low")
	}
	if (Limits{Recv: Recommended, Send: Recommended}).Low() || (Limits{}).Low() {
		t.Error("the recommended or unknown limits are low")
	}
	// 4 MiB send buffer: 2 MiB a round trip of 100 ms.
	if got, want := debian.Rate(0.1), float64(2<<20)/0.1; math.Abs(got-want) > 1 {
		t.Errorf("Rate = %v, want %v", got, want)
	}
	if (Limits{Recv: 1}).Rate(0.1) != 0 {
		t.Error("a rate from an unknown limit")
	}
	if l := Read(); l.Recv <= 0 || l.Send <= 0 {
		t.Errorf("Read() = %+v on Linux", l)
	}
}
