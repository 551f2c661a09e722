package stream

import (
	"crypto/x509"
	"errors"

	"scistream/internal/api"
	"scistream/internal/store"
)

// The streams of SciStream 1.2 clients (store.Record.PeerCA): their WAN
// legs are verified against the gateway's peer CA bundle (Env.PeerCA)
// instead of a pin, and an outbound one learns its peer's listeners only
// from the client's update, after its own listeners were answered.

// errNoPeers: an application connected to an outbound stream whose peer
// listeners the 1.2 client has not given yet (its update).
var errNoPeers = errors.New("no peer listeners yet: the SciStream 1.2 client's update has not given the inbound gateway's listeners")

// awaitsPeers reports whether rec is an outbound stream that may run
// without peer listeners until they are given.
func awaitsPeers(rec *store.Record) bool {
	return rec.PeerCA && rec.Role == api.RoleOutbound
}

// peerCA is the CA bundle the WAN legs of rec are verified against, or
// nil for a pinned stream. A stream of a 1.2 client on a gateway
// restarted without a bundle gets nil: its pin is empty, so every leg is
// refused.
func (st *Stream) peerCA(rec *store.Record) *x509.CertPool {
	if !rec.PeerCA {
		return nil
	}
	return st.env.PeerCA
}
