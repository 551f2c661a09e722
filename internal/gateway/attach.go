package gateway

import (
	"scistream/internal/api"
	"scistream/internal/pace"
	"scistream/internal/store"
	"scistream/internal/stream"
)

// An inbound stream is attached to its peer here (listening ->
// connected): from then on its WAN listeners accept legs from the pinned
// outbound gateway's certificate only, and its rate is settled on what
// both gateways granted.

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
