//go:build !linux

package wan

import (
	"net"
	"time"
)

// bytesReceived cannot say outside Linux: a reset is never taken for
// unanswered there.
func bytesReceived(net.Conn) (uint64, bool) { return 0, false }

// RTTOf cannot say outside Linux.
func RTTOf(net.Conn) (time.Duration, bool) { return 0, false }
