package gateway

import (
	"context"
	"encoding/base64"
	"net"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"time"

	"scistream/internal/access"
	"scistream/internal/api"
	"scistream/internal/httpapi"
	"scistream/internal/intake"
	"scistream/internal/store"
	"scistream/internal/stream"
	"scistream/internal/version"
)

// One handler per route of routes.go. Each decodes its request, asks
// internal/intake for a record and the lifecycle files (create.go, attach.go,
// end.go) for the change, and answers with the public view.

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	if !s.Ready() {
		httpapi.WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "starting"})
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) handleInfo(r *http.Request) (int, any, error) {
	wans := []string{api.WANTLS, api.WANQUIC}
	if s.cfg.AllowTCPWAN {
		wans = append(wans, api.WANTCP)
	}
	info := api.Info{
		Version:              version.Version,
		ListenerIP:           s.cfg.ListenerIP,
		PortRange:            s.cfg.PortRange.String(),
		Engines:              s.engines.Names(),
		DefaultEngine:        s.cfg.Engine,
		WAN:                  wans,
		WANCertSHA256:        s.cfg.Identity.SHA256,
		WANCC:                s.cfg.WANCC.Effective(),
		WANCCSet:             s.cfg.WANCC.Name != "",
		MaxStripe:            s.cfg.Resume.WithDefaults().MaxStripe,
		WANPort:              s.cfg.WAN.Advertise,
		WANDomain:            s.cfg.WAN.Domain,
		PoolPolicy:           s.cfg.Pool.Policy,
		PoolMaxPerPeer:       s.cfg.Pool.MaxPerPeer,
		PoolMaxWarm:          s.cfg.Pool.MaxWarm,
		Identity:             access.Identity(r),
		Roles:                access.RoleNames(access.Principal(r)),
		AppWaitDefaultS:      int(s.cfg.AppWaitDefault / time.Second),
		AppWaitMaxS:          int(s.cfg.AppWaitMax / time.Second),
		ResumeWindowDefaultS: int(s.cfg.Resume.Window / time.Second),
		ResumeWindowMaxS:     int(s.cfg.Resume.WindowMax / time.Second),
		CapacityRate:         int64(s.cfg.Capacity.Rate),
		ReservedRate:         int64(s.env.BestEffort.Reserved()),
		CapacityStreams:      s.cfg.Capacity.Streams,
		CapacityConns:        s.cfg.Capacity.Conns,
		QuotaRate:            int64(s.cfg.Quota.Rate),
		LeaseDefaultS:        int(s.cfg.LeaseDefault / time.Second),
		LeaseMaxS:            int(s.cfg.LeaseMax / time.Second),
	}
	if s.fac != nil {
		s.fac.Info(&info)
	}
	return http.StatusOK, info, nil
}

func (s *Server) handleInbound(r *http.Request) (int, any, error) {
	rec, v, err := createFrom(s, r, s.intake.Inbound)
	if err != nil {
		return 0, nil, err
	}
	// The secret is returned here, once, to the owner only.
	v.Secret = base64.StdEncoding.EncodeToString(rec.Secret)
	return http.StatusCreated, v, nil
}

func (s *Server) handleOutbound(r *http.Request) (int, any, error) {
	_, v, err := createFrom(s, r, s.intake.Outbound)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusCreated, v, nil
}

// createFrom decodes a create request of type Req, turns it into a
// record with toRecord, creates the stream, and returns the record and
// the stream's view with this gateway's WAN certificate (for the peer to
// pin).
func createFrom[Req any](s *Server, r *http.Request, toRecord func(context.Context, *Req, string) (*store.Record, error)) (*store.Record, api.Stream, error) {
	var req Req
	if err := httpapi.Decode(r, &req); err != nil {
		return nil, api.Stream{}, err
	}
	rec, err := toRecord(r.Context(), &req, access.Identity(r))
	if err != nil {
		return nil, api.Stream{}, err
	}
	st, err := s.create(rec)
	if err != nil {
		return nil, api.Stream{}, err
	}
	v := s.view(st.Record(), st)
	v.WANCert = string(s.cfg.Identity.PEM)
	return rec, v, nil
}

func (s *Server) handleAttach(r *http.Request) (int, any, error) {
	st, rec, err := s.owned(r.PathValue("uid"), access.Identity(r))
	if err != nil {
		return 0, nil, err
	}
	var req api.AttachRequest
	if r.ContentLength != 0 { // a tcp stream has nothing to attach: no body needed
		if err := httpapi.Decode(r, &req); err != nil {
			return 0, nil, err
		}
	}
	if st == nil {
		return 0, nil, api.Errorf(api.CodeConflict, "stream %s has ended (%s); request a new one", rec.UID, rec.State)
	}
	pin, err := intake.AttachPin(&req, rec)
	if err != nil {
		return 0, nil, err
	}
	nr, err := s.attach(st, pin, req.Rate)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, s.view(nr, st), nil
}

func (s *Server) handleList(r *http.Request) (int, any, error) {
	owner, allOwners, err := access.OwnerParam(r)
	if err != nil {
		return 0, nil, err
	}
	mine := func(o string) bool { return allOwners || o == owner }
	all := r.URL.Query().Get("all")
	if all != "" && all != "true" && all != "false" && all != "1" && all != "0" {
		return 0, nil, api.Errorf(api.CodeInvalidArgument, "all=%.20q: use true or false", all)
	}
	showEnded := all == "true" || all == "1"
	out := api.StreamList{Streams: []api.Stream{}}
	live := map[store.Key]bool{}
	for _, st := range s.live() {
		if mine(st.Key.Owner) {
			live[st.Key] = true
			out.Streams = append(out.Streams, s.view(st.Record(), st))
		}
	}
	if showEnded {
		recs, err := s.cfg.Store.List()
		if err != nil {
			return 0, nil, storeError("read state", err)
		}
		recs = append(recs, s.unsaved.List()...) // ended; the store has not taken them yet
		seen := map[store.Key]bool{}
		for i := len(recs) - 1; i >= 0; i-- { // unsaved ones last: they win
			rec := recs[i]
			if mine(rec.Owner) && !live[rec.Key()] && !seen[rec.Key()] && rec.State.Terminal() {
				seen[rec.Key()] = true
				out.Streams = append(out.Streams, s.view(rec, nil))
			}
		}
	}
	sort.Slice(out.Streams, func(i, j int) bool { return out.Streams[i].Created.Before(out.Streams[j].Created) })
	return http.StatusOK, out, nil
}

func (s *Server) handleGet(r *http.Request) (int, any, error) {
	st, rec, err := s.ownedBy(r)
	if err != nil {
		return 0, nil, err
	}
	v := s.view(rec, st)
	v.WANCert = string(s.cfg.Identity.PEM) // so a client that lost it can still attach
	return http.StatusOK, v, nil
}

func (s *Server) handleRelease(r *http.Request) (int, any, error) {
	st, rec, err := s.ownedBy(r)
	if err != nil {
		return 0, nil, err
	}
	// Already ended: releasing again is a no-op that reports the end.
	return http.StatusOK, s.release(st, rec, access.Identity(r)), nil
}

// view returns the public view of a record, with the live stats of st
// if it runs.
// wanCCOf is the congestion control of the gateway's ends of WAN legs
// of transport wan: the gateway's for TCP legs, none said for QUIC's.
func (s *Server) wanCCOf(wan string) string {
	if wan == api.WANQUIC {
		return ""
	}
	return s.cfg.WANCC.Effective()
}

func (s *Server) view(rec *store.Record, st *stream.Stream) api.Stream {
	v := api.Stream{
		UID:            rec.UID,
		Role:           rec.Role,
		State:          rec.State,
		Owner:          rec.Owner,
		Targets:        slices.Clone(rec.Targets),
		NumConn:        rec.NumConn,
		WAN:            rec.WAN,
		WANCC:          s.wanCCOf(rec.WAN),
		Engine:         rec.Engine,
		Allow:          slices.Clone(rec.Allow),
		MaxActiveConns: rec.MaxActiveConns,
		Created:        rec.Created,
		Updated:        rec.Updated,
		Reason:         rec.Reason,
		Rate:           rec.Rate,
		RateRequested:  rec.RateRequested,
		MinRate:        rec.MinRate,
		LeaseS:         rec.LeaseS,
		Expires:        rec.Expires,
		WANCertSHA256:  s.cfg.Identity.SHA256,
		PeerCertSHA256: rec.PeerCertSHA256,
	}
	if rec.Role == api.RoleInbound {
		w := int(s.env.AppWaitFor(rec) / time.Second)
		v.AppWaitS = &w
	}
	resume := int(s.env.ResumeWindowFor(rec) / time.Second)
	v.ResumeWindowS = &resume
	if rec.Stripe > 1 {
		v.Stripe = rec.Stripe
	}
	for _, p := range rec.Ports {
		v.Listeners = append(v.Listeners, net.JoinHostPort(s.cfg.ListenerIP, strconv.Itoa(p)))
	}
	if rec.Shared() {
		v.Listeners = []string{s.cfg.WAN.Advertise}
		v.WANServerName = rec.ServerName
	}
	if s.fac != nil && !rec.State.Terminal() {
		s.fac.View(&v, rec)
	}
	v.PeerServerName = rec.PeerServerName
	v.WANPool = rec.WANPool
	if st == nil && rec.Carried != nil { // ended: its final counters
		v.Stats = &api.Stats{BytesToWAN: rec.Carried.BytesToWAN, BytesFromWAN: rec.Carried.BytesFromWAN, TotalConns: rec.Carried.Conns}
	}
	if st != nil {
		v.Stats = st.Stats()
		v.EngineNote = st.EngineNote()
	}
	return v
}
