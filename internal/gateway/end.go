package gateway

import (
	"fmt"
	"time"

	"scistream/internal/api"
	"scistream/internal/store"
)

// A stream ends here: released by its owner, expired by the janitor
// because its peer never came, or failed because it could not be
// restored. Its record stays in the store, in its terminal state, for
// Config.Retention, then the janitor prunes it.

// end stops a live stream for good and records its terminal state.
func (s *Server) end(st *stream, state api.State, reason string) *store.Record {
	s.remove(st)
	st.stop()
	rec := st.record()
	rec.State = state
	rec.Reason = reason
	rec.Updated = s.cfg.Now()
	if err := s.cfg.Store.Put(rec); err != nil {
		s.log.Error("persist stream", "uid", rec.UID, "err", err)
	}
	st.setRecord(rec)
	return rec
}

// fail records that a stored stream could not be brought back.
func (s *Server) fail(rec *store.Record, reason string) {
	rec.State = api.StateFailed
	rec.Reason = reason
	rec.Updated = s.cfg.Now()
	s.log.Warn("stream failed", "uid", rec.UID, "reason", reason)
	if err := s.cfg.Store.Put(rec); err != nil {
		s.log.Error("persist stream", "uid", rec.UID, "err", err)
	}
}

// janitor runs sweep every second until the server shuts down.
func (s *Server) janitor() {
	defer s.wg.Done()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var lastPrune time.Time
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-tick.C:
		}
		lastPrune = s.sweep(s.cfg.Now(), lastPrune)
	}
}

// sweep is one round of the janitor at time now: it samples every live
// stream's rates, expires inbound streams that waited longer than
// Config.PendingTimeout for their peer, and, if a minute has passed since
// lastPrune, prunes records of streams that ended more than
// Config.Retention ago. It returns the time of the last prune.
func (s *Server) sweep(now, lastPrune time.Time) time.Time {
	for _, st := range s.live() {
		st.sample(now)
		if st.pendingSince(now) > s.cfg.PendingTimeout {
			s.log.Info("stream expired waiting for its outbound peer", "uid", st.uid, "timeout", s.cfg.PendingTimeout)
			s.end(st, api.StateExpired, fmt.Sprintf("no outbound peer attached within %s", s.cfg.PendingTimeout))
		}
	}
	if now.Sub(lastPrune) > time.Minute {
		s.prune(now)
		return now
	}
	return lastPrune
}

// prune deletes the records of streams that ended more than
// Config.Retention before now.
func (s *Server) prune(now time.Time) {
	recs, err := s.cfg.Store.List()
	if err != nil {
		s.log.Error("list records for pruning", "err", err)
		return
	}
	for _, r := range recs {
		if r.State.Terminal() && now.Sub(r.Updated) > s.cfg.Retention {
			if err := s.cfg.Store.Delete(r.UID); err != nil {
				s.log.Error("prune record", "uid", r.UID, "err", err)
			}
		}
	}
}
