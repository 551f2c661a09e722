package bench

import "testing"

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{
		"0": 0, "1": 1, "1024": 1024, "17B": 17, "1KiB": 1024, "64KiB": 65536, "64kib": 65536,
		"1MiB": 1 << 20, "64MiB": 64 << 20, "1GiB": 1 << 30, "2TiB": 2 << 40,
		"1KB": 1000, "1MB": 1_000_000, "1GB": 1_000_000_000, "1.5GiB": 3 << 29,
		"0.5KiB": 512, " 10 MB ": 10_000_000, "2.5KB": 2500,
	} {
		got, err := ParseBytes(in)
		if err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "KiB", "-1", "1XB", "1 K", "1.2.3", "0.3B", "1.1KiB", "9999999999TiB", "abc", "1e6"} {
		if got, err := ParseBytes(in); err == nil {
			t.Errorf("ParseBytes(%q) = %d, want an error", in, got)
		}
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{
		0: "0B", 1: "1B", 1023: "1023B", 1024: "1KiB", 65536: "64KiB", 1 << 30: "1GiB",
		1000: "1KB", 1_000_000: "1MB", 1_000_000_000_000: "1TB", 3 << 29: "1536MiB",
	} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
		if n > 0 {
			if back, err := ParseBytes(FormatBytes(n)); err != nil || back != n {
				t.Errorf("round trip of %d: %d, %v", n, back, err)
			}
		}
	}
}

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
