package idp

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"scistream/internal/trustfile"
)

// RequestTimeout bounds each request to an identity provider (discovery,
// keys, introspection, the device flow's token requests).
const RequestTimeout = 10 * time.Second

// maxResponse bounds what is read of a provider's answer.
const maxResponse = 1 << 20

// HTTPClient returns a client for an identity provider's endpoints that
// verifies their certificates against the PEM CA certificates in caFile,
// or the system's roots if caFile is empty, with RequestTimeout. caFile
// is read under the rule of every file that decides whom the program
// trusts (internal/trustfile): whoever can change it can stand in for
// the provider.
func HTTPClient(caFile string) (*http.Client, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		b, err := trustfile.ReadFile("CA file", caFile)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("%s: no PEM certificate in it", caFile)
		}
		tc.RootCAs = pool
	}
	tr := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		TLSClientConfig:     tc,
		TLSHandshakeTimeout: RequestTimeout,
		MaxIdleConnsPerHost: 8,
		ForceAttemptHTTP2:   true,
	}
	return &http.Client{Transport: tr, Timeout: RequestTimeout}, nil
}

// noRedirects is c that follows no redirect: a request that carries
// credentials (introspection's client secret) goes where it was sent or
// nowhere.
func noRedirects(c *http.Client) *http.Client {
	n := *c
	n.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &n
}

// CheckHTTPS refuses a provider URL that is not an absolute https URL
// with a host and without credentials or a fragment. what names it in
// the error.
func CheckHTTPS(what, raw string) error {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return fmt.Errorf("%s %.100q is not a URL", what, raw)
	case u.Scheme != "https" || u.Host == "":
		return fmt.Errorf("%s %.100q: give an https:// URL", what, raw)
	case u.User != nil:
		return fmt.Errorf("%s must not carry credentials in the URL", what)
	case u.Fragment != "" || u.RawQuery != "":
		return fmt.Errorf("%s %.100q must have no query or fragment", what, raw)
	}
	return nil
}

// readBody reads at most maxResponse bytes of r.
func readBody(r io.Reader) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxResponse+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxResponse {
		return nil, errors.New("answer larger than 1 MiB")
	}
	return b, nil
}
