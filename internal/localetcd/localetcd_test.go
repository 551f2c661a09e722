package localetcd

import (
	"strings"
	"testing"

	"scistream/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// TestStartRefuses: without a directory, or without the etcd binary,
// Start starts nothing and says what to do. (A running server is
// exercised through etcdtest's tests, which wrap this package.)
func TestStartRefuses(t *testing.T) {
	if _, err := Start(Options{}); err == nil || !strings.Contains(err.Error(), "Dir") {
		t.Errorf("Start without Dir: %v; want it to name Options.Dir", err)
	}
	t.Setenv("PATH", t.TempDir())
	e, err := Start(Options{Dir: t.TempDir()})
	if err == nil {
		e.Stop()
		t.Fatal("Start without an etcd binary on PATH succeeded")
	}
	if !strings.Contains(err.Error(), "scripts/setup.sh") || !strings.Contains(err.Error(), "etcd-server") {
		t.Errorf("Start without etcd said %q; want it to name scripts/setup.sh and etcd-server", err)
	}
}
