package gateway

import (
	"net/http"
	"sort"

	"scistream/internal/access"
	"scistream/internal/api"
	"scistream/internal/auth"
	"scistream/internal/observe"
	"scistream/internal/stream"
	"scistream/internal/version"
)

// What operators look at (internal/observe) reads the server through
// observed; the routes below guard and answer it.

// observed is the server as internal/observe reads it.
type observed struct{ s *Server }

func (o observed) Live() []*stream.Stream { return o.s.live() }

func (o observed) Gauges() observe.Gauges {
	s := o.s
	s.mu.Lock()
	requested, ready := len(s.pending), s.ready
	s.mu.Unlock()
	idle, open := s.env.Legs.Counts()
	ctrusted, cstrangers := s.cport.Conns()
	held, peak := s.env.Resume.Budget.Held()
	return observe.Gauges{
		ControlTrusted:   ctrusted,
		ControlStrangers: cstrangers,
		ControlRefused:   s.cport.RefusedSince(),
		Ready:            ready,
		Requested:        requested,
		PortsInUse:       s.alloc.InUse(),
		PortsCapacity:    s.cfg.PortRange.Size(),
		FilesInUse:       s.env.Files.InUse(),
		FilesCapacity:    s.env.Files.Max(),
		InHandshake:      s.strange.InHandshake(),
		Refused:          s.strange.RefusedSince(),
		IdleLegs:         idle,
		OpenLegs:         open,
		CapacityRate:     s.cfg.Capacity.Rate,
		Reserved:         s.env.BestEffort.Reserved(),
		ResumeHeld:       held,
		ResumePeak:       peak,
		ResumeCapacity:   s.cfg.Resume.Buffer,
		WANCC:            s.cfg.WANCC.Effective(),
		WANCCSet:         s.cfg.WANCC.Name != "",
	}
}

// handleStatus answers GET /v1/status: the gateway's health and the live
// streams, with their rate history: every identity's for a reader or an
// operator, the caller's own for anyone else.
func (s *Server) handleStatus(r *http.Request) (int, any, error) {
	p := access.Principal(r)
	out := api.GatewayStatus{
		Identity:   p.Identity,
		Scope:      api.ScopeOwn,
		Version:    version.Version,
		ListenerIP: s.cfg.ListenerIP,
		Now:        s.cfg.Now(),
		Started:    s.obs.Started(),
		Health:     s.obs.Health(),
		Streams:    []api.Stream{},
	}
	all := p.Has(auth.RoleReader)
	if all {
		out.Scope = api.ScopeAll
	}
	for _, st := range s.live() {
		if !all && st.Key.Owner != p.Identity {
			continue
		}
		v := s.view(st.Record(), st)
		v.Stats.Rates = st.Rates.View(true)
		out.Streams = append(out.Streams, v)
	}
	sort.Slice(out.Streams, func(i, j int) bool {
		a, b := out.Streams[i], out.Streams[j]
		return a.Created.Before(b.Created) || a.Created.Equal(b.Created) && a.UID+a.Owner < b.UID+b.Owner
	})
	return http.StatusOK, out, nil
}

// operatorView guards GET /metrics, which shows every identity's
// streams: readers and operators only (s2cs --roles names them).
func (s *Server) operatorView(h http.Handler) http.Handler { return s.authedHTTP(h, auth.RoleReader) }
