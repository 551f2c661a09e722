package gateway

import (
	"crypto/x509"

	"scistream/internal/api"
	"scistream/internal/store"
)

// The gateway's side of the SciStream 1.2 control protocol is its
// exported operations (service.go), which internal/legacy12's
// NewBackend turns into the protocol's backend, and the CA bundle its
// streams' WAN legs are verified against.

// SetPeerCA sets the CA bundle the WAN legs of 1.2 streams are verified
// against (s2cs --peer_ca). Call it before Serve; nil (the default)
// refuses every such leg.
func (s *Server) SetPeerCA(pool *x509.CertPool) { s.env.PeerCA = pool }

// waitsForPeer reports whether rec, being created, is an inbound stream
// that will wait for its outbound peer's attach (--quota_pending); one
// of a 1.2 client is created wired.
func waitsForPeer(rec *store.Record) bool {
	return rec.Role == api.RoleInbound && rec.State == api.StateListening
}
