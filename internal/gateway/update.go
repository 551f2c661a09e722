package gateway

import (
	"net/http"
	"time"

	"scistream/internal/api"
	"scistream/internal/httpapi"
	"scistream/internal/store"
	"scistream/internal/stream"
)

// A running stream changed (PATCH /v1/streams/{uid}): its rate, its
// allow-list or its lease, without dropping a connection or touching
// another stream. A new rate applies to the running connections from
// their next chunk; a new allow-list to the connections that arrive from
// then on (those open stay: they were admitted); a renewed lease runs
// from now. An increase of rate is admitted as a creation is, whole or
// not at all.

func (s *Server) handleUpdate(r *http.Request) (int, any, error) {
	st, rec, err := s.ownedBy(r) // an operator may name another owner's stream
	if err != nil {
		return 0, nil, err
	}
	var req api.UpdateRequest
	if err := httpapi.Decode(r, &req); err != nil {
		return 0, nil, err
	}
	if st == nil {
		return 0, nil, api.Errorf(api.CodeConflict, "stream %s has ended (%s); request a new one", rec.UID, rec.State)
	}
	nr, err := s.update(st, &req)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, s.view(nr, st), nil
}

// update checks req against the running stream st and applies it.
func (s *Server) update(st *stream.Stream, req *api.UpdateRequest) (*store.Record, error) {
	u, err := s.intake.CheckUpdate(req, st.Role)
	if err != nil {
		return nil, err
	}
	if u.SetRate && u.Rate > 0 && st.KernelPaths() {
		return nil, api.Errorf(api.CodeConflict, "stream %s has %d connections in the kernel (engine sockmap on a tcp WAN leg), where nothing can pace them; give it a rate when no connection is open, or request it with a rate (its connections then run on splice)", st.UID, st.Active.Load())
	}
	rate, allow, prefixes := u.Rate, u.Allow, u.AllowPrefixes

	old := st.Pace.Rate()
	if u.SetRate {
		s.mu.Lock()
		var err error
		if rate > old { // a decrease needs no admission, even over a capacity lowered since
			_, err = s.grantLocked(st.Key.Owner, st.Key, rate, rate)
		}
		if err == nil {
			st.Pace.Set(rate) // held from now, so that no other admission counts without it
		}
		s.mu.Unlock()
		if err != nil {
			return nil, err
		}
	}
	st.SaveMu.Lock() // else an end meanwhile could be overwritten by this live record
	defer st.SaveMu.Unlock()
	if st.HasStopped() {
		return nil, api.Errorf(api.CodeConflict, "stream %s has ended; request a new one", st.UID)
	}
	now := s.cfg.Now()
	prev := st.Record()
	nr := st.Change(func(r *store.Record) {
		if u.SetRate {
			r.Rate, r.RateRequested, r.MinRate = int64(rate), int64(rate), int64(rate)
		}
		if allow != nil {
			r.Allow = allow
		}
		if u.LeaseS != 0 {
			r.LeaseS = u.LeaseS
			r.Expires = now.Add(time.Duration(u.LeaseS) * time.Second)
		}
		r.Updated = now
	})
	if err := s.cfg.Store.Put(nr); err != nil {
		// The caller is told nothing changed: undo all of it, the
		// record too (a renewed lease would else keep the stream
		// alive, and its view would show a rate it is not paced at).
		st.Change(func(r *store.Record) { *r = *prev }) // saveMu keeps every other change out meanwhile
		if u.SetRate {
			st.Pace.Set(old)
			s.rebalance()
		}
		return nil, storeError("save the stream", err)
	}
	if allow != nil {
		st.Allow.Store(&prefixes)
	}
	if u.SetRate {
		s.rebalance()
	}
	s.log.Info("stream updated", "uid", st.UID, "owner", st.Key.Owner, "rate", rateText(nr.Rate), "allow", nr.Allow, "expires", nr.Expires)
	return nr, nil
}
