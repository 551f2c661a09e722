// Package reqlog logs the control API's requests: every request gets
// an id, returned in the X-Request-Id header and written on each log
// line about the request, so an operator finds a caller's failed
// request from the id the caller reports. The one "request" line per
// request carries the id, the caller's identity (once authenticated,
// NoteIdentity), the route pattern that matched, the status and the
// duration. Headers are never logged: the Authorization header carries
// the bearer token.
package reqlog

import (
	"context"
	"crypto/rand"
	"log/slog"
	"net/http"
	"time"

	"scistream/internal/api"
)

// Header names the request id in a request (the caller's own, kept if
// it is short and safe) and in every response.
const Header = api.RequestIDHeader

// maxRequestID is the longest caller's id kept: a UUID is 36 bytes.
const maxRequestID = 64

// reqInfo is what the request log line learns while a request is
// served. Handlers of one request run on one goroutine, before the line
// is written, so it needs no lock.
type reqInfo struct {
	id       string
	identity string // set by authed once the caller is known
}

type reqInfoKey struct{}

// ID returns the id of r ("" outside Handler).
func ID(r *http.Request) string {
	if info, ok := r.Context().Value(reqInfoKey{}).(*reqInfo); ok {
		return info.id
	}
	return ""
}

// NoteIdentity records the authenticated caller of r for its log line.
func NoteIdentity(r *http.Request, identity string) {
	if info, ok := r.Context().Value(reqInfoKey{}).(*reqInfo); ok {
		info.identity = identity
	}
}

// callerRequestID returns the caller's request id v if it is short and
// safe to log and to echo in a header (letters, digits, and . _ : -),
// else "": a caller cannot forge log lines or answer headers with it.
func callerRequestID(v string) string {
	if len(v) == 0 || len(v) > maxRequestID {
		return ""
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '_', c == ':', c == '-':
		default:
			return ""
		}
	}
	return v
}

// statusWriter remembers the status a handler wrote.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	w.code = code
	w.ResponseWriter.WriteHeader(code)
}

// Handler gives each request h serves its id and logs one line on log
// when h has answered it.
func Handler(log *slog.Logger, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		info := &reqInfo{id: callerRequestID(r.Header.Get(Header))}
		if info.id == "" {
			info.id = rand.Text()
		}
		w.Header().Set(Header, info.id)
		r = r.WithContext(context.WithValue(r.Context(), reqInfoKey{}, info))
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		h.ServeHTTP(sw, r)
		lvl := slog.LevelInfo
		if r.URL.Path == "/healthz" {
			lvl = slog.LevelDebug
		}
		// ServeMux sets r.Pattern on the request it serves, which is r.
		route := r.Pattern
		if route == "" || route == "/" {
			route = "none"
		}
		log.Log(r.Context(), lvl, "request", "request_id", info.id, "method", r.Method, "route", route,
			"path", truncate(r.URL.Path, 200), "identity", info.identity, "remote", r.RemoteAddr,
			"status", sw.code, "duration", time.Since(start))
	})
}

// truncate cuts s to at most n bytes.
func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
