package gateway

import (
	"crypto/x509"
	"fmt"
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
// its attach, a 1.2 stream before its partner is known (listening;
// internal/stream, peerca.go), and a 1.2 session, a req or a hello
// waiting for its partner call (HoldPending). A session's place passes
// to its stream once that is created: the two never count twice, and an
// owner whose quota is N has at most N of them at once, whichever came
// first.

// SetPeerCA sets the CA bundle the WAN legs of 1.2 streams are verified
// against (s2cs --peer_ca). Call it before Serve; nil (the default)
// refuses every such leg.
func (s *Server) SetPeerCA(pool *x509.CertPool) { s.env.PeerCA = pool }

// waitsForPeer reports whether rec, being created, will wait for its
// peer (--quota_pending): an inbound stream for its attach, a 1.2 stream
// for its partner (both listening).
func waitsForPeer(rec *store.Record) bool {
	return rec.State == api.StateListening
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

// pendingExpired is the reason a stream that waited for its peer longer
// than Config.PendingTimeout ends with (expired).
func (s *Server) pendingExpired(rec *store.Record) string {
	d := s.cfg.PendingTimeout
	switch {
	case rec.PeerCA && rec.Role == api.RoleInbound:
		return fmt.Sprintf("its partner never came: no WAN leg of a CONS gateway under --peer_ca reached this PROD side within %s (s2cs --pending_timeout); run the 1.2 outbound-request on the CONS gateway soon after inbound-request, and request a new stream", d)
	case rec.PeerCA:
		return fmt.Sprintf("its partner never came: no update(uid, PROD listeners, CONS) gave this CONS side its peers within %s (s2cs --pending_timeout); send the update soon after req, and request a new stream", d)
	}
	return fmt.Sprintf("no outbound peer attached within %s", d)
}
