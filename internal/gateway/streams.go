package gateway

import (
	"errors"
	"net/http"

	"scistream/internal/access"
	"scistream/internal/api"
	"scistream/internal/intake"
	"scistream/internal/store"
	"scistream/internal/stream"
)

// The table of live streams (Server.streams) and of keys being created
// (Server.pending). A stream's key is its owner and UID (store.Key): an
// identity sees only its own streams, so another's stream is not found,
// never forbidden, and no identity learns that a UID exists elsewhere or
// can take it first. A key is reserved before anything is bound for it,
// so two requests for one key never both proceed; a stream is in the
// table from the moment it runs until it ends.

// reserve marks rec's key as being created. It fails with conflict if a
// live stream or another creation holds it, with no_resources if its
// owner would exceed a limit of Config.Quota or the gateway its
// Capacity (internal/admission), counting the creations in flight too, and
// with unavailable once the server is shutting down; else it sets the
// rate granted (rec.Rate). The caller must call unreserve.
func (s *Server) reserve(rec *store.Record) error {
	k := rec.Key()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return api.Errorf(api.CodeUnavailable, "gateway is shutting down")
	}
	if s.streams[k] != nil || s.pending[k] != nil {
		return api.Errorf(api.CodeConflict, "stream %s already exists on this gateway; release it first or use another uid", k.UID)
	}
	if err := s.admitLocked(rec); err != nil {
		return err
	}
	s.pending[k] = rec
	return nil
}

func (s *Server) unreserve(k store.Key) {
	s.mu.Lock()
	delete(s.pending, k)
	s.mu.Unlock()
}

// add puts a started stream in the table. It reports false, leaving the
// table alone, once the server is shutting down.
func (s *Server) add(st *stream.Stream) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.streams[st.Key] = st
	if st.Shared != nil {
		s.names[st.Shared.ServerName] = st
	}
	return true
}

// byName returns the live stream on the shared WAN port whose server
// name is name, or nil.
func (s *Server) byName(name string) *stream.Stream {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.names[name]
}

// remove takes st out of the table if it is still there.
func (s *Server) remove(st *stream.Stream) {
	s.mu.Lock()
	if s.streams[st.Key] == st {
		delete(s.streams, st.Key)
	}
	if st.Shared != nil && s.names[st.Shared.ServerName] == st {
		delete(s.names, st.Shared.ServerName)
	}
	port := s.port
	s.mu.Unlock()
	if port != nil && st.Shared != nil {
		port.Forget(st) // its trust ends with it
	}
}

// live returns the streams running now.
func (s *Server) live() []*stream.Stream {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*stream.Stream, 0, len(s.streams))
	for _, st := range s.streams {
		out = append(out, st)
	}
	return out
}

// owned returns caller's stream uid: the live stream and its record, or,
// if it has ended or belongs to an earlier run, its stored record with a
// nil stream. Any other identity's stream is not found.
func (s *Server) owned(uid, caller string) (*stream.Stream, *store.Record, error) {
	if err := intake.CheckUID(uid); err != nil {
		return nil, nil, err
	}
	k := store.Key{Owner: caller, UID: uid}
	s.mu.Lock()
	st := s.streams[k]
	s.mu.Unlock()
	if st != nil {
		return st, st.Record(), nil
	}
	if r := s.unsaved.Get(k); r != nil { // ended; the store has not taken its end yet
		return nil, r, nil
	}
	rec, err := s.cfg.Store.Get(k)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil, api.Errorf(api.CodeNotFound, "no stream %s of yours on this gateway; list your streams with s2uc list", uid)
	}
	if err != nil {
		return nil, nil, storeError("read state", err)
	}
	if s.fac != nil && !rec.State.Terminal() && rec.State != api.StateRequested {
		// Live in the facility: created on another node a moment
		// ago, before the reconciler brought it here.
		if st := s.fac.Mirror(rec); st != nil {
			return st, st.Record(), nil
		}
	}
	return nil, rec, nil
}

// storeError is the answer to a request whose state could not be read or
// written (a full or failing disk, an unreachable store): unavailable,
// since the caller can retry once the operator fixed it; the cause goes to
// the log only.
func storeError(what string, err error) error {
	return api.Errorf(api.CodeUnavailable, "the gateway could not %s (its state store failed); retry later, and tell the operator if it persists", what).WithCause(err)
}

// ownedBy returns the stream of the request's path, of the caller or,
// for an operator, of the owner it names (access.OwnerParam), as owned does.
func (s *Server) ownedBy(r *http.Request) (*stream.Stream, *store.Record, error) {
	owner, all, err := access.OwnerParam(r)
	if err != nil {
		return nil, nil, err
	}
	if all {
		return nil, nil, api.Errorf(api.CodeInvalidArgument, "all_owners lists streams; name one stream's owner with owner=")
	}
	st, rec, err := s.owned(r.PathValue("uid"), owner)
	var ae *api.Error
	if owner != access.Identity(r) && errors.As(err, &ae) && ae.Code == api.CodeNotFound {
		err = api.Errorf(api.CodeNotFound, "no stream %s of %s on this gateway; list theirs with s2uc list --owner %s", r.PathValue("uid"), owner, owner)
	}
	return st, rec, err
}
