// Package gateway is the SciStream control server (S2CS) and the data
// servers (S2DS) it runs: it authenticates callers, admits stream requests,
// allocates ports, runs one proxy per stream and channel, keeps every
// stream's state in a store so a restart restores it, and reports status.
//
// Lifecycle: New(cfg) validates and fills defaults without opening any
// socket; Serve(ctx, ln) restores persisted streams and serves the control
// API on ln until ctx ends or Shutdown is called; Shutdown stops every
// proxy (keeping the records, so the next start restores them) and waits
// for every goroutine the server started.
package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"scistream/internal/api"
	"scistream/internal/auth"
	"scistream/internal/certs"
	"scistream/internal/ports"
	"scistream/internal/relay"
	"scistream/internal/sockmap"
	"scistream/internal/store"
	"scistream/internal/wan"
)

// Version is reported by GET /v1/info.
const Version = "0.1.0"

// Config configures a Server. Zero values are documented per field.
type Config struct {
	// ListenerIP is the address advertised to peers in listener
	// addresses. Required.
	ListenerIP string
	// BindIP is the address data listeners bind. If empty, ListenerIP.
	BindIP string
	// PortRange is where data listeners are allocated. Required.
	PortRange ports.Range
	// Identity is the gateway's certificate, used for the control API and
	// every WAN leg. Required.
	Identity *certs.Identity
	// Auth authenticates control-API callers. Required; use
	// auth.Anonymous only for an explicitly insecure gateway.
	Auth auth.Authenticator
	// Store persists stream records. Required.
	Store store.Store
	// Engine is the default data-plane engine. If empty, "splice".
	Engine string
	// QUIC tunes the "quic" WAN transport. Its zero value is the
	// defaults documented on wan.QUICConfig.
	QUIC wan.QUICConfig
	// BufferSize is the ring of the buffer engine for each direction of
	// each connection, in bytes (relay.MinBufferSize to
	// relay.MaxBufferSize). If zero, relay.DefaultBufferSize.
	BufferSize int
	// Sockmap is the loaded eBPF program behind the "sockmap" engine,
	// shared by every stream; the caller owns it and closes it after
	// Shutdown. If nil, streams whose engine is sockmap use splice.
	Sockmap *sockmap.Redirector
	// AllowTCPWAN admits streams whose WAN legs are plaintext TCP. If
	// false, such requests are refused.
	AllowTCPWAN bool
	// PendingTimeout is how long an inbound stream may wait for its
	// outbound peer before it expires and frees its ports. If zero, 15
	// minutes.
	PendingTimeout time.Duration
	// Retention is how long records of ended streams are kept for
	// status queries. If zero, 24 hours.
	Retention time.Duration
	// Logger receives structured logs. If nil, logs are discarded.
	Logger *slog.Logger
	// Now is the clock. If nil, time.Now.
	Now func() time.Time
}

// Server is a SciStream gateway's control server.
type Server struct {
	cfg     Config
	log     *slog.Logger
	alloc   *ports.Allocator
	engines *relay.Engines
	engine  relay.Engine // the default

	ctx    context.Context // parent of every stream's context
	cancel context.CancelFunc

	mu      sync.Mutex // guards the following fields
	streams map[string]*stream
	pending map[string]bool // UIDs being created
	closed  bool
	ready   bool

	httpSrv  *http.Server
	wg       sync.WaitGroup // janitor and HTTP serving
	stopOnce sync.Once
	done     chan struct{}
}

// New validates cfg and returns a Server. It opens no socket.
func New(cfg Config) (*Server, error) {
	if net.ParseIP(cfg.ListenerIP) == nil {
		return nil, fmt.Errorf("listener IP %q is not an IP address", cfg.ListenerIP)
	}
	if cfg.BindIP == "" {
		cfg.BindIP = cfg.ListenerIP
	}
	if net.ParseIP(cfg.BindIP) == nil {
		return nil, fmt.Errorf("bind IP %q is not an IP address", cfg.BindIP)
	}
	if cfg.PortRange.Lo == 0 {
		return nil, errors.New("port range required")
	}
	if cfg.Identity == nil {
		return nil, errors.New("identity (certificate) required")
	}
	if cfg.Auth == nil {
		return nil, errors.New("authenticator required")
	}
	if cfg.Store == nil {
		return nil, errors.New("store required")
	}
	if cfg.Engine == "" {
		cfg.Engine = "splice"
	}
	engines, err := relay.New(relay.Options{BufferSize: cfg.BufferSize, Sockmap: cfg.Sockmap})
	if err != nil {
		return nil, err
	}
	eng, err := engines.Get(cfg.Engine)
	if err != nil {
		return nil, err
	}
	if cfg.PendingTimeout == 0 {
		cfg.PendingTimeout = 15 * time.Minute
	}
	if cfg.Retention == 0 {
		cfg.Retention = 24 * time.Hour
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{
		cfg:     cfg,
		log:     cfg.Logger,
		alloc:   ports.New(cfg.BindIP, cfg.PortRange),
		engines: engines,
		engine:  eng,
		ctx:     ctx,
		cancel:  cancel,
		streams: map[string]*stream{},
		pending: map[string]bool{},
		done:    make(chan struct{}),
	}, nil
}

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
	s.httpSrv = &http.Server{
		Handler:           s.routes(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		TLSConfig: &tls.Config{
			MinVersion:   tls.VersionTLS12,
			Certificates: []tls.Certificate{s.cfg.Identity.TLS},
		},
	}
	s.mu.Unlock()

	if err := s.restore(); err != nil {
		ln.Close()
		s.Shutdown(context.Background())
		return err
	}
	s.wg.Add(1)
	go s.janitor()

	s.mu.Lock()
	s.ready = true
	s.mu.Unlock()

	errc := make(chan error, 1)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		errc <- s.httpSrv.Serve(tls.NewListener(ln, s.httpSrv.TLSConfig))
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
		live := make([]*stream, 0, len(s.streams))
		for _, st := range s.streams {
			live = append(live, st)
		}
		s.mu.Unlock()
		close(s.done)
		if hs != nil {
			if e := hs.Shutdown(ctx); e != nil {
				hs.Close()
			}
		}
		for _, st := range live {
			st.stop()
		}
		s.cancel()
		s.wg.Wait()
		s.mu.Lock()
		s.streams = map[string]*stream{}
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

// restore brings back every non-terminal stream from the store.
func (s *Server) restore() error {
	recs, err := s.cfg.Store.List()
	if err != nil {
		return fmt.Errorf("read state: %w", err)
	}
	for _, rec := range recs {
		if rec.State.Terminal() {
			continue
		}
		if rec.State == api.StateRequested {
			s.fail(rec, "interrupted while being created")
			continue
		}
		lns, err := s.listenPorts(rec)
		if err != nil {
			s.fail(rec, fmt.Sprintf("could not bind its ports again after a restart: %v", err))
			continue
		}
		st, err := s.newStream(rec, lns)
		if err != nil {
			for _, ln := range lns {
				s.alloc.Release(ln)
			}
			s.fail(rec, fmt.Sprintf("could not restore: %v", err))
			continue
		}
		s.mu.Lock()
		s.streams[rec.UID] = st
		s.mu.Unlock()
		st.start()
		s.log.Info("stream restored", "uid", rec.UID, "role", rec.Role, "state", rec.State, "listeners", st.listenerAddrs())
	}
	return nil
}

func (s *Server) fail(rec *store.Record, reason string) {
	rec.State = api.StateFailed
	rec.Reason = reason
	rec.Updated = s.cfg.Now()
	s.log.Warn("stream failed", "uid", rec.UID, "reason", reason)
	if err := s.cfg.Store.Put(rec); err != nil {
		s.log.Error("persist stream", "uid", rec.UID, "err", err)
	}
}

// janitor samples rates every second, expires inbound streams whose peer
// never came, and prunes old records of ended streams.
func (s *Server) janitor() {
	defer s.wg.Done()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	lastPrune := time.Time{}
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-tick.C:
		}
		now := s.cfg.Now()
		s.mu.Lock()
		live := make([]*stream, 0, len(s.streams))
		for _, st := range s.streams {
			live = append(live, st)
		}
		s.mu.Unlock()
		for _, st := range live {
			st.sample(now)
			if st.pendingSince(now) > s.cfg.PendingTimeout {
				s.log.Info("stream expired waiting for its outbound peer", "uid", st.uid, "timeout", s.cfg.PendingTimeout)
				s.end(st, api.StateExpired, fmt.Sprintf("no outbound peer attached within %s", s.cfg.PendingTimeout))
			}
		}
		if now.Sub(lastPrune) > time.Minute {
			lastPrune = now
			s.prune(now)
		}
	}
}

func (s *Server) prune(now time.Time) {
	recs, err := s.cfg.Store.List()
	if err != nil {
		s.log.Error("list records for pruning", "err", err)
		return
	}
	for _, r := range recs {
		if r.State.Terminal() && now.Sub(r.Updated) > s.cfg.Retention {
			if err := s.cfg.Store.Delete(r.UID); err != nil {
				s.log.Error("prune record", "uid", r.UID, "err", err)
			}
		}
	}
}

// end stops a live stream for good and records its terminal state.
func (s *Server) end(st *stream, state api.State, reason string) *store.Record {
	s.mu.Lock()
	if s.streams[st.uid] == st {
		delete(s.streams, st.uid)
	}
	s.mu.Unlock()
	st.stop()
	rec := st.record()
	rec.State = state
	rec.Reason = reason
	rec.Updated = s.cfg.Now()
	if err := s.cfg.Store.Put(rec); err != nil {
		s.log.Error("persist stream", "uid", rec.UID, "err", err)
	}
	st.setRecord(rec)
	return rec
}

// streamView returns the public view of a record (and live stats).
func (s *Server) streamView(rec *store.Record, st *stream) api.Stream {
	v := api.Stream{
		UID:            rec.UID,
		Role:           rec.Role,
		State:          rec.State,
		Owner:          rec.Owner,
		Targets:        slices.Clone(rec.Targets),
		NumConn:        rec.NumConn,
		WAN:            rec.WAN,
		Engine:         rec.Engine,
		Allow:          slices.Clone(rec.Allow),
		Created:        rec.Created,
		Updated:        rec.Updated,
		Reason:         rec.Reason,
		WANCertSHA256:  s.cfg.Identity.SHA256,
		PeerCertSHA256: rec.PeerCertSHA256,
	}
	for _, p := range rec.Ports {
		v.Listeners = append(v.Listeners, net.JoinHostPort(s.cfg.ListenerIP, fmt.Sprint(p)))
	}
	if st != nil {
		v.Stats = st.stats()
	}
	return v
}
