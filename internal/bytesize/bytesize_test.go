package bytesize

import "testing"

func TestParse(t *testing.T) {
	for in, want := range map[string]int64{
		"0": 0, "1": 1, "1024": 1024, "17B": 17, "1KiB": 1024, "64KiB": 65536, "64kib": 65536,
		"1MiB": 1 << 20, "64MiB": 64 << 20, "1GiB": 1 << 30, "2TiB": 2 << 40,
		"1KB": 1000, "1MB": 1_000_000, "1GB": 1_000_000_000, "1.5GiB": 3 << 29,
		"0.5KiB": 512, " 10 MB ": 10_000_000, "2.5KB": 2500,
	} {
		got, err := Parse(in)
		if err != nil || got != want {
			t.Errorf("Parse(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "KiB", "-1", "1XB", "1 K", "1.2.3", "0.3B", "1.1KiB", "9999999999TiB", "abc", "1e6"} {
		if got, err := Parse(in); err == nil {
			t.Errorf("Parse(%q) = %d, want an error", in, got)
		}
	}
}

func TestParseMessage(t *testing.T) {
	_, err := Parse("1XB")
	want := `"1XB": unknown unit "XB"; write a number with an optional unit B, KiB, MiB, GiB, KB, MB or GB, e.g. 64KiB`
	if err == nil || err.Error() != want {
		t.Errorf("Parse(1XB): %v, want %s", err, want)
	}
}

func TestFormat(t *testing.T) {
	for n, want := range map[int64]string{
		0: "0B", 1: "1B", 1023: "1023B", 1024: "1KiB", 65536: "64KiB", 1 << 30: "1GiB",
		1000: "1KB", 1_000_000: "1MB", 1_000_000_000_000: "1TB", 3 << 29: "1536MiB",
	} {
		if got := Format(n); got != want {
			t.Errorf("Format(%d) = %q, want %q", n, got, want)
		}
		if n > 0 {
			if back, err := Parse(Format(n)); err != nil || back != n {
				t.Errorf("round trip of %d: %d, %v", n, back, err)
			}
		}
	}
}

func TestHuman(t *testing.T) {
	// As s2uc printed before Human existed, 1<<20-1 included.
	for n, want := range map[int64]string{
		0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 1<<20 - 1: "1024.0 KiB",
		1 << 20: "1.0 MiB", 5 << 30: "5.0 GiB", 3 << 40: "3.0 TiB", 1 << 50: "1.0 PiB", 1 << 60: "1024.0 PiB",
	} {
		if got := Human(n); got != want {
			t.Errorf("Human(%d) = %q, want %q", n, got, want)
		}
	}
}
