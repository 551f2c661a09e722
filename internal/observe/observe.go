// Package observe is what an operator watches of a gateway: the
// Prometheus metrics (metrics.go), the gateway's health for GET
// /v1/status and the status page (statuspage.go), the optional
// plain-HTTP metrics listener, and the sampler of every stream's rates
// (internal/rates has the statistics). Everything is read, at scrape or
// request time, from the counters the streams and the gateway keep
// anyway (the Gateway interface), so no increment on the data path is
// done twice; the Observer itself counts only the API's error answers
// and the streams that ended.
//
// Who may look is the gateway's to decide (its HTTP layer guards GET
// /metrics and GET /v1/status). The plain metrics listener
// authenticates nobody and encrypts nothing: it is off unless the
// operator gives it, and it serves GET /metrics and nothing else, never
// the API.
//
// Lifecycle: New builds an Observer without starting anything; Serve
// starts the sampler and the plain listener's server, which end with
// ctx; Close stops the listener (idempotent); Wait waits for every
// goroutine Serve started.
package observe

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"scistream/internal/api"
	"scistream/internal/pace"
	"scistream/internal/rates"
	"scistream/internal/stream"
)

// The bounds and defaults of Config's rate settings, as internal/rates
// has them.
const (
	DefaultRateInterval = rates.DefaultInterval
	DefaultRateWindow   = rates.DefaultWindow
	MinRateInterval     = rates.MinInterval
	MaxRateInterval     = rates.MaxInterval
	MaxWindowSamples    = rates.MaxWindowSamples
)

// Config configures the gateway's metrics listener and how it samples
// its streams' rates. Its zero value: no plain metrics listener, a
// sample every second, a window of a minute.
type Config struct {
	// MetricsListener, if not nil, is a listener on which the gateway
	// also serves GET /metrics, and nothing else, over plain HTTP and
	// without authentication, for a scraper inside the facility. Serve
	// serves it and Close closes it (also if Serve never ran). If it is
	// not on a loopback address the Observer warns at start (where it
	// is, its opener says: s2cs on stdout). If nil, the
	// metrics are on the control API only, authenticated.
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

// A FieldError names the Config field Validate refused.
type FieldError struct {
	// Field is the name of the Config field, e.g. "RateInterval".
	Field string
	// Problem completes a sentence that starts with the field's name.
	Problem string
}

func (e *FieldError) Error() string { return e.Field + " " + e.Problem }

func fieldError(field, format string, args ...any) error {
	return &FieldError{Field: field, Problem: fmt.Sprintf(format, args...)}
}

// Validate reports the first rate setting New would refuse, as a
// *FieldError.
func (c Config) Validate() error {
	iv := c.RateInterval
	if iv == 0 {
		iv = DefaultRateInterval
	}
	switch {
	case c.RateInterval < 0 || c.RateInterval > 0 && c.RateInterval < MinRateInterval:
		return fieldError("RateInterval", "%s is too short: give %s to %s, e.g. 1s", c.RateInterval, MinRateInterval, MaxRateInterval)
	case c.RateInterval > MaxRateInterval:
		return fieldError("RateInterval", "%s is too long: give %s to %s, e.g. 1s", c.RateInterval, MinRateInterval, MaxRateInterval)
	case c.RateWindow < 0 || c.RateWindow > 0 && c.RateWindow < iv:
		return fieldError("RateWindow", "%s is shorter than the sampling interval (%s): give at least that, e.g. 1m", c.RateWindow, iv)
	case c.RateWindow/iv > MaxWindowSamples:
		return fieldError("RateWindow", "%s holds %d samples of %s, more than %d: shorten it or lengthen the interval", c.RateWindow, c.RateWindow/iv, iv, MaxWindowSamples)
	}
	return nil
}

// Gateway is what the Observer reads of its gateway.
type Gateway interface {
	// Live returns the gateway's live streams.
	Live() []*stream.Stream
	// Gauges returns what the gateway holds now.
	Gauges() Gauges
}

// Gauges is what a gateway holds at one moment, beside its live
// streams' own counters.
type Gauges struct {
	Ready                     bool
	Requested                 int // streams being created
	PortsInUse, PortsCapacity int
	FilesInUse, FilesCapacity int64
	InHandshake               int              // WAN connections not yet authenticated
	Refused                   map[string]int64 // connections refused before relaying, by reason (internal/strangers)
	IdleLegs, OpenLegs        int              // pooled WAN legs
	// The control port's connections open now, in the trusted part and
	// the strangers', and those it refused or closed, by reason
	// (internal/controlport).
	ControlTrusted, ControlStrangers int
	ControlRefused                   map[string]int64
	CapacityRate, Reserved           pace.Rate // the rate declared for all streams, and reserved of it now
	// What framed connections hold of the gateway's resume buffer now,
	// the most they held at once, and its size (carry.Budget,
	// config.Resume.Buffer).
	ResumeHeld, ResumePeak, ResumeCapacity int64
	// WANCC is the congestion control the gateway's TCP WAN legs run
	// (config.Config.WANCC), and WANCCSet whether the gateway sets it
	// (else it is the host's default).
	WANCC    string
	WANCCSet bool
}

// Observer is a gateway's part that operators look through.
type Observer struct {
	cfg     Config
	gw      Gateway
	log     *slog.Logger
	started time.Time
	metrics http.Handler // the registry's exposition (metrics.go)
	page    statusPage   // the status page (statuspage.go)
	coll    *collector

	apiErrors []atomic.Int64  // error answers, by index in api.Codes
	endedBy   [3]atomic.Int64 // streams ended: released, expired, failed

	wg     sync.WaitGroup
	mu     sync.Mutex // guards the following fields
	plain  *http.Server
	closed bool
}

// New returns the Observer of gw; log is where it says what it serves
// (nil: slog.Default()).
func New(cfg Config, gw Gateway, log *slog.Logger) *Observer {
	if log == nil {
		log = slog.Default()
	}
	o := &Observer{cfg: cfg, gw: gw, log: log, started: time.Now(), page: newStatusPage(),
		apiErrors: make([]atomic.Int64, len(api.Codes()))}
	o.coll = newCollector(o)
	o.metrics = newMetrics(o.coll, log)
	return o
}

// Started is when the Observer was built: the gateway's start.
func (o *Observer) Started() time.Time { return o.started }

// Metrics is the handler of GET /metrics.
func (o *Observer) Metrics() http.Handler { return o.metrics }

// Collector is the collector behind Metrics, for a registry of one's own.
func (o *Observer) Collector() prometheus.Collector { return o.coll }

// APIError counts an error answer of code c.
func (o *Observer) APIError(c api.Code) {
	for i, k := range api.Codes() {
		if k == c {
			o.apiErrors[i].Add(1)
			return
		}
	}
	o.apiErrors[len(o.apiErrors)-1].Add(1) // not in api.Codes (a test keeps it complete): internal
}

// endedStates are the terminal states, in the order of Observer.endedBy.
func endedStates() []api.State {
	return []api.State{api.StateReleased, api.StateExpired, api.StateFailed}
}

// Ended counts a stream that reached terminal state st.
func (o *Observer) Ended(st api.State) {
	for i, k := range endedStates() {
		if k == st {
			o.endedBy[i].Add(1)
		}
	}
}

// Serve starts the rate sampler and, if Config has one, the plain
// metrics listener's server, built by newServer (the gateway's timeouts);
// both end with ctx or Close. Call it once.
func (o *Observer) Serve(ctx context.Context, newServer func(http.Handler) *http.Server) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return
	}
	o.wg.Add(1)
	go o.sampler(ctx)
	ln := o.cfg.MetricsListener
	if ln == nil {
		return
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", o.metrics)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "not found: this listener serves GET /metrics only; the control API and the status page are on the control port (https)", http.StatusNotFound)
	})
	o.plain = newServer(mux)
	addr := ln.Addr().String()
	if ta, ok := ln.Addr().(*net.TCPAddr); !ok || !ta.IP.IsLoopback() {
		o.log.Warn("the metrics listener is not on a loopback address: it serves GET /metrics (every stream's uid, owner and counters) without authentication or encryption to whoever reaches it; let only the scraper reach it", "metrics_listen", addr)
	}
	srv := o.plain
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			o.log.Error("metrics listener failed; the metrics stay on the control API", "metrics_listen", addr, "err", err)
		}
	}()
}

// sampler samples every live stream's rates every RateInterval until ctx
// ends.
func (o *Observer) sampler(ctx context.Context) {
	defer o.wg.Done()
	iv := o.cfg.RateInterval
	if iv == 0 {
		iv = DefaultRateInterval
	}
	tick := time.NewTicker(iv)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := time.Now()
		for _, st := range o.gw.Live() {
			st.Rates.Sample(now, st.ToWAN.Load(), st.FromWAN.Load())
		}
	}
}

// Close stops the plain metrics listener (or closes it if it never
// served). Idempotent.
func (o *Observer) Close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return
	}
	o.closed = true
	if o.plain != nil {
		o.plain.Close()
	} else if o.cfg.MetricsListener != nil {
		o.cfg.MetricsListener.Close()
	}
}

// Wait waits for the goroutines Serve started, once ctx ended and Close
// was called.
func (o *Observer) Wait() { o.wg.Wait() }

// Health returns what the gateway holds and has refused: the status
// page's health and the gateway-wide metrics, from one reading.
func (o *Observer) Health() api.GatewayHealth {
	g := o.gw.Gauges()
	h := api.GatewayHealth{
		Ready:             g.Ready,
		Streams:           map[string]int64{},
		PortsInUse:        g.PortsInUse,
		PortsCapacity:     g.PortsCapacity,
		ConnFilesInUse:    g.FilesInUse,
		ConnFilesCapacity: g.FilesCapacity,
		WANConns:          map[string]int64{"handshake": int64(g.InHandshake)},
		APIErrors:         map[string]int64{},
		Refused:           g.Refused,

		ResumeBufferBytes:    g.ResumeHeld,
		ResumeBufferPeak:     g.ResumePeak,
		ResumeBufferCapacity: g.ResumeCapacity,
	}
	for _, st := range api.LiveStates() {
		h.Streams[string(st)] = 0
	}
	h.Streams[string(api.StateRequested)] = int64(g.Requested)
	var waiting, relaying int64
	for _, st := range o.gw.Live() {
		h.Streams[string(st.Record().State)]++
		waiting += st.WaitingApp.Load()
		relaying += st.Active.Load()
		h.ParkedConns += st.Parked()
	}
	for i, k := range endedStates() {
		h.Streams[string(k)] = o.endedBy[i].Load()
	}
	h.WANConns["waiting"], h.WANConns["relaying"] = waiting, relaying
	h.PooledLegs = map[string]int64{"idle": int64(g.IdleLegs), "busy": int64(max(0, g.OpenLegs-g.IdleLegs))}
	for i, c := range api.Codes() {
		h.APIErrors[string(c)] = o.apiErrors[i].Load()
	}
	return h
}
