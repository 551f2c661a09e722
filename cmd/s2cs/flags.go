package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"scistream/internal/bytesize"
	"scistream/internal/cliflag"
	"scistream/internal/gateway"
	"scistream/internal/ports"
	"scistream/internal/relay"
)

// options are s2cs's command line: the gateway's settings (config turns
// them into a gateway.Config) and what only the daemon itself uses.
type options struct {
	listenerIP, bindIP string
	portRange          string
	engine, bufferSize string
	pending            time.Duration
	quota              gateway.Quota
	maxActive          int
	tcpWAN             bool
	port               int
	certFile, keyFile  string
	tokensFile         string
	noAuth             bool
	stateDir           string
	noSockmap          bool
	verbose            bool
	logFormat          string
	version            bool
}

// parseFlags reads args. --help prints the usage and returns
// flag.ErrHelp.
func parseFlags(args []string, stderr io.Writer) (*options, error) {
	var o options
	fs := flag.NewFlagSet("s2cs", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.certFile, "server_crt", "", "PEM certificate of this gateway (control API and WAN legs); if empty, a self-signed one is generated in --state_dir")
	fs.StringVar(&o.keyFile, "server_key", "", "PEM private key for --server_crt")
	fs.StringVar(&o.listenerIP, "listener_ip", "", "IP address advertised to peers and, unless --bind says otherwise, bound (required)")
	fs.StringVar(&o.bindIP, "bind", "", "IP address data listeners and the control API bind (default: --listener_ip; 0.0.0.0 binds every interface and logs a warning)")
	fs.IntVar(&o.port, "port", 5000, "control API port (0 picks a free one)")
	fs.StringVar(&o.portRange, "port_range", "5100-5199", "data listener ports, LO-HI inclusive")
	fs.StringVar(&o.engine, "type", "splice", "default data-plane engine: splice, buffer or sockmap (eBPF redirect in the kernel; plain TCP WAN legs only)")
	fs.StringVar(&o.bufferSize, "buffer_size", bytesize.Format(relay.DefaultBufferSize), "ring buffer of the buffer engine per direction of each connection, e.g. 10MB; 64KiB to 1GiB")
	fs.BoolVar(&o.noSockmap, "no_sockmap", false, "with --type sockmap: do not load the eBPF program, use splice (as when the kernel refuses it)")
	fs.BoolVar(&o.verbose, "verbose", false, "log every connection event (debug level)")
	fs.StringVar(&o.tokensFile, "tokens", "", "token file: one \"<sha256 hex of token> <identity>\" per line (required unless --insecure_no_auth)")
	fs.StringVar(&o.stateDir, "state_dir", "s2cs-state", "directory for the state database and any generated certificate")
	fs.BoolVar(&o.noAuth, "insecure_no_auth", false, "accept control requests without authentication (INSECURE; for isolated testing only)")
	fs.BoolVar(&o.tcpWAN, "insecure_tcp_wan", false, "allow streams whose WAN legs are plaintext TCP (for trusted circuits only)")
	fs.DurationVar(&o.pending, "pending_timeout", gateway.DefaultPendingTimeout, "how long an inbound stream waits for its outbound peer before it expires and frees its ports")
	fs.IntVar(&o.quota.Streams, "quota_streams", 64, "most live streams one identity may hold on this gateway")
	fs.IntVar(&o.quota.Ports, "quota_ports", 256, "most data ports the live streams of one identity may hold together")
	fs.IntVar(&o.quota.Pending, "quota_pending", 16, "most inbound streams one identity may have waiting for their outbound peer")
	fs.IntVar(&o.maxActive, "max_active_conns", 0, "most application connections the gateway relays at once, over every stream (one more is reset and counted); 0 derives it from the limit of open files, which must hold 2 per connection")
	fs.StringVar(&o.logFormat, "log_format", "text", "log format on stderr: text or json")
	fs.BoolVar(&o.version, "version", false, "print the version and the commit s2cs was built from, and exit")
	cliflag.AddAliases(fs)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: s2cs --listener_ip=IP [--server_crt=FILE --server_key=FILE] --tokens=FILE [flags]\n\n")
		cliflag.PrintDefaults(fs)
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q: every s2cs option is a --flag", fs.Arg(0))
	}
	return &o, nil
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
	for _, q := range []struct {
		name string
		v    int
	}{{"--quota_streams", o.quota.Streams}, {"--quota_ports", o.quota.Ports}, {"--quota_pending", o.quota.Pending}} {
		if q.v < 1 {
			return gateway.Config{}, fmt.Errorf("%s %d: give at least 1", q.name, q.v)
		}
	}
	if o.maxActive < 0 {
		return gateway.Config{}, fmt.Errorf("--max_active_conns %d: give a positive count, or 0 to derive it from the limit of open files", o.maxActive)
	}
	cfg := gateway.Config{
		MaxActiveConns: o.maxActive,
		ListenerIP:     o.listenerIP,
		BindIP:         o.bindIP,
		Engine:         o.engine,
		AllowTCPWAN:    o.tcpWAN,
		PendingTimeout: o.pending,
		Quota:          o.quota,
	}
	var err error
	if cfg.PortRange, err = ports.ParseRange(o.portRange); err != nil {
		return cfg, fmt.Errorf("--port_range: %w", err)
	}
	size, err := bytesize.Parse(o.bufferSize)
	if err != nil {
		return cfg, fmt.Errorf("--buffer_size %w", err)
	}
	// Clamped, so that on a 32-bit build a size past int's range cannot
	// wrap into the valid one; Validate refuses anything past 1GiB.
	cfg.BufferSize = int(min(size, 1<<40))
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
	if (o.certFile == "") != (o.keyFile == "") {
		return cfg, errors.New("give both --server_crt and --server_key, or neither (a self-signed pair is then generated)")
	}
	return cfg, nil
}

// flagError says a gateway.ConfigError in terms of the flag that set
// the field; other errors pass unchanged.
func flagError(err error) error {
	var ce *gateway.ConfigError
	if !errors.As(err, &ce) {
		return err
	}
	name := map[string]string{
		"ListenerIP":     "--listener_ip",
		"BindIP":         "--bind",
		"PortRange":      "--port_range",
		"Engine":         "--type",
		"BufferSize":     "--buffer_size",
		"PendingTimeout": "--pending_timeout",
		"Quota.Streams":  "--quota_streams",
		"Quota.Ports":    "--quota_ports",
		"Quota.Pending":  "--quota_pending",
		"MaxActiveConns": "--max_active_conns",
	}[ce.Field]
	if name == "" {
		return err
	}
	return fmt.Errorf("%s %s", name, ce.Problem)
}
