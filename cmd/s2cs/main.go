// Command s2cs is the SciStream control server: run one on each gateway
// node. It serves the control API over HTTPS and runs the stream proxies.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"scistream/internal/auth"
	"scistream/internal/bytesize"
	"scistream/internal/certs"
	"scistream/internal/cliflag"
	"scistream/internal/gateway"
	"scistream/internal/ports"
	"scistream/internal/relay"
	"scistream/internal/sockmap"
	"scistream/internal/store"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "s2cs:", err)
		}
		os.Exit(2)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("s2cs", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		certFile   = fs.String("server_crt", "", "PEM certificate of this gateway (control API and WAN legs); if empty, a self-signed one is generated in --state_dir")
		keyFile    = fs.String("server_key", "", "PEM private key for --server_crt")
		listenerIP = fs.String("listener_ip", "", "IP address advertised to peers and, unless --bind says otherwise, bound (required)")
		bindIP     = fs.String("bind", "", "IP address data listeners and the control API bind (default: --listener_ip)")
		port       = fs.Int("port", 5000, "control API port (0 picks a free one)")
		portRange  = fs.String("port_range", "5100-5199", "data listener ports, LO-HI inclusive")
		engine     = fs.String("type", "splice", "default data-plane engine: splice, buffer or sockmap (eBPF redirect in the kernel; plain TCP WAN legs only)")
		bufferSize = fs.String("buffer_size", bytesize.Format(relay.DefaultBufferSize), "ring buffer of the buffer engine per direction of each connection, e.g. 10MB; 64KiB to 1GiB")
		noSockmap  = fs.Bool("no_sockmap", false, "with --type sockmap: do not load the eBPF program, use splice (as when the kernel refuses it)")
		verbose    = fs.Bool("verbose", false, "log every connection event (debug level)")
		tokensFile = fs.String("tokens", "", "token file: one \"<sha256 hex of token> <identity>\" per line (required unless --insecure_no_auth)")
		stateDir   = fs.String("state_dir", "s2cs-state", "directory for the state database and any generated certificate")
		noAuth     = fs.Bool("insecure_no_auth", false, "accept control requests without authentication (INSECURE; for isolated testing only)")
		tcpWAN     = fs.Bool("insecure_tcp_wan", false, "allow streams whose WAN legs are plaintext TCP (for trusted circuits only)")
		pending    = fs.Duration("pending_timeout", 15*time.Minute, "how long an inbound stream waits for its outbound peer before it expires")
		logFormat  = fs.String("log_format", "text", "log format on stderr: text or json")
	)
	cliflag.AddAliases(fs)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: s2cs --listener_ip=IP [--server_crt=FILE --server_key=FILE] --tokens=FILE [flags]\n\n")
		cliflag.PrintDefaults(fs)
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q: every s2cs option is a --flag", fs.Arg(0))
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	var h slog.Handler
	switch *logFormat {
	case "text":
		h = slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})
	case "json":
		h = slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level})
	default:
		return fmt.Errorf("--log_format %q: use text or json", *logFormat)
	}
	log := slog.New(h)

	if *listenerIP == "" {
		return errors.New("--listener_ip is required: give the IP address peers use to reach this gateway")
	}
	if net.ParseIP(*listenerIP) == nil {
		return fmt.Errorf("--listener_ip %q is not an IP address", *listenerIP)
	}
	if *bindIP == "" {
		*bindIP = *listenerIP
	}
	if net.ParseIP(*bindIP) == nil {
		return fmt.Errorf("--bind %q is not an IP address", *bindIP)
	}
	if *port < 0 || *port > 65535 {
		return fmt.Errorf("--port %d out of range 0-65535", *port)
	}
	rng, err := ports.ParseRange(*portRange)
	if err != nil {
		return fmt.Errorf("--port_range: %w", err)
	}
	if *port >= rng.Lo && *port <= rng.Hi {
		return fmt.Errorf("--port %d lies inside --port_range %s; choose a control port outside the data range", *port, rng)
	}
	if !slices.Contains(relay.Names(), *engine) {
		return fmt.Errorf("--type %q: choose one of %s", *engine, strings.Join(relay.Names(), ", "))
	}
	bufSize, err := bytesize.Parse(*bufferSize)
	if err != nil {
		return fmt.Errorf("--buffer_size %w", err)
	}
	if bufSize < relay.MinBufferSize || bufSize > relay.MaxBufferSize {
		return fmt.Errorf("--buffer_size %s out of range: give %s to %s, e.g. 10MB", *bufferSize,
			bytesize.Format(relay.MinBufferSize), bytesize.Format(relay.MaxBufferSize))
	}
	if *pending <= 0 {
		return fmt.Errorf("--pending_timeout must be positive, e.g. 15m")
	}
	if (*certFile == "") != (*keyFile == "") {
		return errors.New("give both --server_crt and --server_key, or neither (a self-signed pair is then generated)")
	}
	if err := os.MkdirAll(*stateDir, 0o700); err != nil {
		return fmt.Errorf("--state_dir: %w", err)
	}

	var authn auth.Authenticator
	switch {
	case *noAuth && *tokensFile != "":
		return errors.New("--insecure_no_auth and --tokens exclude each other")
	case *noAuth:
		log.Warn("INSECURE: --insecure_no_auth is set: ANY client that reaches the control port can create and release streams")
		authn = auth.Anonymous{Identity: "anonymous"}
	case *tokensFile == "":
		return errors.New("no authentication configured: pass --tokens FILE (lines \"<sha256 hex of token> <identity>\"), or --insecure_no_auth for isolated testing")
	default:
		t, err := auth.LoadTokens(*tokensFile)
		if err != nil {
			return fmt.Errorf("--tokens: %w", err)
		}
		log.Info("loaded tokens", "file", *tokensFile, "count", t.Len())
		authn = t
	}
	if *tcpWAN {
		log.Warn("--insecure_tcp_wan is set: streams may ask for plaintext WAN legs")
	}

	var id *certs.Identity
	if *certFile != "" {
		if id, err = certs.Load(*certFile, *keyFile); err != nil {
			return err
		}
	} else {
		hosts := []string{*listenerIP, *bindIP, "localhost", "127.0.0.1"}
		if hn, err := os.Hostname(); err == nil {
			hosts = append(hosts, hn)
		}
		var path string
		var generated bool
		id, path, generated, err = certs.LoadOrGenerate(*stateDir, hosts)
		if err != nil {
			return fmt.Errorf("self-signed certificate: %w", err)
		}
		abs, _ := filepath.Abs(path)
		verb := "using"
		if generated {
			verb = "generated"
		}
		fmt.Fprintf(stdout, "s2cs: %s self-signed certificate %s (give it to s2uc as --server_cert)\n", verb, abs)
	}
	fmt.Fprintf(stdout, "s2cs: certificate SHA-256 fingerprint %s\n", id.SHA256)

	// The eBPF program is loaded only when the operator makes sockmap
	// the default engine: a privileged kernel object nobody asked for
	// stays out of every other gateway.
	var smr *sockmap.Redirector
	if *engine == "sockmap" {
		smr, err = sockmap.New(sockmap.Config{ForceUnavailable: *noSockmap})
		if err != nil {
			log.Warn("engine sockmap unavailable: using splice instead; run s2cs as root (CAP_BPF and CAP_NET_ADMIN) on a Linux kernel with SOCKHASH and BTF", "err", err)
			fmt.Fprintf(stdout, "s2cs: engine sockmap unavailable (%v): using splice\n", err)
			smr = nil
		} else {
			defer smr.Close()
			log.Info("engine sockmap available", "window_bytes", smr.Window())
		}
	}

	st, err := store.OpenBolt(filepath.Join(*stateDir, "state.db"))
	if err != nil {
		return err
	}
	srv, err := gateway.New(gateway.Config{
		ListenerIP:     *listenerIP,
		BindIP:         *bindIP,
		PortRange:      rng,
		Identity:       id,
		Auth:           authn,
		Store:          st,
		Engine:         *engine,
		BufferSize:     int(bufSize),
		Sockmap:        smr,
		AllowTCPWAN:    *tcpWAN,
		PendingTimeout: *pending,
		Logger:         log,
	})
	if err != nil {
		st.Close()
		return err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(*bindIP, strconv.Itoa(*port)))
	if err != nil {
		srv.Shutdown(context.Background())
		return fmt.Errorf("control API: %w", err)
	}
	fmt.Fprintf(stdout, "s2cs: control API on https://%s (listener_ip %s, data ports %s, engine %s)\n", ln.Addr(), *listenerIP, rng, *engine)
	log.Info("serving", "control", ln.Addr().String(), "listener_ip", *listenerIP, "bind", *bindIP, "port_range", rng.String(), "engine", *engine, "buffer_size", bytesize.Format(bufSize))
	err = srv.Serve(ctx, ln)
	if smr != nil {
		s := smr.Stats()
		log.Info("sockmap totals", "directions_redirected", s.Redirected, "fallbacks", s.Fallbacks,
			"kernel_bytes", s.KernelBytes, "user_bytes", s.UserBytes, "passes", s.Passes, "trimmed_bytes", s.Trimmed)
	}
	log.Info("stopped")
	return err
}
