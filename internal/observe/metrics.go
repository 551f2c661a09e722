package observe

import (
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"scistream/internal/api"
	"scistream/internal/controlport"
	"scistream/internal/pace"
	"scistream/internal/strangers"
	"scistream/internal/stream"
	"scistream/internal/version"
)

// The Prometheus metrics. Each Observer has its own registry (no global
// one): the Go runtime's and the process's collectors, and collector
// below, which reads at scrape time the counters the streams keep anyway
// (internal/stream, internal/rates, internal/strangers), so that no
// increment on the data path is done twice. Live streams are read from
// the server's table at each scrape: an ended stream's series are gone
// from the next scrape on. Labels are a stream's uid, owner and role and
// fixed enumerations only, so the series stay bounded by the live
// streams. Names, labels and meanings: docs/operations.md.

// maxScrapes bounds the scrapes served at once; more are answered 503.
const maxScrapes = 4

// newMetrics returns the exposition handler of a registry of c and the
// Go runtime's and the process's collectors.
func newMetrics(c *collector, log *slog.Logger) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		c,
	)
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:            slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: maxScrapes,
		Timeout:             10 * time.Second,
	})
}

// collector turns the gateway's counters into metrics at each scrape.
type collector struct {
	o *Observer

	buildInfo, wanCC, ready, streams, streamsEnded, portsInUse, portsCap,
	filesInUse, filesCap, wanConns, pooledLegs, apiErrors, refused,
	controlConns, controlRefused, capacityRate, reservedRate,
	parked, resumeHeld, resumePeak, resumeCap *prometheus.Desc

	info, bytes, conns, connsTotal, connsRefused, handshakeFails, redials, aborted,
	rate, rateMean, rateStddev, ratePeak, legsTotal, legsIdle, rateGranted, leaseExpiry,
	parkedConns, resumedLegs, resentBytes, parkedSeconds, resumeExpired *prometheus.Desc
}

func newCollector(o *Observer) *collector {
	g := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("scistream_"+name, help, labels, nil)
	}
	st := func(name, help string, labels ...string) *prometheus.Desc {
		// Every per-stream series is labelled by the stream's uid,
		// owner and role.
		return prometheus.NewDesc("scistream_stream_"+name, help, append([]string{"uid", "owner", "role"}, labels...), nil)
	}
	return &collector{
		o:              o,
		buildInfo:      g("build_info", "The s2cs release serving, always 1.", "version"),
		wanCC:          g("wan_congestion_control_info", "The congestion control of the gateway's TCP WAN legs (s2cs --wan_cc), always 1; set says whether the gateway sets it on each leg (true) or leaves the host's default (false). The LAN legs run the host's default.", "cc", "set"),
		ready:          g("ready", "1 once the gateway restored its streams and serves, 0 while it starts or stops."),
		streams:        g("streams", "Live streams by state (requested, listening, wired, connected).", "state"),
		streamsEnded:   g("streams_ended_total", "Streams that ended since the gateway started, by terminal state.", "state"),
		portsInUse:     g("ports_in_use", "Data ports of the port range held by streams."),
		portsCap:       g("ports_capacity", "Data ports in the port range."),
		filesInUse:     g("connection_files_in_use", "Open files application connections hold against the gateway's cap (2 per connection over TLS or TCP, 1 over QUIC)."),
		filesCap:       g("connection_files_capacity", "The gateway's cap on the open files of application connections (2 x --max_active_conns)."),
		wanConns:       g("wan_connections", "WAN connections by state: handshake (not yet authenticated), waiting (held for an application that does not answer), relaying.", "state"),
		pooledLegs:     g("pooled_legs", "Pooled WAN legs of outbound streams by state: idle, busy (carrying a connection or being dialed).", "state"),
		apiErrors:      g("api_errors_total", "Control API error answers by code: unauthenticated are authentication failures, no_resources admission refusals.", "code"),
		refused:        g("refused_connections_total", "Connections refused before they were relayed, by reason (the gateway's refusal summary).", "reason"),
		controlConns:   g("control_connections", "Control port connections open now, by part: trusted (from an address a caller authenticated from in the last 10 minutes), strangers.", "part"),
		controlRefused: g("control_refused_total", "Control port connections reset at arrival or closed by a deadline, by reason: per_source, total (over a cap of --control_conns), first_request (no request in time), stranger_idle (idle with no authenticated request), h2_resets (HTTP/2 streams reset too fast).", "reason"),
		capacityRate:   g("capacity_rate_bytes_per_second", "The rate the gateway reserves for streams in all, per direction (s2cs --capacity_rate, given in bits per second); 0 when undeclared."),
		reservedRate:   g("reserved_rate_bytes_per_second", "What live streams have reserved of the capacity now."),
		parked:         g("parked_conns", "Application connections of every live stream waiting, parked, for a new WAN leg now (their applications see a pause)."),
		resumeHeld:     g("resume_buffer_bytes", "What framed connections hold now of the gateway's resume buffer: bytes sent and not yet acknowledged by the peer, or received and not yet taken by the application."),
		resumePeak:     g("resume_buffer_peak_bytes", "The most framed connections held of the resume buffer at once since the gateway started."),
		resumeCap:      g("resume_buffer_capacity_bytes", "The gateway's resume buffer (s2cs --resume_buffer): a connection past it is not read until others give bytes back."),

		info:           st("info", "A live stream, always 1; its state, WAN transport, engine, what the watch leg says of the peer gateway, and whether its connections outlive a lost WAN leg (resume: on, off, peer_without, plaintext, pooled, unknown until a leg said).", "state", "wan", "engine", "peer", "resume"),
		bytes:          st("bytes_total", "Bytes relayed, by direction: to_wan (from this gateway's application to the peer gateway) and from_wan.", "direction"),
		conns:          st("connections", "Application connections by state: active (relayed now), waiting (a WAN leg held while the application does not answer).", "state"),
		connsTotal:     st("connections_total", "Application connections relayed (both legs up)."),
		connsRefused:   st("connections_refused_total", "Connections refused on arrival: allow_list (source outside the allow-list), over_cap (the stream's or the gateway's cap of connections at once), handshake_cap (too many WAN connections in their handshake).", "reason"),
		handshakeFails: st("wan_handshake_failures_total", "WAN connections to this stream that failed authentication (TLS with the pinned certificate, the preface and its secret, QUIC)."),
		redials:        st("wan_redials_total", "An outbound stream's WAN dials the peer gateway reset before it answered (over its cap of connections in their handshake), dialled again."),
		aborted:        st("connections_aborted_total", "Relayed connections that ended other than in order, by kind (api.End*).", "kind"),
		rate:           st("rate_bytes_per_second", "The latest rate sample (bytes over the last sampling interval), by direction.", "direction"),
		rateMean:       st("rate_mean_bytes_per_second", "Mean of the rate samples, by direction and span: life, window (the last --rate_window), steady (steady state, ramp-up and tail of each transfer left out).", "direction", "span"),
		rateStddev:     st("rate_stddev_bytes_per_second", "Standard deviation (volatility) of the rate samples, by direction and span.", "direction", "span"),
		ratePeak:       st("rate_peak_bytes_per_second", "Highest rate sample, by direction and span.", "direction", "span"),
		legsTotal:      st("pooled_legs_total", "An outbound stream's pooled WAN legs by event: created (dialed), reused (taken from the pool), torn_down (at the gateway's cap per peer).", "event"),
		legsIdle:       st("pooled_legs_idle", "An outbound stream's pooled WAN legs idle now."),
		rateGranted:    st("rate_granted_bytes_per_second", "The rate reserved for the stream and kept to in each direction (s2uc --rate, given in bits per second); 0 for best effort."),
		leaseExpiry:    st("lease_expiry_timestamp_seconds", "When the stream's lease runs out (Unix time): the gateway then releases it unless it is renewed."),
		parkedConns:    st("parked_conns", "Application connections waiting, parked, for a new WAN leg now: the stream is resuming while any is."),
		resumedLegs:    st("resumed_legs_total", "WAN legs that replaced a lost one under a connection (the connection resumed)."),
		resentBytes:    st("resent_bytes_total", "Bytes sent again on the WAN legs that replaced a lost one (what the peer had not received)."),
		parkedSeconds:  st("parked_seconds_total", "Time connections spent waiting, parked, for a new WAN leg, in all, counted when a leg came back."),
		resumeExpired:  st("resume_expired_total", "Connections reset at both applications because no new WAN leg came within the resume window (also among connections_aborted_total's wan_lost)."),
	}
}

func (c *collector) descs() []*prometheus.Desc {
	return []*prometheus.Desc{c.buildInfo, c.wanCC, c.ready, c.streams, c.streamsEnded, c.portsInUse, c.portsCap,
		c.filesInUse, c.filesCap, c.wanConns, c.pooledLegs, c.apiErrors, c.refused, c.controlConns, c.controlRefused, c.capacityRate, c.reservedRate,
		c.parked, c.resumeHeld, c.resumePeak, c.resumeCap,
		c.info, c.bytes, c.conns, c.connsTotal, c.connsRefused, c.handshakeFails, c.redials, c.aborted,
		c.rate, c.rateMean, c.rateStddev, c.ratePeak, c.legsTotal, c.legsIdle, c.rateGranted, c.leaseExpiry,
		c.parkedConns, c.resumedLegs, c.resentBytes, c.parkedSeconds, c.resumeExpired}
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs() {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	h := c.o.Health()
	g := c.o.gw.Gauges()
	gauge(c.buildInfo, 1, version.Version)
	gauge(c.wanCC, 1, g.WANCC, strconv.FormatBool(g.WANCCSet))
	gauge(c.ready, boolValue(h.Ready))
	for _, st := range api.LiveStates() {
		gauge(c.streams, float64(h.Streams[string(st)]), string(st))
	}
	for _, st := range endedStates() {
		counter(c.streamsEnded, float64(h.Streams[string(st)]), string(st))
	}
	gauge(c.portsInUse, float64(h.PortsInUse))
	gauge(c.portsCap, float64(h.PortsCapacity))
	gauge(c.filesInUse, float64(h.ConnFilesInUse))
	gauge(c.filesCap, float64(h.ConnFilesCapacity))
	for _, k := range []string{"handshake", "waiting", "relaying"} {
		gauge(c.wanConns, float64(h.WANConns[k]), k)
	}
	for _, k := range []string{"idle", "busy"} {
		gauge(c.pooledLegs, float64(h.PooledLegs[k]), k)
	}
	for _, code := range api.Codes() {
		counter(c.apiErrors, float64(h.APIErrors[string(code)]), string(code))
	}
	for _, k := range strangers.Keys() {
		counter(c.refused, float64(h.Refused[k]), k)
	}
	gauge(c.controlConns, float64(g.ControlTrusted), "trusted")
	gauge(c.controlConns, float64(g.ControlStrangers), "strangers")
	for _, k := range controlport.RefusedKeys() {
		counter(c.controlRefused, float64(g.ControlRefused[k]), k)
	}
	gauge(c.capacityRate, g.CapacityRate.BytesPerSecond())
	gauge(c.reservedRate, g.Reserved.BytesPerSecond())
	gauge(c.parked, float64(h.ParkedConns))
	gauge(c.resumeHeld, float64(h.ResumeBufferBytes))
	gauge(c.resumePeak, float64(h.ResumeBufferPeak))
	gauge(c.resumeCap, float64(h.ResumeBufferCapacity))
	for _, st := range c.o.gw.Live() {
		c.collectStream(st, gauge, counter)
	}
}

// collectStream sends the series of one live stream.
func (c *collector) collectStream(st *stream.Stream, gauge, counter func(*prometheus.Desc, float64, ...string)) {
	rec := st.Record()
	s := st.Stats()
	l := []string{rec.UID, rec.Owner, string(rec.Role)}
	with := func(more ...string) []string { return append(append([]string{}, l...), more...) }
	peer := s.Peer
	if peer == "" {
		peer = "unknown"
	}
	resume := s.Resume
	if resume == "" {
		resume = "unknown"
	}
	gauge(c.info, 1, with(string(rec.State), rec.WAN, rec.Engine, peer, resume)...)
	counter(c.bytes, float64(s.BytesToWAN), with("to_wan")...)
	counter(c.bytes, float64(s.BytesFromWAN), with("from_wan")...)
	gauge(c.conns, float64(s.ActiveConns), with("active")...)
	gauge(c.conns, float64(s.WaitingConns), with("waiting")...)
	counter(c.connsTotal, float64(s.TotalConns), l...)
	counter(c.connsRefused, float64(st.Refused.Allow.Load()), with("allow_list")...)
	counter(c.connsRefused, float64(s.OverCapConns), with("over_cap")...)
	counter(c.connsRefused, float64(st.Refused.HandshakeCap.Load()), with("handshake_cap")...)
	counter(c.handshakeFails, float64(st.Refused.WANAuth.Load()), l...)
	for _, k := range api.EndKinds() {
		counter(c.aborted, float64(s.AbortedByKind[k]), with(k)...)
	}
	gauge(c.parkedConns, float64(s.ParkedConns), l...)
	counter(c.resumedLegs, float64(s.ResumedLegs), l...)
	counter(c.resentBytes, float64(s.ResentBytes), l...)
	counter(c.parkedSeconds, s.ParkedSeconds, l...)
	counter(c.resumeExpired, float64(s.ResumeExpired), l...)
	gauge(c.rateGranted, pace.Rate(rec.Rate).BytesPerSecond(), l...)
	gauge(c.leaseExpiry, float64(rec.Expires.Unix()), l...)
	gauge(c.rate, s.RateToWAN, with("to_wan")...)
	gauge(c.rate, s.RateFromWAN, with("from_wan")...)
	for _, d := range []struct {
		name string
		r    api.DirRate
	}{{"to_wan", s.Rates.ToWAN}, {"from_wan", s.Rates.FromWAN}} {
		for _, sp := range []struct {
			name string
			v    api.RateStat
		}{{"life", d.r.Life}, {"window", d.r.Window}, {"steady", d.r.Steady}} {
			gauge(c.rateMean, sp.v.MeanBps, with(d.name, sp.name)...)
			gauge(c.rateStddev, sp.v.StddevBps, with(d.name, sp.name)...)
			gauge(c.ratePeak, sp.v.PeakBps, with(d.name, sp.name)...)
		}
	}
	if rec.Role == api.RoleOutbound {
		counter(c.legsTotal, float64(s.LegsCreated), with("created")...)
		counter(c.legsTotal, float64(s.LegsReused), with("reused")...)
		counter(c.legsTotal, float64(s.LegsTornDown), with("torn_down")...)
		gauge(c.legsIdle, float64(s.LegsIdle), l...)
		counter(c.redials, float64(s.WANRedials), l...)
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
