package gateway

import (
	"net/http"
	"slices"
	"strings"

	"scistream/internal/access"
	"scistream/internal/api"
	"scistream/internal/auth"
	"scistream/internal/controlport"
	"scistream/internal/intake"
	"scistream/internal/reqlog"
	"scistream/internal/store"
	"scistream/internal/stream"
)

// The gateway's operations as a control protocol other than its HTTPS
// API uses them (internal/legacy12, the SciStream 1.2 protocol): the
// same authentication, checks, admission, persistence and end as the
// API's routes. Every error is an *api.Error (any other is internal).

// Authenticate authenticates the caller of r as every API route does
// (Config.Auth, Config.Roles, replaced by SetAccess), checks that it
// holds one of roles, and refuses while the gateway is not ready.
// Challenges of a refused token go to w's header.
func (s *Server) Authenticate(w http.ResponseWriter, r *http.Request, roles ...auth.Role) (*auth.Principal, error) {
	ac := s.access.Load()
	p, err := access.Authenticate(ac.auth, ac.roles, w, r, roles)
	if err != nil {
		return nil, err
	}
	reqlog.NoteIdentity(r, p.Identity)     // for the request's log line
	controlport.Authenticated(r.Context()) // its connection and source hold a user's place now
	if !s.Ready() {
		return p, api.Errorf(api.CodeUnavailable, "gateway is shutting down or not ready; retry shortly")
	}
	return p, nil
}

// Intake returns the checks that turn requests into records.
func (s *Server) Intake() *intake.Checker { return s.intake }

// Create admits, persists and starts the stream of rec, a record from
// Intake, and returns its view.
func (s *Server) Create(rec *store.Record) (api.Stream, error) {
	st, err := s.create(rec)
	if err != nil {
		return api.Stream{}, err
	}
	return s.view(st.Record(), st), nil
}

// Stream returns the view of caller's stream uid, running or ended.
func (s *Server) Stream(uid, caller string) (api.Stream, error) {
	st, rec, err := s.owned(uid, caller)
	if err != nil {
		return api.Stream{}, err
	}
	return s.view(rec, st), nil
}

// Release ends caller's stream uid, released by whom, and returns its
// view with its final counters; releasing an ended one again changes
// nothing and returns its view.
func (s *Server) Release(uid, caller, by string) (api.Stream, error) {
	st, rec, err := s.owned(uid, caller)
	if err != nil {
		return api.Stream{}, err
	}
	return s.release(st, rec, by), nil
}

// release ends st (nil: ended already; rec is its record), released by
// whom, and returns its view, as Release.
func (s *Server) release(st *stream.Stream, rec *store.Record, by string) api.Stream {
	if st == nil {
		return s.view(rec, nil)
	}
	final := st.Stats()
	nr := s.end(st, api.StateReleased, "released by "+by)
	v := s.view(nr, nil)
	v.Stats = final
	s.log.Info("stream released", "uid", nr.UID, "owner", nr.Owner, "by", by, "bytes_to_wan", final.BytesToWAN, "bytes_from_wan", final.BytesFromWAN)
	return v
}

// SetTargets gives caller's running stream uid its targets, once, and
// returns its view: giving the same ones again changes nothing, other
// ones are a conflict. check, called with the stream's record before
// anything changes, refuses a stream or targets that may not be set. A
// stream that waited for them (listening: an outbound 1.2 stream, whose
// partner the targets make known) is wired with them, in the same
// write, and starts its watch leg (stream.PeersGiven).
func (s *Server) SetTargets(uid, caller string, targets []string, check func(*store.Record) error) (api.Stream, error) {
	st, rec, err := s.owned(uid, caller)
	if err != nil {
		return api.Stream{}, err
	}
	if st == nil {
		return api.Stream{}, api.Errorf(api.CodeConflict, "stream %s has ended (%s); request a new one", rec.UID, rec.State)
	}
	if err := check(rec); err != nil {
		return api.Stream{}, err
	}
	st.SaveMu.Lock() // as update does: never store a live record over the end's
	defer st.SaveMu.Unlock()
	if st.HasStopped() {
		return api.Stream{}, api.Errorf(api.CodeConflict, "stream %s has ended; request a new one", uid)
	}
	prev := st.Record()
	if len(prev.Targets) > 0 {
		if !slices.Equal(prev.Targets, targets) {
			return api.Stream{}, api.Errorf(api.CodeConflict, "stream %s already leads to %s; release it and request a new one", uid, strings.Join(prev.Targets, ", "))
		}
		return s.view(prev, st), nil
	}
	now := s.cfg.Now()
	nr := st.Change(func(r *store.Record) {
		r.Targets, r.Updated = slices.Clone(targets), now
		if r.State == api.StateListening {
			r.State = api.StateWired
		}
	})
	if err := s.cfg.Store.Put(nr); err != nil {
		st.Change(func(r *store.Record) { *r = *prev })
		return api.Stream{}, storeError("save the stream", err)
	}
	st.PeersGiven()
	s.log.Info("stream updated", "uid", uid, "owner", caller, "targets", targets, "state", nr.State)
	return s.view(nr, st), nil
}
