// Package gateway is the SciStream control server (S2CS): it
// authenticates callers, admits stream requests, allocates ports, starts
// and stops the data servers (S2DS: each running stream is an
// internal/stream.Stream), keeps every stream's state in a store so a
// restart restores it, and reports status.
//
// Lifecycle: New(cfg) validates and fills defaults without opening any
// socket; Serve(ctx, ln) restores persisted streams and serves the control
// API on ln until ctx ends or Shutdown is called; Shutdown stops every
// proxy (keeping the records, so the next start restores them) and waits
// for every goroutine the server started.
//
// It composes the packages of each concern: internal/access (who calls),
// internal/intake (a request turned into a record), internal/admission
// (what a stream may hold), internal/stream (a running stream),
// internal/wanport (the shared WAN port), internal/facility (a node of a
// facility), internal/observe (what operators watch), internal/controlport
// (the control port's listener), internal/legacy12 (the 1.2 protocol). Each gets what it
// needs of the server as a value or a small interface; none reaches back
// into the Server. Here:
//
//	settings.go  Config: the gateway's settings (internal/gateway/config: defaults, Validate, the plan of open files)
//	server.go    Server: New, Serve, Shutdown
//	routes.go    the HTTP layer: routes, authentication, error writing (internal/reqlog, internal/httpapi)
//	handlers.go  one thin handler per route, the public view
//	service.go   the operations another control protocol uses (internal/legacy12's backend)
//	streams.go   the table of live streams: reservation, lookup, ownership
//	create.go    a stream created (requested -> listening/wired) or restored
//	attach.go    an inbound stream attached to its peer (listening -> wired); wired -> connected stored
//	end.go       a stream ended (released, expired, failed) and the janitor
//	facility.go  the table as internal/facility uses it, and the create of a node
//	observe.go   what internal/observe reads of the server; GET /v1/status
//	admission.go the usage internal/admission decides on; best effort rebalanced
//	update.go    a running stream changed (rate, allow-list, lease) without dropping its connections
//	legacy12.go  the CA bundle of the 1.2 streams' WAN legs
package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"scistream/internal/admission"
	"scistream/internal/carry"
	"scistream/internal/controlport"
	"scistream/internal/egress"
	"scistream/internal/facility"
	"scistream/internal/fileplan"
	"scistream/internal/framed"
	"scistream/internal/handoff"
	"scistream/internal/intake"
	"scistream/internal/legpool"
	"scistream/internal/observe"
	"scistream/internal/pace"
	"scistream/internal/peerdial"
	"scistream/internal/ports"
	"scistream/internal/rates"
	"scistream/internal/relay"
	"scistream/internal/store"
	"scistream/internal/strangers"
	"scistream/internal/stream"
	"scistream/internal/wanport"
)

// Server is a SciStream gateway's control server.
type Server struct {
	cfg     Config
	log     *slog.Logger
	alloc   *ports.Allocator
	engines *relay.Engines
	env     *stream.Env // what every stream gets
	strange *strangers.Gate
	cport   *controlport.Gate            // the control port's connections (Config.Control)
	self    *egress.Self                 // the endpoints no stream may make the gateway dial
	files   fileplan.Plan                // the plan of open files, as Config.Files gave it
	handed  []handoff.Item               // Config.Handed, until restore gave them back (handover.go)
	adopted int                          // how many of them a stream took
	admit   admission.Policy             // what a stream may hold (Config.Capacity, Config.Quota)
	access  atomic.Pointer[accessConfig] // who may call: Config.Auth and Roles, or SetAccess's
	intake  *intake.Checker              // a request turned into a record
	obs     *observe.Observer            // what operators look at: metrics, status, rates
	fac     *facility.Node               // the node's side of its facility (internal/facility); nil for a gateway of one node
	unsaved *store.Unsaved               // final records, kept while the store refuses them
	handing atomic.Bool                  // HandOver began: a node of a facility keeps its lease at Shutdown

	ctx    context.Context // parent of every stream's context
	cancel context.CancelFunc

	mu      sync.Mutex // guards the following fields
	streams map[store.Key]*stream.Stream
	names   map[string]*stream.Stream   // the streams on the shared WAN port, by server name
	pending map[store.Key]*store.Record // being created, for reserve
	closed  bool
	ready   bool
	port    *wanport.Port // the shared WAN port, once open (Config.WAN)
	// settled holds the streams whose record moved on by itself
	// (connected; a 1.2 inbound stream wired), until the janitor stores
	// it (attach.go); settledFailing says the last try failed (said
	// once).
	settled        map[store.Key]*stream.Stream
	settledFailing bool
	// held counts the places of Config.Quota.Pending that SciStream 1.2
	// sessions hold, by owner and UID (HoldPending, legacy12.go).
	held map[store.Key]int

	httpSrv  *http.Server
	grpc     http.Handler   // the gRPC service on the control port (SetGRPC); nil: none
	wg       sync.WaitGroup // janitor and HTTP serving
	stopOnce sync.Once
	done     chan struct{}
}

// New validates cfg (Config.Validate, and that Identity, Auth and Store
// are set) and returns a Server. It opens no socket.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	switch {
	case cfg.Identity == nil:
		return nil, errors.New("identity (certificate) required")
	case cfg.Auth == nil:
		return nil, errors.New("authenticator required")
	case cfg.Store == nil:
		return nil, errors.New("store required")
	}
	if _, ok := cfg.Store.(*store.Etcd); cfg.Node != "" && !ok {
		return nil, &ConfigError{Field: "Node", Problem: "a node of a facility keeps its state in etcd with the other nodes: give s2cs --store etcd://HOST:PORT, or leave --node out"}
	}
	files, err := cfg.Files()
	if err != nil {
		return nil, err
	}
	sharedWAN, routed := cfg.WAN.Shared(), cfg.WAN.Advertise != "" // as given: the defaults differ by node
	cfg = cfg.WithDefaults()
	engines, err := cfg.Engines()
	if err != nil {
		return nil, err
	}
	paceable, err := engines.Get("splice")
	if err != nil {
		return nil, err
	}
	alloc := ports.New(cfg.BindIP, cfg.PortRange)
	alloc.SetSockets(cfg.Sockets)
	self := cfg.OwnEndpoints()
	strange := strangers.New(cfg.Strangers, cfg.Logger, cfg.Now())
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		cfg:     cfg,
		log:     cfg.Logger,
		alloc:   alloc,
		engines: engines,
		strange: strange,
		cport:   controlport.NewGate(cfg.Control, cfg.Logger),
		self:    self,
		files:   files,
		handed:  cfg.Handed,
		admit:   admission.Policy{Capacity: cfg.Capacity, Quota: cfg.Quota},
		env: &stream.Env{
			Log:       cfg.Logger,
			Alloc:     alloc,
			Cert:      &cfg.Identity.TLS,
			Rates:     rates.NewSettings(cfg.Observe.RateInterval, cfg.Observe.RateWindow),
			QUIC:      cfg.QUIC,
			Strangers: strange,
			Targets:   egress.New(cfg.AllowTargets, "--allow_targets", self),
			Peers:     egress.New(cfg.AllowPeers, "--allow_peers", self),
			WANCC:     cfg.WANCC.Name,
			Advertise: cfg.WAN.Advertise,
			AppWait:   cfg.AppWaitDefault, AppWaitMax: cfg.AppWaitMax,
			Legs:       legpool.New(cfg.Pool, cfg.Logger),
			Handshakes: peerdial.NewHandshakes(cfg.HandshakesPerPeer),
			Files:      stream.NewSlots(fileplan.PerConn * int64(cfg.MaxActiveConns)),
			BestEffort: pace.NewBestEffort(cfg.Capacity.Rate),
			Paceable:   paceable,
			Kernel:     engines.Kernel(),
			Facility:   cfg.Node != "",
			Resume: framed.Config{Window: cfg.Resume.ConnBuffer, Budget: carry.NewBudget(cfg.Resume.Buffer),
				ResumeWindow: cfg.Resume.Window, MaxStripes: cfg.Resume.WithDefaults().MaxStripe},
			ResumeMax: cfg.Resume.WindowMax,
		},
		ctx:     ctx,
		cancel:  cancel,
		streams: map[store.Key]*stream.Stream{},
		names:   map[string]*stream.Stream{},
		pending: map[store.Key]*store.Record{},
		unsaved: store.NewUnsaved(cfg.Store),
		done:    make(chan struct{}),

		settled: map[store.Key]*stream.Stream{},
		held:    map[store.Key]int{},
	}
	s.env.Settled = s.noteSettled
	s.obs = observe.New(cfg.Observe, observed{s}, cfg.Logger)
	s.access.Store(&accessConfig{cfg.Auth, cfg.Roles})
	s.intake = intake.New(intake.Config{
		ListenerIP: cfg.ListenerIP, BindIP: cfg.BindIP, PortRange: cfg.PortRange,
		WANPort: cfg.WAN.Port, WANDomain: cfg.WAN.Domain, Node: cfg.Node, AllowTCPWAN: cfg.AllowTCPWAN,
		Engines: engines, Engine: cfg.Engine, ConnFiles: fileplan.PerConn * cfg.MaxActiveConns, PoolMaxWarm: cfg.Pool.MaxWarm,
		Bounds: cfg.Bounds, ResumeWindowMax: cfg.Resume.WindowMax, MaxStripe: cfg.Resume.WithDefaults().MaxStripe,
		LookupHost: cfg.LookupHost, Targets: s.env.Targets, Peers: s.env.Peers,
	})
	if cfg.Node != "" {
		s.fac = s.newFacility(sharedWAN, routed)
		s.env.Reread = cfg.Store.Get
	}
	return s, nil
}

// Files returns the gateway's plan of its open files (Config.Files).
func (s *Server) Files() fileplan.Plan { return s.files }

// Serve restores persisted streams, then serves the control API over TLS
// on ln until ctx is cancelled or Shutdown is called. It returns after
// shutdown has completed. Serve closes ln.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ln.Close()
		return http.ErrServerClosed
	}
	s.self.AddListener(ln.Addr(), "this gateway's own control port")
	s.httpSrv = s.httpServer(s.routes())
	s.httpSrv.TLSConfig = &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{s.cfg.Identity.TLS},
	}
	s.mu.Unlock()

	if s.cfg.WAN.Port != 0 {
		wp, err := wanport.Open(s.cfg.BindIP, s.cfg.WAN, s.env, s.cfg.QUIC, s.byName, s.cfg.Sockets)
		if err != nil {
			ln.Close()
			s.Shutdown(context.Background())
			return err
		}
		s.mu.Lock()
		closed := s.closed
		if !closed {
			s.port, s.env.Port = wp, wp
		}
		s.mu.Unlock()
		if closed {
			wp.Close()
			ln.Close()
			return http.ErrServerClosed
		}
		s.log.Info("shared WAN port open", "bind", wp.Addr().String(), "advertised", s.cfg.WAN.Advertise, "domain", s.cfg.WAN.Domain, "proxy_protocol", s.cfg.WAN.ProxyProtocol, "proxy_from", s.cfg.WAN.ProxyFrom)
	}
	restore := s.restore
	if s.fac != nil {
		restore = s.joinFacility
	}
	err := restore()
	s.closeUnadopted()
	if err != nil {
		ln.Close()
		s.Shutdown(context.Background())
		return err
	}
	if s.port != nil {
		s.port.Start()
	}
	s.wg.Add(1)
	go s.janitor()
	s.obs.Serve(s.ctx, s.httpServer) // the rate sampler and the plain metrics listener

	s.mu.Lock()
	s.ready = true
	s.mu.Unlock()

	errc := make(chan error, 1)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		errc <- s.httpSrv.Serve(s.controlListen(ln))
	}()
	select {
	case <-ctx.Done():
	case <-s.done:
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			s.Shutdown(context.Background())
			return fmt.Errorf("serve control API: %w", err)
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s.Shutdown(sctx)
}

// httpServer returns an HTTP server of h with the gateway's bounds on a
// request's time and header size, logging to the gateway's log. Its
// hooks tie the control port's connections to their places at the gate
// (internal/controlport); they leave other listeners' alone.
func (s *Server) httpServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		ConnState:         s.cport.ConnState,
		ConnContext:       controlport.ConnContext,
	}
}

// Shutdown stops the control API and every proxy, keeping stream records
// so the next start restores them, and waits for all goroutines. It is
// idempotent; ctx bounds the graceful drain of control requests.
func (s *Server) Shutdown(ctx context.Context) error {
	var err error
	s.stopOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.ready = false
		hs := s.httpSrv
		port := s.port
		s.mu.Unlock()
		close(s.done)
		if hs != nil {
			if e := hs.Shutdown(ctx); e != nil {
				hs.Close()
			}
		}
		s.obs.Close()
		if port != nil {
			port.Close() // no new legs; the streams' own end below
		}
		keep := s.fac == nil // a node of a facility keeps no counters (keepCarried)
		if !keep {
			// keepCarried would store a stream gone connected in the
			// last second with its record; a node of a facility
			// stores just that change, as the janitor would have.
			s.storeSettled()
		}
		for _, st := range s.live() {
			st.Stop()
			if keep && !s.keepCarried(st) {
				// The store refused: each further write would wait out
				// its timeout too (3 s on etcd), and a stop must stay
				// within its unit's TimeoutStopSec.
				keep = false
				s.log.Warn("stopped storing what streams carried: the store refused; their counters start again from zero at the next start")
			}
		}
		s.cancel()
		s.wg.Wait()
		s.obs.Wait()
		if s.fac != nil {
			if s.handing.Load() {
				// The successor joins under the same name and moves the
				// claims onto its own lease: the other nodes take
				// nothing over meanwhile (the old lease runs out).
				s.fac.Close()
			} else {
				s.fac.Leave() // its channels move to the other nodes now
			}
		}
		s.saveUnsaved() // a last try
		s.mu.Lock()
		s.streams = map[store.Key]*stream.Stream{}
		s.mu.Unlock()
		err = s.cfg.Store.Close()
	})
	return err
}

// Ready reports whether the server has restored its streams and serves.
func (s *Server) Ready() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ready
}

// maxHeaderBytes bounds the header block of a control request.
const maxHeaderBytes = 64 << 10
