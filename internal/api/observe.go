package api

import "time"

// Rates are a stream's sampled rates on one gateway (Stats.Rates): every
// IntervalS the gateway reads the stream's byte counters and turns the
// bytes moved since the last sample into a rate per direction, bytes over
// the time between the two readings (seed 004's method). Each direction
// keeps the mean, standard deviation and peak of those samples over the
// stream's life, over the last WindowS and over its steady state.
//
// Steady state: a run is a sequence of consecutive samples in each of
// which bytes moved; in every run the first and the last TrimSamples
// samples are its ramp-up and its tail and are left out (TrimSamples
// covers at least one second: the partial intervals where a transfer
// starts and stops, and its first second of ramp-up). A sample counts
// once TrimSamples later samples of its run came, so the steady figures
// lag the live rate by that many intervals, and a run of fewer than
// 2*TrimSamples+1 samples has no steady state.
type Rates struct {
	// IntervalS is the time between samples, in seconds (s2cs
	// --rate_interval).
	IntervalS float64 `json:"interval_s"`
	// WindowS is the span of Window and History, in seconds (s2cs
	// --rate_window).
	WindowS float64 `json:"window_s"`
	// TrimSamples is the ramp-up and the tail left out of each run for
	// the steady state, in samples.
	TrimSamples int     `json:"trim_samples"`
	ToWAN       DirRate `json:"to_wan"`
	FromWAN     DirRate `json:"from_wan"`
	// History holds the samples of the window, oldest first, for a
	// chart; only GET /v1/status sends it.
	History *RateHistory `json:"history,omitempty"`
}

// DirRate summarises the samples of one direction.
type DirRate struct {
	// Life: every sample since the stream started on this gateway, idle
	// ones included (its mean is the bytes over the time).
	Life RateStat `json:"life"`
	// Window: the samples of the last Rates.WindowS.
	Window RateStat `json:"window"`
	// Steady: the steady-state samples of every run so far.
	Steady RateStat `json:"steady"`
	// LastRun is the latest run of samples in which bytes moved, or
	// absent if none has yet.
	LastRun *RateRun `json:"last_run,omitempty"`
}

// RateRun is one run of consecutive samples in which bytes moved: one
// transfer, as the gateway sees it.
type RateRun struct {
	// Start is the time of the run's first sample (the end of the
	// interval in which bytes first moved).
	Start time.Time `json:"start"`
	// Samples and Bytes count the run's samples and the bytes they
	// carried, ramp-up and tail included.
	Samples int64 `json:"samples"`
	Bytes   int64 `json:"bytes"`
	// Ended says the run is over: a sample in which no byte moved
	// followed it, so its tail is known and Steady is final.
	Ended bool `json:"ended"`
	// Steady is the run's steady state (see Rates).
	Steady RateStat `json:"steady"`
}

// RateStat is the mean, standard deviation and peak of a set of rate
// samples, in bytes per second. Each sample weighs as much as the time it
// covers (so the mean is the samples' bytes over their time; with samples
// of equal length, as the sampler takes them unless it wakes late, the
// plain mean), and the standard deviation is the population's, weighted
// the same way; all are 0 with no sample.
type RateStat struct {
	Samples   int64   `json:"samples"`
	MeanBps   float64 `json:"mean_Bps"`
	StddevBps float64 `json:"stddev_Bps"`
	PeakBps   float64 `json:"peak_Bps"`
}

// RateHistory is the window's samples, oldest first: sample i of n was
// taken at End - (n-1-i)*Rates.IntervalS.
type RateHistory struct {
	End     time.Time `json:"end"`
	ToWAN   []float64 `json:"to_wan_Bps"`
	FromWAN []float64 `json:"from_wan_Bps"`
}

// GatewayStatus is the operators' view of a gateway: GET /v1/status (the
// status page's data). Unlike GET /v1/streams it shows every identity's
// live streams, with their rate history.
type GatewayStatus struct {
	Version    string        `json:"version"`
	ListenerIP string        `json:"listener_ip"`
	Now        time.Time     `json:"now"`
	Started    time.Time     `json:"started"`
	Health     GatewayHealth `json:"health"`
	// Identity is the caller's, and Scope whose streams Streams holds:
	// ScopeAll for a reader or an operator, ScopeOwn (the caller's
	// own) for anyone else.
	Identity string `json:"identity"`
	Scope    string `json:"scope"`
	// Streams are the live streams in Scope, oldest first.
	Streams []Stream `json:"streams"`
}

// The scopes of GET /v1/status.
const (
	ScopeAll = "all" // every identity's streams: readers and operators
	ScopeOwn = "own" // the caller's own streams
)

// GatewayHealth is what the gateway holds and has refused; the same
// numbers as its Prometheus metrics (docs/operations.md).
type GatewayHealth struct {
	// Ready says the gateway restored its streams and serves.
	Ready bool `json:"ready"`
	// Streams counts the streams by state: live ones (requested,
	// listening, wired, connected) now, ended ones (released, expired, failed)
	// since the gateway started.
	Streams map[string]int64 `json:"streams"`
	// PortsInUse of PortsCapacity, the data ports of the range.
	PortsInUse    int `json:"ports_in_use"`
	PortsCapacity int `json:"ports_capacity"`
	// ConnFilesInUse of ConnFilesCapacity: the open files application
	// connections hold against the gateway's cap (2 per connection over
	// TLS or TCP, 1 over QUIC).
	ConnFilesInUse    int64 `json:"conn_files_in_use"`
	ConnFilesCapacity int64 `json:"conn_files_capacity"`
	// WANConns counts the WAN connections by state: "handshake" (not yet
	// authenticated), "waiting" (held for an application that does not
	// answer), "relaying"; PooledLegs the pooled legs "idle" and "busy".
	WANConns   map[string]int64 `json:"wan_conns"`
	PooledLegs map[string]int64 `json:"pooled_legs"`
	// APIErrors counts the control API's error answers by code since the
	// gateway started: "unauthenticated" are authentication failures,
	// "no_resources" admission refusals.
	APIErrors map[string]int64 `json:"api_errors"`
	// Refused counts the connections refused before they were relayed,
	// by reason, since the gateway started: WAN connections that did not
	// authenticate or came over a cap, application connections from
	// outside a stream's allow-list or over a cap (docs/operations.md
	// lists the reasons).
	Refused map[string]int64 `json:"refused"`
	// ParkedConns counts the application connections of every live
	// stream that wait, parked, for a new WAN leg now (Stats.ParkedConns).
	ParkedConns int64 `json:"parked_conns"`
	// ResumeBufferBytes is what framed connections hold now of the
	// gateway's budget of ResumeBufferCapacity (s2cs --resume_buffer):
	// bytes sent and not yet acknowledged by the peer, or received and
	// not yet taken by the application; ResumeBufferPeak the most held at
	// once since the gateway started.
	ResumeBufferBytes    int64 `json:"resume_buffer_bytes"`
	ResumeBufferPeak     int64 `json:"resume_buffer_peak_bytes"`
	ResumeBufferCapacity int64 `json:"resume_buffer_capacity_bytes"`
}

// Codes lists the error codes, in the order of their declaration.
func Codes() []Code {
	return []Code{CodeInvalidArgument, CodeUnauthenticated, CodePermissionDenied, CodeNotFound,
		CodeNoResources, CodeConflict, CodeUnavailable, CodeInternal}
}
