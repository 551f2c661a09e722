// Package main is the s2cs command, the SciStream control server: run one
// on each gateway node. It serves the control API over HTTPS and runs the
// stream proxies.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"scistream/internal/auth"
	"scistream/internal/bytesize"
	"scistream/internal/certs"
	"scistream/internal/cliflag"
	"scistream/internal/egress"
	"scistream/internal/fileplan"
	"scistream/internal/gateway"
	"scistream/internal/handoff"
	"scistream/internal/pace"
	"scistream/internal/sockmap"
	"scistream/internal/tcpbuf"
	"scistream/internal/version"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(exitCode(err, os.Stderr))
}

// exitCode reports err on stderr and returns the process's exit status:
// 0 for success and for --help, 2 for anything else (a bad flag, a
// gateway that could not start or stopped with an error).
func exitCode(err error, stderr io.Writer) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if !errors.As(err, new(loggedError)) {
		fmt.Fprintln(stderr, "s2cs:", err)
	}
	return 2
}

// run starts the gateway that args describe and serves until ctx ends.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	if len(args) > 0 && args[0] == "completion" {
		return completion(args[1:], stdout)
	}
	given := args                      // a live upgrade starts the new binary with them (upgrade.go)
	exe, exeErr := os.Executable()     // the path it started from, before a new binary replaces it there
	args, l12 := translate12(args)     // a SciStream 1.2 command line (legacy12.go)
	o, err := parseFlags(args, stdout) // --help is asked for: it goes to stdout, to be paged or grepped
	if err != nil {
		return err
	}
	// Under --log_format json, an error once the log is open is a JSON
	// record too (after the hint below, deferred later, is added).
	var jsonLog *slog.Logger
	defer func() {
		if err != nil && jsonLog != nil {
			jsonLog.Error("s2cs stopped: " + strings.ReplaceAll(err.Error(), "\n", "; "))
			err = loggedError{err}
		}
	}()
	// A refused value that came from --config names its key and file.
	defer func() { err = o.ops.fileHint(err) }()
	if o.version {
		fmt.Fprintln(stdout, version.String("s2cs"))
		return nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return fmt.Errorf("the working directory: %w", err)
	}
	if err := l12.apply(o, o.ops.given(), wd, hostAddrs); err != nil {
		return err
	}
	cfg, err := o.config()
	if err != nil {
		return err
	}
	storeCfg, err := o.store.config()
	if err != nil {
		return err
	}
	log, err := o.logger(stderr)
	if err != nil {
		return err
	}
	if o.ops.printConfig {
		return o.ops.writeConfig(stdout)
	}
	if o.logFormat == "json" {
		// Every line s2cs writes is JSON: the log on stderr, and what it
		// says on stdout (announce.go).
		jsonLog = log
		jl := newJSONLines(stdout)
		defer jl.Flush()
		stdout = jl
	}
	if o.ops.configFile != "" {
		log.Info("configuration file", "path", o.ops.configFile, "keys", len(o.ops.fromFile))
	}
	succ, err := takingOver(log) // started by a live upgrade (upgrade.go)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(cfg.BindIP); ip != nil && ip.IsUnspecified() {
		log.Warn("--bind " + cfg.BindIP + " binds the control API and every data listener on all interfaces: applications and peers reach them on any address this host has; prefer one address")
	}
	if cfg.Auth, err = o.authenticator(ctx, log); err != nil {
		return err
	}
	if cfg.Roles, err = o.id.policy(log); err != nil {
		closeAuth(cfg.Auth)
		return err
	}
	ctx, quit := context.WithCancel(ctx)
	defer quit()
	rl := &reloader{o: o, log: log, cur: cfg.Auth, hangup: newHangup(), quit: quit}
	defer func() { closeAuth(rl.cur) }() // until the reloader has it (watchReload)
	if cfg.AllowTCPWAN {
		log.Warn("--insecure_tcp_wan is set: streams may ask for plaintext WAN legs")
	}
	if err := os.MkdirAll(o.stateDir, 0o700); err != nil {
		return fmt.Errorf("--state_dir: %w", err)
	}
	if cfg.Identity, err = o.identity(cfg, stdout); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "s2cs: certificate SHA-256 fingerprint %s\n", cfg.Identity.SHA256)
	cfg.Sockmap = o.sockmap(cfg.Engine, log)
	if cfg.Sockmap != nil {
		defer cfg.Sockmap.Close()
	}
	var srvp atomic.Pointer[gateway.Server]
	// Every listening socket on a fixed port is bound through sockets,
	// for a live upgrade to hand over (upgrade.go).
	sockets := &handoff.Sockets{}
	cfg.Sockets = sockets
	if succ != nil {
		// Everything that could fail without the old process's ports
		// and store has been checked: it may stop now, and hand over.
		items, terr := succ.take()
		if terr != nil {
			return terr
		}
		var ierr error
		if cfg.Handed, ierr = sockets.Inherit(items); ierr != nil {
			log.Warn("live upgrade: some of the sockets handed over are not taken", "err", ierr)
		}
		confirmed := succ.confirm(func() bool { s := srvp.Load(); return s != nil && s.Ready() }, sockets)
		defer func() { confirmed(err) }()
	}
	if cfg.Store, err = openStore(storeCfg, o.stateDir, log, stdout); err != nil {
		return err
	}
	cfg.Logger = log
	if cfg.Observe.MetricsListener, err = o.observe.listen(stdout, sockets); err != nil {
		cfg.Store.Close()
		return err
	}
	srv, err := gateway.New(cfg)
	if err != nil {
		cfg.Store.Close()
		if cfg.Observe.MetricsListener != nil {
			cfg.Observe.MetricsListener.Close()
		}
		return flagError(err)
	}
	rl.srv = srv
	srvp.Store(srv)
	stopReload := rl.watchReload(ctx) // SIGHUP: tokens, roles and identity providers read again (reload.go)
	defer stopReload()
	// A live upgrade ends the serving without a stop: the service
	// manager hears the new main process, not STOPPING=1.
	serveCtx, handedOver := context.WithCancel(ctx)
	defer handedOver()
	up := &upgrader{exe: exe, args: given, log: log, srv: srv, done: handedOver}
	if exeErr != nil {
		log.Warn("SIGUSR2 (a live upgrade) is refused: the binary's path is unknown", "err", exeErr)
	} else {
		defer up.watch(ctx)() // SIGUSR2: a live upgrade (upgrade.go); waits for one under way
	}
	l12.report(log)
	if err := o.legacy.serve(srv, log); err != nil {
		srv.Shutdown(context.Background())
		return err
	}
	reportFiles(srv.Files(), log, stdout)
	ln, err := sockets.Listen("tcp", net.JoinHostPort(cfg.BindIP, strconv.Itoa(o.port)))
	if err != nil {
		srv.Shutdown(context.Background())
		return fmt.Errorf("control API: %w", err)
	}
	fmt.Fprintf(stdout, "s2cs: control API on https://%s (listener_ip %s, data ports %s, engine %s)\n", ln.Addr(), cfg.ListenerIP, cfg.PortRange, cfg.Engine)
	notified := notifyReady(ctx, srv.Ready, ln.Addr().String(), log) // READY=1 under systemd (notify.go)
	// Each start-up fact is said once: the line above on stdout says
	// where the API is, the addresses and the engine; the log says the
	// rest.
	resume := cfg.Resume.WithDefaults()
	bufs := tcpbuf.Read()
	log.Info("serving", "version", version.Current().String(), "bind", cfg.BindIP, "buffer_size", bytesize.Format(int64(cfg.BufferSize)),
		"capacity_rate", rateOrNone(cfg.Capacity.Rate), "quota_rate", rateOrNone(cfg.Quota.Rate), "lease_default", cfg.LeaseDefault, "lease_max", cfg.LeaseMax,
		"resume_window", resume.Window, "resume_window_max", resume.WindowMax,
		"resume_conn_buffer", bytesize.Format(int64(resume.ConnBuffer)), "resume_buffer", bytesize.Format(resume.Buffer), "max_stripe", resume.MaxStripe,
		"wan_cc", cfg.WANCC.Effective(), "wan_cc_from", cfg.WANCC.Note,
		"tcp_rmem_max", bufOrUnknown(bufs.Recv), "tcp_wmem_max", bufOrUnknown(bufs.Send))
	if bufs.Low() {
		log.Info("TCP autotuning may grow a socket's buffers only this far: one WAN leg then carries at most about this much at 100 ms RTT, less through losses; for long paths raise the limits (or stripe the streams)",
			"tcp_rmem_max", bufOrUnknown(bufs.Recv), "tcp_wmem_max", bufOrUnknown(bufs.Send), "per_leg_at_100ms", bytesize.Human(int64(bufs.Rate(0.1)))+"/s", "fix", tcpbuf.Fix)
	}
	if cfg.WANCC.FellBack {
		log.Warn("the WAN legs run the host's default congestion control, which gives up most of a long or lossy path if it is cubic or reno; --wan_cc host says this is meant", "cc", cfg.WANCC.Effective(), "why", cfg.WANCC.Note)
	}
	log.Info("what streams may make this gateway dial", "applications", describeAllow(cfg.AllowTargets), "peers", describeAllow(cfg.AllowPeers),
		"never", "this gateway's own control port, metrics listener, data ports and shared WAN port")
	if cfg.Capacity.Rate == 0 {
		log.Info("no --capacity_rate: the rates streams ask for are granted and kept to, but not reserved against the link, and best-effort streams are not paced")
	}
	err = srv.Serve(serveCtx, ln)
	if e := up.wait(); e != nil && err == nil {
		err = e // handed over and not confirmed: a failure, for Restart=on-failure
	}
	notified()
	if cfg.Sockmap != nil {
		s := cfg.Sockmap.Stats()
		log.Info("sockmap totals", "directions_redirected", s.Redirected, "fallbacks", s.Fallbacks,
			"kernel_bytes", s.KernelBytes, "user_bytes", s.UserBytes, "passes", s.Passes, "trimmed_bytes", s.Trimmed)
	}
	log.Info("stopped")
	return err
}

// reportFiles says at start, on stdout, how the gateway spends its open
// files, and in the log, loudly, when the limit gives it few
// connections: an operator learns it now, not from connections refused
// under load.
func reportFiles(f fileplan.Plan, log *slog.Logger, stdout io.Writer) {
	how := "set by --max_active_conns"
	if f.Derived {
		how = "derived from the limit"
	}
	fmt.Fprintf(stdout, "s2cs: open files: limit %d; up to %d application connections at once (%s, %d files each), %d splice pipes, %d for listeners, strangers and the rest\n",
		f.Limit, f.MaxActiveConns, how, fileplan.PerConn, f.MaxPipes, f.Fixed)
	if f.Low() {
		want := f.LimitFor()
		log.Warn(fmt.Sprintf("the limit of %d open files gives only %d application connections at once: raise it to %d for 1024 (ulimit -n %d before s2cs, or LimitNOFILE=%d in its systemd unit; the hard limit as root), or narrow --port_range",
			f.Limit, f.MaxActiveConns, want, want, want))
	}
}

// logger returns the logger --log_format, --log_level and --verbose ask
// for, writing to stderr.
func (o *options) logger(stderr io.Writer) (*slog.Logger, error) {
	name, err := o.ops.checkLevel(o.verbose)
	if err != nil {
		return nil, err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(name)); err != nil {
		return nil, fmt.Errorf("--log_level: %w", err)
	}
	hopts := &slog.HandlerOptions{Level: level}
	switch o.logFormat {
	case "text":
		return slog.New(slog.NewTextHandler(stderr, hopts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(stderr, hopts)), nil
	}
	return nil, fmt.Errorf("--log_format %q: use text or json", o.logFormat)
}

// authenticator returns how control requests are authenticated: the
// --tokens file, the identity providers of --oidc_issuer and
// --introspection_url (identity.go), either or both, or nobody at all
// with --insecure_no_auth (said loudly).
func (o *options) authenticator(ctx context.Context, log *slog.Logger) (auth.Authenticator, error) {
	providers := o.id.jwt() || o.id.opaque()
	switch {
	case o.noAuth && o.tokensFile != "":
		return nil, errors.New("--insecure_no_auth and --tokens exclude each other")
	case o.noAuth && providers:
		return nil, errors.New("--insecure_no_auth excludes --oidc_issuer and --introspection_url")
	case o.noAuth:
		log.Warn("INSECURE: --insecure_no_auth is set: ANY client that reaches the control port can create and release streams")
		return auth.Anonymous{Identity: "anonymous"}, nil
	case o.tokensFile == "" && !providers && o.legacy.why != "":
		return nil, errors.New(o.legacy.why + " without --client_secret: 1.2 then checked no token, and s2cs always checks them: pass --tokens FILE (lines \"<sha256 hex of token> <identity>\"), --client_id and --client_secret (Globus Auth, as 1.2), --oidc_issuer URL or --introspection_url URL (see docs/identity.md), or --insecure_no_auth for isolated testing")
	case o.tokensFile == "" && !providers:
		return nil, errors.New("no authentication configured: pass --tokens FILE (lines \"<sha256 hex of token> <identity>\"), --oidc_issuer URL or --introspection_url URL (see docs/identity.md), or --insecure_no_auth for isolated testing")
	}
	var static *auth.Tokens
	if o.tokensFile != "" {
		t, err := auth.LoadTokens(o.tokensFile)
		if err != nil {
			return nil, fmt.Errorf("--tokens: %w", err)
		}
		log.Info("loaded tokens", "file", o.tokensFile, "count", t.Len())
		static = t
	}
	if !providers {
		return static, nil
	}
	return o.id.chain(ctx, static, log)
}

// identity loads --server_crt/--server_key, or the self-signed pair in
// --state_dir (generated on first start), and says which on stdout.
func (o *options) identity(cfg gateway.Config, stdout io.Writer) (*certs.Identity, error) {
	if o.certFile != "" {
		return certs.Load(o.certFile, o.keyFile)
	}
	hosts := []string{cfg.ListenerIP, cfg.BindIP, "localhost", "127.0.0.1"}
	if hn, err := os.Hostname(); err == nil {
		hosts = append(hosts, hn)
	}
	id, path, generated, err := certs.LoadOrGenerate(o.stateDir, hosts)
	if err != nil {
		return nil, fmt.Errorf("self-signed certificate: %w", err)
	}
	abs, _ := filepath.Abs(path)
	verb := "using"
	if generated {
		verb = "generated"
	}
	fmt.Fprintf(stdout, "s2cs: %s self-signed certificate %s (give it to s2uc as --server_cert)\n", verb, abs)
	return id, nil
}

// sockmap loads the eBPF program when the operator makes sockmap the
// default engine: a privileged kernel object nobody asked for stays out
// of every other gateway. It returns nil (streams then use splice, and
// the log says why) when the kernel refuses it.
func (o *options) sockmap(engine string, log *slog.Logger) *sockmap.Redirector {
	if engine != "sockmap" {
		return nil
	}
	smr, err := sockmap.New(sockmap.Config{ForceUnavailable: o.noSockmap})
	if err != nil {
		log.Warn("engine sockmap unavailable: using splice instead; run s2cs as root (CAP_BPF and CAP_NET_ADMIN) on a Linux kernel with SOCKHASH and BTF", "err", err)
		return nil
	}
	log.Info("engine sockmap available", "window_bytes", smr.Window())
	return smr
}

// completion writes the completion script of the shell args name:
// "s2cs completion bash|zsh|fish".
func completion(args []string, stdout io.Writer) error {
	if len(args) != 1 || !cliflag.HasShell(args[0]) {
		return fmt.Errorf("usage: s2cs completion %s", strings.Join(cliflag.Shells, "|"))
	}
	var o options
	return cliflag.Completion{Program: "s2cs", Flags: cliflag.FlagsOf(o.flagSet())}.Write(stdout, args[0])
}

// bufOrUnknown formats a TCP buffer limit (0: unknown).
func bufOrUnknown(n int64) string {
	if n <= 0 {
		return "unknown"
	}
	return bytesize.Format(n)
}

// rateOrNone writes a configured rate for the log, "none" for zero.
func rateOrNone(r pace.Rate) string {
	if r == 0 {
		return "none"
	}
	return r.String()
}

// describeAllow says what an allow-list (--allow_targets, --allow_peers)
// lets the gateway dial, for the log.
func describeAllow(l []netip.Prefix) string {
	return egress.New(l, "", nil).Describe()
}
