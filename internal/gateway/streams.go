package gateway

import (
	"errors"

	"scistream/internal/api"
	"scistream/internal/store"
)

// The table of live streams (Server.streams) and of UIDs being created
// (Server.pending): a UID is reserved before anything is bound for it,
// so two requests for one UID never both proceed; a stream is in the
// table from the moment it runs until it ends.

// reserve marks uid as being created. It fails with conflict if a live
// stream or another creation holds it, and with unavailable once the
// server is shutting down. The caller must call unreserve.
func (s *Server) reserve(uid string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return api.Errorf(api.CodeUnavailable, "gateway is shutting down")
	}
	if s.streams[uid] != nil || s.pending[uid] {
		return api.Errorf(api.CodeConflict, "stream %s already exists on this gateway; release it first or use another uid", uid)
	}
	s.pending[uid] = true
	return nil
}

func (s *Server) unreserve(uid string) {
	s.mu.Lock()
	delete(s.pending, uid)
	s.mu.Unlock()
}

// add puts a started stream in the table. It reports false, leaving the
// table alone, once the server is shutting down.
func (s *Server) add(st *stream) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.streams[st.uid] = st
	return true
}

// remove takes st out of the table if it is still there.
func (s *Server) remove(st *stream) {
	s.mu.Lock()
	if s.streams[st.uid] == st {
		delete(s.streams, st.uid)
	}
	s.mu.Unlock()
}

// live returns the streams running now.
func (s *Server) live() []*stream {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*stream, 0, len(s.streams))
	for _, st := range s.streams {
		out = append(out, st)
	}
	return out
}

// lookup returns the live stream uid, or, if it has ended or belongs to
// an earlier run, its stored record with a nil stream.
func (s *Server) lookup(uid string) (*stream, *store.Record, error) {
	if err := checkUID(uid); err != nil {
		return nil, nil, err
	}
	s.mu.Lock()
	st := s.streams[uid]
	s.mu.Unlock()
	if st != nil {
		return st, st.record(), nil
	}
	rec, err := s.cfg.Store.Get(uid)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil, api.Errorf(api.CodeNotFound, "no stream %s on this gateway; list streams with s2uc list", uid)
	}
	if err != nil {
		return nil, nil, api.Errorf(api.CodeInternal, "read state").WithCause(err)
	}
	return nil, rec, nil
}

// owned is lookup for a caller: it fails unless the caller owns the
// stream.
func (s *Server) owned(uid, caller string) (*stream, *store.Record, error) {
	st, rec, err := s.lookup(uid)
	if err != nil {
		return nil, nil, err
	}
	if rec.Owner != caller {
		return nil, nil, api.Errorf(api.CodePermissionDenied, "stream %s belongs to another identity; only its owner may see or change it", uid)
	}
	return st, rec, nil
}
