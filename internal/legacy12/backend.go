package legacy12

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"strings"

	"scistream/internal/api"
	"scistream/internal/auth"
	"scistream/internal/intake"
	"scistream/internal/store"
)

// Gateway is what the service's Backend needs of the gateway
// (*gateway.Server): the operations its HTTPS API's routes use. Every
// error is an *api.Error.
type Gateway interface {
	// Authenticate authenticates the caller of r as the API's routes
	// do and checks it holds one of roles.
	Authenticate(w http.ResponseWriter, r *http.Request, roles ...auth.Role) (*auth.Principal, error)
	// Intake returns the checks that turn requests into records.
	Intake() *intake.Checker
	// Create creates the stream of a record from Intake.
	Create(rec *store.Record) (api.Stream, error)
	// Stream returns the view of caller's stream uid.
	Stream(uid, caller string) (api.Stream, error)
	// SetTargets gives caller's running stream uid its targets once;
	// check refuses a stream or targets that may not be set.
	SetTargets(uid, caller string, targets []string, check func(*store.Record) error) (api.Stream, error)
	// Release ends caller's stream uid, released by whom.
	Release(uid, caller, by string) (api.Stream, error)
	// HoldPending takes one of owner's places of its pending quota for
	// a 1.2 session of uid, until release.
	HoldPending(owner, uid string) (release func(), err error)
}

// NewBackend returns gw as the service's Backend. A 1.2 stream is an
// ordinary stream of the gateway: its caller is authenticated by the
// API's chain, its record checked by intake (Inbound12, Outbound12,
// Peers12), admitted, created, persisted, updated and ended by the same
// code as the API's streams; it differs only in its WAN legs, verified
// against the peer CA bundle instead of a pin (store.Record.PeerCA),
// and, on the outbound side, in learning its peer's listeners after its
// own were answered.
func NewBackend(gw Gateway) Backend { return backend{gw} }

type backend struct{ gw Gateway }

// Authenticate returns the identity token (sent as the 1.2 client sends
// it: the raw token in the metadata "authorization", or with a "Bearer "
// prefix) stands for, as the API's chain says for a request from remote,
// if it holds the role user.
func (b backend) Authenticate(ctx context.Context, token, remote string) (string, error) {
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
	p, err := b.gw.Authenticate(discardHeader{}, r, auth.RoleUser)
	if err != nil {
		return "", err
	}
	return p.Identity, nil
}

// CreateInbound creates owner's inbound stream uid of numConn channels
// whose channel i leads to targets[i % len(targets)] ("host:port", all on
// one host), and returns its WAN listeners.
func (b backend) CreateInbound(ctx context.Context, owner, uid string, numConn int, targets []string) ([]string, error) {
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
	rec, err := b.gw.Intake().Inbound12(ctx, &req, owner)
	if err != nil {
		return nil, err
	}
	v, err := b.gw.Create(rec)
	return v.Listeners, err
}

// CreateOutbound creates owner's outbound stream uid of numConn channels,
// whose peer listeners SetPeers gives later, and returns its listeners
// (where the connecting application connects).
func (b backend) CreateOutbound(ctx context.Context, owner, uid string, numConn int) ([]string, error) {
	rec, err := b.gw.Intake().Outbound12(uid, numConn, owner)
	if err != nil {
		return nil, err
	}
	v, err := b.gw.Create(rec)
	return v.Listeners, err
}

// SetPeers gives owner's outbound 1.2 stream uid the inbound gateway's
// listeners, checked as an outbound request's peer_listeners are, and
// returns the stream's listeners. Giving the same ones again changes
// nothing; other ones are a conflict.
func (b backend) SetPeers(ctx context.Context, owner, uid string, peers []string) ([]string, error) {
	v, err := b.gw.SetTargets(uid, owner, peers, func(rec *store.Record) error {
		if rec.Role != api.RoleOutbound || !rec.PeerCA {
			return api.Errorf(api.CodeInvalidArgument, "stream %s is not the CONS side of a 1.2 stream on this gateway: update it with role PROD, or send CONS to the gateway of the connecting application", uid)
		}
		return b.gw.Intake().Peers12(ctx, "remote_listeners", peers)
	})
	return v.Listeners, err
}

// HoldPending takes one of owner's places of the gateway's pending
// quota (s2cs --quota_pending) for a session of uid: a req or hello
// waiting for its partner call counts as a stream waiting for its peer,
// until release, or until the stream of uid is created (then the stream
// counts).
func (b backend) HoldPending(owner, uid string) (func(), error) {
	return b.gw.HoldPending(owner, uid)
}

// Get returns the view of owner's stream uid.
func (b backend) Get(ctx context.Context, owner, uid string) (api.Stream, error) {
	return b.gw.Stream(uid, owner)
}

// Release ends owner's stream uid, as DELETE /v1/streams/{uid} does;
// releasing an ended one again does nothing.
func (b backend) Release(ctx context.Context, owner, uid string) error {
	_, err := b.gw.Release(uid, owner, owner+" (1.2 client)")
	return err
}

// discardHeader is the ResponseWriter Authenticate sets its
// WWW-Authenticate header on: gRPC has no such header.
type discardHeader struct{}

func (discardHeader) Header() http.Header         { return http.Header{} }
func (discardHeader) Write(b []byte) (int, error) { return len(b), nil }
func (discardHeader) WriteHeader(int)             {}
