package intake

import (
	"context"

	"scistream/internal/api"
	"scistream/internal/store"
	"scistream/internal/wan"
)

// The records of streams of SciStream 1.2 clients (internal/legacy12):
// their WAN legs are verified against the gateway's peer CA bundle, not
// pinned, and bound by a secret derived from owner and UID
// (store.Record.PeerCA); an outbound one learns its peer's listeners only
// from the client's update, after its own listeners were answered.
//
// Both are created listening: waiting for their partner, as an inbound
// stream waits for its attach (admitted against the owner's
// quota_pending, expired after pending_timeout), and wired once their
// partner is known: the outbound (CONS) side when the update gives its
// peers, the inbound (PROD) side when its partner's first WAN leg
// authenticates (internal/stream, peerca.go). Neither takes an attach
// (AttachPin).

// Inbound12 checks a 1.2 client's inbound request (always wan "tls", on
// the stream's own ports) and returns its record, listening until its
// partner's first WAN leg comes.
func (s *Checker) Inbound12(ctx context.Context, req *api.InboundRequest, owner string) (*store.Record, error) {
	req.WAN, req.WANListener = api.WANTLS, api.WANListenerPorts
	rec, err := s.Inbound(ctx, req, owner)
	if err != nil {
		return nil, err
	}
	rec.State = api.StateListening
	rec.PeerCA, rec.Secret = true, wan.CASecret(owner, rec.UID)
	return rec, nil
}

// Outbound12 checks a 1.2 client's outbound request of numConn channels
// for stream uid and returns its record: wan "tls", best effort, the
// listener's own subnet allowed, and no peer listeners yet (Peers12
// checks those the update gives), so listening until they come.
func (s *Checker) Outbound12(uid string, numConn int, owner string) (*store.Record, error) {
	if err := CheckUID(uid); err != nil {
		return nil, err
	}
	wanT, engine := api.WANTLS, ""
	if err := s.checkCommon(numConn, true, &wanT, &engine); err != nil {
		return nil, err
	}
	allow, err := s.Allow(nil)
	if err != nil {
		return nil, err
	}
	t, err := s.checkTerms(0, 0, 0)
	if err != nil {
		return nil, err
	}
	rec := &store.Record{
		UID:     uid,
		Role:    api.RoleOutbound,
		State:   api.StateListening,
		Owner:   owner,
		NumConn: numConn,
		WAN:     wanT,
		Engine:  engine,
		Allow:   allow,
		Secret:  wan.CASecret(owner, uid),
		PeerCA:  true,
	}
	t.apply(rec)
	return rec, nil
}

// Peers12 checks the peer listeners a 1.2 client's update gives an
// outbound stream, as an outbound request's peer_listeners are (field
// names them in a refusal).
func (s *Checker) Peers12(ctx context.Context, field string, peers []string) error {
	if len(peers) == 0 || len(peers) > api.MaxReceiverPorts {
		return api.Errorf(api.CodeInvalidArgument, "%s: give 1 to %d host:port listeners of the PROD gateway", field, api.MaxReceiverPorts)
	}
	for _, p := range peers {
		if _, err := s.checkHostPort(ctx, s.cfg.Peers, field, p); err != nil {
			return err
		}
	}
	return nil
}
