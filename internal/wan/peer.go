package wan

import "net"

// PeerOf is the peer gateway of a leg's target "host:port": its host, so
// that the streams of one peer (on their own ports, or its shared WAN
// port) share what is bounded per peer (pooled legs, handshakes).
func PeerOf(target string) string {
	if host, _, err := net.SplitHostPort(target); err == nil {
		return host
	}
	return target
}
