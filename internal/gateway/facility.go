package gateway

import (
	"errors"
	"net"

	"scistream/internal/api"
	"scistream/internal/facility"
	"scistream/internal/store"
	"scistream/internal/stream"
)

// A node of a facility of several (Config.Node) is internal/facility's
// Node; it reads and changes the server's table through table, and the
// server keeps the state changes of a stream (build, launch, end).

// newFacility returns the Node of a gateway of a facility, which has not
// joined yet.
func (s *Server) newFacility(sharedWAN string, routed bool) *facility.Node {
	cfg := s.cfg
	return facility.NewNode(facility.Config{
		Node:       cfg.Node,
		Store:      cfg.Store.(*store.Etcd), // New checked
		Info:       store.NodeInfo{Host: cfg.ListenerIP, CertSHA256: cfg.Identity.SHA256},
		TTL:        cfg.Takeover / 2,
		Now:        cfg.Now,
		SharedWAN:  sharedWAN,
		Routed:     routed,
		ListenerIP: cfg.ListenerIP,
		Alloc:      s.alloc,
		PortRange:  cfg.PortRange,
		Self:       s.self,
		Log:        s.log,
		Table:      table{s},
	})
}

// joinFacility joins the facility, bringing its streams into the table
// and serving the channels placed on this node, and starts the
// reconciler.
func (s *Server) joinFacility() error {
	if err := s.fac.Join(); err != nil {
		return err
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.fac.Serve(s.ctx)
	}()
	return nil
}

// createOnNodes is create for a node of a facility: the facility places
// the stream's channels and stores its record (facility.Node.Create),
// this node serves those placed on it and waits for the other nodes to
// serve theirs (serving any they do not). The caller holds rec's
// reservation.
func (s *Server) createOnNodes(rec *store.Record) (*stream.Stream, error) {
	mine, err := s.fac.Create(rec)
	var se *facility.StoreError
	if errors.As(err, &se) {
		s.abandon(rec, se.Err)
		return nil, storeError("save the stream", se.Err)
	}
	if err != nil {
		return nil, err
	}
	st, err := s.build(rec, mine)
	if err != nil {
		for _, ln := range mine {
			if ln != nil {
				s.alloc.Release(ln)
			}
		}
		s.finish(rec, api.StateFailed, "could not start")
		return nil, api.Errorf(api.CodeInternal, "create stream").WithCause(err)
	}
	if err := s.launch(st); err != nil {
		return nil, err
	}
	s.fac.AwaitClaims(st, rec)
	return st, nil
}

// stewards reports whether this node runs the janitor's work for st:
// always on a gateway of one node (facility.Node.Stewards).
func (s *Server) stewards(st *stream.Stream) bool {
	return s.fac == nil || s.fac.Stewards(st)
}

// table is the server's table of live streams as the facility uses it.
type table struct{ s *Server }

func (t table) Lookup(k store.Key) (*stream.Stream, bool, bool) {
	s := t.s
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.streams[k], s.pending[k] != nil, s.closed
}

func (t table) Live() []*stream.Stream { return t.s.live() }

func (t table) Adopt(rec *store.Record, lns []*net.TCPListener) (*stream.Stream, error) {
	s := t.s
	st, err := s.build(rec, lns)
	if err != nil {
		return nil, err
	}
	if !s.add(st) {
		st.Stop()
		return nil, nil
	}
	s.adoptHanded(st) // a live upgrade: before it accepts, as in restore
	st.Start()
	s.rebalance()
	return st, nil
}

func (t table) Drop(st *stream.Stream) { t.s.remove(st) }

func (t table) Rebalance() { t.s.rebalance() }
