// Package config holds a gateway's settings (Config): every field with
// what its zero value means, the one validator (Validate, which asks
// each sub-setting's package to check its own and names the field it
// refuses in an *Error), the defaults (WithDefaults), the plan of open
// files (Files) and the relay engines the settings ask for (Engines).
// s2cs fills a Config from its flags and configuration file and checks
// it before it opens anything; internal/gateway.New serves one.
package config

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"time"

	"scistream/internal/admission"
	"scistream/internal/auth"
	"scistream/internal/certs"
	"scistream/internal/controlport"
	"scistream/internal/egress"
	"scistream/internal/fileplan"
	"scistream/internal/handoff"
	"scistream/internal/intake"
	"scistream/internal/legpool"
	"scistream/internal/observe"
	"scistream/internal/peerdial"
	"scistream/internal/ports"
	"scistream/internal/relay"
	"scistream/internal/sockmap"
	"scistream/internal/store"
	"scistream/internal/strangers"
	"scistream/internal/tcpcc"
	"scistream/internal/wanport"
	"scistream/internal/wanquic"
)

// Config configures a gateway (internal/gateway.Server). Zero values
// are documented per field; Validate (which gateway.New calls) is the
// one place that checks them.
type Config struct {
	// ListenerIP is the address advertised to peers in listener
	// addresses. Required.
	ListenerIP string
	// BindIP is the address data listeners bind. If empty, ListenerIP.
	// An unspecified address (0.0.0.0, ::) binds every interface; the
	// caller should have the operator ask for it explicitly.
	BindIP string
	// PortRange is where data listeners are allocated. Required.
	PortRange ports.Range
	// Identity is the gateway's certificate, used for the control API and
	// every WAN leg. Required.
	Identity *certs.Identity
	// Auth authenticates control-API callers. Required; use
	// auth.Anonymous only for an explicitly insecure gateway. One that
	// is an auth.PrincipalAuthenticator (auth.Chain) also tells the
	// caller's groups and scopes, which Roles may use. Server.SetAccess
	// replaces it while the gateway serves.
	Auth auth.Authenticator
	// Roles gives callers their roles (internal/access): user (own
	// streams, and its own streams in the status), operator (every
	// identity's streams), reader (info, every stream in the status, and
	// the metrics). If nil, every authenticated caller is a user, and
	// nobody a reader or an operator: the metrics, which show every
	// identity's streams, are refused to every token. Server.SetAccess
	// replaces it while the gateway serves.
	Roles *auth.Policy
	// Store persists stream records. Required. Shutdown closes it.
	Store store.Store
	// Handed are the connections the process before handed over in a
	// live upgrade (Server.HandOver; kind handoff.KindConn): the
	// streams restored take theirs back before they accept anything,
	// and Serve closes the files of the rest (their applications are
	// reset). nil: none.
	Handed []handoff.Item
	// Sockets binds the streams' listeners and the shared WAN port,
	// taking those the process before handed over (a live upgrade),
	// and keeps them for the next (Server.HandOver). nil: they are
	// bound afresh, and a hand-over passes none.
	Sockets *handoff.Sockets
	// Engine is the default data-plane engine, one of relay.Names. If
	// empty, "splice".
	Engine string
	// QUIC tunes the "quic" WAN transport. Its zero value is the
	// defaults documented on wanquic.Config.
	QUIC wanquic.Config
	// BufferSize is the ring of the buffer engine for each direction of
	// each connection, in bytes (relay.MinBufferSize to
	// relay.MaxBufferSize). If zero, relay.DefaultBufferSize.
	BufferSize int
	// Sockmap is the loaded eBPF program behind the "sockmap" engine,
	// shared by every stream; the caller owns it and closes it after
	// Shutdown. If nil, streams whose engine is sockmap use splice.
	Sockmap *sockmap.Redirector
	// WANCC is the congestion control set on both ends the gateway
	// holds of every TCP WAN leg (dialed, accepted, pooled, on the
	// shared WAN port; internal/tcpcc), "" none: the host's default.
	// The LAN legs keep the host's default whatever it says. Resolve it
	// with tcpcc.Resolve (s2cs --wan_cc), which checks it can be set.
	WANCC tcpcc.Choice
	// AllowTCPWAN admits streams whose WAN legs are plaintext TCP. If
	// false, such requests are refused.
	AllowTCPWAN bool
	// PendingTimeout is how long a stream may wait for its peer (an
	// inbound stream for its attach, a stream of a SciStream 1.2 client
	// for its partner) before it expires and frees its ports. If zero,
	// DefaultPendingTimeout.
	PendingTimeout time.Duration
	// WAN is the shared WAN port (internal/wanport). Its zero value is
	// none: every stream listens on ports of its own.
	WAN wanport.Config
	// Bounds are the defaults and maxima of the wait for an inbound
	// stream's application and of a stream's lease. Its zero value is
	// the defaults documented on intake.Bounds.
	intake.Bounds
	// Pool manages the pooled WAN legs of outbound streams (internal/stream). Its
	// zero value is the defaults documented on legpool.Config.
	Pool legpool.Config
	// Quota limits what one identity may hold at once. Its zero value is
	// the defaults documented on admission.Quota.
	Quota admission.Quota
	// Capacity is what the gateway as a whole admits streams against
	// (internal/admission). Its zero value declares nothing: no bound but the
	// ports and the quotas.
	Capacity admission.Capacity
	// Node, if not empty, makes the gateway one node of a facility of
	// several that share Store, which must then be an etcd store
	// (*store.Etcd; facility.go): any node answers for any stream, a
	// stream's channels are spread over the nodes, and when a node dies
	// the others take its channels over. Every node of a facility has its
	// own Node name and ListenerIP and the same Identity. The shared WAN
	// port (WAN) is not served by a facility. If empty, the gateway
	// is one node.
	Node string
	// Takeover bounds the time from a node's death to its channels
	// being served by other nodes: the node's etcd lease lasts about
	// half of it. At least 4 s. If zero, DefaultTakeover.
	Takeover time.Duration
	// HandshakesPerPeer bounds the WAN handshakes in flight from this
	// gateway to one peer gateway; an application connection over the
	// bound waits for a slot, within its leg's handshake deadline
	// (peerdial.Handshakes). If zero, peerdial.DefaultHandshakesPerPeer.
	HandshakesPerPeer int
	// Strangers caps the WAN connections still in their handshake. Its
	// zero value is the defaults documented on Limits.
	Strangers strangers.Limits
	// Control caps the control port's connections, per source and in
	// all, and bounds how long one may wait before its first request or
	// sit idle unauthenticated (internal/controlport). Its zero value is
	// the defaults documented on controlport.Limits.
	Control controlport.Limits
	// Observe sets the plain metrics listener and the sampling of rates
	// (internal/observe). Its zero value is the defaults documented on
	// observe.Config.
	Observe observe.Config
	// MaxActiveConns caps the application connections the gateway
	// relays at once over TLS or TCP WAN legs, over every stream; one
	// more is reset at once and counted (the stream's over_cap_conns),
	// so the gateway never runs out of open files in the middle of its
	// work (an accept, a dial, a store write failing with EMFILE). The
	// cap is kept in open files, fileplan.PerConn per such connection: a
	// connection over QUIC holds one (its own socket), so twice as many
	// of those fit. It is also the most a stream's max_active_conns may
	// ask for. If zero, it is derived from FileLimit (see Files).
	MaxActiveConns int
	// Resume is how application connections over framed WAN legs
	// (internal/framed) outlive a lost leg: the wait for a new one and
	// the buffers it takes. Its zero value is the defaults documented on
	// Resume.
	Resume Resume
	// FileLimit is the limit of open files the gateway plans against. If
	// zero, the process's soft RLIMIT_NOFILE when Validate runs (which
	// the Go runtime raised to the hard limit at start).
	FileLimit int
	// AllowTargets, if not nil, lists the addresses where inbound
	// streams' applications may be (remote_ip): the gateway dials those
	// only. If nil, the default rules of internal/egress: any unicast
	// address but loopback, link-local and the gateway host's own. The
	// gateway's own endpoints (control port, metrics listener, data-port
	// range, shared WAN port) are never dialled, whatever it says.
	AllowTargets []netip.Prefix
	// AllowPeers is AllowTargets for the peer gateways outbound streams
	// dial (peer_listeners, peer_nodes). If nil, the same default rules.
	AllowPeers []netip.Prefix
	// LookupHost resolves the host names a request gives (remote_ip,
	// peer_listeners) when it arrives, so that a name that does not
	// resolve is refused then, not when data flows. If nil,
	// net.DefaultResolver.LookupNetIP for "ip".
	LookupHost func(ctx context.Context, host string) ([]netip.Addr, error)
	// Retention is how long records of ended streams are kept for
	// status queries. If zero, 24 hours.
	Retention time.Duration
	// Logger receives structured logs. If nil, logs are discarded.
	Logger *slog.Logger
	// Now is the clock. If nil, time.Now.
	Now func() time.Time
}

// DefaultPendingTimeout is how long a stream waits for its peer when
// Config.PendingTimeout is zero: long enough for a person to run the
// outbound request by hand, short enough that an abandoned request does
// not hold ports for long.
const DefaultPendingTimeout = 5 * time.Minute

// DefaultTakeover is Config.Takeover's default: the bound, from a node's
// death, within which other nodes of its facility serve its channels.
const DefaultTakeover = 10 * time.Second

// An Error names the Config field that Validate refused, so that a
// caller can say it in its own terms (s2cs names its flag).
type Error struct {
	// Field is the name of the Config field, e.g. "ListenerIP".
	Field string
	// Problem completes a sentence that starts with the field's name,
	// e.g. `"10.0.0" is not an IP address`.
	Problem string
	// Err is the underlying error, if any.
	Err error
}

func (e *Error) Error() string { return e.Field + " " + e.Problem }
func (e *Error) Unwrap() error { return e.Err }

func fieldError(field, format string, args ...any) error {
	return &Error{Field: field, Problem: fmt.Sprintf(format, args...)}
}

// Validate reports the first setting gateway.New would refuse, without opening
// anything and without looking at Identity, Auth and Store: a daemon
// calls it before it loads a certificate or opens its database, so a
// mistyped setting costs nothing. Errors are *Error.
func (c Config) Validate() error {
	switch {
	case c.ListenerIP == "":
		return fieldError("ListenerIP", "is required: give the IP address peers use to reach this gateway")
	case net.ParseIP(c.ListenerIP) == nil:
		return fieldError("ListenerIP", "%q is not an IP address", c.ListenerIP)
	case c.BindIP != "" && net.ParseIP(c.BindIP) == nil:
		return fieldError("BindIP", "%q is not an IP address", c.BindIP)
	case c.PortRange.Lo < 1 || c.PortRange.Hi > 65535 || c.PortRange.Lo > c.PortRange.Hi:
		return fieldError("PortRange", "%q is not a range of ports: give LO-HI within 1-65535", c.PortRange)
	case c.PendingTimeout < 0:
		return fieldError("PendingTimeout", "must be positive, e.g. 15m")
	case c.Retention < 0:
		return fieldError("Retention", "must be positive, e.g. 24h")
	case c.HandshakesPerPeer < 0:
		return fieldError("HandshakesPerPeer", "%d is negative: give the most WAN handshakes in flight to one peer gateway, or 0 for %d", c.HandshakesPerPeer, peerdial.DefaultHandshakesPerPeer)
	case c.MaxActiveConns < 0:
		return fieldError("MaxActiveConns", "%d is negative: give the most application connections the gateway relays at once, or 0 to derive it from the limit of open files", c.MaxActiveConns)
	case c.FileLimit < 0:
		return fieldError("FileLimit", "%d is negative", c.FileLimit)
	case c.Node != "" && store.ValidFacility(c.Node) != nil:
		return fieldError("Node", "%v", store.ValidFacility(c.Node))
	case c.Takeover != 0 && c.Takeover < 4*time.Second:
		return fieldError("Takeover", "%s is too short: etcd's leases need at least 4s (the default is %s)", c.Takeover, DefaultTakeover)
	case c.Takeover != 0 && c.Node == "":
		return fieldError("Takeover", "applies to a node of a facility only: name the node too, or leave the takeover bound out")
	}
	if err := c.Bounds.Validate(); err != nil {
		var fe *intake.FieldError
		errors.As(err, &fe)
		return &Error{Field: fe.Field, Problem: fe.Problem, Err: err}
	}
	if err := c.Strangers.Validate(); err != nil {
		var le *strangers.LimitsError
		errors.As(err, &le)
		return &Error{Field: strings.TrimSuffix("Strangers."+le.Field, "."), Problem: le.Problem, Err: err}
	}
	if err := c.Control.Validate(); err != nil {
		return &Error{Field: "Control", Problem: err.Error(), Err: err}
	}
	if err := c.Resume.Validate(); err != nil {
		return err
	}
	if err := c.Quota.Validate(); err != nil {
		var fe *admission.FieldError
		errors.As(err, &fe)
		return &Error{Field: "Quota." + fe.Field, Problem: fe.Problem, Err: err}
	}
	if err := c.Capacity.Validate(); err != nil {
		var fe *admission.FieldError
		errors.As(err, &fe)
		return &Error{Field: "Capacity." + fe.Field, Problem: fe.Problem, Err: err}
	}
	if err := c.WAN.Validate(c.PortRange); err != nil {
		var fe *wanport.FieldError
		errors.As(err, &fe)
		return &Error{Field: "WAN." + fe.Field, Problem: fe.Problem, Err: err}
	}
	if err := c.Pool.Validate(); err != nil {
		var fe *legpool.FieldError
		errors.As(err, &fe)
		return &Error{Field: "Pool." + fe.Field, Problem: fe.Problem, Err: err}
	}
	if err := c.Observe.Validate(); err != nil {
		var fe *observe.FieldError
		errors.As(err, &fe)
		return &Error{Field: "Observe." + fe.Field, Problem: fe.Problem, Err: err}
	}
	if _, err := c.Files(); err != nil {
		return err
	}
	_, err := c.Engines()
	return err
}

// Files plans c's open files (internal/fileplan). It fails, as a
// *Error on MaxActiveConns naming the files needed and the fix,
// when the limit cannot hold the cap given, or any connection at all.
func (c Config) Files() (fileplan.Plan, error) {
	ports := 0
	if c.PortRange.Hi >= c.PortRange.Lo {
		ports = c.PortRange.Hi - c.PortRange.Lo + 1
	}
	p, err := fileplan.Make(fileplan.Input{Limit: c.FileLimit, Ports: ports,
		Strangers: c.Strangers.WithDefaults().Total, Control: c.Control.WithDefaults().Total, MaxActiveConns: c.MaxActiveConns})
	var fe *fileplan.Error
	if errors.As(err, &fe) {
		field := fe.Field
		if field == "Limit" {
			field = "FileLimit"
		}
		return p, &Error{Field: field, Problem: fe.Problem, Err: err}
	}
	return p, err
}

// Engines builds the relay engines c asks for and checks its default
// engine exists.
func (c Config) Engines() (*relay.Engines, error) {
	f, err := c.Files()
	if err != nil {
		return nil, err
	}
	pipes := f.MaxPipes
	if pipes == 0 {
		pipes = -1 // none left: relay's zero would mean no cap
	}
	set, err := relay.New(relay.Options{BufferSize: c.BufferSize, Sockmap: c.Sockmap, MaxPipes: pipes})
	if err != nil {
		return nil, &Error{Field: "BufferSize", Err: err,
			Problem: fmt.Sprintf("%d bytes out of range: give %d (64KiB) to %d (1GiB), e.g. 10MB", c.BufferSize, relay.MinBufferSize, relay.MaxBufferSize)}
	}
	if c.Engine != "" {
		if _, err := set.Get(c.Engine); err != nil {
			return nil, &Error{Field: "Engine", Err: err,
				Problem: fmt.Sprintf("%.40q is not an engine of this build: choose one of %s", c.Engine, strings.Join(relay.Names(), ", "))}
		}
	}
	return set, nil
}

// WithDefaults returns c with every zero value that has a default
// filled in. c must have passed Validate.
func (c Config) WithDefaults() Config {
	if c.Takeover == 0 {
		c.Takeover = DefaultTakeover
	}
	if c.BindIP == "" {
		c.BindIP = c.ListenerIP
	}
	if c.Engine == "" {
		c.Engine = "splice"
	}
	if c.PendingTimeout == 0 {
		c.PendingTimeout = DefaultPendingTimeout
	}
	c.Bounds = c.Bounds.Resolve()
	c.Quota = c.Quota.WithDefaults()
	c.Pool = c.Pool.WithDefaults()
	c.WAN = c.WAN.WithDefaults(c.ListenerIP)
	if f, err := c.Files(); err == nil { // Validate passed: it cannot fail
		c.MaxActiveConns, c.FileLimit = f.MaxActiveConns, f.Limit
	}
	c.Resume = c.Resume.WithDefaults()
	if c.QUIC.MaxStreams == 0 {
		// A channel may carry every connection the gateway admits
		// (one file each over QUIC): QUIC's own default, 1024 per
		// channel, would refuse first.
		c.QUIC.MaxStreams = fileplan.PerConn * c.MaxActiveConns
	}
	if c.LookupHost == nil {
		c.LookupHost = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	if c.Retention == 0 {
		c.Retention = 24 * time.Hour
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// OwnEndpoints returns the gateway's own endpoints that cfg (defaults
// filled) gives before it serves, which no stream may make it dial: its
// data-port range, its shared WAN port and its metrics listener. The
// gateway adds its control port when it serves.
func (cfg Config) OwnEndpoints() *egress.Self {
	self := &egress.Self{}
	bind, err := netip.ParseAddr(cfg.BindIP)
	if err != nil { // Validate checked it
		bind = netip.IPv4Unspecified()
	}
	self.Add(egress.Endpoint{Addr: bind, Lo: uint16(cfg.PortRange.Lo), Hi: uint16(cfg.PortRange.Hi), What: "this gateway's own data-port range " + cfg.PortRange.String()})
	if cfg.WAN.Port != 0 {
		self.Add(egress.Endpoint{Addr: bind, Lo: uint16(cfg.WAN.Port), Hi: uint16(cfg.WAN.Port), What: "this gateway's own shared WAN port"})
	}
	if ln := cfg.Observe.MetricsListener; ln != nil {
		self.AddListener(ln.Addr(), "this gateway's own metrics listener")
	}
	return self
}
