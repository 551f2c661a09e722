package gateway

import (
	"context"
	"errors"
	"fmt"

	"scistream/internal/framed"
	"scistream/internal/handoff"
	"scistream/internal/store"
	"scistream/internal/stream"
)

// A live upgrade (kill -USR2 on s2cs, cmd/s2cs/upgrade.go): HandOver
// freezes every stream's framed connections and stops the gateway as
// Shutdown does (records kept, the watch legs saying "stopping"); the
// successor, started with them as Config.Handed, restores the streams
// and gives each its connections back (adoptHanded) before it starts
// them. A node of a facility keeps its lease: its successor joins
// under the same name and moves the claims onto its own lease
// (facility.Node.Close), so no other node takes its channels over.

// HandOver freezes the framed connections of every stream, then shuts
// the gateway down, keeping the records. It returns what the successor
// takes, the connections and the listening sockets of Config.Sockets
// (their files: close them once passed on); err says which
// connections could not be frozen (they end now, reset, as at a
// restart) and how the shutdown went.
func (s *Server) HandOver(ctx context.Context) ([]handoff.Item, error) {
	var items []handoff.Item
	var errs []error
	s.handing.Store(true)
	// The listening sockets first (Config.Sockets): what arrives from
	// now on, while neither process accepts, waits in their queues;
	// then no stream accepts here any more, and nothing new starts
	// that the freeze would miss.
	sockets := s.cfg.Sockets.Items()
	live := s.live()
	for _, st := range live {
		st.CloseListeners()
	}
	for _, st := range live {
		handed, files, err := st.FreezeConns()
		if err != nil {
			errs = append(errs, fmt.Errorf("stream %s: %w", st.UID, err))
		}
		name := handedName(st.Record().Key())
		for i, hd := range handed {
			b, err := hd.MarshalBinary()
			if err != nil {
				files[i].Close()
				errs = append(errs, err)
				continue
			}
			items = append(items, handoff.Item{Kind: handoff.KindConn, Name: name, Record: b, File: files[i]})
		}
	}
	conns := len(items)
	items = append(items, sockets...)
	s.log.Info("live upgrade: connections frozen for the new process", "connections", conns, "listeners", len(sockets))
	if err := s.Shutdown(ctx); err != nil {
		errs = append(errs, err)
	}
	return items, errors.Join(errs...)
}

// handedName names the stream of key in a handed-over item: its UID,
// then its owner (a UID holds no space).
func handedName(k store.Key) string { return k.UID + " " + k.Owner }

// adoptHanded gives st the connections of Config.Handed that are its,
// before it starts.
func (s *Server) adoptHanded(st *stream.Stream) {
	name := handedName(st.Record().Key())
	for i := range s.handed {
		it := &s.handed[i]
		if it.File == nil || it.Name != name {
			continue
		}
		f := it.File
		it.File = nil
		var hd framed.Handed
		err := hd.UnmarshalBinary(it.Record)
		if err != nil {
			f.Close()
		} else {
			err = st.AdoptConn(hd, f)
		}
		if err != nil {
			s.log.Warn("live upgrade: a connection handed over could not be taken back: its application is reset", "uid", st.UID, "err", err)
			continue
		}
		s.adopted++
	}
}

// closeUnadopted closes the files of the handed-over connections no
// stream took (its stream ended meanwhile, or failed to restore): their
// applications are reset.
func (s *Server) closeUnadopted() {
	if len(s.handed) == 0 {
		return
	}
	reset := 0
	for i := range s.handed {
		if f := s.handed[i].File; f != nil {
			f.Close()
			s.handed[i].File = nil
			reset++
		}
	}
	s.log.Info("live upgrade: connections handed over taken back", "taken", s.adopted, "of", len(s.handed), "reset", reset)
	s.handed = nil
}
