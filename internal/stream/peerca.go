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
//
// Such a stream is listening, waiting for its peer as an inbound stream
// before its attach (under the gateway's quota_pending and
// pending_timeout), until its partner is known, and wired only then: the
// outbound (CONS) side when the client's update gives it the inbound
// gateway's listeners (gateway.Server.SetTargets), the inbound (PROD)
// side when the first leg of its partner authenticates here (verified
// under the peer CA, bound to the stream's UID and owner: partnerCame).
// The outbound side dials its watch leg as soon as it knows its peers
// (PeersGiven), so the inbound side learns of its partner a second after
// the update, not at the first application connection.

// errNoPeers: an application connected to an outbound stream whose peer
// listeners the 1.2 client has not given yet (its update).
var errNoPeers = errors.New("no peer listeners yet: the SciStream 1.2 client's update has not given the inbound gateway's listeners")

// awaitsPeers reports whether rec is an outbound stream that may run
// without peer listeners until they are given.
func awaitsPeers(rec *store.Record) bool {
	return rec.PeerCA && rec.Role == api.RoleOutbound
}

// partnerWires reports whether rec is an inbound stream that the first
// authenticated leg of its partner wires (a pinned one is wired by its
// attach).
func partnerWires(rec *store.Record) bool {
	return rec.PeerCA && rec.Role == api.RoleInbound
}

// partnerCame notes that a leg of the peer authenticated on st (the watch
// leg, a pooled or a data leg): the first call moves a listening inbound
// 1.2 record to wired (settleLocked), and the gateway stores it. One
// atomic load per leg after the first.
func (st *Stream) partnerCame() {
	if st.Role != api.RoleInbound || st.partnerOK.Load() || !st.partnerOK.CompareAndSwap(false, true) {
		return
	}
	st.settle()
}

// PeersGiven starts the watch leg of an outbound 1.2 stream whose peer
// listeners were just given (its record has them): its first leg tells
// the inbound side its partner came. It does nothing for other streams,
// and only once.
func (st *Stream) PeersGiven() {
	if rec := st.Record(); awaitsPeers(rec) && len(rec.Targets) > 0 {
		st.startWatch(st.env.Log.With("uid", st.UID))
	}
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
