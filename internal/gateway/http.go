package gateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"scistream/internal/api"
	"scistream/internal/auth"
	"scistream/internal/certs"
	"scistream/internal/ports"
	"scistream/internal/store"
	"scistream/internal/wan"
)

type ctxKey struct{}

// identity returns the authenticated caller of r.
func identity(r *http.Request) string {
	id, _ := r.Context().Value(ctxKey{}).(string)
	return id
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", s.handleHealth)
	mux.HandleFunc("GET /v1/openapi.yaml", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/yaml")
		w.Write(api.OpenAPI)
	})
	mux.Handle("GET /v1/info", s.authed(s.handleInfo))
	mux.Handle("POST /v1/streams/inbound", s.authed(s.handleInbound))
	mux.Handle("POST /v1/streams/outbound", s.authed(s.handleOutbound))
	mux.Handle("POST /v1/streams/{uid}/attach", s.authed(s.handleAttach))
	mux.Handle("GET /v1/streams", s.authed(s.handleList))
	mux.Handle("GET /v1/streams/{uid}", s.authed(s.handleGet))
	mux.Handle("DELETE /v1/streams/{uid}", s.authed(s.handleRelease))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, r, api.Errorf(api.CodeNotFound, "no such endpoint %s %s; see GET /v1/openapi.yaml", r.Method, r.URL.Path))
	})
	return s.logRequests(mux)
}

// handlerFunc is an API handler: it returns a status and body, or an error.
type handlerFunc func(r *http.Request) (int, any, error)

func (s *Server) authed(h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := s.cfg.Auth.Authenticate(r)
		if err != nil {
			msg := "missing bearer token: set SCISTREAM_TOKEN or pass --token_file"
			if errors.Is(err, auth.ErrBadToken) {
				msg = "bearer token not recognised by this gateway: check the token and the gateway's --tokens file"
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="s2cs"`)
			s.writeError(w, r, api.Errorf(api.CodeUnauthenticated, "%s", msg).WithCause(err))
			return
		}
		r = r.WithContext(context.WithValue(r.Context(), ctxKey{}, id))
		if !s.Ready() {
			s.writeError(w, r, api.Errorf(api.CodeUnavailable, "gateway is shutting down or not ready; retry shortly"))
			return
		}
		code, body, err := h(r)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		writeJSON(w, code, body)
	})
}

type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	w.code = code
	w.ResponseWriter.WriteHeader(code)
}

func (s *Server) logRequests(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, code: 200}
		h.ServeHTTP(sw, r)
		lvl := slog.LevelDebug
		if r.URL.Path != "/healthz" {
			lvl = slog.LevelInfo
		}
		// Never log headers: they carry the bearer token.
		s.log.Log(r.Context(), lvl, "request", "method", r.Method, "path", r.URL.Path,
			"remote", r.RemoteAddr, "status", sw.code, "duration", time.Since(start))
	})
}

func writeJSON(w http.ResponseWriter, code int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(body)
}

func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var ae *api.Error
	if !errors.As(err, &ae) {
		ae = api.Errorf(api.CodeInternal, "internal error; see the gateway's log").WithCause(err)
	}
	if ae.Code == api.CodeInternal || ae.Cause() != nil {
		s.log.Warn("request failed", "method", r.Method, "path", r.URL.Path, "code", ae.Code, "msg", ae.Message, "cause", ae.Cause())
	}
	writeJSON(w, ae.Code.HTTPStatus(), api.ErrorBody{Error: *ae})
}

// decode reads exactly one JSON object into v, refusing unknown fields.
func decode(r *http.Request, v any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
		return api.Errorf(api.CodeInvalidArgument, "content type %q: send application/json", ct)
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, api.MaxBodyBytes+1))
	if err != nil {
		return api.Errorf(api.CodeInvalidArgument, "read request body: %v", err)
	}
	if len(body) > api.MaxBodyBytes {
		return api.Errorf(api.CodeInvalidArgument, "request body larger than %d bytes", api.MaxBodyBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return api.Errorf(api.CodeInvalidArgument, "malformed JSON body: %s", jsonMsg(err))
	}
	if dec.More() {
		return api.Errorf(api.CodeInvalidArgument, "malformed JSON body: trailing data after the object")
	}
	return nil
}

func jsonMsg(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("syntax error at byte %d: %v", se.Offset, se)
	case errors.As(err, &te):
		return fmt.Sprintf("field %q must be %s, not %s", te.Field, te.Type, te.Value)
	case errors.Is(err, io.EOF):
		return "empty body; send a JSON object"
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	if !s.Ready() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "starting"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) handleInfo(r *http.Request) (int, any, error) {
	wans := []string{api.WANTLS, api.WANQUIC}
	if s.cfg.AllowTCPWAN {
		wans = append(wans, api.WANTCP)
	}
	return 200, api.Info{
		Version:       Version,
		ListenerIP:    s.cfg.ListenerIP,
		PortRange:     s.cfg.PortRange.String(),
		Engines:       s.engines.Names(),
		DefaultEngine: s.engine.Name(),
		WAN:           wans,
		WANCertSHA256: s.cfg.Identity.SHA256,
		Identity:      identity(r),
	}, nil
}

func (s *Server) checkCommon(numConn int, wanT, engine *string) error {
	if numConn < 1 || numConn > api.MaxChannels {
		return api.Errorf(api.CodeInvalidArgument, "num_conn %d out of range: give 1 to %d channels", numConn, api.MaxChannels)
	}
	if numConn > s.cfg.PortRange.Size() {
		return api.Errorf(api.CodeInvalidArgument, "num_conn %d exceeds this gateway's port range %s (%d ports)", numConn, s.cfg.PortRange, s.cfg.PortRange.Size())
	}
	switch *wanT {
	case "":
		*wanT = api.WANTLS
	case api.WANTLS, api.WANQUIC:
	case api.WANTCP:
		if !s.cfg.AllowTCPWAN {
			return api.Errorf(api.CodePermissionDenied, "this gateway refuses plaintext WAN legs (wan \"tcp\"); use \"tls\", or ask the operator to start s2cs with --insecure_tcp_wan")
		}
	default:
		return api.Errorf(api.CodeInvalidArgument, "wan %q unknown: use \"tls\" (default), \"quic\" or \"tcp\"", *wanT)
	}
	if *engine == "" {
		*engine = s.engine.Name()
	} else if _, err := s.engines.Get(*engine); err != nil {
		return api.Errorf(api.CodeInvalidArgument, "engine %q unknown: use one of %s", *engine, strings.Join(s.engines.Names(), ", "))
	}
	return nil
}

func checkUID(uid string) error {
	if !validUID(uid) {
		return api.Errorf(api.CodeInvalidArgument, "uid %.80q is not a stream UID (a lower-case UUID such as 0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b6c)", uid)
	}
	return nil
}

func validUID(uid string) bool {
	if len(uid) != 36 {
		return false
	}
	for i, c := range uid {
		switch {
		case i == 8 || i == 13 || i == 18 || i == 23:
			if c != '-' {
				return false
			}
		case c >= '0' && c <= '9', c >= 'a' && c <= 'f':
		default:
			return false
		}
	}
	return true
}

func newUID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func checkPort(field string, p int) error {
	if p < 1 || p > 65535 {
		return api.Errorf(api.CodeInvalidArgument, "%s: port %d out of range 1-65535", field, p)
	}
	return nil
}

func checkHost(field, h string) error {
	if h == "" {
		return api.Errorf(api.CodeInvalidArgument, "%s is required", field)
	}
	if net.ParseIP(h) != nil {
		return nil
	}
	if len(h) > 253 {
		return api.Errorf(api.CodeInvalidArgument, "%s: host name too long", field)
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 {
			return api.Errorf(api.CodeInvalidArgument, "%s %.80q is not an IP address or host name", field, h)
		}
		for _, c := range label {
			if !(c == '-' || c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
				return api.Errorf(api.CodeInvalidArgument, "%s %.80q is not an IP address or host name", field, h)
			}
		}
	}
	return nil
}

func (s *Server) handleInbound(r *http.Request) (int, any, error) {
	var req api.InboundRequest
	if err := decode(r, &req); err != nil {
		return 0, nil, err
	}
	if err := s.checkCommon(req.NumConn, &req.WAN, &req.Engine); err != nil {
		return 0, nil, err
	}
	if err := checkHost("remote_ip", req.RemoteIP); err != nil {
		return 0, nil, err
	}
	if len(req.ReceiverPorts) == 0 || len(req.ReceiverPorts) > api.MaxReceiverPorts {
		return 0, nil, api.Errorf(api.CodeInvalidArgument, "receiver_ports: give 1 to %d ports of the listening application", api.MaxReceiverPorts)
	}
	var targets []string
	for _, p := range req.ReceiverPorts {
		if err := checkPort("receiver_ports", p); err != nil {
			return 0, nil, err
		}
		targets = append(targets, net.JoinHostPort(req.RemoteIP, fmt.Sprint(p)))
	}
	if req.UID == "" {
		req.UID = newUID()
	} else if err := checkUID(req.UID); err != nil {
		return 0, nil, err
	}
	rec := &store.Record{
		UID:     req.UID,
		Role:    api.RoleInbound,
		State:   api.StateListening,
		Owner:   identity(r),
		Targets: targets,
		NumConn: req.NumConn,
		WAN:     req.WAN,
		Engine:  req.Engine,
		Secret:  wan.NewSecret(),
	}
	st, err := s.create(rec)
	if err != nil {
		return 0, nil, err
	}
	v := s.streamView(st.record(), st)
	v.Secret = base64.StdEncoding.EncodeToString(rec.Secret)
	v.WANCert = string(s.cfg.Identity.PEM)
	return http.StatusCreated, v, nil
}

func (s *Server) handleOutbound(r *http.Request) (int, any, error) {
	var req api.OutboundRequest
	if err := decode(r, &req); err != nil {
		return 0, nil, err
	}
	if err := checkUID(req.UID); err != nil {
		return 0, nil, err
	}
	if err := s.checkCommon(req.NumConn, &req.WAN, &req.Engine); err != nil {
		return 0, nil, err
	}
	if len(req.PeerListeners) == 0 || len(req.PeerListeners) > api.MaxReceiverPorts {
		return 0, nil, api.Errorf(api.CodeInvalidArgument, "peer_listeners: give 1 to %d host:port addresses of the inbound gateway's listeners", api.MaxReceiverPorts)
	}
	for _, pl := range req.PeerListeners {
		h, p, err := net.SplitHostPort(pl)
		if err != nil {
			return 0, nil, api.Errorf(api.CodeInvalidArgument, "peer_listeners: %.80q is not host:port", pl)
		}
		if err := checkHost("peer_listeners host", h); err != nil {
			return 0, nil, err
		}
		var port int
		if _, err := fmt.Sscanf(p, "%d", &port); err != nil || fmt.Sprint(port) != p {
			return 0, nil, api.Errorf(api.CodeInvalidArgument, "peer_listeners: port %.20q is not a number", p)
		}
		if err := checkPort("peer_listeners", port); err != nil {
			return 0, nil, err
		}
	}
	secret, err := base64.StdEncoding.DecodeString(req.Secret)
	if err != nil || len(secret) != wan.SecretLen {
		return 0, nil, api.Errorf(api.CodeInvalidArgument, "secret must be the base64 of %d bytes, as returned by the inbound request", wan.SecretLen)
	}
	var pin string
	if api.WANPinned(req.WAN) {
		if req.PeerCert == "" {
			return 0, nil, api.Errorf(api.CodeInvalidArgument, "peer_cert is required with wan %q: pass the inbound gateway's wan_cert", req.WAN)
		}
		c, err := certs.ParsePEM([]byte(req.PeerCert))
		if err != nil {
			return 0, nil, api.Errorf(api.CodeInvalidArgument, "peer_cert: %v", err)
		}
		pin = certs.Fingerprint(c.Raw)
	}
	if len(req.Allow) > api.MaxAllow {
		return 0, nil, api.Errorf(api.CodeInvalidArgument, "allow: at most %d entries", api.MaxAllow)
	}
	allow := req.Allow
	for _, a := range allow {
		if _, err := parsePrefix(a); err != nil {
			return 0, nil, api.Errorf(api.CodeInvalidArgument, "allow: %v; give addresses or CIDR prefixes such as 10.1.0.0/16", err)
		}
	}
	if len(allow) == 0 {
		ip := s.cfg.BindIP
		if net.ParseIP(ip).IsUnspecified() {
			ip = s.cfg.ListenerIP
		}
		allow = []string{ownSubnet(ip)}
	}
	rec := &store.Record{
		UID:            req.UID,
		Role:           api.RoleOutbound,
		State:          api.StateConnected,
		Owner:          identity(r),
		Targets:        slices.Clone(req.PeerListeners),
		NumConn:        req.NumConn,
		WAN:            req.WAN,
		Engine:         req.Engine,
		Allow:          allow,
		Secret:         secret,
		PeerCertSHA256: pin,
	}
	st, err := s.create(rec)
	if err != nil {
		return 0, nil, err
	}
	v := s.streamView(st.record(), st)
	v.WANCert = string(s.cfg.Identity.PEM)
	return http.StatusCreated, v, nil
}

// create reserves rec.UID, binds its listeners, persists it and starts it.
func (s *Server) create(rec *store.Record) (*stream, error) {
	now := s.cfg.Now()
	rec.Created, rec.Updated = now, now
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, api.Errorf(api.CodeUnavailable, "gateway is shutting down")
	}
	if s.streams[rec.UID] != nil || s.pending[rec.UID] {
		s.mu.Unlock()
		return nil, api.Errorf(api.CodeConflict, "stream %s already exists on this gateway; release it first or use another uid", rec.UID)
	}
	s.pending[rec.UID] = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.pending, rec.UID)
		s.mu.Unlock()
	}()
	if old, err := s.cfg.Store.Get(rec.UID); err == nil && (!old.State.Terminal() || old.Owner != rec.Owner) {
		return nil, api.Errorf(api.CodeConflict, "stream %s already exists on this gateway", rec.UID)
	} else if err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, api.Errorf(api.CodeInternal, "read state").WithCause(err)
	}

	lns, err := s.listen(rec)
	if err != nil {
		if errors.Is(err, ports.ErrExhausted) {
			return nil, api.Errorf(api.CodeNoResources, "no free ports: %d wanted, range %s is in use; release streams or widen --port_range", rec.NumConn, s.cfg.PortRange).WithCause(err)
		}
		return nil, api.Errorf(api.CodeInternal, "bind listeners").WithCause(err)
	}
	for _, ln := range lns {
		rec.Ports = append(rec.Ports, ln.Addr().(*net.TCPAddr).Port)
	}
	st, err := s.newStream(rec, lns)
	if err == nil {
		err = s.cfg.Store.Put(rec)
	}
	if err != nil {
		for _, ln := range lns {
			s.alloc.Release(ln)
		}
		return nil, api.Errorf(api.CodeInternal, "create stream").WithCause(err)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		st.stop()
		return nil, api.Errorf(api.CodeUnavailable, "gateway is shutting down")
	}
	s.streams[rec.UID] = st
	s.mu.Unlock()
	st.start()
	if rec.WAN == api.WANTCP {
		s.log.Warn("stream uses a plaintext WAN leg: data crosses the WAN unencrypted", "uid", rec.UID)
	}
	s.log.Info("stream created", "uid", rec.UID, "role", rec.Role, "owner", rec.Owner,
		"listeners", st.listenerAddrs(), "targets", rec.Targets, "wan", rec.WAN, "engine", rec.Engine)
	return st, nil
}

// owned returns the live stream uid if the caller owns it. A stream that
// has ended is returned as a record with a nil stream.
func (s *Server) owned(r *http.Request) (*stream, *store.Record, error) {
	uid := r.PathValue("uid")
	if err := checkUID(uid); err != nil {
		return nil, nil, err
	}
	s.mu.Lock()
	st := s.streams[uid]
	s.mu.Unlock()
	var rec *store.Record
	if st != nil {
		rec = st.record()
	} else {
		var err error
		rec, err = s.cfg.Store.Get(uid)
		if errors.Is(err, store.ErrNotFound) {
			return nil, nil, api.Errorf(api.CodeNotFound, "no stream %s on this gateway; list streams with s2uc list", uid)
		}
		if err != nil {
			return nil, nil, api.Errorf(api.CodeInternal, "read state").WithCause(err)
		}
	}
	if rec.Owner != identity(r) {
		return nil, nil, api.Errorf(api.CodePermissionDenied, "stream %s belongs to another identity; only its owner may see or change it", uid)
	}
	return st, rec, nil
}

func (s *Server) handleAttach(r *http.Request) (int, any, error) {
	st, rec, err := s.owned(r)
	if err != nil {
		return 0, nil, err
	}
	var req api.AttachRequest
	if r.ContentLength != 0 { // a tcp stream has nothing to attach: no body needed
		if err := decode(r, &req); err != nil {
			return 0, nil, err
		}
	}
	if st == nil {
		return 0, nil, api.Errorf(api.CodeConflict, "stream %s has ended (%s); request a new one", rec.UID, rec.State)
	}
	if rec.Role != api.RoleInbound {
		return 0, nil, api.Errorf(api.CodeInvalidArgument, "stream %s is the outbound side on this gateway; attach applies to the inbound side", rec.UID)
	}
	var pin string
	if api.WANPinned(rec.WAN) {
		if req.PeerCert == "" {
			return 0, nil, api.Errorf(api.CodeInvalidArgument, "peer_cert is required for a %s stream: pass the outbound gateway's wan_cert", rec.WAN)
		}
		c, err := certs.ParsePEM([]byte(req.PeerCert))
		if err != nil {
			return 0, nil, api.Errorf(api.CodeInvalidArgument, "peer_cert: %v", err)
		}
		pin = certs.Fingerprint(c.Raw)
	}
	if rec.State == api.StateConnected && rec.PeerCertSHA256 != pin {
		return 0, nil, api.Errorf(api.CodeConflict, "stream %s is already attached to another peer certificate; release it and request a new stream", rec.UID)
	}
	nr := st.attach(pin, s.cfg.Now())
	if err := s.cfg.Store.Put(nr); err != nil {
		return 0, nil, api.Errorf(api.CodeInternal, "persist stream").WithCause(err)
	}
	s.log.Info("stream attached", "uid", nr.UID, "peer_cert_sha256", pin)
	return 200, s.streamView(nr, st), nil
}

func (s *Server) handleList(r *http.Request) (int, any, error) {
	id := identity(r)
	all := r.URL.Query().Get("all")
	if all != "" && all != "true" && all != "false" && all != "1" && all != "0" {
		return 0, nil, api.Errorf(api.CodeInvalidArgument, "all=%.20q: use true or false", all)
	}
	showEnded := all == "true" || all == "1"
	out := api.StreamList{Streams: []api.Stream{}}
	s.mu.Lock()
	live := make(map[string]*stream, len(s.streams))
	for uid, st := range s.streams {
		live[uid] = st
	}
	s.mu.Unlock()
	for _, st := range live {
		rec := st.record()
		if rec.Owner == id {
			out.Streams = append(out.Streams, s.streamView(rec, st))
		}
	}
	if showEnded {
		recs, err := s.cfg.Store.List()
		if err != nil {
			return 0, nil, api.Errorf(api.CodeInternal, "read state").WithCause(err)
		}
		for _, rec := range recs {
			if rec.Owner == id && live[rec.UID] == nil && rec.State.Terminal() {
				out.Streams = append(out.Streams, s.streamView(rec, nil))
			}
		}
	}
	sort.Slice(out.Streams, func(i, j int) bool { return out.Streams[i].Created.Before(out.Streams[j].Created) })
	return 200, out, nil
}

func (s *Server) handleGet(r *http.Request) (int, any, error) {
	st, rec, err := s.owned(r)
	if err != nil {
		return 0, nil, err
	}
	v := s.streamView(rec, st)
	v.WANCert = string(s.cfg.Identity.PEM) // so a client that lost it can still attach
	return 200, v, nil
}

func (s *Server) handleRelease(r *http.Request) (int, any, error) {
	st, rec, err := s.owned(r)
	if err != nil {
		return 0, nil, err
	}
	if st == nil {
		// Already ended: releasing again is a no-op that reports the end.
		return 200, s.streamView(rec, nil), nil
	}
	final := st.stats()
	nr := s.end(st, api.StateReleased, "released by "+identity(r))
	v := s.streamView(nr, nil)
	v.Stats = final
	s.log.Info("stream released", "uid", nr.UID, "bytes_to_wan", final.BytesToWAN, "bytes_from_wan", final.BytesFromWAN)
	return 200, v, nil
}

// ownSubnet returns the prefix of the interface network that holds ip, or
// the single address if no interface holds it.
func ownSubnet(ip string) string {
	addr := net.ParseIP(ip)
	if ifaces, err := net.InterfaceAddrs(); err == nil && !addr.IsUnspecified() {
		for _, a := range ifaces {
			if n, ok := a.(*net.IPNet); ok && n.Contains(addr) {
				return (&net.IPNet{IP: n.IP.Mask(n.Mask), Mask: n.Mask}).String()
			}
		}
	}
	if addr.To4() != nil {
		return addr.String() + "/32"
	}
	return addr.String() + "/128"
}
