package gateway

import (
	"errors"
	"net"
	"net/http"
	"strings"

	"scistream/internal/access"
	"scistream/internal/api"
	"scistream/internal/auth"
	"scistream/internal/httpapi"
	"scistream/internal/reqlog"
)

// The HTTP layer: routes, authentication and error writing (the
// conventions of bodies and paths: internal/httpapi). Handlers
// (handlers.go) are functions of a request that return a status and a
// body, or an error that writeError turns into the documented error
// body.

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", s.handleHealth)
	mux.HandleFunc("GET /v1/openapi.yaml", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/yaml")
		w.Write(api.OpenAPI)
	})
	// What operators look at (observe.go): the metrics (readers and
	// operators), the gateway's status (every caller: its own streams,
	// all of them for readers and operators), and the status page, which
	// holds no data of its own.
	mux.Handle("GET /v1/status", s.authedAs(s.handleStatus, auth.RoleUser, auth.RoleReader))
	mux.Handle("GET /metrics", s.operatorView(s.obs.Metrics()))
	mux.HandleFunc("GET /status", s.obs.ServeStatusPage)

	mux.Handle("GET /v1/info", s.authedAs(s.handleInfo, auth.RoleUser, auth.RoleReader))
	mux.Handle("POST /v1/streams/inbound", s.authed(s.handleInbound))
	mux.Handle("POST /v1/streams/outbound", s.authed(s.handleOutbound))
	mux.Handle("POST /v1/streams/{uid}/attach", s.authed(s.handleAttach))
	mux.Handle("GET /v1/streams", s.authed(s.handleList))
	mux.Handle("GET /v1/streams/{uid}", s.authed(s.handleGet))
	mux.Handle("DELETE /v1/streams/{uid}", s.authed(s.handleRelease))
	mux.Handle("PATCH /v1/streams/{uid}", s.authed(s.handleUpdate))
	notFound := func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, r, api.Errorf(api.CodeNotFound, "no such endpoint %s %.200q; see GET /v1/openapi.yaml", r.Method, r.URL.Path))
	}
	mux.HandleFunc("/", notFound)
	return reqlog.Handler(s.log, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// ServeMux answers a path with "//", "/./" or "/../" in it
		// with a redirect to its clean form; the API has no such
		// paths, so it is simply not found.
		if p := r.URL.Path; p == "" || p[0] != '/' || httpapi.CleanPath(p) != p {
			notFound(w, r)
			return
		}
		mux.ServeHTTP(w, r)
		httpapi.Drain(r)
	}))
}

// handlerFunc is an API handler: it returns a status and body, or an error.
type handlerFunc func(r *http.Request) (int, any, error)

// authed serves h to callers with the role user (internal/access).
func (s *Server) authed(h handlerFunc) http.Handler { return s.authedAs(h, auth.RoleUser) }

// authedAs serves h to callers that hold one of roles, and writes its
// answer.
func (s *Server) authedAs(h handlerFunc, roles ...auth.Role) http.Handler {
	return s.authedHTTP(s.answer(h), roles...)
}

// authedHTTP authenticates the caller, checks it holds one of roles and
// refuses requests until the server is ready; then h answers.
func (s *Server) authedHTTP(h http.Handler, roles ...auth.Role) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := s.Authenticate(w, r, roles...)
		if p != nil {
			r = access.With(r, p)
		}
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// answer writes h's answer: its body as JSON, or its error.
func (s *Server) answer(h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code, body, err := h(r)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		httpapi.WriteJSON(w, code, body)
	})
}

// writeError writes err as the documented error body. An error that is
// not an *api.Error is an internal fault: the caller learns only that,
// and the cause goes to the log.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var ae *api.Error
	if !errors.As(err, &ae) {
		ae = api.Errorf(api.CodeInternal, "internal error; see the gateway's log").WithCause(err)
	}
	s.obs.APIError(ae.Code)
	if ae.Code == api.CodeInternal || ae.Cause() != nil {
		s.log.Warn("request failed", "request_id", reqlog.ID(r), "method", r.Method, "path", r.URL.Path, "code", ae.Code, "message", ae.Message, "cause", ae.Cause())
	}
	httpapi.WriteJSON(w, ae.Code.HTTPStatus(), api.ErrorBody{Error: *ae})
}

// accessConfig is how callers are authenticated and what roles they
// hold, replaced whole by SetAccess.
type accessConfig struct {
	auth  auth.Authenticator
	roles *auth.Policy
}

// SetAccess replaces how callers are authenticated (Config.Auth) and the
// roles they hold (Config.Roles, nil for every caller a user), at once
// for every request that arrives from now on (one in flight finishes
// under the old ones); s2cs calls it on SIGHUP with the files re-read.
// It refuses a nil authn and keeps the old ones. The caller closes the
// old authenticator, if it must, once it has replaced it.
func (s *Server) SetAccess(authn auth.Authenticator, roles *auth.Policy) error {
	if authn == nil {
		return errors.New("authenticator required")
	}
	s.access.Store(&accessConfig{authn, roles})
	return nil
}

// SetGRPC makes the control port serve h, a gRPC server's ServeHTTP, to
// HTTP/2 requests of content type application/grpc, beside the API
// (internal/controlport). Call it before Serve; nil (the default) serves
// the HTTPS API alone, over HTTP/1.1.
func (s *Server) SetGRPC(h http.Handler) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.grpc = h
}

// controlListen returns the listener of the control API on ln: TLS
// connections for net/http, with those that chose HTTP/2 served apart
// when a gRPC service is set. Called by Serve with s.httpSrv set.
func (s *Server) controlListen(ln net.Listener) net.Listener {
	cfg := s.httpSrv.TLSConfig
	if s.grpc == nil {
		return s.cport.Listen(ln, cfg, maxHeaderBytes)
	}
	api, grpcH := s.httpSrv.Handler, s.grpc
	h2 := s.httpServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
			grpcH.ServeHTTP(w, r)
			return
		}
		api.ServeHTTP(w, r)
	}))
	return s.cport.ListenSplit(ln, cfg, maxHeaderBytes, s.httpSrv.ReadHeaderTimeout, h2, &s.wg)
}
