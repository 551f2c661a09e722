package peerwatch

import (
	"testing"

	"scistream/internal/leakcheck"
)

// TestMain fails the package's run if any goroutine a test started
// outlives the tests.
func TestMain(m *testing.M) { leakcheck.Main(m) }
