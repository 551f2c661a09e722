package bench

import "testing"

func TestParseRate(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Rate
	}{
		{"5000msg/s", Rate{MsgsPerSec: 5000}},
		{"2.5 msgs/s", Rate{MsgsPerSec: 2.5}},
		{"100/s", Rate{MsgsPerSec: 100}},
		{"100MB/s", Rate{BytesPerSec: 100e6}},
		{"1GiB/s", Rate{BytesPerSec: 1 << 30}},
		{"64KiB", Rate{BytesPerSec: 64 << 10}},
	} {
		got, err := ParseRate(c.in)
		if err != nil || got != c.want {
			t.Errorf("%q: got %+v, %v; want %+v", c.in, got, err, c.want)
		}
		if back, err := ParseRate(got.String()); err != nil || back != got {
			t.Errorf("%q: String %q does not parse back (%v)", c.in, got.String(), err)
		}
	}
	for _, bad := range []string{"", "100", "0msg/s", "-5msg/s", "xmsg/s", "0MB/s", "fast", "1e12msg/s"} {
		if _, err := ParseRate(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	if r := (Rate{BytesPerSec: 1 << 20}); r.PerSecond(1024) != 1024 {
		t.Errorf("1MiB/s of 1KiB messages: %v msg/s", r.PerSecond(1024))
	}
}
