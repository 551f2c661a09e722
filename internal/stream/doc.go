// Package stream runs one SciStream stream on a gateway: the proxy of
// its channels once its record says what they are. The gateway
// (internal/gateway) admits a request, binds the ports and stores the
// record; New builds the stream on those listeners and Start serves
// them until Stop:
//
//   - on the outbound side each channel's LAN listener accepts the
//     application's connections (allow-list, max_active_conns) and dials
//     a WAN leg to the peer's listener of that channel, over TLS, QUIC or
//     TCP (quic.go, on internal/wanquic), fresh or from the pool of warm
//     legs (pooled.go, on internal/legpool: LRU and LRU-M at the cap per
//     peer), its handshakes bounded per peer, dialled again while the
//     peer resets it before it answered, racing the peer facility's nodes
//     when a channel moved (channels.go, on internal/peerdial);
//   - on the inbound side each channel's WAN listener authenticates legs
//     (pinned certificate, the stream secret, the caps on strangers) and
//     dials the application, waiting for it while the stream says to
//     (appwait.go, on internal/appwait), within the gateway's egress
//     policy;
//   - every connection is relayed by the stream's engine (relay), paced
//     to the rate granted (pacing.go, on internal/pace), counted, and its end classified
//     (ends.go, on internal/ends); a watch leg tells each side of the other's state
//     (watch.go, on internal/peerwatch); a wired stream goes connected at
//     the first data leg that works (wired.go).
//
// What a stream needs of its gateway comes in Env, shared by every
// stream and never changed once they run; it never reaches back into
// the gateway. Its methods may be called concurrently.
package stream
