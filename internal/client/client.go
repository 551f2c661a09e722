// Package client is the Go library behind s2uc: a typed client for one
// s2cs control API, and the orchestration that wires a stream across two
// gateways (inbound, outbound, attach) and undoes it on failure.
//
// Workflow engines can use it directly instead of running s2uc.
package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"scistream/internal/api"
)

// Client talks to one s2cs.
type Client struct {
	addr  string
	token string
	hc    *http.Client
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

// New returns a client for cfg.Addr.
func New(cfg Config) (*Client, error) {
	host, _, err := net.SplitHostPort(cfg.Addr)
	if err != nil || host == "" {
		return nil, fmt.Errorf("--s2cs %q: want HOST:PORT of the gateway's control API, e.g. 10.0.0.5:5000", cfg.Addr)
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.ServerCert != "" {
		pemBytes, err := os.ReadFile(cfg.ServerCert)
		if err != nil {
			return nil, fmt.Errorf("--server_cert: %w", err)
		}
		verify, err := pinOrChain(pemBytes, host)
		if err != nil {
			return nil, fmt.Errorf("--server_cert %s: %w", cfg.ServerCert, err)
		}
		// The certificate given is either the gateway's own (self-signed,
		// pinned exactly) or a CA; VerifyConnection handles both, so the
		// default verification is replaced, not skipped.
		tc.InsecureSkipVerify = true
		tc.VerifyConnection = verify
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
	return &Client{addr: cfg.Addr, token: cfg.Token, hc: &http.Client{Transport: tr, Timeout: cfg.Timeout}}, nil
}

// Addr returns the gateway's control address.
func (c *Client) Addr() string { return c.addr }

// Close releases idle connections.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

var errCertMismatch = errors.New("certificate mismatch")

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
			return errCertMismatch
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
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, DNSName: host}); err != nil {
			return fmt.Errorf("%w: %v", errCertMismatch, err)
		}
		return nil
	}, nil
}

// Do sends a request and decodes a JSON answer into out (if non-nil). API
// errors come back as *api.Error; transport errors name the fix.
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
	resp, err := c.hc.Do(req)
	if err != nil {
		return c.transportError(err)
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

func (c *Client) transportError(err error) error {
	s := err.Error()
	switch {
	case errors.Is(err, errCertMismatch) || strings.Contains(s, "certificate"):
		return fmt.Errorf("s2cs %s: TLS verification failed (%v); pass the gateway's certificate with --server_cert (s2cs prints its path at start)", c.addr, unwrapURL(err))
	case strings.Contains(s, "connection refused"):
		return fmt.Errorf("s2cs %s: connection refused; check --s2cs and that s2cs runs there", c.addr)
	case strings.Contains(s, "server gave HTTP response to HTTPS client"):
		return fmt.Errorf("s2cs %s: answered plain HTTP; the control API is HTTPS only", c.addr)
	}
	return fmt.Errorf("s2cs %s: %v", c.addr, unwrapURL(err))
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

// Inbound creates the inbound side of a stream.
func (c *Client) Inbound(ctx context.Context, req *api.InboundRequest) (*api.Stream, error) {
	var out api.Stream
	return &out, c.Do(ctx, "POST", "/v1/streams/inbound", req, &out)
}

// Outbound creates the outbound side of a stream.
func (c *Client) Outbound(ctx context.Context, req *api.OutboundRequest) (*api.Stream, error) {
	var out api.Stream
	return &out, c.Do(ctx, "POST", "/v1/streams/outbound", req, &out)
}

// Attach pins the outbound gateway's certificate on the inbound side.
func (c *Client) Attach(ctx context.Context, uid string, req *api.AttachRequest) (*api.Stream, error) {
	var out api.Stream
	return &out, c.Do(ctx, "POST", "/v1/streams/"+uid+"/attach", req, &out)
}

// Get returns one stream.
func (c *Client) Get(ctx context.Context, uid string) (*api.Stream, error) {
	var out api.Stream
	return &out, c.Do(ctx, "GET", "/v1/streams/"+uid, nil, &out)
}

// List returns the caller's streams; all includes ended ones.
func (c *Client) List(ctx context.Context, all bool) ([]api.Stream, error) {
	var out api.StreamList
	path := "/v1/streams"
	if all {
		path += "?all=true"
	}
	return out.Streams, c.Do(ctx, "GET", path, nil, &out)
}

// Release ends a stream on this gateway.
func (c *Client) Release(ctx context.Context, uid string) (*api.Stream, error) {
	var out api.Stream
	return &out, c.Do(ctx, "DELETE", "/v1/streams/"+uid, nil, &out)
}
