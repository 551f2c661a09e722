// Package oidctest runs a real OpenID Connect issuer for tests, as
// net/http/httptest runs a server: Start serves, on a loopback HTTPS port
// (or one on the address Options.IP names) with a certificate from a CA made for the run, OIDC discovery, a JWKS,
// the device authorization grant (RFC 8628), a token endpoint
// (device_code and refresh_token grants), token introspection (RFC
// 7662) and revocation (RFC 7009), with keys made per run by the same
// JOSE library the gateway verifies with.
//
// Tests mint tokens with it, good ones (Mint, MintOpaque) and bad ones
// (expired, not yet valid, for another audience or issuer, "alg: none",
// signed by a foreign key, HMAC keyed with the issuer's public key), and
// approve a pending device code as the user's browser would (Approve).
// Nothing here reaches beyond loopback, or the address the test gives
// (one of a link to its own network namespaces).
package oidctest

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// Options configure an Issuer. Every zero value has the default given.
type Options struct {
	// Audience is the "aud" of every token the issuer issues. If empty,
	// "scistream".
	Audience string
	// ClientID is the public client that logs in with the device flow
	// (s2uc). If empty, "s2uc".
	ClientID string
	// IntrospectionClientID and IntrospectionSecret are the credentials
	// the introspection endpoint demands (client_secret_basic). If empty,
	// "s2cs" and a random secret.
	IntrospectionClientID, IntrospectionSecret string
	// Opaque makes the token endpoint issue opaque access tokens, known
	// to the introspection endpoint only, instead of JWTs.
	Opaque bool
	// Alg is the signing algorithm: "RS256", "ES256" or "EdDSA". If
	// empty, "RS256".
	Alg string
	// AccessTTL is the lifetime of an access token the token endpoint
	// issues. If zero, one hour.
	AccessTTL time.Duration
	// Interval is the device flow's polling interval, in seconds. If
	// zero, 1 (the least a client waits).
	Interval int
	// Groups gives a subject's "groups" claim.
	Groups map[string][]string
	// Scope is the scope of the tokens the token endpoint issues when
	// the client asks for none. If empty, "openid scistream".
	Scope string
	// NoRevocation leaves the revocation endpoint out of discovery.
	NoRevocation bool
	// IP is the address the issuer listens on, which its certificate
	// names too: an address of this host that the gateways under test
	// reach (one in a network namespace of the test's reaches none of
	// its loopback). If nil, 127.0.0.1.
	IP net.IP
}

// Issuer is a running test issuer. Its exported fields are read-only.
type Issuer struct {
	// URL is the issuer identifier, https://127.0.0.1:PORT.
	URL string
	// CAFile holds the PEM certificate of the CA that issued the
	// server's certificate (s2cs --oidc_ca, s2uc login --ca); CAPEM is
	// its content.
	CAFile string
	CAPEM  []byte
	// Audience, ClientID, IntrospectionClientID and IntrospectionSecret
	// are Options' values after defaults.
	Audience, ClientID                         string
	IntrospectionClientID, IntrospectionSecret string

	opts Options
	srv  *httptest.Server
	hc   *http.Client // trusts CAPEM

	mu       sync.Mutex // guards the following fields
	keys     []signingKey
	devices  map[string]*deviceCode // by device code
	refresh  map[string]grant       // by refresh token
	opaque   map[string]Claims      // by opaque access token
	revoked  map[string]bool
	down     bool
	gate     chan struct{} // while non-nil, introspections wait for it to close
	stats    Stats
	inflight int
}

// Stats count what the issuer was asked.
type Stats struct {
	Discoveries    int // GET of the discovery document
	JWKSFetches    int // GET of the JWKS
	DeviceAuths    int // device authorization requests
	DeviceGrants   int // tokens issued for an approved device code
	Refreshes      int // tokens issued for a refresh token
	Introspections int // introspection requests answered or held
	// MaxInFlight is the most introspection requests it was serving at
	// once.
	MaxInFlight int
	Revocations int
}

type signingKey struct {
	kid  string
	alg  jose.SignatureAlgorithm
	priv crypto.Signer
}

type grant struct {
	subject, scope string
}

type deviceCode struct {
	code, userCode string
	scope          string
	expiry         time.Time
	subject        string // set by Approve
	denied         bool
}

// Start runs an issuer until the test ends.
func Start(t testing.TB, o Options) *Issuer {
	t.Helper()
	if o.Audience == "" {
		o.Audience = "scistream"
	}
	if o.ClientID == "" {
		o.ClientID = "s2uc"
	}
	if o.IntrospectionClientID == "" {
		o.IntrospectionClientID = "s2cs"
	}
	if o.IntrospectionSecret == "" {
		o.IntrospectionSecret = "secret-" + randHex(16)
	}
	if o.Alg == "" {
		o.Alg = "RS256"
	}
	if o.AccessTTL == 0 {
		o.AccessTTL = time.Hour
	}
	if o.Interval == 0 {
		o.Interval = 1
	}
	if o.Scope == "" {
		o.Scope = "openid scistream"
	}
	is := &Issuer{
		opts: o, Audience: o.Audience, ClientID: o.ClientID,
		IntrospectionClientID: o.IntrospectionClientID, IntrospectionSecret: o.IntrospectionSecret,
		devices: map[string]*deviceCode{}, refresh: map[string]grant{}, opaque: map[string]Claims{}, revoked: map[string]bool{},
	}
	key, err := newKey(jose.SignatureAlgorithm(o.Alg))
	if err != nil {
		t.Fatalf("oidctest: %v", err)
	}
	is.keys = []signingKey{key}
	caPEM, leaf, err := serverCert(o.IP)
	if err != nil {
		t.Fatalf("oidctest: certificate: %v", err)
	}
	is.CAPEM = caPEM
	is.CAFile = filepath.Join(t.TempDir(), "oidctest-ca.pem")
	if err := os.WriteFile(is.CAFile, caPEM, 0o644); err != nil {
		t.Fatalf("oidctest: %v", err)
	}
	is.srv = httptest.NewUnstartedServer(is.routes())
	if o.IP != nil {
		ln, err := net.Listen("tcp", net.JoinHostPort(o.IP.String(), "0"))
		if err != nil {
			t.Fatalf("oidctest: listen on %s: %v", o.IP, err)
		}
		is.srv.Listener.Close()
		is.srv.Listener = ln
	}
	// Handshakes a test fails on purpose (a client without the CA) are
	// no news.
	is.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	is.srv.TLS = &tls.Config{Certificates: []tls.Certificate{leaf}, MinVersion: tls.VersionTLS12}
	is.srv.StartTLS()
	is.URL = is.srv.URL
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	is.hc = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	t.Cleanup(func() {
		is.Release()
		is.hc.CloseIdleConnections()
		is.srv.Close()
	})
	return is
}

// Client returns an HTTP client that trusts the issuer's CA.
func (is *Issuer) Client() *http.Client { return is.hc }

// Stats returns what the issuer was asked so far.
func (is *Issuer) Stats() Stats {
	is.mu.Lock()
	defer is.mu.Unlock()
	return is.stats
}

// InFlight returns the introspection requests being served now.
func (is *Issuer) InFlight() int {
	is.mu.Lock()
	defer is.mu.Unlock()
	return is.inflight
}

// SetDown makes the JWKS, token and introspection endpoints answer 503
// (down) or serve again; discovery keeps answering.
func (is *Issuer) SetDown(down bool) {
	is.mu.Lock()
	is.down = down
	is.mu.Unlock()
}

// SetAccessTTL changes the lifetime of the access tokens the token
// endpoint issues from now on (Options.AccessTTL).
func (is *Issuer) SetAccessTTL(d time.Duration) {
	is.mu.Lock()
	is.opts.AccessTTL = d
	is.mu.Unlock()
}

func (is *Issuer) accessTTL() time.Duration {
	is.mu.Lock()
	defer is.mu.Unlock()
	return is.opts.AccessTTL
}

// Hold makes introspection requests wait, counted in InFlight, until
// Release: a test sees how many a gateway sends at once.
func (is *Issuer) Hold() {
	is.mu.Lock()
	if is.gate == nil {
		is.gate = make(chan struct{})
	}
	is.mu.Unlock()
}

// Release lets held introspection requests go on and stops holding.
func (is *Issuer) Release() {
	is.mu.Lock()
	if is.gate != nil {
		close(is.gate)
		is.gate = nil
	}
	is.mu.Unlock()
}

// Rotate adds a new signing key, which signs from now on; the old one
// stays in the JWKS, as a provider rolls its keys over.
func (is *Issuer) Rotate() error {
	k, err := newKey(jose.SignatureAlgorithm(is.opts.Alg))
	if err != nil {
		return err
	}
	is.mu.Lock()
	is.keys = append(is.keys, k)
	is.mu.Unlock()
	return nil
}

// DropOldKeys removes every key but the current one from the JWKS.
func (is *Issuer) DropOldKeys() {
	is.mu.Lock()
	is.keys = is.keys[len(is.keys)-1:]
	is.mu.Unlock()
}

// JWKS returns the issuer's public key set as JSON (for s2cs
// --oidc_jwks_file).
func (is *Issuer) JWKS() ([]byte, error) {
	return jsonMarshal(is.publicKeys())
}

func (is *Issuer) publicKeys() jose.JSONWebKeySet {
	is.mu.Lock()
	defer is.mu.Unlock()
	var set jose.JSONWebKeySet
	for _, k := range is.keys {
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: k.priv.Public(), KeyID: k.kid, Algorithm: string(k.alg), Use: "sig"})
	}
	return set
}

func (is *Issuer) current() signingKey {
	is.mu.Lock()
	defer is.mu.Unlock()
	return is.keys[len(is.keys)-1]
}

func newKey(alg jose.SignatureAlgorithm) (signingKey, error) {
	k := signingKey{kid: randHex(8), alg: alg}
	var err error
	switch alg {
	case jose.RS256:
		k.priv, err = rsa.GenerateKey(rand.Reader, 2048)
	case jose.ES256:
		k.priv, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case jose.EdDSA:
		_, k.priv, err = ed25519.GenerateKey(rand.Reader)
	default:
		return k, fmt.Errorf("signing algorithm %q: use RS256, ES256 or EdDSA", alg)
	}
	return k, err
}

// serverCert makes a CA and a certificate for 127.0.0.1, localhost and
// ip (if not nil) signed by it, and returns the CA's PEM and the
// server's pair.
func serverCert(ip net.IP) ([]byte, tls.Certificate, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "oidctest CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	ips := []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	if ip != nil {
		ips = append(ips, ip)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "oidctest"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		DNSNames: []string{"localhost"}, IPAddresses: ips,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	return caPEM, tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// Approve approves the pending device code whose user code is userCode
// for subject, as the user's browser would: it posts the code to the
// verification page over HTTPS.
func (is *Issuer) Approve(ctx context.Context, userCode, subject string) error {
	return is.activate(ctx, userCode, subject, "approve")
}

// Deny refuses the pending device code whose user code is userCode.
func (is *Issuer) Deny(ctx context.Context, userCode string) error {
	return is.activate(ctx, userCode, "", "deny")
}
