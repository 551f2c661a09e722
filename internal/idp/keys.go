package idp

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	jose "github.com/go-jose/go-jose/v4"

	"scistream/internal/auth"
	"scistream/internal/trustfile"
)

// A KeySource gives the public keys that may have signed a token.
type KeySource interface {
	// Keys returns the keys whose key ID is kid, or every key when kid
	// is empty. A kid it does not know may make it fetch the keys again
	// (a provider rolled its keys over); it returns no keys, and no
	// error, when the kid is still unknown. auth.ErrUnavailable means it
	// could not learn the keys.
	Keys(ctx context.Context, kid string) ([]jose.JSONWebKey, error)
}

// parseKeySet reads a JWKS, keeping the keys a token may be verified
// with: public RSA, EC and Ed25519 keys for signing. Symmetric keys are
// dropped, so an HMAC can never be checked against a key that another
// party knows (nor a public key be taken for an HMAC secret); so are
// keys of other types or uses, as RFC 7517 section 5 asks.
func parseKeySet(b []byte) ([]jose.JSONWebKey, error) {
	var raw struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("not a JWKS: %w", err)
	}
	var keys []jose.JSONWebKey
	for _, r := range raw.Keys {
		var k jose.JSONWebKey
		if err := k.UnmarshalJSON(r); err != nil {
			continue
		}
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		switch pub := k.Key.(type) {
		case *rsa.PublicKey, *ecdsa.PublicKey, ed25519.PublicKey:
		case *rsa.PrivateKey:
			k.Key = &pub.PublicKey
		case *ecdsa.PrivateKey:
			k.Key = &pub.PublicKey
		case ed25519.PrivateKey:
			k.Key = pub.Public()
		default:
			continue
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, errors.New("the JWKS holds no public RSA, EC or Ed25519 signing key")
	}
	return keys, nil
}

func byKID(keys []jose.JSONWebKey, kid string) []jose.JSONWebKey {
	if kid == "" {
		return keys
	}
	var out []jose.JSONWebKey
	for _, k := range keys {
		if k.KeyID == kid {
			out = append(out, k)
		}
	}
	return out
}

// StaticKeys are keys read once from a JWKS file (s2cs
// --oidc_jwks_file): for a provider the gateway cannot reach, or one
// whose keys the operator pins.
type StaticKeys struct{ keys []jose.JSONWebKey }

// LoadKeys reads a JWKS file, under the rule of every file that decides
// whom the gateway trusts (internal/trustfile): whoever can change it
// can sign tokens of their own.
func LoadKeys(path string) (*StaticKeys, error) {
	b, err := trustfile.ReadFile("JWKS file", path)
	if err != nil {
		return nil, err
	}
	keys, err := parseKeySet(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &StaticKeys{keys: keys}, nil
}

// Keys returns the file's keys of kid.
func (s *StaticKeys) Keys(_ context.Context, kid string) ([]jose.JSONWebKey, error) {
	return byKID(s.keys, kid), nil
}

// Len returns the number of keys.
func (s *StaticKeys) Len() int { return len(s.keys) }

// RemoteConfig configures RemoteKeys.
type RemoteConfig struct {
	// Issuer is discovered (OpenID Connect discovery) for its jwks_uri
	// when JWKSURL is empty; its discovery document must name it as
	// its issuer.
	Issuer string
	// JWKSURL is the key set's URL. If empty, it is discovered.
	JWKSURL string
	// Client makes the requests. Required (HTTPClient).
	Client *http.Client
	// MaxAge is how long fetched keys are used before they are fetched
	// again, in the background: until a fetch succeeds, the old ones
	// stay in use. If zero, one hour.
	MaxAge time.Duration
	// MinInterval is the least time between two fetches, however many
	// tokens name a key ID the set does not hold: a flood of forged
	// tokens makes at most one fetch per interval. If zero, 10 seconds.
	MinInterval time.Duration
	// Now is the clock. If nil, time.Now.
	Now func() time.Time
}

// RemoteKeys are an issuer's keys, fetched over HTTPS when first
// needed, again when older than MaxAge, and when a token names a key ID
// they do not hold (the provider rolled its keys over), never more
// often than MinInterval, one fetch at a time.
//
// Only a check that needs a key the set does not hold (a new kid, or no
// keys yet) waits for a fetch, in its own goroutine; the others wait
// for it, then look again. Keys older than MaxAge serve as they are
// while one background goroutine fetches them again: a hung provider
// makes no check of a known key wait. That goroutine ends with its
// request (RequestTimeout at most); Close stops it and waits for it.
//
// Why not go-oidc's RemoteKeySet: it fetches the keys again whenever a
// signature fails to verify, so each forged token would cost the
// provider a request, and it fetches in a goroutine it does not wait
// for. Discovery is go-oidc's.
type RemoteKeys struct {
	cfg   RemoteConfig
	fetch chan struct{} // holds one token while a fetch runs, in a check or in the background

	// life ends at Close: it bounds the background refresh, which
	// refreshes counts.
	life      context.Context
	endLife   context.CancelFunc
	refreshes sync.WaitGroup

	mu       sync.Mutex // guards the following fields
	jwksURL  string
	keys     []jose.JSONWebKey
	fetched  time.Time // of keys; zero until a fetch succeeded
	lastTry  time.Time // of the last fetch, whatever its result
	lastErr  error
	fetchesN int
	closed   bool // no background refresh starts
}

// NewRemoteKeys returns the key set cfg describes; it fetches nothing
// yet. Close it to stop its background refresh.
func NewRemoteKeys(cfg RemoteConfig) (*RemoteKeys, error) {
	if cfg.Client == nil {
		return nil, errors.New("idp: RemoteConfig.Client is required")
	}
	if cfg.JWKSURL == "" {
		if err := CheckHTTPS("issuer", cfg.Issuer); err != nil {
			return nil, err
		}
	} else if err := CheckHTTPS("JWKS URL", cfg.JWKSURL); err != nil {
		return nil, err
	}
	if cfg.MaxAge == 0 {
		cfg.MaxAge = time.Hour
	}
	if cfg.MinInterval == 0 {
		cfg.MinInterval = 10 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	life, end := context.WithCancel(context.Background())
	return &RemoteKeys{cfg: cfg, fetch: make(chan struct{}, 1), jwksURL: cfg.JWKSURL, life: life, endLife: end}, nil
}

// Close stops the background refresh, waiting for one that runs. The
// keys held still serve afterwards, and a check of a kid they lack
// still fetches, in its own goroutine. Close may be called more than
// once.
func (r *RemoteKeys) Close() error {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.endLife()
	r.refreshes.Wait()
	return nil
}

// Keys returns the keys of kid, fetching them as RemoteKeys says.
func (r *RemoteKeys) Keys(ctx context.Context, kid string) ([]jose.JSONWebKey, error) {
	if keys, ok := r.held(kid); ok {
		return keys, nil
	}
	select { // one fetch at a time; the others wait for it, then look again
	case r.fetch <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: waiting for the issuer's keys: %w", auth.ErrUnavailable, ctx.Err())
	}
	defer func() { <-r.fetch }()
	if keys, ok := r.held(kid); ok {
		return keys, nil
	}
	r.mu.Lock()
	now := r.cfg.Now()
	keys, fetched, lastErr := byKID(r.keys, kid), r.fetched, r.lastErr
	if !r.lastTry.IsZero() && now.Sub(r.lastTry) < r.cfg.MinInterval {
		r.mu.Unlock()
		return r.settle(keys, fetched, lastErr)
	}
	r.lastTry = now
	r.fetchesN++
	r.mu.Unlock()

	// The answer may serve other checks waiting for it: the request
	// does not end with this caller's context, only with its timeout.
	got, err := r.get(context.WithoutCancel(ctx))
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lastErr = err
	if err != nil {
		return r.settle(keys, fetched, err)
	}
	r.keys, r.fetched = got, r.cfg.Now()
	return byKID(got, kid), nil
}

// settle answers from the keys held when no fetch can be made now: the
// keys of kid if there are some (even old ones), none if the set is
// known and lacks kid, unavailable if no fetch ever succeeded or the
// last one failed.
func (r *RemoteKeys) settle(keys []jose.JSONWebKey, fetched time.Time, lastErr error) ([]jose.JSONWebKey, error) {
	switch {
	case len(keys) > 0:
		return keys, nil
	case fetched.IsZero() || lastErr != nil:
		if lastErr == nil {
			lastErr = errors.New("not fetched yet")
		}
		return nil, fmt.Errorf("%w: the issuer's keys: %w", auth.ErrUnavailable, lastErr)
	}
	return nil, nil
}

// held returns the keys of kid when the set holds some, however old;
// keys older than MaxAge start a background refresh.
func (r *RemoteKeys) held(kid string) ([]jose.JSONWebKey, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fetched.IsZero() {
		return nil, false
	}
	keys := byKID(r.keys, kid)
	if len(keys) == 0 {
		return nil, false
	}
	if now := r.cfg.Now(); now.Sub(r.fetched) >= r.cfg.MaxAge {
		r.refresh(now)
	}
	return keys, true
}

// refresh starts fetching the keys in the background, unless a fetch
// runs (its keys will do), one was tried within MinInterval (a provider
// that fails is asked once per interval, not once per check), or the
// set is closed. r.mu must be held.
func (r *RemoteKeys) refresh(now time.Time) {
	if r.closed || now.Sub(r.lastTry) < r.cfg.MinInterval {
		return
	}
	select {
	case r.fetch <- struct{}{}:
	default:
		return
	}
	r.lastTry = now
	r.fetchesN++
	r.refreshes.Add(1)
	go func() {
		defer r.refreshes.Done()
		got, err := r.get(r.life)
		r.mu.Lock()
		r.lastErr = err
		if err == nil {
			r.keys, r.fetched = got, r.cfg.Now()
		}
		r.mu.Unlock()
		<-r.fetch // after the keys are in: a check waiting for the fetch looks again
	}()
}

// Fetches returns how many fetches were made (or started).
func (r *RemoteKeys) Fetches() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fetchesN
}

// Prefetch fetches the keys now, so that a gateway learns at start
// whether its issuer answers.
func (r *RemoteKeys) Prefetch(ctx context.Context) error {
	_, err := r.Keys(ctx, "\x00prefetch") // a kid no key has: forces the fetch
	return err
}

// get discovers the JWKS URL if needed and fetches the keys, within
// RequestTimeout and ctx.
func (r *RemoteKeys) get(ctx context.Context) ([]jose.JSONWebKey, error) {
	ctx, cancel := context.WithTimeout(ctx, RequestTimeout)
	defer cancel()
	r.mu.Lock()
	u := r.jwksURL
	r.mu.Unlock()
	if u == "" {
		p, err := oidc.NewProvider(oidc.ClientContext(ctx, r.cfg.Client), r.cfg.Issuer)
		if err != nil {
			return nil, fmt.Errorf("discovery of %s: %w", r.cfg.Issuer, err)
		}
		var doc struct {
			JWKSURL string `json:"jwks_uri"`
		}
		if err := p.Claims(&doc); err != nil {
			return nil, fmt.Errorf("discovery of %s: %w", r.cfg.Issuer, err)
		}
		if err := CheckHTTPS("jwks_uri", doc.JWKSURL); err != nil {
			return nil, fmt.Errorf("discovery of %s: %w", r.cfg.Issuer, err)
		}
		u = doc.JWKSURL
		r.mu.Lock()
		r.jwksURL = u
		r.mu.Unlock()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := r.cfg.Client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetch keys: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetch keys %s: HTTP %s", u, resp.Status)
	}
	b, err := readBody(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("fetch keys %s: %w", u, err)
	}
	keys, err := parseKeySet(b)
	if err != nil {
		return nil, fmt.Errorf("keys %s: %w", u, err)
	}
	return keys, nil
}
