// Package peerdial dials the WAN legs of a gateway's outbound streams
// toward their peer gateways, whatever the leg (a leg of one
// application connection, a pooled leg):
//
//   - Handshakes bounds the handshakes in flight to each peer, so that a
//     burst of application connections finishes its handshakes within
//     their deadline instead of starting all of them at once
//     (handshakes.go);
//   - Redial dials again, for up to RedialWindow, a leg the peer reset
//     before it answered, as a peer does while it holds too many
//     connections of strangers in their handshake (redial.go);
//   - Race dials a channel's port on each node of a peer facility in
//     turn, staggered, and keeps the first that answers (race.go).
//
// It knows nothing of streams: a caller passes the dial of one leg and
// gets its result. Its functions and the methods of Handshakes may be
// called concurrently.
package peerdial
