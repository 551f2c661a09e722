// Package intake turns a control request into a stream's record: every
// check of a request field lives here, and every refusal is an
// invalid_argument (or permission_denied) *api.Error whose message names
// the field and the fix. Nothing here opens a socket or touches the
// store; host names are resolved (Config.LookupHost) so that one that
// does not resolve is refused now, not when data flows, and every
// address a stream would make the gateway dial is checked against the
// gateway's target policies (internal/egress), which its dials check
// again at connect(2).
package intake

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"scistream/internal/admission"
	"scistream/internal/api"
	"scistream/internal/certs"
	"scistream/internal/egress"
	"scistream/internal/pace"
	"scistream/internal/ports"
	"scistream/internal/relay"
	"scistream/internal/store"
	"scistream/internal/stream"
	"scistream/internal/wan"
	"scistream/internal/wanport"
)

// Config is what a Checker checks requests against: the gateway's
// settings, defaults filled in. Every field must be set but those whose
// zero value is documented.
type Config struct {
	// ListenerIP is the address the gateway's listeners are reached at;
	// BindIP the one they bind (0.0.0.0: every address). An outbound
	// stream's default allow-list is the subnet of the one reached.
	ListenerIP, BindIP string
	// PortRange is the gateway's data ports.
	PortRange ports.Range
	// WANPort is the shared WAN port (0: none), WANDomain the domain of
	// the server names of the streams on it.
	WANPort   int
	WANDomain string
	// Node is the gateway's node name in a facility of several ("" for
	// a gateway of one node).
	Node string
	// AllowTCPWAN admits plaintext WAN legs (wan "tcp").
	AllowTCPWAN bool
	// Engines are the data-plane engines, Engine the default.
	Engines *relay.Engines
	Engine  string
	// ConnFiles is the gateway's cap of open files of application
	// connections (stream.FilesOf of a transport per connection).
	ConnFiles int
	// PoolMaxWarm is the most idle legs per channel a stream may ask.
	PoolMaxWarm int
	// Bounds bound an inbound stream's wait for its application and a
	// stream's lease; Resolve has been applied.
	Bounds
	// ResumeWindowMax is the longest resume_window_s a request may ask
	// for (the gateway's Resume.WindowMax, defaults applied); zero: a
	// request may ask for 0 only.
	ResumeWindowMax time.Duration
	// MaxStripe is the most an outbound request's stripe may be; zero
	// or 1: no striping.
	MaxStripe int
	// LookupHost resolves the host names of a request.
	LookupHost func(ctx context.Context, host string) ([]netip.Addr, error)
	// Targets is what applications a stream may make the gateway dial,
	// Peers what peer gateways.
	Targets, Peers *egress.Policy
}

// Checker checks requests against its Config.
type Checker struct{ cfg Config }

// New returns the Checker of cfg.
func New(cfg Config) *Checker { return &Checker{cfg: cfg} }

// lookupTimeout bounds the resolution of one host name of a request.
const lookupTimeout = 5 * time.Second

// Inbound checks an inbound request and returns the record of the new
// stream it asks for, owned by owner, with a fresh stream secret.
func (s *Checker) Inbound(ctx context.Context, req *api.InboundRequest, owner string) (*store.Record, error) {
	shared, err := s.checkListener(req.WANListener, req.WAN)
	if err != nil {
		return nil, err
	}
	if err := s.checkCommon(req.NumConn, !shared, &req.WAN, &req.Engine); err != nil {
		return nil, err
	}
	if err := s.checkMaxActive(req.MaxActiveConns, req.WAN); err != nil {
		return nil, err
	}
	if s.cfg.Node != "" && req.WAN == api.WANQUIC {
		return nil, api.Errorf(api.CodeInvalidArgument, "wan \"quic\": this gateway is node %s of a facility of several nodes, whose inbound channels move between nodes over tls and tcp only; use wan \"tls\"", s.cfg.Node)
	}
	if len(req.ReceiverPorts) == 0 || len(req.ReceiverPorts) > api.MaxReceiverPorts {
		if err := checkHost("remote_ip", req.RemoteIP); err != nil {
			return nil, err
		}
		return nil, api.Errorf(api.CodeInvalidArgument, "receiver_ports: give 1 to %d ports of the listening application", api.MaxReceiverPorts)
	}
	var targets []string
	for _, p := range req.ReceiverPorts {
		if err := checkPort("receiver_ports", p); err != nil {
			return nil, err
		}
		targets = append(targets, net.JoinHostPort(req.RemoteIP, strconv.Itoa(p)))
	}
	if err := s.checkDial(ctx, s.cfg.Targets, "remote_ip", req.RemoteIP, req.ReceiverPorts); err != nil {
		return nil, err
	}
	uid := req.UID
	if uid == "" {
		uid = NewUID()
	} else if err := CheckUID(uid); err != nil {
		return nil, err
	}
	wait, err := s.appWaitS(req.AppWaitS)
	if err != nil {
		return nil, err
	}
	resume, err := s.resumeWindowS(req.ResumeWindowS)
	if err != nil {
		return nil, err
	}
	t, err := s.checkTerms(req.Rate, req.MinRate, req.LeaseS)
	if err != nil {
		return nil, err
	}
	rec := &store.Record{
		UID:      uid,
		Role:     api.RoleInbound,
		State:    api.StateListening,
		Owner:    owner,
		Targets:  targets,
		NumConn:  req.NumConn,
		WAN:      req.WAN,
		Engine:   req.Engine,
		AppWaitS: &wait,
		Secret:   wan.NewSecret(),

		ResumeWindowS: resume,

		MaxActiveConns: req.MaxActiveConns,
	}
	t.apply(rec)
	if shared {
		rec.ServerName = wanport.NewServerName(s.cfg.WANDomain)
	}
	return rec, nil
}

// checkListener checks an inbound request's wan_listener for transport
// wanT (not yet defaulted) and reports whether the stream uses the
// gateway's shared WAN port.
func (s *Checker) checkListener(listener, wanT string) (bool, error) {
	pinned := wanT == "" || api.WANPinned(wanT)
	switch listener {
	case "":
		return s.cfg.WANPort != 0 && pinned, nil
	case api.WANListenerPorts:
		return false, nil
	case api.WANListenerShared:
		if s.cfg.WANPort == 0 {
			return false, api.Errorf(api.CodeInvalidArgument, "wan_listener \"shared\": this gateway has no shared WAN port (s2cs --wan_port); omit wan_listener or use \"ports\"")
		}
		if !pinned {
			return false, api.Errorf(api.CodeInvalidArgument, "wan_listener \"shared\" needs wan \"tls\" or \"quic\": the shared port tells streams apart by their TLS server name, which a plaintext leg does not carry; use \"ports\"")
		}
		return true, nil
	}
	return false, api.Errorf(api.CodeInvalidArgument, "wan_listener %.40q unknown: use \"shared\" or \"ports\", or omit it", listener)
}

// appWaitS checks the app_wait_s of an inbound request (nil: absent) and
// returns the stream's wait for its application, in seconds.
func (s *Checker) appWaitS(req *int) (int, error) {
	most := int(s.cfg.AppWaitMax / time.Second)
	switch {
	case req == nil:
		return int(s.cfg.AppWaitDefault / time.Second), nil
	case *req < 0:
		return 0, api.Errorf(api.CodeInvalidArgument, "app_wait_s %d is negative: give the seconds to wait for the application, 0 to %d (0: do not wait)", *req, most)
	case *req > most:
		return 0, api.Errorf(api.CodeInvalidArgument, "app_wait_s %d exceeds this gateway's maximum of %d seconds: give 0 to %d, or ask the operator to raise s2cs --app_wait_max", *req, most, most)
	}
	return *req, nil
}

// checkStripe checks an outbound request's stripe over WAN transport
// wan.
func (s *Checker) checkStripe(stripe int, wanT string) error {
	most := max(s.cfg.MaxStripe, 1)
	switch {
	case stripe < 0:
		return api.Errorf(api.CodeInvalidArgument, "stripe %d is negative: give the WAN legs at once each connection is carried on, 1 to %d", stripe, most)
	case stripe > most:
		return api.Errorf(api.CodeInvalidArgument, "stripe %d exceeds this gateway's maximum of %d legs at once: give 1 to %d, or ask the operator to raise s2cs --max_stripe", stripe, most, most)
	case stripe > 1 && wanT == api.WANQUIC:
		return api.Errorf(api.CodeInvalidArgument, "stripe %d with wan quic: a QUIC connection's streams share one flow and its congestion control, so more legs gain nothing; use wan tls to stripe, or stripe 1", stripe)
	case stripe > 1 && wanT == api.WANTCP:
		return api.Errorf(api.CodeInvalidArgument, "stripe %d with wan tcp: plaintext legs carry no positioned frames to reassemble; use wan tls to stripe, or stripe 1", stripe)
	}
	return nil
}

// resumeWindowS checks a request's resume_window_s (nil: absent, the
// gateway's default, which the record keeps as nil so that a change of
// the default applies) and returns the record's.
func (s *Checker) resumeWindowS(req *int) (*int, error) {
	most := int(s.cfg.ResumeWindowMax / time.Second)
	switch {
	case req == nil:
		return nil, nil
	case *req < 0:
		return nil, api.Errorf(api.CodeInvalidArgument, "resume_window_s %d is negative: give the seconds a connection waits for a new WAN leg, 0 to %d (0: do not wait)", *req, most)
	case *req > most:
		return nil, api.Errorf(api.CodeInvalidArgument, "resume_window_s %d exceeds this gateway's maximum of %d seconds: give 0 to %d, or ask the operator to raise s2cs --resume_window_max", *req, most, most)
	}
	w := *req
	return &w, nil
}

// Outbound checks an outbound request and returns the record of the new
// stream it asks for, owned by owner.
func (s *Checker) Outbound(ctx context.Context, req *api.OutboundRequest, owner string) (*store.Record, error) {
	if err := CheckUID(req.UID); err != nil {
		return nil, err
	}
	if err := s.checkCommon(req.NumConn, true, &req.WAN, &req.Engine); err != nil {
		return nil, err
	}
	if req.PeerServerName != "" {
		if !api.WANPinned(req.WAN) {
			return nil, api.Errorf(api.CodeInvalidArgument, "peer_server_name: a %q stream sends no TLS server name; omit it", req.WAN)
		}
		if !wan.ValidServerName(req.PeerServerName) {
			return nil, api.Errorf(api.CodeInvalidArgument, "peer_server_name %.80q is not a lower-case DNS name: pass the inbound side's wan_server_name", req.PeerServerName)
		}
	}
	switch {
	case req.WANPool < 0 || req.WANPool > s.cfg.PoolMaxWarm:
		return nil, api.Errorf(api.CodeInvalidArgument, "wan_pool %d out of range: give 0 to %d idle legs per channel (s2cs --pool_max_warm)", req.WANPool, s.cfg.PoolMaxWarm)
	case req.WANPool > 0 && req.WAN != api.WANTLS:
		return nil, api.Errorf(api.CodeInvalidArgument, "wan_pool needs wan \"tls\": a quic stream's application connections already share one QUIC connection per channel, and a tcp leg would lose its splice; omit wan_pool")
	case req.WANPool > 0 && len(req.PeerNodes) > 0:
		return nil, api.Errorf(api.CodeInvalidArgument, "wan_pool: pooled legs do not follow a channel across the nodes of the peer's facility (peer_nodes) yet; omit wan_pool, or reach the peer facility through its shared WAN port's router")
	case len(req.PeerNodes) > api.MaxPeerNodes:
		return nil, api.Errorf(api.CodeInvalidArgument, "peer_nodes: at most %d hosts", api.MaxPeerNodes)
	}
	if err := s.checkMaxActive(req.MaxActiveConns, req.WAN); err != nil {
		return nil, err
	}
	if len(req.PeerListeners) == 0 || len(req.PeerListeners) > api.MaxReceiverPorts {
		return nil, api.Errorf(api.CodeInvalidArgument, "peer_listeners: give 1 to %d host:port addresses of the inbound gateway's listeners", api.MaxReceiverPorts)
	}
	var peerPorts []int
	for _, pl := range req.PeerListeners {
		port, err := s.checkHostPort(ctx, s.cfg.Peers, "peer_listeners", pl)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(peerPorts, port) {
			peerPorts = append(peerPorts, port)
		}
	}
	// A channel whose listener does not answer is dialled at the same
	// port on the peer facility's other nodes (stream.dialPeer).
	for _, h := range req.PeerNodes {
		if err := s.checkDial(ctx, s.cfg.Peers, "peer_nodes", h, peerPorts); err != nil {
			return nil, err
		}
	}
	secret, err := base64.StdEncoding.DecodeString(req.Secret)
	if err != nil || len(secret) != wan.SecretLen {
		return nil, api.Errorf(api.CodeInvalidArgument, "secret must be the base64 of %d bytes, as returned by the inbound request", wan.SecretLen)
	}
	pin, err := parsePin(req.WAN, req.PeerCert, "inbound")
	if err != nil {
		return nil, err
	}
	allow, err := s.Allow(req.Allow)
	if err != nil {
		return nil, err
	}
	resume, err := s.resumeWindowS(req.ResumeWindowS)
	if err != nil {
		return nil, err
	}
	if err := s.checkStripe(req.Stripe, req.WAN); err != nil {
		return nil, err
	}
	t, err := s.checkTerms(req.Rate, req.MinRate, req.LeaseS)
	if err != nil {
		return nil, err
	}
	rec := &store.Record{
		UID:            req.UID,
		Role:           api.RoleOutbound,
		Stripe:         req.Stripe,
		State:          api.StateWired,
		Owner:          owner,
		Targets:        slices.Clone(req.PeerListeners),
		NumConn:        req.NumConn,
		WAN:            req.WAN,
		Engine:         req.Engine,
		Allow:          allow,
		Secret:         secret,
		PeerCertSHA256: pin,
		PeerServerName: req.PeerServerName,
		WANPool:        req.WANPool,
		MaxActiveConns: req.MaxActiveConns,
		PeerNodes:      slices.Clone(req.PeerNodes),
		ResumeWindowS:  resume,
	}
	t.apply(rec)
	return rec, nil
}

// Allow checks an allow-list and returns it, defaulted to the listener's
// own subnet when empty.
func (s *Checker) Allow(allow []string) ([]string, error) {
	if len(allow) > api.MaxAllow {
		return nil, api.Errorf(api.CodeInvalidArgument, "allow: at most %d entries", api.MaxAllow)
	}
	for _, a := range allow {
		if _, err := stream.ParsePrefix(a); err != nil {
			return nil, api.Errorf(api.CodeInvalidArgument, "allow: %v; give addresses or CIDR prefixes such as 10.1.0.0/16", err)
		}
	}
	if len(allow) == 0 {
		return []string{s.defaultAllow()}, nil
	}
	return slices.Clone(allow), nil
}

// terms are what a create request asks of rate and lifetime, checked.
type terms struct {
	rate, least pace.Rate
	leaseS      int
}

// checkTerms checks a create request's rate, min_rate and lease_s.
func (s *Checker) checkTerms(rate, least int64, leaseS int) (terms, error) {
	r, l, err := admission.CheckRate(rate, least)
	if err != nil {
		return terms{}, err
	}
	lease, err := s.Lease(leaseS)
	if err != nil {
		return terms{}, err
	}
	return terms{rate: r, least: l, leaseS: lease}, nil
}

// apply puts t in rec; admission (reserve) sets the rate granted.
func (t terms) apply(rec *store.Record) {
	rec.RateRequested, rec.MinRate, rec.LeaseS = int64(t.rate), int64(t.least), t.leaseS
}

// AttachPin checks an attach request for the inbound stream rec and
// returns the pin of the outbound gateway's certificate ("" for a
// transport that pins nothing).
func AttachPin(req *api.AttachRequest, rec *store.Record) (string, error) {
	if rec.Role != api.RoleInbound {
		return "", api.Errorf(api.CodeInvalidArgument, "stream %s is the outbound side on this gateway; attach applies to the inbound side", rec.UID)
	}
	if rec.PeerCA {
		return "", api.Errorf(api.CodeInvalidArgument, "stream %s is a SciStream 1.2 client's: it pins nothing, and goes wired when the first WAN leg of its CONS gateway (under --peer_ca) comes; send the 1.2 outbound-request to the CONS gateway instead of attaching", rec.UID)
	}
	return parsePin(rec.WAN, req.PeerCert, "outbound")
}

// parsePin returns the SHA-256 pin of the PEM certificate peerCert that a
// request carries for a stream whose WAN transport is wanT, or "" if that
// transport pins nothing. peer names the gateway whose wan_cert it is.
func parsePin(wanT, peerCert, peer string) (string, error) {
	if !api.WANPinned(wanT) {
		return "", nil
	}
	if peerCert == "" {
		return "", api.Errorf(api.CodeInvalidArgument, "peer_cert is required for a %q stream: pass the %s gateway's wan_cert", wanT, peer)
	}
	c, err := certs.ParsePEM([]byte(peerCert))
	if err != nil {
		return "", api.Errorf(api.CodeInvalidArgument, "peer_cert: %v", err)
	}
	return certs.Fingerprint(c.Raw), nil
}

// checkMaxActive checks a request's max_active_conns for a stream over
// transport wanT: 0 (the gateway's cap) up to the most the gateway
// admits over that transport (over quic, twice its cap).
func (s *Checker) checkMaxActive(n int, wanT string) error {
	most := s.cfg.ConnFiles / int(stream.FilesOf(wanT))
	if n < 0 || n > most {
		return api.Errorf(api.CodeInvalidArgument, "max_active_conns %d out of range: give 1 to %d (this gateway's cap on %s connections at once), or omit it for the gateway's cap", n, most, wanT)
	}
	return nil
}

// checkCommon checks the fields both requests share and fills in the
// defaults of wanT and engine. ports says whether the stream needs
// num_conn ports of the gateway's range.
func (s *Checker) checkCommon(numConn int, ports bool, wanT, engine *string) error {
	if numConn < 1 || numConn > api.MaxChannels {
		return api.Errorf(api.CodeInvalidArgument, "num_conn %d out of range: give 1 to %d channels", numConn, api.MaxChannels)
	}
	if ports && numConn > s.cfg.PortRange.Size() {
		return api.Errorf(api.CodeInvalidArgument, "num_conn %d exceeds this gateway's port range %s (%d ports)", numConn, s.cfg.PortRange, s.cfg.PortRange.Size())
	}
	switch *wanT {
	case "":
		*wanT = api.WANTLS
	case api.WANTLS, api.WANQUIC:
	case api.WANTCP:
		if !s.cfg.AllowTCPWAN {
			return api.Errorf(api.CodePermissionDenied, "this gateway refuses plaintext WAN legs (wan \"tcp\"); use \"tls\", or ask the operator to start s2cs with --insecure_tcp_wan")
		}
	default:
		return api.Errorf(api.CodeInvalidArgument, "wan %q unknown: use \"tls\" (default), \"quic\" or \"tcp\"", *wanT)
	}
	if *engine == "" {
		*engine = s.cfg.Engine
	} else if _, err := s.cfg.Engines.Get(*engine); err != nil {
		return api.Errorf(api.CodeInvalidArgument, "engine %q unknown: use one of %s", *engine, strings.Join(s.cfg.Engines.Names(), ", "))
	}
	return nil
}

// defaultAllow is the allow-list of an outbound stream whose request
// gives none: the subnet of the address its listeners are reached at.
func (s *Checker) defaultAllow() string {
	ip := s.cfg.BindIP
	if net.ParseIP(ip).IsUnspecified() {
		ip = s.cfg.ListenerIP
	}
	return ownSubnet(ip)
}

// CheckUID refuses what is not a stream UID.
func CheckUID(uid string) error {
	if !api.ValidUID(uid) {
		return api.Errorf(api.CodeInvalidArgument, "uid %.80q is not a stream UID (a lower-case UUID such as 0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b6c)", uid)
	}
	return nil
}

// NewUID returns a random (version 4) UUID.
func NewUID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func checkPort(field string, p int) error {
	if p < 1 || p > 65535 {
		return api.Errorf(api.CodeInvalidArgument, "%s: port %d out of range 1-65535", field, p)
	}
	return nil
}

func checkHost(field, h string) error {
	if h == "" {
		return api.Errorf(api.CodeInvalidArgument, "%s is required", field)
	}
	if net.ParseIP(h) != nil {
		return nil
	}
	if len(h) > 253 {
		return api.Errorf(api.CodeInvalidArgument, "%s: host name too long", field)
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 {
			return api.Errorf(api.CodeInvalidArgument, "%s %.80q is not an IP address or host name", field, h)
		}
		for _, c := range label {
			if !(c == '-' || c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
				return api.Errorf(api.CodeInvalidArgument, "%s %.80q is not an IP address or host name", field, h)
			}
		}
	}
	return nil
}

// ownSubnet returns the prefix of the interface network that holds ip, or
// the single address if no interface holds it.
func ownSubnet(ip string) string {
	addr := net.ParseIP(ip)
	if ifaces, err := net.InterfaceAddrs(); err == nil && !addr.IsUnspecified() {
		for _, a := range ifaces {
			if n, ok := a.(*net.IPNet); ok && n.Contains(addr) {
				return (&net.IPNet{IP: n.IP.Mask(n.Mask), Mask: n.Mask}).String()
			}
		}
	}
	if addr.To4() != nil {
		return addr.String() + "/32"
	}
	return addr.String() + "/128"
}

// Lease checks a request's lease_s and returns it, defaulted.
func (s *Checker) Lease(leaseS int) (int, error) {
	most := int(s.cfg.LeaseMax.Seconds())
	switch {
	case leaseS == 0:
		return int(s.cfg.LeaseDefault.Seconds()), nil
	case leaseS < 0 || leaseS > most:
		return 0, api.Errorf(api.CodeInvalidArgument, "lease_s %d: give 1 to %d seconds (this gateway's longest lease, s2cs --lease_max), or omit it for the default (%d)", leaseS, most, int(s.cfg.LeaseDefault.Seconds()))
	}
	return leaseS, nil
}

// Update is an update request checked (CheckUpdate): what to change of
// a running stream.
type Update struct {
	// Rate is the new reserved rate (0: best effort), if SetRate.
	Rate    pace.Rate
	SetRate bool
	// Allow is the new allow-list, AllowPrefixes the same parsed; nil:
	// unchanged.
	Allow         []string
	AllowPrefixes []netip.Prefix
	// LeaseS is the new lease from now, in seconds; 0: unchanged.
	LeaseS int
}

// CheckUpdate checks req, an update of a running stream of role, and
// returns the change it asks for. What depends on the stream's running
// state (connections in the kernel, the capacity) is the gateway's to
// check.
func (s *Checker) CheckUpdate(req *api.UpdateRequest, role api.Role) (Update, error) {
	var u Update
	if req.Rate == nil && req.Allow == nil && req.LeaseS == nil {
		return u, api.Errorf(api.CodeInvalidArgument, "nothing to update: give rate, allow or lease_s")
	}
	if req.Rate != nil {
		r, _, err := admission.CheckRate(*req.Rate, 0)
		if err != nil {
			return u, err
		}
		u.Rate, u.SetRate = r, true
	}
	if req.Allow != nil {
		if role != api.RoleOutbound {
			return u, api.Errorf(api.CodeInvalidArgument, "allow: an inbound stream has no allow-list (its WAN legs are authenticated by the peer gateway's pinned certificate); update the outbound side")
		}
		a, err := s.Allow(*req.Allow)
		if err != nil {
			return u, err
		}
		u.AllowPrefixes, _ = stream.ParseAllow(a) // checked
		u.Allow = a
	}
	if req.LeaseS != nil {
		if *req.LeaseS == 0 {
			return u, api.Errorf(api.CodeInvalidArgument, "lease_s 0: give the seconds the stream should live from now, 1 to %d; release it to end it now", int(s.cfg.LeaseMax.Seconds()))
		}
		if _, err := s.Lease(*req.LeaseS); err != nil {
			return u, err
		}
		u.LeaseS = *req.LeaseS
	}
	return u, nil
}
