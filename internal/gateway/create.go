package gateway

import (
	"errors"
	"fmt"
	"net"
	"time"

	"scistream/internal/api"
	"scistream/internal/pace"
	"scistream/internal/ports"
	"scistream/internal/store"
	"scistream/internal/stream"
)

// A stream comes to life here: created from a checked record
// (requested -> listening for an inbound stream, -> wired for an
// outbound one), or restored from the store after a restart.

// create reserves rec.UID, binds its listeners, persists it and starts it.
func (s *Server) create(rec *store.Record) (*stream.Stream, error) {
	now := s.cfg.Now()
	rec.Created, rec.Updated = now, now
	rec.Expires = now.Add(time.Duration(rec.LeaseS) * time.Second)
	if err := s.reserve(rec); err != nil {
		return nil, err
	}
	defer s.unreserve(rec.Key())
	if old, err := s.cfg.Store.Get(rec.Key()); err == nil && !old.State.Terminal() {
		return nil, api.Errorf(api.CodeConflict, "stream %s already exists on this gateway; release it first or use another uid", rec.UID)
	} else if err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, storeError("read state", err)
	}
	if s.fac != nil {
		st, err := s.createOnNodes(rec)
		if err != nil {
			return nil, err
		}
		s.log.Info("stream created", "uid", rec.UID, "role", rec.Role, "owner", rec.Owner, "nodes", rec.Nodes,
			"ports", rec.Ports, "targets", rec.Targets, "wan", rec.WAN, "engine", rec.Engine, "rate", rateText(rec.Rate), "expires", rec.Expires)
		return st, nil
	}

	lns, err := s.listen(rec)
	if err != nil {
		if errors.Is(err, ports.ErrExhausted) {
			return nil, api.Errorf(api.CodeNoResources, "no free ports: %d wanted, range %s is in use; release streams or widen --port_range", rec.NumConn, s.cfg.PortRange).WithCause(err)
		}
		return nil, api.Errorf(api.CodeInternal, "bind listeners").WithCause(err)
	}
	for _, ln := range lns {
		rec.Ports = append(rec.Ports, ln.Addr().(*net.TCPAddr).Port)
	}
	st, err := s.build(rec, lns)
	if err != nil {
		for _, ln := range lns {
			s.alloc.Release(ln)
		}
		return nil, api.Errorf(api.CodeInternal, "create stream").WithCause(err)
	}
	if err := s.cfg.Store.Put(rec); err != nil {
		for _, ln := range lns {
			s.alloc.Release(ln)
		}
		s.abandon(rec, err)
		return nil, storeError("save the stream", err)
	}
	if err := s.launch(st); err != nil {
		return nil, err
	}
	if rec.WAN == api.WANTCP {
		s.log.Warn("stream uses a plaintext WAN leg: data crosses the WAN unencrypted", "uid", rec.UID)
	}
	s.log.Info("stream created", "uid", rec.UID, "role", rec.Role, "owner", rec.Owner,
		"listeners", st.ListenerAddrs(), "targets", rec.Targets, "wan", rec.WAN, "engine", rec.Engine,
		"rate", rateText(rec.Rate), "expires", rec.Expires)
	return st, nil
}

// abandon records the end of a stream whose creation failed to reach
// the store in time (err wraps store.ErrUnavailable): the write may have
// landed all the same, and a restart (or, in a facility, the other
// nodes) would then serve a stream its caller was told had failed. Its
// terminal record is stored now or, if the store still does not
// answer, by the janitor once it does (end.go); it says why.
func (s *Server) abandon(rec *store.Record, err error) {
	if !errors.Is(err, store.ErrUnavailable) {
		return
	}
	r := *rec
	s.finish(&r, api.StateFailed, "its creation was answered unavailable: the state store did not confirm it in time; request a new stream")
}

// restore brings back every non-terminal stream from the store.
func (s *Server) restore() error {
	recs, err := s.cfg.Store.List()
	if err != nil {
		return fmt.Errorf("read state: %w", err)
	}
	for _, rec := range recs {
		if rec.State.Terminal() {
			if rec.Secret != nil || rec.PeerCertSHA256 != "" {
				// Ended under a version that kept them.
				rec.Secret, rec.PeerCertSHA256 = nil, ""
				s.save(rec)
			}
			continue
		}
		if rec.State == api.StateRequested {
			s.fail(rec, "interrupted while being created")
			continue
		}
		if rec.Expires.IsZero() { // stored before leases existed
			rec.LeaseS = int(s.cfg.LeaseDefault.Seconds())
			rec.Expires = s.cfg.Now().Add(s.cfg.LeaseDefault)
		}
		lns, err := s.listenPorts(rec)
		if err != nil {
			s.fail(rec, fmt.Sprintf("could not bind its ports again after a restart: %v", err))
			continue
		}
		st, err := s.build(rec, lns)
		if err != nil {
			for _, ln := range lns {
				s.alloc.Release(ln)
			}
			s.fail(rec, fmt.Sprintf("could not restore: %v", err))
			continue
		}
		if !s.add(st) {
			st.Stop()
			return nil // shutting down
		}
		s.adoptHanded(st) // before it accepts: a peer's join finds its connections
		st.Start()
		s.log.Info("stream restored", "uid", rec.UID, "role", rec.Role, "state", rec.State, "listeners", st.ListenerAddrs(), "rate", rateText(rec.Rate), "expires", rec.Expires)
	}
	// Reservations come back as they were, admitted or not: they were
	// admitted once, and the capacity may only have shrunk since.
	s.rebalance()
	if all := pace.Rate(int64(s.env.BestEffort.Reserved())); s.cfg.Capacity.Rate > 0 && all > s.cfg.Capacity.Rate {
		s.log.Warn("restored streams reserve more than --capacity_rate; new reservations wait until enough of them end", "reserved", all, "capacity", s.cfg.Capacity.Rate)
	}
	return nil
}

// build makes the runtime of rec on its bound listeners, with the engine
// it asks for.
func (s *Server) build(rec *store.Record, lns []*net.TCPListener) (*stream.Stream, error) {
	eng, err := s.engines.Get(rec.Engine)
	if err != nil {
		return nil, err
	}
	if eng.Name() == "sockmap" {
		// Said once per stream: the kernel redirect needs two plain
		// TCP sockets.
		switch {
		case !s.engines.Kernel():
			s.log.Warn("engine sockmap not loaded on this gateway (it loads with s2cs --type sockmap; see the start-up log): the stream uses splice", "uid", rec.UID)
		case rec.WAN != api.WANTCP:
			s.log.Info("engine sockmap redirects only between plain TCP sockets: this stream's WAN legs are encrypted (tls or quic), so they are copied in user space; use --wan tcp on trusted circuits for the kernel redirect", "uid", rec.UID, "wan", rec.WAN)
		}
	}
	return stream.New(s.ctx, s.env, rec, lns, eng)
}

// launch puts the built stream st in the table and starts it, or stops
// it and fails once the server is shutting down.
func (s *Server) launch(st *stream.Stream) error {
	if !s.add(st) {
		st.Stop()
		return api.Errorf(api.CodeUnavailable, "gateway is shutting down")
	}
	st.Start()
	s.rebalance()
	return nil
}

// listen binds a new stream's listeners: TCP, plus UDP on the same ports
// for an inbound QUIC stream.
func (s *Server) listen(rec *store.Record) ([]*net.TCPListener, error) {
	if rec.Shared() {
		return nil, nil // the shared WAN port serves it
	}
	if usesUDP(rec) {
		return s.alloc.ListenWithUDP(rec.NumConn)
	}
	return s.alloc.Listen(rec.NumConn)
}

// listenPorts binds a restored stream's listeners again, on its ports.
func (s *Server) listenPorts(rec *store.Record) ([]*net.TCPListener, error) {
	if rec.Shared() {
		return nil, nil
	}
	if usesUDP(rec) {
		return s.alloc.ListenPortsWithUDP(rec.Ports)
	}
	return s.alloc.ListenPorts(rec.Ports)
}

// usesUDP reports whether rec's listeners need a UDP socket on their port.
func usesUDP(rec *store.Record) bool {
	return rec.WAN == api.WANQUIC && rec.Role == api.RoleInbound
}
