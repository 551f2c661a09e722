package gateway

import (
	"context"
	"crypto/x509"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"scistream/internal/access"
	"scistream/internal/api"
	"scistream/internal/auth"
	"scistream/internal/store"
)

// The gateway's side of the SciStream 1.2 control protocol
// (internal/legacy12 holds the protocol: its gRPC service, the meeting of
// req and hello). A 1.2 stream is an ordinary stream: its caller is
// authenticated by the API's chain, its record checked by validate.go's
// checks, admitted, created, persisted, updated and ended by the same
// code as the API's streams; it differs only in its WAN legs, verified
// against the peer CA bundle instead of a pin (store.Record.PeerCA), and,
// on the outbound side, in learning its peer's listeners after its own
// were answered.

// Legacy12 is the gateway as the 1.2 protocol's service uses it
// (legacy12.Backend). Every error is an *api.Error.
type Legacy12 struct{ s *Server }

// Legacy12 returns the gateway's backend for the 1.2 protocol.
func (s *Server) Legacy12() *Legacy12 { return &Legacy12{s} }

// Authenticate returns the identity token (sent as the 1.2 client sends
// it: the raw token in the metadata "authorization", or with a "Bearer "
// prefix) stands for, as the API's chain says for a request from remote,
// if it holds the role user.
func (b *Legacy12) Authenticate(ctx context.Context, token, remote string) (string, error) {
	s := b.s
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, "/scistream.Control", nil)
	if err != nil {
		return "", api.Errorf(api.CodeInternal, "authenticate").WithCause(err)
	}
	if token != "" && !strings.HasPrefix(token, "Bearer ") {
		token = "Bearer " + token
	}
	if token != "" {
		r.Header.Set("Authorization", token)
	}
	r.RemoteAddr = remote
	ac := s.access.Load()
	p, err := access.Authenticate(ac.auth, ac.roles, discardHeader{}, r, []auth.Role{auth.RoleUser})
	if err != nil {
		return "", err
	}
	if !s.Ready() {
		return "", api.Errorf(api.CodeUnavailable, "gateway is shutting down or not ready; retry shortly")
	}
	return p.Identity, nil
}

// CreateInbound creates owner's inbound stream uid of numConn channels
// whose channel i leads to targets[i % len(targets)] ("host:port", all on
// one host), and returns its WAN listeners.
func (b *Legacy12) CreateInbound(ctx context.Context, owner, uid string, numConn int, targets []string) ([]string, error) {
	s := b.s
	if len(targets) == 0 {
		return nil, api.Errorf(api.CodeInvalidArgument, "hello names no producer listener: give prod_listeners as host:port")
	}
	var host string
	var ports []int
	for _, t := range targets {
		h, p, err := net.SplitHostPort(t)
		if err != nil {
			return nil, api.Errorf(api.CodeInvalidArgument, "prod_listeners: %.80q is not host:port", t)
		}
		port, err := strconv.Atoi(p)
		if err != nil || strconv.Itoa(port) != p {
			return nil, api.Errorf(api.CodeInvalidArgument, "prod_listeners: port %.20q is not a number", p)
		}
		if host != "" && h != host {
			return nil, api.Errorf(api.CodeInvalidArgument, "prod_listeners name two hosts (%.80s, %.80s): this gateway leads a stream's channels to one producer host; request one stream per host", host, h)
		}
		host = h
		ports = append(ports, port)
	}
	req := api.InboundRequest{UID: uid, RemoteIP: host, ReceiverPorts: ports, NumConn: numConn}
	rec, err := s.intake.Inbound12(ctx, &req, owner)
	if err != nil {
		return nil, err
	}
	st, err := s.create(rec)
	if err != nil {
		return nil, err
	}
	return s.view(st.Record(), st).Listeners, nil
}

// CreateOutbound creates owner's outbound stream uid of numConn channels,
// whose peer listeners SetPeers gives later, and returns its listeners
// (where the connecting application connects).
func (b *Legacy12) CreateOutbound(ctx context.Context, owner, uid string, numConn int) ([]string, error) {
	s := b.s
	rec, err := s.intake.Outbound12(uid, numConn, owner)
	if err != nil {
		return nil, err
	}
	st, err := s.create(rec)
	if err != nil {
		return nil, err
	}
	return s.view(st.Record(), st).Listeners, nil
}

// SetPeers gives owner's outbound 1.2 stream uid the inbound gateway's
// listeners, checked as an outbound request's peer_listeners are, and
// returns the stream's listeners. Giving the same ones again changes
// nothing; other ones are a conflict.
func (b *Legacy12) SetPeers(ctx context.Context, owner, uid string, peers []string) ([]string, error) {
	s := b.s
	st, rec, err := s.owned(uid, owner)
	if err != nil {
		return nil, err
	}
	if st == nil {
		return nil, api.Errorf(api.CodeConflict, "stream %s has ended (%s); request a new one", rec.UID, rec.State)
	}
	if rec.Role != api.RoleOutbound || !rec.PeerCA {
		return nil, api.Errorf(api.CodeInvalidArgument, "stream %s is not the CONS side of a 1.2 stream on this gateway: update it with role PROD, or send CONS to the gateway of the connecting application", uid)
	}
	if err := s.intake.Peers12(ctx, "remote_listeners", peers); err != nil {
		return nil, err
	}
	st.SaveMu.Lock() // as update does: never store a live record over the end's
	defer st.SaveMu.Unlock()
	if st.HasStopped() {
		return nil, api.Errorf(api.CodeConflict, "stream %s has ended; request a new one", uid)
	}
	prev := st.Record()
	if len(prev.Targets) > 0 {
		if !slices.Equal(prev.Targets, peers) {
			return nil, api.Errorf(api.CodeConflict, "stream %s already leads to %s; release it and request a new one", uid, strings.Join(prev.Targets, ", "))
		}
		return s.view(prev, st).Listeners, nil
	}
	now := s.cfg.Now()
	nr := st.Change(func(r *store.Record) { r.Targets, r.Updated = slices.Clone(peers), now })
	if err := s.cfg.Store.Put(nr); err != nil {
		st.Change(func(r *store.Record) { *r = *prev })
		return nil, storeError("save the stream", err)
	}
	s.log.Info("stream updated", "uid", uid, "owner", owner, "peer_listeners", peers)
	return s.view(nr, st).Listeners, nil
}

// Get returns the view of owner's stream uid.
func (b *Legacy12) Get(ctx context.Context, owner, uid string) (api.Stream, error) {
	st, rec, err := b.s.owned(uid, owner)
	if err != nil {
		return api.Stream{}, err
	}
	return b.s.view(rec, st), nil
}

// Release ends owner's stream uid, as DELETE /v1/streams/{uid} does;
// releasing an ended one again does nothing.
func (b *Legacy12) Release(ctx context.Context, owner, uid string) error {
	s := b.s
	st, _, err := s.owned(uid, owner)
	if err != nil || st == nil {
		return err
	}
	nr := s.end(st, api.StateReleased, "released by "+owner+" (1.2 client)")
	s.log.Info("stream released", "uid", nr.UID, "owner", nr.Owner, "by", owner)
	return nil
}

// discardHeader is the ResponseWriter authenticate sets its
// WWW-Authenticate header on: gRPC has no such header.
type discardHeader struct{}

func (discardHeader) Header() http.Header         { return http.Header{} }
func (discardHeader) Write(b []byte) (int, error) { return len(b), nil }
func (discardHeader) WriteHeader(int)             {}

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
