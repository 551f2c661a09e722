package gateway

import (
	"scistream/internal/api"
	"scistream/internal/store"
)

// An inbound stream is attached to its peer here (listening ->
// connected): from then on its WAN listeners accept legs from the pinned
// outbound gateway's certificate only.

// attach pins pin (the outbound gateway's certificate, "" for a transport
// that pins nothing) on the inbound stream st and persists the change.
// Attaching again with the same pin succeeds and changes nothing;
// another pin is a conflict.
func (s *Server) attach(st *stream, pin string) (*store.Record, error) {
	rec, ok := st.attach(pin, s.cfg.Now())
	if !ok {
		return nil, api.Errorf(api.CodeConflict, "stream %s is already attached to another peer certificate; release it and request a new stream", rec.UID)
	}
	if err := s.cfg.Store.Put(rec); err != nil {
		return nil, storeError("save the stream", err)
	}
	s.log.Info("stream attached", "uid", rec.UID, "peer_cert_sha256", pin)
	return rec, nil
}
