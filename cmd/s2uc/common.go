package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"scistream/internal/api"
	"scistream/internal/auth"
	"scistream/internal/client"
	"scistream/internal/login"
	"scistream/internal/trustfile"
)

// gatewayFlags are the flags that reach one gateway.
type gatewayFlags struct {
	s2cs, cert, tokenFile string
	// tokenFrom names where tokenFile came from, in its errors: empty
	// for the flag --PREFIXtoken_file.
	tokenFrom string
	prefix    string // of the flags' names: "", "inbound_", "outbound_"
	// record is set for the gateway of a command that reaches a stream's
	// gateways from its local record when --s2cs is not given.
	record bool
	// def are the defaults of the configuration file and environment
	// for this side (cmdline.applyDefaults).
	def client.GatewayDefaults
}

// configuredToken names a token file of the defaults, in its errors.
const configuredToken = "token_file (SCISTREAM_TOKEN_FILE or the configuration file)"

// fill gives the fields not set on the command line their defaults.
func (g *gatewayFlags) fill() {
	if g.s2cs == "" {
		g.s2cs = g.def.S2CS
	}
	if g.cert == "" {
		g.cert = g.def.ServerCert
	}
	if g.tokenFile == "" && g.def.TokenFile != "" {
		g.tokenFile, g.tokenFrom = g.def.TokenFile, configuredToken
	}
}

// useDefault fills g from the defaults when --s2cs is not given (for a
// stream s2uc has no record of) and reports whether g then names a
// gateway.
func (g *gatewayFlags) useDefault() bool {
	if g.s2cs == "" && g.def.S2CS != "" {
		g.fill()
	}
	return g.s2cs != ""
}

// recordSide reaches the gateway of one side ("inbound" or "outbound")
// of stream uid as its local record e names it: the record's address
// and certificate. The token file is, highest first: flagValue, that of
// the command line's flagName (--token_file); the record's (the one the
// stream was wired with: s2uc keeps it, the Python library only when
// one was given); the configured one of that side, as s2uc stream takes
// it (client.Defaults.Side: the configuration file's
// inbound_token_file or outbound_token_file, else SCISTREAM_TOKEN_FILE,
// else token_file); else none, and the token is SCISTREAM_TOKEN or the
// login (token). A stream made with the token of the configuration file
// is so reached as it was made, whoever made it.
func (c *cmdline) recordSide(uid, side string, e *client.Endpoint, flagName, flagValue string) gatewayFlags {
	g := gatewayFlags{s2cs: e.S2CS, cert: e.ServerCert}
	switch def := c.defaults.Side(side + "_").TokenFile; {
	case flagValue != "":
		g.tokenFile, g.tokenFrom = flagValue, "--"+flagName
	case e.TokenFile != "":
		g.tokenFile, g.tokenFrom = e.TokenFile, "token_file of the local record of stream "+uid
	case def != "":
		g.tokenFile, g.tokenFrom = def, configuredToken
	}
	return g
}

func (g *gatewayFlags) register(fs *flag.FlagSet, prefix, what, note string) {
	g.prefix = prefix
	fs.StringVar(&g.s2cs, prefix+"s2cs", "", "HOST:PORT of the "+what+"'s control API"+note)
	fs.StringVar(&g.cert, prefix+"server_cert", "", "PEM certificate of the "+what+" (or of its CA)")
	fs.StringVar(&g.tokenFile, prefix+"token_file", "", "file holding the bearer token for the "+what+" (default: $SCISTREAM_TOKEN_FILE or the configuration file's; without one: $SCISTREAM_TOKEN, else the login of s2uc login)")
}

// client builds a control client, with the token of --token_file or
// else SCISTREAM_TOKEN. The library's complaints about its configuration
// are said in terms of these flags.
func (g *gatewayFlags) client(timeout time.Duration) (*client.Client, error) {
	if g.s2cs == "" {
		return nil, usagef("missing --%ss2cs HOST:PORT of the gateway's control API (or a default: SCISTREAM_S2CS, or s2cs in the configuration file, docs/client.md)", g.prefix)
	}
	from := g.tokenFrom
	if from == "" {
		from = "--" + g.prefix + "token_file"
	}
	tok, err := token(g.tokenFile, from)
	if err != nil {
		return nil, err
	}
	c, err := client.New(client.Config{Addr: g.s2cs, ServerCert: g.cert, Token: tok, Timeout: timeout})
	var ce *client.ConfigError
	if errors.As(err, &ce) {
		switch ce.Field {
		case "Addr":
			return nil, usagef("--%ss2cs %q: want HOST:PORT of the gateway's control API, e.g. 10.0.0.5:5000", g.prefix, ce.Value)
		case "ServerCert":
			return nil, usagef("--%sserver_cert %s: %w", g.prefix, ce.Value, ce.Err)
		}
	}
	return c, err
}

// hint adds to a failed request's error what the user can change on
// s2uc's command line: the client library says what failed, not which
// flag to fix; and to a refusal that is not the caller's to fix, the id
// under which the gateway logged the request. The error stays one line.
func hint(err error) error {
	var ae *api.Error
	switch {
	case errors.As(err, &ae) && ae.RequestID != "" && operatorsCode(ae.Code):
		// Not the caller's to fix: name the request the gateway logged.
		return fmt.Errorf("%w (request %s in the gateway's log)", err, ae.RequestID)
	case errors.Is(err, client.ErrBadAnswer):
		return fmt.Errorf("%w; s2uc kept and forwarded nothing of it: check that --s2cs and --server_cert name a SciStream gateway you trust", err)
	case errors.Is(err, client.ErrCertificate):
		return fmt.Errorf("%w; pass the gateway's certificate with --server_cert (s2cs prints its path at start)", err)
	case errors.Is(err, client.ErrWANPort):
		return fmt.Errorf("%w (give --s2cs the control port, 5000 by default)", err)
	case errors.Is(err, client.ErrUnreachable), errors.Is(err, client.ErrNotHTTPS):
		return fmt.Errorf("%w; check --s2cs and that s2cs runs there", err)
	}
	return err
}

// operatorsCode reports whether a gateway's refusal with code c is one
// its operator may have to look into (the request itself was well
// formed): an internal fault, an outage, a refused identity, a full
// gateway.
func operatorsCode(c api.Code) bool {
	switch c {
	case api.CodeInternal, api.CodeUnavailable, api.CodeUnauthenticated, api.CodePermissionDenied, api.CodeNoResources:
		return true
	}
	return false
}

// token returns the bearer token of a request: that of file if given
// (from names where it came from, for its errors: "--token_file"...),
// else $SCISTREAM_TOKEN if set, else the login s2uc login stored
// (renewed if it is about to expire), else none.
func token(file, from string) (string, error) {
	if file != "" {
		return tokenFile(file, from)
	}
	if t := strings.TrimSpace(os.Getenv("SCISTREAM_TOKEN")); t != "" {
		return t, nil
	}
	st, err := login.DefaultStore()
	if err != nil {
		return "", nil // no home, so no login: the gateway asks for a token
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t, err := st.Token(ctx)
	if errors.Is(err, login.ErrNoLogin) {
		return "", nil
	}
	return t, err
}

// tokenFile reads a token file (from: the flag or key that named it),
// which only its owner may read or write (as ssh demands of a private
// key): a token others can read is theirs too. Like every file s2uc
// trusts (internal/trustfile), it must be the user's (or root's), in
// directories nobody else may write: whoever can swap it makes s2uc act
// as them.
func tokenFile(file, from string) (string, error) {
	f, err := os.Open(file)
	if err != nil {
		return "", usagef("%s: %w", from, err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o077 != 0 {
		return "", usagef("%s %s can be read or written by others (mode %04o): chmod 600 %s", from, file, fi.Mode().Perm(), file)
	}
	if err := trustfile.Verify(from, file, f); err != nil {
		return "", usagef("%w", err)
	}
	b, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err != nil {
		return "", usagef("%s: %w", from, err)
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", usagef("%s %s is empty", from, file)
	}
	return t, nil
}

// ownerUsage is the help of --owner on the commands about one stream.
const ownerUsage = "the identity that owns the stream, when it is not yours (the gateway's operators only; give --s2cs)"

// checkOwner checks --owner: an identity, and a gateway named with
// --s2cs, since another's stream is in no local record.
func checkOwner(owner string, gw *gatewayFlags) error {
	switch {
	case owner == "":
		return nil
	case !auth.ValidIdentity(owner):
		return usagef("--owner %.140q is not an identity: 1-128 letters, digits or ._@+:/-, as s2uc list --all_owners shows it", owner)
	case gw.s2cs == "":
		return usagef("--owner needs --s2cs: give the gateway whose operator you are")
	}
	return nil
}

// commonFlags are shared by every command.
type commonFlags struct {
	output  string
	timeout time.Duration
	profile string
}

func (c *commonFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.output, "output", "", "output format: text or json (default: $SCISTREAM_OUTPUT, else output in the configuration file, else text)")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Second, "timeout of each control request")
	fs.StringVar(&c.profile, "profile", "", "the profile of the configuration file to take defaults from (default: $SCISTREAM_PROFILE, or its profile key)")
}

func (c *commonFlags) check() error {
	if c.output != "text" && c.output != "json" {
		return usagef("--output %q: use text or json", c.output)
	}
	if c.timeout <= 0 {
		return usagef("--timeout must be positive, e.g. 30s")
	}
	return nil
}

// parsePorts parses "8080" or "7000,17000".
func parsePorts(flagName, s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, usagef("missing --%s: give the port(s), e.g. 8080 or 7000,17000", flagName)
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		p, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || p < 1 || p > 65535 {
			return nil, usagef("--%s: %q is not a port 1-65535", flagName, strings.TrimSpace(f))
		}
		out = append(out, p)
	}
	return out, nil
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// appWaitUsage is the help of --app_wait, on the commands that create an
// inbound stream.
const appWaitUsage = "how long the inbound gateway holds a producer's connection, unread, while the listening application cannot be reached, before it resets it, e.g. 30s or 10m; 0 not to wait (default: the gateway's, see s2uc info)"

// parseAppWait reads --app_wait: empty means the gateway's default (nil),
// otherwise whole seconds as the request's app_wait_s.
func parseAppWait(s string) (*int, error) {
	if s == "" {
		return nil, nil
	}
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		return nil, usagef("--app_wait %q: give a duration such as 30s or 10m, or 0 not to wait", s)
	case d < 0 || d%time.Second != 0:
		return nil, usagef("--app_wait %s: give a whole number of seconds, 0 or more, e.g. 30s", d)
	case d > api.MaxAppWaitS*time.Second:
		return nil, usagef("--app_wait %s is longer than any gateway allows (24h); see s2uc info for the gateway's maximum", d)
	}
	n := int(d / time.Second)
	return &n, nil
}

// resumeWindowUsage is the help of --resume_window, on the commands that
// create a stream.
const resumeWindowUsage = "how long a connection over framed WAN legs (both gateways of this release, tls or quic) waits, parked, for a new leg when its leg is lost, its applications seeing a pause, before both are reset, e.g. 30s or 5m; 0 not to wait (default: the gateway's, see s2uc info)"

// stripeUsage is the help of --stripe, on the commands that make an
// outbound side.
const stripeUsage = "WAN legs at once each application connection is carried on (striping: past one TCP flow's limit, a per-flow firewall or a lossy long path), 1 to the gateway's --max_stripe (see s2uc info); tls legs; the inbound gateway grants it or keeps one leg (s2uc status says)"

// checkStripe checks --stripe.
func checkStripe(n int) error {
	if n < 1 || n > 16 {
		return usagef("--stripe %d: give 1 (one leg) to 16 legs at once; the gateway's maximum is in s2uc info", n)
	}
	return nil
}

// parseResumeWindow reads --resume_window: empty means the gateway's
// default (nil), otherwise whole seconds as the request's
// resume_window_s.
func parseResumeWindow(s string) (*int, error) {
	if s == "" {
		return nil, nil
	}
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		return nil, usagef("--resume_window %q: give a duration such as 30s or 5m, or 0 not to wait", s)
	case d < 0 || d%time.Second != 0:
		return nil, usagef("--resume_window %s: give a whole number of seconds, 0 or more, e.g. 30s", d)
	case d > api.MaxResumeWindowS*time.Second:
		return nil, usagef("--resume_window %s is longer than any gateway allows (24h); see s2uc info for the gateway's maximum", d)
	}
	n := int(d / time.Second)
	return &n, nil
}

func checkNumConn(n int) error {
	if n < 1 || n > api.MaxChannels {
		return usagef("--num_conn %d out of range: give 1 to %d", n, api.MaxChannels)
	}
	return nil
}

// checkMaxActive checks --max_active_conns (0: the gateway's cap; the
// gateway refuses more than it admits).
func checkMaxActive(n int) error {
	if n < 0 {
		return usagef("--max_active_conns %d: give the most connections the stream relays at once, or 0 for the gateway's cap", n)
	}
	return nil
}

func hostPort(host string, port int) string { return net.JoinHostPort(host, strconv.Itoa(port)) }

// public strips what must never be printed (the stream secret) and the
// bulky PEM from a stream view.
func public(s *api.Stream) *api.Stream {
	c := *s
	c.Secret = ""
	c.WANCert = ""
	return &c
}

func sessions() (client.Sessions, error) { return client.DefaultSessions() }

func fmtRate(bps float64) string {
	return fmt.Sprintf("%.1f MB/s", bps/1e6)
}
