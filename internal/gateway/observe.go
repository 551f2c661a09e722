package gateway

import (
	"errors"
	"net"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"scistream/internal/api"
	"scistream/internal/rates"
	"scistream/internal/version"
)

// What an operator watches: the Prometheus metrics (metrics.go), the
// gateway's status for the status page (GET /v1/status, statuspage.go),
// and the optional plain-HTTP metrics listener, all read from the same
// counters the streams and the server keep anyway; the sampled rates are
// internal/rates'.
//
// Who may look: readers and operators (operatorView), whom a roles file
// names (s2cs --roles); the metrics and the status show every identity's
// streams, their owners and peers.
// The plain metrics listener authenticates nobody and encrypts nothing:
// it is off unless the operator gives it, and it serves GET /metrics and
// nothing else, never the API.

// The bounds and defaults of ObserveConfig's rate settings, as
// internal/rates has them.
const (
	DefaultRateInterval = rates.DefaultInterval
	DefaultRateWindow   = rates.DefaultWindow
	MinRateInterval     = rates.MinInterval
	MaxRateInterval     = rates.MaxInterval
	MaxWindowSamples    = rates.MaxWindowSamples
)

// ObserveConfig configures the gateway's metrics listener and how it
// samples its streams' rates. Its zero value: no plain metrics listener,
// a sample every second, a window of a minute.
type ObserveConfig struct {
	// MetricsListener, if not nil, is a listener on which the gateway
	// also serves GET /metrics, and nothing else, over plain HTTP and
	// without authentication, for a scraper inside the facility. Serve
	// serves it and Shutdown closes it (also if Serve never ran). If it
	// is not on a loopback address the gateway warns at start. If nil,
	// the metrics are on the control API only, authenticated.
	MetricsListener net.Listener
	// RateInterval is the time between two samples of every stream's
	// rates (internal/rates), MinRateInterval to MaxRateInterval. If zero,
	// DefaultRateInterval.
	RateInterval time.Duration
	// RateWindow is the span of the recent rates (their mean, standard
	// deviation and peak, and the status page's chart), at least one
	// interval and at most MaxWindowSamples of them. If zero,
	// DefaultRateWindow.
	RateWindow time.Duration
}

// Validate reports the first rate setting New would refuse, as a
// *ConfigError on Observe.RateInterval or Observe.RateWindow;
// Config.Validate calls it.
func (c ObserveConfig) Validate() error {
	iv := c.RateInterval
	if iv == 0 {
		iv = DefaultRateInterval
	}
	switch {
	case c.RateInterval < 0 || c.RateInterval > 0 && c.RateInterval < MinRateInterval:
		return fieldError("Observe.RateInterval", "%s is too short: give %s to %s, e.g. 1s", c.RateInterval, MinRateInterval, MaxRateInterval)
	case c.RateInterval > MaxRateInterval:
		return fieldError("Observe.RateInterval", "%s is too long: give %s to %s, e.g. 1s", c.RateInterval, MinRateInterval, MaxRateInterval)
	case c.RateWindow < 0 || c.RateWindow > 0 && c.RateWindow < iv:
		return fieldError("Observe.RateWindow", "%s is shorter than the sampling interval (%s): give at least that, e.g. 1m", c.RateWindow, iv)
	case c.RateWindow/iv > MaxWindowSamples:
		return fieldError("Observe.RateWindow", "%s holds %d samples of %s, more than %d: shorten it or lengthen the interval", c.RateWindow, c.RateWindow/iv, iv, MaxWindowSamples)
	}
	return nil
}

// observer is the server's part that operators look through.
type observer struct {
	started time.Time
	reg     *prometheus.Registry
	metrics http.Handler // the registry's exposition (metrics.go)
	page    statusPage   // the status page (statuspage.go)

	apiErrors []atomic.Int64  // error answers, by index in api.Codes
	endedBy   [3]atomic.Int64 // streams ended: released, expired, failed

	mu     sync.Mutex // guards the following fields
	ln     net.Listener
	plain  *http.Server // serving ln, once Serve started it
	closed bool
}

func newObserver(s *Server) *observer {
	o := &observer{started: time.Now(), ln: s.cfg.Observe.MetricsListener, page: newStatusPage(),
		apiErrors: make([]atomic.Int64, len(api.Codes()))}
	o.reg, o.metrics = newMetrics(s)
	return o
}

// apiError counts an error answer of code c.
func (o *observer) apiError(c api.Code) {
	for i, k := range api.Codes() {
		if k == c {
			o.apiErrors[i].Add(1)
			return
		}
	}
	o.apiErrors[len(o.apiErrors)-1].Add(1) // not in api.Codes (a test keeps it complete): internal
}

// endedStates are the terminal states, in the order of observer.endedBy.
func endedStates() []api.State {
	return []api.State{api.StateReleased, api.StateExpired, api.StateFailed}
}

// ended counts a stream that reached terminal state st.
func (o *observer) ended(st api.State) {
	for i, k := range endedStates() {
		if k == st {
			o.endedBy[i].Add(1)
		}
	}
}

// serveObservers starts the rate sampler and, if the gateway has one,
// the plain metrics listener's server; both end with Shutdown.
func (s *Server) serveObservers() {
	o := s.obs
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return
	}
	s.wg.Add(1)
	go s.sampler()
	if o.ln == nil {
		return
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", o.metrics)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "not found: this listener serves GET /metrics only; the control API and the status page are on the control port (https)", http.StatusNotFound)
	})
	o.plain = s.httpServer(mux)
	addr := o.ln.Addr().String()
	if ta, ok := o.ln.Addr().(*net.TCPAddr); !ok || !ta.IP.IsLoopback() {
		s.log.Warn("the metrics listener is not on a loopback address: it serves GET /metrics (every stream's uid, owner and counters) without authentication or encryption to whoever reaches it; let only the scraper reach it", "metrics_listen", addr)
	}
	s.log.Info("metrics listener open (plain HTTP, GET /metrics only)", "metrics_listen", addr)
	srv, ln := o.plain, o.ln
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("metrics listener failed; the metrics stay on the control API", "metrics_listen", addr, "err", err)
		}
	}()
}

// close stops the plain metrics listener (or closes it if it never
// served). Idempotent.
func (o *observer) close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return
	}
	o.closed = true
	if o.plain != nil {
		o.plain.Close()
	} else if o.ln != nil {
		o.ln.Close()
	}
}

// health returns what the gateway holds and has refused: the status
// page's health and the gateway-wide metrics, from one reading.
func (s *Server) health() api.GatewayHealth {
	h := api.GatewayHealth{
		Ready:             s.Ready(),
		Streams:           map[string]int64{},
		PortsInUse:        s.alloc.InUse(),
		PortsCapacity:     s.cfg.PortRange.Size(),
		ConnFilesInUse:    s.env.Files.InUse(),
		ConnFilesCapacity: s.env.Files.Max(),
		WANConns:          map[string]int64{"handshake": int64(s.strange.InHandshake())},
		APIErrors:         map[string]int64{},
		Refused:           s.strange.RefusedSince(),
	}
	for _, st := range []api.State{api.StateRequested, api.StateListening, api.StateConnected} {
		h.Streams[string(st)] = 0
	}
	s.mu.Lock()
	h.Streams[string(api.StateRequested)] = int64(len(s.pending))
	s.mu.Unlock()
	var waiting, relaying int64
	for _, st := range s.live() {
		h.Streams[string(st.Record().State)]++
		waiting += st.WaitingApp.Load()
		relaying += st.Active.Load()
	}
	for i, k := range endedStates() {
		h.Streams[string(k)] = s.obs.endedBy[i].Load()
	}
	h.WANConns["waiting"], h.WANConns["relaying"] = waiting, relaying
	idle, open := s.env.Legs.Counts()
	h.PooledLegs = map[string]int64{"idle": int64(idle), "busy": int64(max(0, open-idle))}
	for i, c := range api.Codes() {
		h.APIErrors[string(c)] = s.obs.apiErrors[i].Load()
	}
	return h
}

// handleStatus answers GET /v1/status: the gateway's health and every
// live stream, whoever owns it, with its rate history.
func (s *Server) handleStatus(r *http.Request) (int, any, error) {
	out := api.GatewayStatus{
		Version:    version.Version,
		ListenerIP: s.cfg.ListenerIP,
		Now:        s.cfg.Now(),
		Started:    s.obs.started,
		Health:     s.health(),
		Streams:    []api.Stream{},
	}
	for _, st := range s.live() {
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

// operatorView guards what operators look at (GET /metrics, GET
// /v1/status), which shows every identity's streams: readers and
// operators only (s2cs --roles names them).
func (s *Server) operatorView(h http.Handler) http.Handler { return s.authedHTTP(h, roleReader) }
