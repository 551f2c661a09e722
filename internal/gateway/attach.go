package gateway

import (
	"errors"

	"scistream/internal/api"
	"scistream/internal/pace"
	"scistream/internal/store"
	"scistream/internal/stream"
)

// An inbound stream is attached to its peer here (listening -> wired):
// from then on its WAN listeners accept legs from the pinned outbound
// gateway's certificate only, and its rate is settled on what both
// gateways granted. A wired stream (inbound once attached, outbound from
// its creation) goes connected when a data leg first works on this
// gateway (internal/stream, wired.go); the stream changes its record in
// memory at once and tells noteSettled, and the janitor stores the
// change (storeSettled), never the data path. An inbound stream of a
// SciStream 1.2 client has no attach: it goes wired by itself when its
// partner's first leg authenticates (internal/stream, peerca.go), stored
// the same way; an outbound one goes wired when the client's update
// gives it its peers (SetTargets, service.go).

// attach pins pin (the outbound gateway's certificate, "" for a
// transport that pins nothing) on the inbound stream st, settles its
// rate on rate (what the outbound gateway granted; 0 keeps it) and
// persists the change. Attaching again with the same pin succeeds and
// changes nothing but the rate; another pin is a conflict.
func (s *Server) attach(st *stream.Stream, pin string, rate int64) (*store.Record, error) {
	if rate != 0 {
		cur := st.Record()
		switch {
		case rate < 0 || rate > cur.Rate:
			return nil, api.Errorf(api.CodeInvalidArgument, "rate %d: attach may only lower the rate granted to the inbound side (%d bit/s) to what the outbound side granted; use PATCH to raise it", rate, cur.Rate)
		case rate < cur.MinRate:
			return nil, api.Errorf(api.CodeInvalidArgument, "rate %d is below the stream's min_rate %d", rate, cur.MinRate)
		}
	}
	st.SaveMu.Lock() // as update does: never store a live record over the end's
	defer st.SaveMu.Unlock()
	if st.HasStopped() {
		return nil, api.Errorf(api.CodeConflict, "stream %s has ended; request a new one", st.UID)
	}
	rec, ok := st.Attach(pin, s.cfg.Now())
	if !ok {
		return nil, api.Errorf(api.CodeConflict, "stream %s is already attached to another peer certificate; release it and request a new stream", rec.UID)
	}
	if rate != 0 && rate != rec.Rate {
		st.Pace.Set(pace.Rate(rate))
		rec = st.Change(func(r *store.Record) { r.Rate = rate })
		s.rebalance()
	}
	if err := s.cfg.Store.Put(rec); err != nil {
		return nil, storeError("save the stream", err)
	}
	s.log.Info("stream attached", "uid", rec.UID, "peer_cert_sha256", pin, "rate", rateText(rec.Rate))
	return rec, nil
}

// noteSettled is stream.Env.Settled: it queues st, whose record moved on
// by itself (connected, or a 1.2 inbound stream wired), for the janitor
// to store. It does not block.
func (s *Server) noteSettled(st *stream.Stream) {
	s.mu.Lock()
	s.settled[st.Key] = st
	s.mu.Unlock()
}

// storeSettled stores the state of the streams that moved on by
// themselves since the last round. It stops at the first write the store
// refuses, keeping that stream and the rest for the next round (one store
// timeout per round at most); the log says so once per outage of the
// store. A stream whose change is never stored is restored in its stored
// state (wired, or a 1.2 inbound stream listening), and moves on again
// at its first connection.
func (s *Server) storeSettled() {
	s.mu.Lock()
	sts := make([]*stream.Stream, 0, len(s.settled))
	for k, st := range s.settled {
		sts = append(sts, st)
		delete(s.settled, k)
	}
	s.mu.Unlock()
	for i, st := range sts {
		err := s.storeSettledOne(st)
		if err == nil {
			continue
		}
		s.mu.Lock()
		for _, st := range sts[i:] {
			if s.settled[st.Key] == nil {
				s.settled[st.Key] = st
			}
		}
		said := s.settledFailing
		s.settledFailing = true
		s.mu.Unlock()
		if !said {
			s.log.Warn("could not store that a stream is connected (data passed), or a 1.2 stream wired (its partner came); trying again every second, and with its next change", "uid", st.UID, "owner", st.Key.Owner, "err", err)
		}
		return
	}
	s.mu.Lock()
	was := s.settledFailing && len(sts) > 0
	if len(sts) > 0 {
		s.settledFailing = false
	}
	s.mu.Unlock()
	if was {
		s.log.Info("stored the connected streams after all", "streams", len(sts))
	}
}

// storeSettledOne moves st's stored record on to the state st's record
// moved to by itself, changing nothing else of it (on a node of a
// facility another node may have stored a change this node has not
// mirrored yet): from wired to connected, or, for a 1.2 inbound stream,
// from listening to wired or connected. A record of another incarnation,
// ended, or in any other state is left alone (a pinned inbound stream
// leaves listening only by its attach, which stores its pin).
func (s *Server) storeSettledOne(st *stream.Stream) error {
	st.SaveMu.Lock() // as update does: never store a live record over the end's
	defer st.SaveMu.Unlock()
	if st.HasStopped() {
		return nil // ended (its end is stored) or shut down (keepCarried stores it)
	}
	rec, err := s.cfg.Store.Get(st.Key)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	cur := st.Record()
	if !rec.Created.Equal(cur.Created) || !settles(rec, cur.State) {
		return nil
	}
	rec.State = cur.State
	if err := s.cfg.Store.Put(rec); err != nil && !errors.Is(err, store.ErrEnded) {
		return err
	}
	return nil
}

// settles reports whether the stored record rec moves on to state, which
// its stream reached by itself.
func settles(rec *store.Record, state api.State) bool {
	switch rec.State {
	case api.StateWired:
		return state == api.StateConnected
	case api.StateListening:
		return rec.PeerCA && rec.Role == api.RoleInbound && (state == api.StateWired || state == api.StateConnected)
	}
	return false
}
