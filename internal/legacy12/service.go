// Package legacy12 serves the control protocol of SciStream 1.2 (the
// gRPC service scistream.Control of the Python s2uc and s2cs) so that a
// site's 1.2 runbooks drive this gateway unchanged. The gateway serves it
// on its control port beside the HTTPS API (gateway.Server.SetGRPC); the
// streams it creates are ordinary streams of the gateway, made through
// Backend (NewBackend of the gateway's operations, backend.go).
//
// The 1.2 client's sequences: inbound-request sends req(uid, PROD, ...),
// which answers once hello(uid, PROD, targets) came (before or after it),
// then update(uid, prod_listeners, PROD); outbound-request sends
// req(uid, CONS, ...), answered once hello came, then update(uid,
// inbound listeners, CONS); release(uid) ends one side. Unlike 1.2, a req
// meets only the hello of its own UID and caller (sessions never cross),
// waits for it a bounded time (Config.HelloWait), and every refusal is a
// gRPC status with a message naming the fix, never UNKNOWN.
//
// A req or hello waiting for its partner call (a session) is a thing of
// its caller's waiting for its peer: it takes one of the caller's places
// of the gateway's pending quota (Backend.HoldPending, s2cs
// --quota_pending) until its stream is created or it lapses, and the
// sessions are bounded per caller (Config.MaxPendingPerOwner) and in all
// (Config.MaxPending): one caller at its bound is refused, the others are
// still served. The stream a session makes waits for its partner too
// (listening, under the same quota and --pending_timeout) until the
// partner is known: on the CONS side the update that gives its peers, on
// the PROD side the first WAN leg of its CONS gateway (internal/stream,
// peerca.go); then it is wired.
package legacy12

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"scistream/internal/api"
)

// Roles of the 1.2 protocol.
const (
	RoleProd = "PROD" // the gateway in front of the listening application: an inbound stream
	RoleCons = "CONS" // the gateway in front of the connecting application: an outbound stream
)

// Backend is the gateway as the service uses it: the same
// authentication, checks, admission, persistence and end as its HTTPS
// API. Every error should be an *api.Error (any other is internal).
type Backend interface {
	// Authenticate returns the identity of the caller whose token the
	// metadata "authorization" held, connecting from remote.
	Authenticate(ctx context.Context, token, remote string) (string, error)
	// CreateInbound creates owner's inbound stream uid leading channel
	// i to targets[i % len(targets)]; it returns its WAN listeners.
	CreateInbound(ctx context.Context, owner, uid string, numConn int, targets []string) ([]string, error)
	// CreateOutbound creates owner's outbound stream uid, whose peers
	// SetPeers gives later; it returns its listeners.
	CreateOutbound(ctx context.Context, owner, uid string, numConn int) ([]string, error)
	// SetPeers gives owner's outbound stream uid its peer listeners.
	SetPeers(ctx context.Context, owner, uid string, peers []string) ([]string, error)
	// HoldPending takes one of owner's places of the pending quota for
	// a session of uid until release is called (idempotent); it fails
	// when owner has none left, the error naming the quota.
	HoldPending(owner, uid string) (release func(), err error)
	// Get returns the view of owner's stream uid.
	Get(ctx context.Context, owner, uid string) (api.Stream, error)
	// Release ends owner's stream uid.
	Release(ctx context.Context, owner, uid string) error
}

// Config configures a Service.
type Config struct {
	// Backend is the gateway. Required.
	Backend Backend
	// Logger gets a line per call. If nil, slog.Default().
	Logger *slog.Logger
	// HelloWait bounds how long a req waits for its hello, and how long a
	// hello that came first waits for its req. If zero, 10 s.
	HelloWait time.Duration
	// MaxPending bounds the reqs and hellos waiting for their partner at
	// once, every caller's together; one more is refused
	// RESOURCE_EXHAUSTED. If zero, 1024.
	MaxPending int
	// MaxPendingPerOwner bounds those of one caller, below its pending
	// quota (Backend.HoldPending) when that is larger; one more is
	// refused RESOURCE_EXHAUSTED. If zero, 64.
	MaxPendingPerOwner int
}

// Limits of a message's fields, past those of the gateway itself.
const (
	maxListeners = api.MaxReceiverPorts // entries of a listener list
	maxAddr      = 300                  // bytes of one host:port
)

// Service is the gRPC service scistream.Control.
type Service struct {
	UnimplementedControlServer
	b        Backend
	log      *slog.Logger
	wait     time.Duration
	limit    int // Config.MaxPending
	perOwner int // Config.MaxPendingPerOwner

	mu       sync.Mutex // guards the following
	sessions map[key]*session
	owners   map[string]int // sessions by owner
}

// key names a session: one caller's UID. Two callers' sessions of one
// UID never meet.
type key struct{ owner, uid string }

// session is a req and its hello meeting.
type session struct {
	hello   chan struct{} // closed when the hello came
	targets []string      // what the hello gave (set before hello closes)
	req     bool          // a req waits on it
	expires time.Time     // for a hello that came first
	release func()        // gives back its place of the pending quota
}

// New returns the service of cfg.
func New(cfg Config) (*Service, error) {
	if cfg.Backend == nil {
		return nil, errors.New("legacy12: Backend required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.HelloWait == 0 {
		cfg.HelloWait = 10 * time.Second
	}
	if cfg.MaxPending == 0 {
		cfg.MaxPending = 1024
	}
	if cfg.MaxPendingPerOwner == 0 {
		cfg.MaxPendingPerOwner = 64
	}
	return &Service{
		b: cfg.Backend, log: cfg.Logger, wait: cfg.HelloWait, limit: cfg.MaxPending, perOwner: cfg.MaxPendingPerOwner,
		sessions: map[key]*session{}, owners: map[string]int{},
	}, nil
}

// maxMessage bounds a request message: the largest valid one is well
// under it.
const maxMessage = 64 << 10

// NewServer returns a gRPC server of svc, to serve with its ServeHTTP
// (gateway.Server.SetGRPC). It has no transport security of its own: the
// gateway's control port runs TLS. A request that is not its method's
// protobuf message is answered INVALID_ARGUMENT (codec.go).
func NewServer(svc *Service) *grpc.Server {
	gs := grpc.NewServer(grpc.MaxRecvMsgSize(maxMessage), grpc.MaxConcurrentStreams(250), grpc.ForceServerCodecV2(codec{}))
	gs.RegisterService(serviceDesc(), svc)
	return gs
}

// Req asks for one side of stream uid and answers once its hello came.
func (s *Service) Req(ctx context.Context, r *Request) (*Response, error) {
	owner, err := s.caller(ctx)
	if err != nil {
		return nil, s.done("req", r.GetUid(), "", err)
	}
	uid := r.GetUid()
	if err := checkUID(uid); err != nil {
		return nil, s.done("req", uid, owner, err)
	}
	role, err := checkRole("role", r.GetRole())
	if err != nil {
		return nil, s.done("req", uid, owner, err)
	}
	n := int(r.GetNumConn())
	if n < 1 || n > api.MaxChannels {
		return nil, s.done("req", uid, owner, status.Errorf(codes.InvalidArgument, "num_conn %d out of range: give 1 to %d (s2uc --num_conn)", r.GetNumConn(), api.MaxChannels))
	}
	// A second req for a live stream is refused now, not after a wait
	// for a hello.
	if v, err := s.b.Get(ctx, owner, uid); err == nil && !v.State.Terminal() {
		return nil, s.done("req", uid, owner, status.Errorf(codes.AlreadyExists, "stream %s exists on this gateway already: release it first, or use a new uid", uid))
	}
	// rate (kb/s) is ignored, as the 1.2 server ignores it: a stream of
	// a 1.2 client is best effort.
	k := key{owner, uid}
	targets, ss, err := s.meet(ctx, k)
	if err != nil {
		return nil, s.done("req", uid, owner, err)
	}
	// The session keeps its place of the quota until its stream holds
	// one (or failed).
	defer s.forgetSession(k, ss)
	var out Response
	switch role {
	case RoleProd:
		ls, err := s.b.CreateInbound(ctx, owner, uid, n, targets)
		if err != nil {
			return nil, s.done("req", uid, owner, err)
		}
		out.Listeners = ls
		out.ProdListeners = expand(targets, n)
	case RoleCons:
		ls, err := s.b.CreateOutbound(ctx, owner, uid, n)
		if err != nil {
			return nil, s.done("req", uid, owner, err)
		}
		out.Listeners = ls
	}
	s.done("req", uid, owner, nil)
	return &out, nil
}

// Hello gives stream uid's producer listeners to its req, waiting or to
// come.
func (s *Service) Hello(ctx context.Context, h *Hello) (*AppResponse, error) {
	owner, err := s.caller(ctx)
	if err != nil {
		return nil, s.done("hello", h.GetUid(), "", err)
	}
	uid := h.GetUid()
	if err := checkUID(uid); err != nil {
		return nil, s.done("hello", uid, owner, err)
	}
	if _, err := checkRole("role", h.GetRole()); err != nil {
		return nil, s.done("hello", uid, owner, err)
	}
	if err := checkList("prod_listeners", h.GetProdListeners()); err != nil {
		return nil, s.done("hello", uid, owner, err)
	}
	if err := s.greet(key{owner, uid}, slices.Clone(h.GetProdListeners())); err != nil {
		return nil, s.done("hello", uid, owner, err)
	}
	s.done("hello", uid, owner, nil)
	return &AppResponse{Message: "hello received for " + uid, Listeners: h.GetProdListeners()}, nil
}

// Update gives a side its targets: on PROD the producer's listeners that
// req answered (checked, nothing changes), on CONS the inbound gateway's
// listeners, which start the proxies toward it.
func (s *Service) Update(ctx context.Context, u *UpdateTargets) (*Response, error) {
	owner, err := s.caller(ctx)
	if err != nil {
		return nil, s.done("update", u.GetUid(), "", err)
	}
	uid := u.GetUid()
	if err := checkUID(uid); err != nil {
		return nil, s.done("update", uid, owner, err)
	}
	role, err := checkRole("role", u.GetRole())
	if err != nil {
		return nil, s.done("update", uid, owner, err)
	}
	if err := checkList("remote_listeners", u.GetRemoteListeners()); err != nil {
		return nil, s.done("update", uid, owner, err)
	}
	v, err := s.b.Get(ctx, owner, uid)
	if err != nil {
		return nil, s.done("update", uid, owner, err)
	}
	if v.State.Terminal() {
		return nil, s.done("update", uid, owner, ended(v))
	}
	if role == RoleCons {
		ls, err := s.b.SetPeers(ctx, owner, uid, u.GetRemoteListeners())
		if err != nil {
			return nil, s.done("update", uid, owner, err)
		}
		s.done("update", uid, owner, nil)
		return &Response{Listeners: ls}, nil
	}
	switch {
	case v.Role != api.RoleInbound:
		err = status.Errorf(codes.InvalidArgument, "stream %s is the CONS side on this gateway: update it with role CONS", uid)
	case !slices.Equal(u.GetRemoteListeners(), expand(v.Targets, v.NumConn)) && !slices.Equal(u.GetRemoteListeners(), v.Targets):
		err = status.Errorf(codes.InvalidArgument, "remote_listeners differ from the producer listeners req answered (%s): send those, or release the stream and request a new one", strings.Join(expand(v.Targets, v.NumConn), ", "))
	}
	if err != nil {
		return nil, s.done("update", uid, owner, err)
	}
	s.done("update", uid, owner, nil)
	return &Response{Listeners: v.Listeners, ProdListeners: expand(v.Targets, v.NumConn)}, nil
}

// Release ends this gateway's side of stream uid.
func (s *Service) Release(ctx context.Context, r *Release) (*Response, error) {
	owner, err := s.caller(ctx)
	if err != nil {
		return nil, s.done("release", r.GetUid(), "", err)
	}
	uid := r.GetUid()
	if err := checkUID(uid); err != nil {
		return nil, s.done("release", uid, owner, err)
	}
	s.forget(key{owner, uid})
	if err := s.b.Release(ctx, owner, uid); err != nil {
		return nil, s.done("release", uid, owner, err)
	}
	s.done("release", uid, owner, nil)
	return &Response{}, nil
}

// meet registers a req for k and waits for its hello (or finds the one
// that came first); it returns the hello's targets and the session, which
// the caller forgets (forgetSession) once its stream is created or
// failed: until then the session keeps its place of the pending quota.
func (s *Service) meet(ctx context.Context, k key) ([]string, *session, error) {
	s.mu.Lock()
	s.purgeLocked(time.Now())
	ss := s.sessions[k]
	switch {
	case ss != nil && ss.req:
		s.mu.Unlock()
		return nil, nil, status.Errorf(codes.AlreadyExists, "a req for %s is already waiting for its hello: send hello, or use a new uid", k.uid)
	case ss == nil:
		var err error
		if ss, err = s.openLocked(k, time.Time{}); err != nil {
			s.mu.Unlock()
			return nil, nil, err
		}
	}
	ss.req = true
	s.mu.Unlock()

	t := time.NewTimer(s.wait)
	defer t.Stop()
	select {
	case <-ss.hello:
		return ss.targets, ss, nil
	case <-t.C:
		s.forgetSession(k, ss)
		return nil, nil, status.Errorf(codes.DeadlineExceeded, "no hello for %s came within %v of its req: the 1.2 client sends hello(uid, PROD, producer listeners) beside req; send it, then req again", k.uid, s.wait)
	case <-ctx.Done():
		s.forgetSession(k, ss)
		return nil, nil, status.FromContextError(ctx.Err()).Err()
	}
}

// greet gives the hello of k to its req, or keeps it for the req to come.
func (s *Service) greet(k key, targets []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	s.purgeLocked(now)
	ss := s.sessions[k]
	switch {
	case ss != nil && ss.targets != nil:
		return status.Errorf(codes.AlreadyExists, "a hello for %s came already: one hello per req; use a new uid for a new stream", k.uid)
	case ss == nil:
		var err error
		if ss, err = s.openLocked(k, now.Add(s.wait)); err != nil {
			return err
		}
	}
	if targets == nil {
		targets = []string{}
	}
	ss.targets = targets
	close(ss.hello)
	return nil
}

// openLocked adds a session for k (a hello that came first expires then;
// a req's has none) if its owner and the service are under their bounds
// and its owner has a place of its pending quota left. s.mu must be held.
func (s *Service) openLocked(k key, expires time.Time) (*session, error) {
	if n := s.owners[k.owner]; n >= s.perOwner {
		return nil, status.Errorf(codes.ResourceExhausted, "%s already has %d reqs and hellos waiting for their partner call on this gateway, the most one identity may have: send the calls they wait for (unanswered, each lapses after %v), then retry", k.owner, n, s.wait)
	}
	if len(s.sessions) >= s.limit {
		return nil, status.Errorf(codes.ResourceExhausted, "%d reqs and hellos of all users already wait for their partner call on this gateway, the most it holds; retry shortly", s.limit)
	}
	release, err := s.b.HoldPending(k.owner, k.uid)
	if err != nil {
		return nil, err
	}
	ss := &session{hello: make(chan struct{}), expires: expires, release: release}
	s.sessions[k] = ss
	s.owners[k.owner]++
	return ss, nil
}

// deleteLocked removes the session of k and gives back its place. s.mu
// must be held.
func (s *Service) deleteLocked(k key) {
	ss := s.sessions[k]
	if ss == nil {
		return
	}
	delete(s.sessions, k)
	if s.owners[k.owner]--; s.owners[k.owner] <= 0 {
		delete(s.owners, k.owner)
	}
	ss.release()
}

// forgetSession removes ss, a session whose req ended, from the table.
func (s *Service) forgetSession(k key, ss *session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sessions[k] == ss {
		s.deleteLocked(k)
	}
}

// forget drops a hello kept for k (its stream is released).
func (s *Service) forget(k key) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ss := s.sessions[k]; ss != nil && !ss.req {
		s.deleteLocked(k)
	}
}

// purgeLocked drops the hellos whose req did not come in time.
func (s *Service) purgeLocked(now time.Time) {
	for k, ss := range s.sessions {
		if !ss.req && now.After(ss.expires) {
			s.deleteLocked(k)
		}
	}
}

// caller authenticates the call's token (metadata "authorization").
func (s *Service) caller(ctx context.Context) (string, error) {
	var token, remote string
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get("authorization"); len(v) > 0 {
			token = v[0]
		}
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		remote = p.Addr.String()
	}
	return s.b.Authenticate(ctx, token, remote)
}

// done logs the end of a call and returns err as a gRPC status error.
func (s *Service) done(method, uid, owner string, err error) error {
	if err == nil {
		s.log.Info("1.2 call", "method", method, "uid", uid, "owner", owner)
		return nil
	}
	st := toStatus(err)
	s.log.Info("1.2 call refused", "method", method, "uid", uid, "owner", owner, "code", st.Code().String(), "message", st.Message())
	return st.Err()
}

// toStatus maps err to a gRPC status: an *api.Error by its code, a status
// as it is, anything else INTERNAL (never UNKNOWN).
func toStatus(err error) *status.Status {
	if st, ok := status.FromError(err); ok && st.Code() != codes.Unknown {
		return st
	}
	var ae *api.Error
	if !errors.As(err, &ae) {
		return status.New(codes.Internal, "internal error; see the gateway's log")
	}
	c := codes.Internal
	switch ae.Code {
	case api.CodeInvalidArgument:
		c = codes.InvalidArgument
	case api.CodeUnauthenticated:
		c = codes.Unauthenticated
	case api.CodePermissionDenied:
		c = codes.PermissionDenied
	case api.CodeNotFound:
		c = codes.NotFound
	case api.CodeNoResources:
		c = codes.ResourceExhausted
	case api.CodeConflict:
		c = codes.AlreadyExists
	case api.CodeUnavailable:
		c = codes.Unavailable
	}
	msg := ae.Message
	if c == codes.Internal {
		msg = "internal error; see the gateway's log"
	}
	return status.New(c, msg)
}

// ended is the answer to a call about a stream that has ended: what
// became of it and why (an expiry names --pending_timeout or the lease).
func ended(v api.Stream) error {
	why := ""
	if v.Reason != "" {
		why = ": " + v.Reason
	}
	return status.Errorf(codes.FailedPrecondition, "stream %s has ended (%s%s); send req and hello again for a new one (the same uid will do)", v.UID, v.State, why)
}

// expand lists targets round-robin over n channels, as the gateway leads
// channel i to targets[i % len(targets)].
func expand(targets []string, n int) []string {
	if len(targets) == 0 {
		return nil
	}
	out := make([]string, n)
	for i := range out {
		out[i] = targets[i%len(targets)]
	}
	return out
}

func checkUID(uid string) error {
	if !api.ValidUID(uid) {
		return status.Errorf(codes.InvalidArgument, "uid %.80q is not a stream UID: give a lower-case UUID, as the 1.2 client generates", uid)
	}
	return nil
}

func checkRole(field, role string) (string, error) {
	if role != RoleProd && role != RoleCons {
		return "", status.Errorf(codes.InvalidArgument, "%s %.40q unknown: use %q (the producer's gateway) or %q (the consumer's)", field, role, RoleProd, RoleCons)
	}
	return role, nil
}

func checkList(field string, l []string) error {
	if len(l) > maxListeners {
		return status.Errorf(codes.InvalidArgument, "%s: at most %d listeners", field, maxListeners)
	}
	for _, a := range l {
		if len(a) == 0 || len(a) > maxAddr {
			return status.Errorf(codes.InvalidArgument, "%s: %.80q is not host:port", field, a)
		}
	}
	return nil
}

// Waiting returns how many reqs wait for their hello now.
func (s *Service) Waiting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, ss := range s.sessions {
		if ss.req {
			n++
		}
	}
	return n
}

// StatusOf returns err as the service answers it: a gRPC status error
// whose code is never UNKNOWN (nil for nil).
func StatusOf(err error) error {
	if err == nil {
		return nil
	}
	return toStatus(err).Err()
}
