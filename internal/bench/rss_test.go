package bench

import (
	"os"
	"testing"
)

func TestParseStatusRSS(t *testing.T) {
	got, err := parseStatusRSS("Name:\ts2cs\nVmPeak:\t  900 kB\nVmRSS:\t   12345 kB\nThreads:\t7\n")
	if err != nil || got != 12345<<10 {
		t.Fatalf("parseStatusRSS = %d, %v; want %d", got, err, 12345<<10)
	}
	for _, bad := range []string{"", "VmRSS:\t12 MB\n", "VmRSS:\tlots kB\n", "VmRSS:\t-1 kB\n"} {
		if _, err := parseStatusRSS(bad); err == nil {
			t.Errorf("parseStatusRSS(%q) accepted", bad)
		}
	}
	if rss, err := ProcessRSS(os.Getpid()); err != nil || rss <= 0 {
		t.Fatalf("ProcessRSS(self) = %d, %v", rss, err)
	}
}
