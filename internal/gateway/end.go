package gateway

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"time"

	"scistream/internal/api"
	"scistream/internal/store"
	"scistream/internal/stream"
)

// A stream ends here: released by its owner, expired by the janitor
// because its peer never came or its lease ran out, or failed because
// it could not be restored. Its record stays in the store, in its
// terminal state and without its secret or pin, for Config.Retention;
// then the janitor prunes it.

// end stops a live stream for good and records its terminal state.
func (s *Server) end(st *stream.Stream, state api.State, reason string) *store.Record {
	if s.fac != nil { // not to be mirrored again before the store has its end
		s.fac.NoteEnded(st.Key, st.Record().Created)
	}
	s.remove(st)
	st.SayEnded() // the watch leg says released, not stopping
	st.Stop()
	s.rebalance() // its reservation is free
	// An update or attach that got in first stores its record before
	// the terminal one; those that come later see the stream stopped.
	st.SaveMu.Lock()
	defer st.SaveMu.Unlock()
	rec := st.Record()
	if s.fac == nil { // a node of a facility counts its own channels only
		rec.Carried = st.Carried() // the final counters, kept with the end
	}
	s.finish(rec, state, reason)
	st.SetRecord(rec)
	return rec
}

// fail records that a stored stream could not be brought back.
func (s *Server) fail(rec *store.Record, reason string) {
	s.log.Warn("stream failed", "uid", rec.UID, "owner", rec.Owner, "reason", reason)
	s.finish(rec, api.StateFailed, reason)
}

// finish puts rec in its terminal state, forgets its secret and pin (an
// ended stream needs neither, and a stolen database must not yield
// them), and stores it. If the store refuses (a full disk), the janitor
// tries again: until the write lands, a restart would bring the stream
// back.
func (s *Server) finish(rec *store.Record, state api.State, reason string) {
	s.obs.Ended(state)
	rec.State = state
	rec.Reason = reason
	rec.Updated = s.cfg.Now()
	rec.Secret = nil
	rec.PeerCertSHA256 = ""
	s.save(rec)
}

// save stores the final record rec, or keeps it for the janitor to store
// later (store.Unsaved).
func (s *Server) save(rec *store.Record) {
	if err := s.unsaved.Put(rec); err != nil {
		s.log.Error("could not store the end of a stream; retrying every second (until then, a restart would bring it back)",
			"uid", rec.UID, "owner", rec.Owner, "state", rec.State, "err", err)
	}
}

// saveUnsaved tries again to store the final records the store refused.
func (s *Server) saveUnsaved() {
	for _, r := range s.unsaved.Retry() {
		s.log.Info("stored the end of a stream after all", "uid", r.UID, "owner", r.Owner, "state", r.State)
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

// sweep is one round of the janitor at time now: it expires streams
// that waited longer than Config.PendingTimeout for their peer
// (internal/observe samples their rates), stores the ends of
// streams the store refused before and the streams that moved on by
// themselves (attach.go), says the connections refused in the last
// interval (internal/strangers) and those of the control port
// (internal/controlport), and, if a minute has passed since
// lastPrune, prunes records of streams that ended more than
// Config.Retention ago. It returns the time of the last prune.
func (s *Server) sweep(now, lastPrune time.Time) time.Time {
	s.saveUnsaved()
	if s.strange.Summarize(now) {
		// A flood of strangers ended: give its memory (goroutine
		// stacks, TLS state) back to the system now rather than in
		// minutes. One collection first: buffers in sync.Pools (a
		// leg's, a framed connection's) survive the first collection
		// in the pools' victim caches, and only the second frees them.
		runtime.GC()
		debug.FreeOSMemory()
	}
	s.cport.Summarize(now)
	for _, st := range s.live() {
		if !s.stewards(st) {
			continue // another node of the facility expires it
		}
		if st.PendingSince(now) > s.cfg.PendingTimeout {
			s.log.Info("stream expired waiting for its peer", "uid", st.UID, "owner", st.Key.Owner, "timeout", s.cfg.PendingTimeout)
			s.end(st, api.StateExpired, s.pendingExpired(st.Record()))
			continue
		}
		if exp, lease := st.Lease(); !now.Before(exp) {
			s.log.Info("stream expired: its lease ran out", "uid", st.UID, "owner", st.Key.Owner, "lease_s", lease, "expires", exp)
			s.end(st, api.StateExpired, fmt.Sprintf("its lease (%s) ran out at %s; renew a lease before it ends with s2uc update UID --lease DURATION", time.Duration(lease)*time.Second, exp.UTC().Format(time.RFC3339)))
		}
	}
	s.storeSettled() // after the expiries: a store that does not answer delays this round by its timeout
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
			if err := s.cfg.Store.Delete(r.Key()); err != nil {
				s.log.Error("prune record", "uid", r.UID, "err", err)
			}
		}
	}
}

// keepCarried stores what the stopped stream st carried in its record, so
// that the next start counts on from it (store.Record.Carried), and
// reports whether the store took it. Shutdown calls it on a gateway of
// one node only: a node of a facility counts its own channels only, and
// the record is every node's.
func (s *Server) keepCarried(st *stream.Stream) bool {
	st.SaveMu.Lock()
	defer st.SaveMu.Unlock()
	c := st.Carried()
	rec := st.Change(func(r *store.Record) { r.Carried = c })
	if err := s.cfg.Store.Put(rec); err != nil {
		s.log.Warn("could not store what a stream carried; its counters start again from zero at the next start", "uid", rec.UID, "owner", rec.Owner, "err", err)
		return false
	}
	return true
}
