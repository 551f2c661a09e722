package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"time"

	"scistream/internal/admission"
	"scistream/internal/bytesize"
	"scistream/internal/cliflag"
	"scistream/internal/controlport"
	"scistream/internal/egress"
	"scistream/internal/gateway"
	"scistream/internal/intake"
	"scistream/internal/legpool"
	"scistream/internal/pace"
	"scistream/internal/ports"
	"scistream/internal/relay"
	"scistream/internal/tcpcc"
	"scistream/internal/wanport"
)

// options are s2cs's command line: the gateway's settings (config turns
// them into a gateway.Config) and what only the daemon itself uses.
type options struct {
	ops                opsOptions // configfile.go: --config, --print_config, --log_level
	listenerIP, bindIP string
	portRange          string
	engine, bufferSize string
	pending            time.Duration
	appWait, appMax    time.Duration
	quota              admission.Quota
	capacity           admission.Capacity
	capacityRate       string
	quotaRate          string
	lease, leaseMax    time.Duration
	maxActive          int
	controlConns       int
	tcpWAN             bool
	allowTargets       string
	allowPeers         string
	port               int
	wanPort            int
	node               string
	takeover           time.Duration
	wanDomain          string
	wanAdvertise       string
	wanCC              string
	wanProxy           bool
	wanProxyFrom       string
	pool               legpool.Config
	resume             resumeOptions
	certFile, keyFile  string
	tokensFile         string
	id                 idOptions // identity.go
	noAuth             bool
	stateDir           string
	store              storeOptions
	noSockmap          bool
	verbose            bool
	logFormat          string
	version            bool
	observe            observeOptions // observe.go
	legacy             legacyOptions  // legacy12.go: SciStream 1.2 clients
}

// parseFlags reads args, and the configuration file --config names
// (configfile.go): a flag on the command line overrides its key in the
// file. --help (-h) prints the usage to help and returns flag.ErrHelp;
// a flag that is not s2cs's, or a value its flag refuses, is an error of
// one line that says where the flags are listed (run prints it on
// stderr), not the usage.
func parseFlags(args []string, help io.Writer) (*options, error) {
	var o options
	fs := o.flagSet()
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(help)
			fs.Usage()
			return nil, err
		}
		return nil, cliflag.ParseError(fs, err, "s2cs --help")
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q: every s2cs option is a --flag", fs.Arg(0))
	}
	if err := o.ops.load(fs); err != nil {
		return nil, err
	}
	return &o, nil
}

// flagSet defines s2cs's flags on o's fields. Each flag is also a key of
// the configuration file, by the same name (configfile.go), and belongs
// to one of flagGroups. Its Usage writes the usage, by group, to its
// Output, which is io.Discard: the flag package calls Usage on every
// error too, and parseFlags sets the Output only when --help asks.
func (o *options) flagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("s2cs", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.ops.register(fs)
	fs.StringVar(&o.certFile, "server_crt", "", "PEM certificate of this gateway (control API and WAN legs); if empty, a self-signed one is generated in --state_dir (a SciStream 1.2 command line reads ./server.crt, as 1.2 did, if it is there)")
	fs.StringVar(&o.keyFile, "server_key", "", "PEM private key for --server_crt (a SciStream 1.2 command line reads ./server.key, as 1.2 did, if it is there)")
	fs.StringVar(&o.listenerIP, "listener_ip", "", "IP address advertised to peers and, unless --bind says otherwise, bound (required; without it a SciStream 1.2 command line binds 0.0.0.0, as 1.2 did, and advertises this host's one IPv4 address)")
	fs.StringVar(&o.bindIP, "bind", "", "IP address data listeners and the control API bind (default: --listener_ip; 0.0.0.0 binds every interface and logs a warning)")
	fs.IntVar(&o.port, "port", 5000, "control API port (0 picks a free one)")
	fs.StringVar(&o.portRange, "port_range", "5100-5199", "data listener ports, LO-HI inclusive")
	fs.StringVar(&o.node, "node", "", "this gateway's name as one node of a facility of several that share --store etcd://... under --store_facility (docs/facility.md): any node answers for any stream, channels are spread over the nodes and taken over when one dies; every node needs the same --server_crt (and --wan_port settings, if any) and its own --listener_ip; default: a gateway of one node")
	fs.DurationVar(&o.takeover, "takeover", 0, "with --node: the target time from a node's death to its channels being served by the other nodes (its etcd lease lasts half of it; docs/facility.md says what it depends on); at least 4s (default 10s)")
	fs.IntVar(&o.wanPort, "wan_port", 0, "shared WAN port (443 behind an SNI router): one TCP listener and one UDP socket for the inbound WAN legs of every tls and quic stream, told apart by TLS server name; 0: each stream listens on ports of its own from --port_range")
	fs.StringVar(&o.wanDomain, "wan_domain", "", "DNS domain of the shared WAN port's server names (each stream gets a random name under it), which an SNI router routes to this gateway (default "+wanport.DefaultDomain+")")
	fs.BoolVar(&o.wanProxy, "wan_proxy_protocol", false, "the shared WAN port sits behind a router that sends the PROXY protocol v2 header (HAProxy send-proxy-v2): cap, trust and log the source it names; only if nothing but the router can reach the port")
	fs.StringVar(&o.wanProxyFrom, "wan_proxy_from", "", "with --wan_proxy_protocol (required there): the routers' addresses, CIDR prefixes or addresses, comma-separated; a connection to the shared WAN port from any other address is reset before its header is read, so no one past the router names a source of their choosing")
	fs.IntVar(&o.pool.MaxPerPeer, "pool_max_per_peer", 64, "most pooled WAN legs (idle and busy) to one peer gateway; at the cap an idle one is torn down by --pool_policy")
	fs.StringVar(&o.pool.Policy, "pool_policy", legpool.PolicyLRUM, "which idle pooled WAN leg is torn down at --pool_max_per_peer: lru (least recently used) or lrum (LRU-M: spare the flows whose legs were torn down most)")
	fs.IntVar(&o.pool.MaxWarm, "pool_max_warm", 16, "largest wan_pool (idle pooled legs per channel) a stream may ask for")
	fs.DurationVar(&o.pool.IdleTimeout, "pool_idle_timeout", legpool.DefaultIdleTimeout, "how long a pooled WAN leg beyond a channel's wan_pool may stay idle (after a burst dialed more) before it is torn down")
	o.resume.register(fs)
	fs.StringVar(&o.wanCC, "wan_cc", tcpcc.Auto, "congestion control of this gateway's TCP WAN legs (both ends it holds: dialed, accepted, pooled, on the shared WAN port; TCP_CONGESTION per socket), whatever the host's default: auto (bbr where the kernel offers it, else the host's default), host (the host's default), or a name of tcp_available_congestion_control; the LAN legs keep the host's default. QUIC legs run quic-go's own")
	fs.StringVar(&o.wanAdvertise, "wan_advertise", "", "host:port peers dial for the shared WAN port, e.g. the SNI router's public name and 443 (default: --listener_ip and --wan_port)")
	fs.StringVar(&o.engine, "type", "splice", "default data-plane engine: splice, buffer or sockmap (eBPF redirect in the kernel; plain TCP WAN legs only)")
	fs.StringVar(&o.bufferSize, "buffer_size", bytesize.Format(relay.DefaultBufferSize), "ring buffer of the buffer engine per direction of each connection, e.g. 10MB; 64KiB to 1GiB")
	fs.BoolVar(&o.noSockmap, "no_sockmap", false, "with --type sockmap: do not load the eBPF program, use splice (as when the kernel refuses it)")
	fs.BoolVar(&o.verbose, "verbose", false, "log every connection event (debug level)")
	fs.StringVar(&o.tokensFile, "tokens", "", "token file: one \"<sha256 hex of token> <identity>\" per line (required unless --oidc_issuer, --introspection_url or --insecure_no_auth); read again on SIGHUP")
	o.id.register(fs)
	fs.StringVar(&o.stateDir, "state_dir", "s2cs-state", "directory for the state database and any generated certificate")
	fs.BoolVar(&o.noAuth, "insecure_no_auth", false, "accept control requests without authentication (INSECURE; for isolated testing only)")
	fs.StringVar(&o.allowTargets, "allow_targets", "", "where inbound streams' applications may be (remote_ip): CIDR prefixes or addresses, comma-separated, e.g. 10.1.0.0/16, or 127.0.0.0/8 for applications on this host; replaces the default, which is any unicast address but loopback, link-local (169.254.0.0/16, fe80::/10: cloud metadata services) and this host's own; this gateway's own control port, metrics listener, data ports and shared WAN port are never dialled, whatever the list says (docs/security.md)")
	fs.StringVar(&o.allowPeers, "allow_peers", "", "which peer gateways outbound streams may dial (peer_listeners, peer_nodes): CIDR prefixes or addresses, comma-separated, e.g. the partner facilities' gateways; replaces the same default as --allow_targets")
	fs.BoolVar(&o.tcpWAN, "insecure_tcp_wan", false, "allow streams whose WAN legs are plaintext TCP (for trusted circuits only)")
	fs.DurationVar(&o.pending, "pending_timeout", gateway.DefaultPendingTimeout, "how long a stream waits for its peer (an inbound stream for its attach, a SciStream 1.2 stream for its partner) before it expires and frees its ports")
	fs.DurationVar(&o.appWait, "app_wait_default", intake.DefaultAppWait, "how long an inbound stream holds a WAN connection whose application cannot be reached (dialing it again with backoff) before it resets it, when the request gives no app_wait_s; whole seconds, 0 to not wait")
	fs.DurationVar(&o.appMax, "app_wait_max", intake.DefaultAppWaitMax, "the longest app_wait_s a request may ask for; whole seconds, at most 24h, 0 to let no stream wait")
	fs.IntVar(&o.quota.Streams, "quota_streams", 64, "most live streams one identity may hold on this gateway")
	fs.IntVar(&o.quota.Ports, "quota_ports", 256, "most data ports the live streams of one identity may hold together")
	fs.IntVar(&o.quota.Pending, "quota_pending", 16, "most streams and SciStream 1.2 sessions one identity may have waiting for their peer, counted together: inbound streams not yet attached, 1.2 streams whose partner has not come, 1.2 reqs and hellos waiting for their partner call")
	fs.StringVar(&o.quotaRate, "quota_rate", "0", "most rate the live streams of one identity may have reserved together, in bits per second (e.g. 5G, 800Mbit/s, 100MB/s); 0: no bound but --capacity_rate")
	fs.StringVar(&o.capacityRate, "capacity_rate", "0", "rate this gateway reserves for streams in all, per direction, in bits per second: its WAN link's, e.g. 10G; requests are admitted against it and best-effort streams share what reservations leave; 0 declares none (every rate asked is granted and kept to, best effort is not paced)")
	fs.IntVar(&o.capacity.Streams, "capacity_streams", 0, "most live streams on this gateway, every identity's together (0: no bound but the ports)")
	fs.IntVar(&o.capacity.Conns, "capacity_conns", 0, "most channels (num_conn) of the live streams together (0: no bound but the ports)")
	fs.DurationVar(&o.lease, "lease_default", intake.DefaultLease, "lease of a stream whose request gives none: unless renewed (s2uc update --lease), the stream is released when it runs out; whole seconds")
	fs.DurationVar(&o.leaseMax, "lease_max", intake.DefaultLeaseMax, "longest lease a request or a renewal may ask for; whole seconds")
	fs.IntVar(&o.controlConns, "control_conns", controlport.DefaultTotal, "most control connections open at once (in its plan of open files): half kept for addresses a caller authenticated from in the last 10 minutes, a quarter at most from any one address; one over is reset at once")
	fs.IntVar(&o.maxActive, "max_active_conns", 0, "most application connections the gateway relays at once, over every stream (one more is reset and counted); 0 derives it from the limit of open files, which must hold 2 per connection")
	fs.StringVar(&o.logFormat, "log_format", "text", "log format on stderr: text or json")
	fs.BoolVar(&o.version, "version", false, "print the version and the commit s2cs was built from, and exit")
	o.observe.register(fs)
	o.store.register(fs)
	o.legacy.register(fs)
	cliflag.AddAliases(fs)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: s2cs --listener_ip=IP [--server_crt=FILE --server_key=FILE] (--tokens=FILE | --oidc_issuer=URL ... | --introspection_url=URL ...) [--roles=FILE] [flags]

Every flag is also a key of the --config file, and answers to its
kebab-case spelling too (--port-range); --print_config writes the keys
in these groups. s2cs completion bash|zsh|fish prints a shell
completion script. The SciStream 1.2 daemon's command line is taken
too, with --peer_ca added (docs/migrating-from-1.2.md).

`)
		cliflag.PrintGroups(fs.Output(), fs, flagGroups())
	}
	return fs
}

// flagGroups are s2cs's flags by concern, in the order --help lists
// them and --print_config writes their keys; every flag is in exactly
// one (TestFlagGroups).
func flagGroups() []cliflag.Group {
	return []cliflag.Group{
		{Title: "The gateway (addresses, ports, certificate, state)", Flags: []string{
			"listener_ip", "bind", "port", "port_range", "server_crt", "server_key", "state_dir"}},
		{Title: "Data plane", Flags: []string{
			"type", "buffer_size", "no_sockmap", "max_active_conns"}},
		{Title: "WAN legs (plaintext TCP, the shared WAN port, pooled legs)", Flags: []string{
			"insecure_tcp_wan", "wan_cc", "wan_port", "wan_domain", "wan_advertise", "wan_proxy_protocol", "wan_proxy_from",
			"pool_max_per_peer", "pool_policy", "pool_max_warm", "pool_idle_timeout"}},
		{Title: "Resuming connections over a lost WAN leg, and striping them (framed legs)", Flags: []string{
			"resume_window", "resume_window_max", "resume_conn_buffer", "resume_buffer", "max_stripe"}},
		{Title: "What streams may make this gateway dial", Flags: []string{
			"allow_targets", "allow_peers"}},
		{Title: "Identity and access (tokens, identity providers, roles)", Flags: []string{
			"tokens",
			"oidc_issuer", "oidc_audience", "oidc_jwks_file", "oidc_algs", "oidc_clock_skew", "oidc_identity_claim", "oidc_groups_claim", "oidc_alias",
			"introspection_url", "introspection_client_id", "introspection_secret_file", "introspection_audience",
			"introspection_identity_claim", "introspection_groups_claim", "introspection_alias", "introspection_cache_ttl", "introspection_max_in_flight",
			"oidc_ca", "roles", "insecure_no_auth"}},
		{Title: "Limits and admission (quotas, capacity, timeouts, leases)", Flags: []string{
			"quota_streams", "quota_ports", "quota_pending", "quota_rate",
			"capacity_rate", "capacity_streams", "capacity_conns",
			"pending_timeout", "app_wait_default", "app_wait_max", "lease_default", "lease_max", "control_conns"}},
		{Title: "Facility and state store (etcd, nodes)", Flags: []string{
			"store", "store_facility", "etcd_ca", "etcd_cert", "etcd_key", "etcd_user", "etcd_password_file", "insecure_etcd",
			"node", "takeover"}},
		{Title: "Observability (metrics, rates, logs)", Flags: []string{
			"metrics_listen", "rate_interval", "rate_window", "log_format", "log_level", "verbose"}},
		{Title: "SciStream 1.2 clients (the gRPC control protocol)", Flags: []string{
			"control_grpc", "peer_ca"}},
		{Title: "The command itself", Flags: []string{
			"config", "print_config", "version"}},
	}
}

// config turns the options into the gateway's settings and checks them
// with gateway.Config.Validate, the one validator of those settings; it
// checks here only what the gateway does not see (the control port, the
// certificate files). Identity, Auth, Store, Sockmap and Logger are left
// for run to fill in.
func (o *options) config() (gateway.Config, error) {
	// The gateway reads a zero as "the default": on the command line a
	// zero is a mistake.
	if o.pending <= 0 {
		return gateway.Config{}, errors.New("--pending_timeout must be positive, e.g. 5m")
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"--app_wait_default", o.appWait}, {"--app_wait_max", o.appMax}} {
		if d.v < 0 {
			return gateway.Config{}, fmt.Errorf("%s %s is negative: give a duration such as 30s, or 0s not to wait", d.name, d.v)
		}
	}
	for _, q := range []struct {
		name string
		v    int
	}{{"--quota_streams", o.quota.Streams}, {"--quota_ports", o.quota.Ports}, {"--quota_pending", o.quota.Pending},
		{"--pool_max_per_peer", o.pool.MaxPerPeer}, {"--pool_max_warm", o.pool.MaxWarm}} {
		if q.v < 1 {
			return gateway.Config{}, fmt.Errorf("%s %d: give at least 1", q.name, q.v)
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"--lease_default", o.lease}, {"--lease_max", o.leaseMax}, {"--pool_idle_timeout", o.pool.IdleTimeout}} {
		if d.v <= 0 {
			return gateway.Config{}, fmt.Errorf("%s %s: give a positive duration, e.g. 24h", d.name, d.v)
		}
	}
	if o.controlConns < 2 {
		return gateway.Config{}, fmt.Errorf("--control_conns %d: give at least 2 (the default is %d)", o.controlConns, controlport.DefaultTotal)
	}
	if o.maxActive < 0 {
		return gateway.Config{}, fmt.Errorf("--max_active_conns %d: give a positive count, or 0 to derive it from the limit of open files", o.maxActive)
	}
	if err := o.id.check(); err != nil {
		return gateway.Config{}, err
	}
	resume, err := o.resume.config()
	if err != nil {
		return gateway.Config{}, err
	}
	if err := o.legacy.check(o.node); err != nil {
		return gateway.Config{}, err
	}
	if o.listenerIP == "" {
		// Said here rather than by Validate: the hint is the command
		// line's.
		return gateway.Config{}, errors.New("--listener_ip is required: give the IP address peers use to reach this gateway (a SciStream 1.2 command line, which takes 1.2's 0.0.0.0, is one with --peer_ca FILE: docs/migrating-from-1.2.md)")
	}
	cfg := gateway.Config{
		ListenerIP:     o.listenerIP,
		BindIP:         o.bindIP,
		Engine:         o.engine,
		AllowTCPWAN:    o.tcpWAN,
		PendingTimeout: o.pending,
		Quota:          o.quota,
		WAN:            wanport.Config{Port: o.wanPort, Domain: o.wanDomain, Advertise: o.wanAdvertise, ProxyProtocol: o.wanProxy},
		Pool:           o.pool,
		Resume:         resume,
		Bounds:         intake.Bounds{AppWaitDefault: noWait(o.appWait), AppWaitMax: noWait(o.appMax), LeaseDefault: o.lease, LeaseMax: o.leaseMax},
		MaxActiveConns: o.maxActive,
		Control:        controlport.Limits{Total: o.controlConns},
		Capacity:       o.capacity,
		Node:           o.node,
		Takeover:       o.takeover,
	}
	for _, l := range []struct {
		flag, v string
		to      *[]netip.Prefix
	}{{"--allow_targets", o.allowTargets, &cfg.AllowTargets}, {"--allow_peers", o.allowPeers, &cfg.AllowPeers}, {"--wan_proxy_from", o.wanProxyFrom, &cfg.WAN.ProxyFrom}} {
		if l.v == "" {
			continue
		}
		if *l.to, err = egress.ParseList(l.flag, l.v); err != nil {
			return cfg, err
		}
	}
	if cfg.Capacity.Rate, err = pace.ParseRate(o.capacityRate); err != nil {
		return cfg, fmt.Errorf("--capacity_rate %w", err)
	}
	if cfg.Quota.Rate, err = pace.ParseRate(o.quotaRate); err != nil {
		return cfg, fmt.Errorf("--quota_rate %w", err)
	}
	if cfg.PortRange, err = ports.ParseRange(o.portRange); err != nil {
		return cfg, fmt.Errorf("--port_range: %w", err)
	}
	if cfg.WANCC, err = tcpcc.Resolve(o.wanCC); err != nil {
		return cfg, fmt.Errorf("--wan_cc: %w", err)
	}
	size, err := bytesize.Parse(o.bufferSize)
	if err != nil {
		return cfg, fmt.Errorf("--buffer_size %w", err)
	}
	// Clamped, so that on a 32-bit build a size past int's range cannot
	// wrap into the valid one; Validate refuses anything past 1GiB.
	cfg.BufferSize = int(min(size, 1<<40))
	if cfg.Observe, err = o.observe.config(); err != nil {
		return cfg, err
	}
	if err := cfg.Validate(); err != nil {
		return cfg, flagError(err)
	}
	if cfg.BindIP == "" {
		cfg.BindIP = cfg.ListenerIP
	}
	if o.port < 0 || o.port > 65535 {
		return cfg, fmt.Errorf("--port %d out of range 0-65535", o.port)
	}
	if o.port >= cfg.PortRange.Lo && o.port <= cfg.PortRange.Hi {
		return cfg, fmt.Errorf("--port %d lies inside --port_range %s; choose a control port outside the data range", o.port, cfg.PortRange)
	}
	if o.port != 0 && o.port == o.wanPort {
		return cfg, fmt.Errorf("--port %d is also --wan_port; the control API and the shared WAN port need a port each", o.port)
	}
	if o.node != "" && o.store.url == "" {
		return cfg, fmt.Errorf("--node %s: the nodes of a facility share their state in etcd: give --store %sHOST:PORT and --store_facility NAME too", o.node, etcdScheme)
	}
	if o.node != "" && o.certFile == "" {
		return cfg, fmt.Errorf("--node %s: every node of a facility presents the same WAN certificate (a peer pins one per stream): give --server_crt and --server_key, the same files on every node", o.node)
	}
	if (o.certFile == "") != (o.keyFile == "") {
		return cfg, errors.New("give both --server_crt and --server_key, or neither (a self-signed pair is then generated)")
	}
	return cfg, nil
}

// noWait turns a wait given on the command line into the gateway's
// terms: there a zero is "the default", here it is "do not wait", which
// the gateway spells negative.
func noWait(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// flagError says a gateway.ConfigError in terms of the flag that set
// the field; other errors pass unchanged.
func flagError(err error) error {
	var ce *gateway.ConfigError
	if !errors.As(err, &ce) {
		return err
	}
	name := map[string]string{
		"ListenerIP":        "--listener_ip",
		"BindIP":            "--bind",
		"PortRange":         "--port_range",
		"Engine":            "--type",
		"BufferSize":        "--buffer_size",
		"PendingTimeout":    "--pending_timeout",
		"AppWaitDefault":    "--app_wait_default",
		"AppWaitMax":        "--app_wait_max",
		"Quota.Streams":     "--quota_streams",
		"Quota.Ports":       "--quota_ports",
		"Quota.Pending":     "--quota_pending",
		"WAN.Port":          "--wan_port",
		"Node":              "--node",
		"Takeover":          "--takeover",
		"WAN.Domain":        "--wan_domain",
		"WAN.Advertise":     "--wan_advertise",
		"WAN.ProxyFrom":     "--wan_proxy_from",
		"Pool.MaxPerPeer":   "--pool_max_per_peer",
		"Pool.Policy":       "--pool_policy",
		"Pool.MaxWarm":      "--pool_max_warm",
		"Pool.IdleTimeout":  "--pool_idle_timeout",
		"MaxActiveConns":    "--max_active_conns",
		"Control":           "--control_conns",
		"Quota.Rate":        "--quota_rate",
		"Capacity.Rate":     "--capacity_rate",
		"Capacity.Streams":  "--capacity_streams",
		"Capacity.Conns":    "--capacity_conns",
		"LeaseDefault":      "--lease_default",
		"LeaseMax":          "--lease_max",
		"Resume.Window":     "--resume_window",
		"Resume.WindowMax":  "--resume_window_max",
		"Resume.ConnBuffer": "--resume_conn_buffer",
		"Resume.Buffer":     "--resume_buffer",
		"Resume.MaxStripe":  "--max_stripe",
	}[ce.Field]
	if name == "" {
		return err
	}
	return fmt.Errorf("%s %s", name, ce.Problem)
}
