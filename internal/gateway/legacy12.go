package gateway

import (
	"crypto/x509"
	"sync"

	"scistream/internal/api"
	"scistream/internal/store"
)

// The gateway's side of the SciStream 1.2 control protocol is its
// exported operations (service.go, and HoldPending here), which
// internal/legacy12's NewBackend turns into the protocol's backend, and
// the CA bundle its streams' WAN legs are verified against.
//
// What waits for its peer counts against the owner's Config.Quota.Pending
// (s2cs --quota_pending), all of it together: an inbound stream before
// its attach, and a 1.2 session, a req or a hello waiting for its
// partner call (HoldPending). A session's place passes to its stream
// once that is created: the two never count twice, and an owner whose
// quota is N has at most N of them at once, whichever came first.

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

// HoldPending takes one of owner's places of Config.Quota.Pending for a
// SciStream 1.2 session of uid (a req or hello waiting for its partner
// call), until release is called (more than once does nothing). The
// place counts in every admission as a stream waiting for its peer does,
// except that of the stream of uid itself, and not at all once the stream
// of uid exists: it is the session's stream. It fails no_resources naming
// the limit when owner has no place left, unavailable once the server is
// shutting down.
func (s *Server) HoldPending(owner, uid string) (release func(), err error) {
	k := store.Key{Owner: owner, UID: uid}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, api.Errorf(api.CodeUnavailable, "gateway is shutting down")
	}
	if err := s.admit.AdmitWaiting(s.usageLocked(owner, store.Key{}), owner); err != nil {
		return nil, err
	}
	s.held[k]++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.held[k]--; s.held[k] <= 0 {
				delete(s.held, k)
			}
		})
	}, nil
}
