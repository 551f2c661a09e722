// Package client is the Go library behind s2uc: a typed client for one
// s2cs control API, and the orchestration that wires a stream across two
// gateways (inbound, outbound, attach) and undoes it on failure.
//
// Workflow engines can use it directly instead of running s2uc.
//
// Errors say what the library knows and leave the remedy to the caller,
// which knows how the user configured it: a request that fails before
// the gateway answers wraps ErrUnreachable, ErrCertificate, ErrNotHTTPS or ErrWANPort
// (test with errors.Is); a gateway's refusal is an *api.Error; an answer
// the client will not act on wraps ErrBadAnswer (answer.go); a Config
// that New cannot use is a *ConfigError.
//
// A gateway is not trusted beyond its stream: every UID it answers is
// checked (api.ValidUID) before it names a URL or a local record, what
// the client relays to the other gateway is checked for its form, every
// path segment is escaped, and redirects are not followed. The text of
// an answer (reasons, names, an *api.Error's message) is passed on as it
// came; a caller that prints it makes it printable first.
package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"syscall"
	"time"

	"scistream/internal/api"
	"scistream/internal/trustfile"
)

// Errors of a request that got no answer from the gateway's API. Each
// comes wrapped with the gateway's address and the cause.
var (
	// ErrUnreachable: no connection to the address could be opened
	// (refused, no route, unknown name, dial timeout).
	ErrUnreachable = errors.New("unreachable")
	// ErrCertificate: the gateway's TLS certificate failed verification:
	// it is neither the one in Config.ServerCert nor issued by it, or,
	// without ServerCert, the system's roots do not trust it.
	ErrCertificate = errors.New("TLS verification failed")
	// ErrNotHTTPS: something answered in plain HTTP; the control API is
	// HTTPS only.
	ErrNotHTTPS = errors.New("answered plain HTTP; the control API is HTTPS only")
	// ErrWANPort: the address asked for a client certificate and, given
	// none, ended the handshake with an alert: that is what a gateway's
	// WAN data port does (the gateways authenticate each other by
	// certificate there); its control API never asks for one.
	ErrWANPort = errors.New("asks for a client certificate: it is a gateway's WAN data port, not its control port")
)

// A ConfigError is a Config field New cannot use. Field is the field's
// name ("Addr", "ServerCert"), Value its value, Err what is wrong.
type ConfigError struct {
	Field string
	Value string
	Err   error
}

func (e *ConfigError) Error() string {
	what := map[string]string{"Addr": "address", "ServerCert": "server certificate"}[e.Field]
	if what == "" {
		what = e.Field
	}
	return fmt.Sprintf("%s %q: %v", what, e.Value, e.Err)
}

func (e *ConfigError) Unwrap() error { return e.Err }

// Client talks to one s2cs.
type Client struct {
	addr   string
	token  string
	pinned bool // Config.ServerCert was given
	hc     *http.Client
	// certAsked is set once a handshake asked for a client certificate
	// (ErrWANPort).
	certAsked atomic.Bool
}

// Config configures a Client.
type Config struct {
	// Addr is the control API's "host:port". Required.
	Addr string
	// ServerCert is a PEM file holding the gateway's certificate (or the
	// CA that issued it). If empty, the system roots verify the gateway.
	ServerCert string
	// Token is the bearer token. If empty, no Authorization is sent.
	Token string
	// Timeout bounds each request. If zero, 30 seconds.
	Timeout time.Duration
}

// New returns a client for cfg.Addr. It reads cfg.ServerCert but opens
// no connection. Its errors are *ConfigError.
func New(cfg Config) (*Client, error) {
	host, _, err := net.SplitHostPort(cfg.Addr)
	if err != nil || host == "" {
		return nil, &ConfigError{"Addr", cfg.Addr, errors.New("want host:port of the gateway's control API, e.g. 10.0.0.5:5000")}
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.ServerCert != "" {
		// The pin decides which gateway gets the token: whoever can
		// change the file can name theirs (internal/trustfile).
		pemBytes, err := trustfile.ReadFile("server certificate", cfg.ServerCert)
		if err != nil {
			return nil, &ConfigError{"ServerCert", cfg.ServerCert, err}
		}
		verify, err := pinOrChain(pemBytes, host)
		if err != nil {
			return nil, &ConfigError{"ServerCert", cfg.ServerCert, err}
		}
		// The certificate given is either the gateway's own (self-signed,
		// pinned exactly) or a CA; VerifyConnection handles both, so the
		// default verification is replaced, not skipped.
		tc.InsecureSkipVerify = true
		tc.VerifyConnection = verify
	}
	c := &Client{addr: cfg.Addr, token: cfg.Token, pinned: cfg.ServerCert != ""}
	tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		// A control API never asks: noted, to say what the address
		// is when the handshake then fails (transportError). None is
		// sent, as without this function.
		c.certAsked.Store(true)
		return &tls.Certificate{}, nil
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 30 * time.Second
	}
	tr := &http.Transport{
		TLSClientConfig:     tc,
		TLSHandshakeTimeout: 10 * time.Second,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 4,
		ForceAttemptHTTP2:   true,
	}
	hc := &http.Client{
		Transport: tr,
		Timeout:   cfg.Timeout,
		// The control API never redirects. Following a redirect would
		// take a request, and its token, to a path or host the gateway
		// names rather than the one the client built: a redirect is
		// answered as the error it is (HTTP 3xx).
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	c.hc = hc
	return c, nil
}

// Addr returns the gateway's control address.
func (c *Client) Addr() string { return c.addr }

// Close releases idle connections.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

// errNoPeerCert: the gateway's handshake carried no certificate.
var errNoPeerCert = errors.New("the gateway sent no certificate")

// pinOrChain returns the TLS check for a ServerCert file: the gateway's
// certificate is one of the file's, or chains to one of them for host.
// Its errors are x509's (or errNoPeerCert), which transportError
// recognises.
func pinOrChain(pemBytes []byte, host string) (func(tls.ConnectionState) error, error) {
	pool := x509.NewCertPool()
	var certs []*x509.Certificate
	for rest := pemBytes; ; {
		var der []byte
		der, rest = nextPEM(rest)
		if der == nil {
			break
		}
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, err
		}
		certs = append(certs, c)
		pool.AddCert(c)
	}
	if len(certs) == 0 {
		return nil, errors.New("no PEM certificate in file")
	}
	return func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errNoPeerCert
		}
		leaf := cs.PeerCertificates[0]
		for _, c := range certs {
			if bytes.Equal(c.Raw, leaf.Raw) {
				return nil // exact pin
			}
		}
		inter := x509.NewCertPool()
		for _, c := range cs.PeerCertificates[1:] {
			inter.AddCert(c)
		}
		_, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, DNSName: host})
		return err
	}, nil
}

// Do sends a request and decodes a JSON answer into out (if non-nil). API
// errors come back as *api.Error; a request the gateway's API did not
// answer wraps ErrUnreachable, ErrCertificate, ErrNotHTTPS or ErrWANPort when it is
// one of those.
func (c *Client) Do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "https://"+c.addr+path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	// Our own id, which the gateway keeps for its log line and answers
	// with: an error can then name the request the operator looks for.
	req.Header.Set(api.RequestIDHeader, rand.Text())
	resp, err := c.hc.Do(req)
	if err != nil {
		return c.transportError(ctx, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("s2cs %s: read response: %w", c.addr, err)
	}
	if resp.StatusCode >= 300 {
		var eb api.ErrorBody
		if json.Unmarshal(data, &eb) == nil && eb.Error.Code != "" {
			e := eb.Error
			e.RequestID = resp.Header.Get(api.RequestIDHeader)
			return &e
		}
		return fmt.Errorf("s2cs %s: HTTP %s", c.addr, resp.Status)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("s2cs %s: decode response: %w", c.addr, err)
		}
	}
	return nil
}

// transportError classifies a failed round trip by the errors' types,
// never their text, and says what failed without naming how the caller
// configured it.
func (c *Client) transportError(ctx context.Context, err error) error {
	var (
		op            *net.OpError
		recordErr     tls.RecordHeaderError
		unknownCA     x509.UnknownAuthorityError
		hostname      x509.HostnameError
		invalid       x509.CertificateInvalidError
		tlsVerify     *tls.CertificateVerificationError
		inner         = unwrapURL(err)
		looksLikeHTTP = errors.As(err, &recordErr) && string(recordErr.RecordHeader[:]) == "HTTP/"
	)
	switch {
	case errors.Is(err, errNoPeerCert), errors.As(err, &unknownCA), errors.As(err, &hostname),
		errors.As(err, &invalid), errors.As(err, &tlsVerify):
		what := "the system's trusted roots do not vouch for the gateway's certificate, and none was given"
		if c.pinned {
			what = "the gateway's certificate does not match the one given"
		}
		return fmt.Errorf("s2cs %s: %w (%w): %s", c.addr, ErrCertificate, inner, what)
	case errors.Is(err, http.ErrSchemeMismatch), looksLikeHTTP:
		return fmt.Errorf("s2cs %s: %w", c.addr, ErrNotHTTPS)
	case c.certAsked.Load():
		// The address asked for a client certificate (and then ended
		// the handshake: certificate_required, however the HTTP
		// transport words it). A control API never asks.
		return &wanPortError{c.addr, inner}
	case errors.As(err, &op) && op.Op == "remote error" && c.asksClientCert(ctx):
		// A TLS alert before any certificate was asked for, from an
		// address that asks for one when offered no application
		// protocol: a WAN data port refuses those the client offers
		// (h2, http/1.1) before it asks (no_application_protocol).
		return &wanPortError{c.addr, op.Err}
	case errors.As(err, &op) && op.Op == "dial", errors.Is(err, syscall.ECONNREFUSED):
		cause := inner
		if op != nil && op.Err != nil {
			cause = op.Err
		}
		return fmt.Errorf("s2cs %s: %w: %w", c.addr, ErrUnreachable, cause)
	}
	return fmt.Errorf("s2cs %s: %w", c.addr, inner)
}

// wanPortError is ErrWANPort of addr: "ADDR asks for a client
// certificate: ...", the alert kept for errors.As, not said.
type wanPortError struct {
	addr  string
	alert error
}

func (e *wanPortError) Error() string   { return e.addr + " " + ErrWANPort.Error() }
func (e *wanPortError) Unwrap() []error { return []error{ErrWANPort, e.alert} }

// asksClientCert reports whether c's address asks for a client
// certificate in a handshake that offers no application protocol, as
// only a gateway's WAN data port does. It is asked after a handshake
// ended with an alert, on a connection of its own that carries nothing
// but the handshake (no request, no token: its certificate need not be
// the one pinned), closed at once.
func (c *Client) asksClientCert(ctx context.Context) bool {
	tr, ok := c.hc.Transport.(*http.Transport)
	if !ok || ctx.Err() != nil {
		return false
	}
	var asked atomic.Bool
	cfg := tr.TLSClientConfig.Clone()
	cfg.NextProtos = nil
	cfg.InsecureSkipVerify, cfg.VerifyConnection = true, nil
	cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		asked.Store(true)
		return nil, errors.New("asked for a client certificate") // ends the handshake: nothing more to learn
	}
	ctx, cancel := context.WithTimeout(ctx, c.hc.Timeout) // as long as a request may take
	defer cancel()
	if conn, err := (&tls.Dialer{Config: cfg}).DialContext(ctx, "tcp", c.addr); err == nil {
		conn.Close()
	}
	return asked.Load()
}

func unwrapURL(err error) error {
	var ue interface{ Unwrap() error }
	if errors.As(err, &ue) {
		if inner := ue.Unwrap(); inner != nil {
			return inner
		}
	}
	return err
}

// Info returns the gateway's description.
func (c *Client) Info(ctx context.Context) (*api.Info, error) {
	var out api.Info
	return &out, c.Do(ctx, "GET", "/v1/info", nil, &out)
}

// Inbound creates the inbound side of a stream. An answer the client
// refuses (ErrBadAnswer) is released again if it names a stream.
func (c *Client) Inbound(ctx context.Context, req *api.InboundRequest) (*api.Stream, error) {
	var out api.Stream
	if err := c.Do(ctx, "POST", "/v1/streams/inbound", req, &out); err != nil {
		return nil, err
	}
	if err := c.checkCreated(&out, req.UID, req.WAN, true); err != nil {
		return nil, c.undo(ctx, out.UID, err)
	}
	return &out, nil
}

// Outbound creates the outbound side of a stream. An answer the client
// refuses (ErrBadAnswer) is released again if it names a stream.
func (c *Client) Outbound(ctx context.Context, req *api.OutboundRequest) (*api.Stream, error) {
	var out api.Stream
	if err := c.Do(ctx, "POST", "/v1/streams/outbound", req, &out); err != nil {
		return nil, err
	}
	if err := c.checkCreated(&out, req.UID, req.WAN, false); err != nil {
		return nil, c.undo(ctx, out.UID, err)
	}
	return &out, nil
}

// Attach pins the outbound gateway's certificate on the inbound side.
func (c *Client) Attach(ctx context.Context, uid string, req *api.AttachRequest) (*api.Stream, error) {
	return c.streamDo(ctx, "POST", "", uid, "/attach", req)
}

// Get returns one stream.
func (c *Client) Get(ctx context.Context, uid string) (*api.Stream, error) {
	return c.GetOf(ctx, "", uid)
}

// List returns the caller's streams; all includes ended ones.
func (c *Client) List(ctx context.Context, all bool) ([]api.Stream, error) {
	return c.ListOf(ctx, "", false, all)
}

// Update changes a running stream on this gateway (its rate, allow-list
// or lease) without dropping its connections.
func (c *Client) Update(ctx context.Context, uid string, req *api.UpdateRequest) (*api.Stream, error) {
	return c.UpdateOf(ctx, "", uid, req)
}

// Release ends a stream on this gateway.
func (c *Client) Release(ctx context.Context, uid string) (*api.Stream, error) {
	return c.ReleaseOf(ctx, "", uid)
}

// streamDo sends a request about stream uid of owner ("": the caller's)
// to its path followed by suffix, and returns the stream the gateway
// answered with, checked to be that stream.
func (c *Client) streamDo(ctx context.Context, method, owner, uid, suffix string, in any) (*api.Stream, error) {
	path, err := streamPath(uid, suffix)
	if err != nil {
		return nil, fmt.Errorf("s2cs %s: %w", c.addr, err)
	}
	var out api.Stream
	if err := c.Do(ctx, method, path+ownerQuery(owner), in, &out); err != nil {
		return nil, err
	}
	if err := c.checkView(&out, uid); err != nil {
		return nil, err
	}
	return &out, nil
}
