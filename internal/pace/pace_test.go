package pace

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestParseRate(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Rate
	}{
		{"0", 0}, {"1500", 1500}, {"10G", 10e9}, {"10Gbit/s", 10e9}, {"800 Mbit/s", 800e6},
		{"800Mbps", 800e6}, {"2.5G", 2.5e9}, {"100MB/s", 800e6}, {"1kb/s", 1000}, {" 5T ", 5e12},
		{"10T", 10e12}, {"12.5MB/s", 100e6},
	} {
		got, err := ParseRate(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseRate(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{"", "G", "-1", "1.5", "10 Gb", "1e9", "1..2M", "11T", "10 furlongs/s", "0.1bit/s", "99999999999999999999999"} {
		if r, err := ParseRate(in); err == nil {
			t.Errorf("ParseRate(%q) = %d, want an error", in, r)
		} else if !strings.Contains(err.Error(), "e.g. 800M") {
			t.Errorf("ParseRate(%q) error %q does not say how to write a rate", in, err)
		}
	}
}

func TestRateString(t *testing.T) {
	for _, c := range []struct {
		r    Rate
		want string
	}{{0, "best effort"}, {10e9, "10 Gbit/s"}, {800e6, "800 Mbit/s"}, {1500, "1500 bit/s"}, {2500, "2500 bit/s"}, {3e3, "3 kbit/s"}, {1234567, "1.234567 Mbit/s"}} {
		if got := c.r.String(); got != c.want {
			t.Errorf("Rate(%d).String() = %q, want %q", c.r, got, c.want)
		}
		if c.r != 0 {
			if back, err := ParseRate(c.r.String()); err != nil || back != c.r {
				t.Errorf("ParseRate(%q) = %d, %v; want %d", c.r.String(), back, err, c.r)
			}
		}
	}
}

// holds sends total bytes through b in chunks of chunk bytes and fails
// if they passed sooner than its rate r and a burst allow.
func holds(t *testing.T, b *Bucket, r Rate, total, chunk int64) {
	t.Helper()
	start := time.Now()
	for sent := int64(0); sent < total; sent += chunk {
		if err := b.Wait(context.Background(), chunk); err != nil {
			t.Fatal(err)
		}
	}
	el := time.Since(start).Seconds()
	if min := (float64(total) - float64(burstOf(r))) / r.BytesPerSecond(); el < min {
		t.Fatalf("%d bytes passed in %.3fs; at %s with a burst of %d they need at least %.3fs", total, el, r, burstOf(r), min)
	}
}

// The bucket never lets more through than its burst plus its rate over
// the time taken: a lower bound on the time, which no scheduling delay
// can break. Chunks larger than the burst wait in pieces.
func TestBucketHoldsRate(t *testing.T) {
	holds(t, NewBucket(80e6), 80e6, 3e6, 256<<10) // 10 MB/s: burst 500 KB
	holds(t, NewBucket(8e6), 8e6, 300e3, 128<<10) // 1 MB/s: burst 64 KiB, chunks twice that
}

// SetRate applies to the next wait, and a lower rate clips the tokens a
// higher one had gathered.
func TestBucketSetRate(t *testing.T) {
	b := NewBucket(8e9) // 1 GB/s: a burst of 50 MB
	b.SetRate(80e6)
	if b.Rate() != 80e6 {
		t.Fatalf("Rate() = %d after SetRate", b.Rate())
	}
	holds(t, b, 80e6, 2e6, 256<<10)
}

// A new bucket is empty: its first bytes wait their turn.
func TestBucketStartsEmpty(t *testing.T) {
	b := NewBucket(80e6) // 10 MB/s
	start := time.Now()
	if err := b.Wait(context.Background(), 250e3); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < 25*time.Millisecond {
		t.Fatalf("the first 250 kB of a new 10 MB/s bucket passed in %s, want at least 25ms", el)
	}
}

// A cancelled context ends a wait at once.
func TestBucketCancel(t *testing.T) {
	b := NewBucket(8e3) // 1 kB/s, burst 64 KiB, and empty
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Wait(ctx, minBurst) }() // would take a minute
	cancel()
	if err := <-done; err != context.Canceled {
		t.Fatalf("Wait after cancel = %v, want context.Canceled", err)
	}
}

func FuzzParseRate(f *testing.F) {
	for _, s := range []string{"10G", "100MB/s", "1.5Mbit/s", "0", "7bps"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRate(s)
		if err != nil {
			return
		}
		if r < 0 || r > Max {
			t.Fatalf("ParseRate(%q) = %d, out of range", s, r)
		}
		if r != 0 {
			if back, err := ParseRate(r.String()); err != nil || back != r {
				t.Fatalf("ParseRate(%q) = %d, but its String %q reads back as %d, %v", s, r, r.String(), back, err)
			}
		}
	})
}
