package idp

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"scistream/internal/auth"
)

// IntrospectConfig configures an Introspector.
type IntrospectConfig struct {
	// URL is the introspection endpoint (https). Required.
	URL string
	// ClientID and Secret authenticate the gateway to the endpoint
	// (HTTP Basic, client_secret_basic). Required. The secret is never
	// logged nor put in an error.
	ClientID, Secret string
	// Client makes the requests (HTTPClient); it follows no redirect.
	// Required.
	Client *http.Client
	// Audience, if set, is a value the answer's "aud" must hold.
	Audience string
	// Issuer, if set, is the "iss" the answer must carry.
	Issuer string
	// ClockSkew is as in JWTConfig. If zero, DefaultClockSkew; if
	// negative, none.
	ClockSkew time.Duration
	// CacheTTL is the longest an active answer is reused, and never past
	// the token's expiry. If zero, DefaultCacheTTL.
	CacheTTL time.Duration
	// NegativeTTL is how long an inactive answer is reused: a client
	// that retries a revoked token asks once per NegativeTTL. If zero,
	// DefaultNegativeTTL; if negative, inactive answers are not kept.
	NegativeTTL time.Duration
	// MaxInFlight bounds the requests to the endpoint at once: a flood
	// of distinct garbage tokens costs the endpoint at most this many
	// requests at a time. If zero, DefaultMaxInFlight.
	MaxInFlight int
	// MaxWait is how long a check waits for one of MaxInFlight before it
	// answers auth.ErrUnavailable. If zero, 5 seconds.
	MaxWait time.Duration
	// MaxEntries bounds the cache; when it is full, expired answers go
	// first, then arbitrary ones. If zero, DefaultMaxEntries.
	MaxEntries int
	// Claims names the caller; Claims.Alias is required.
	Claims ClaimMap
	// Now is the clock. If nil, time.Now.
	Now func() time.Time
}

// The defaults of IntrospectConfig.
const (
	DefaultCacheTTL    = 2 * time.Minute
	DefaultNegativeTTL = 10 * time.Second
	DefaultMaxInFlight = 8
	DefaultMaxEntries  = 10000
)

// Validate reports what in c NewIntrospector would refuse.
func (c IntrospectConfig) Validate() error {
	if err := CheckHTTPS("introspection URL", c.URL); err != nil {
		return err
	}
	switch {
	case c.ClientID == "" || len(c.ClientID) > maxNameBytes:
		return errors.New("client id is required: give the gateway's client id at the introspection endpoint")
	case c.Secret == "":
		return errors.New("client secret is required")
	case c.Client == nil:
		return errors.New("idp: IntrospectConfig.Client is required")
	case c.ClockSkew > MaxClockSkew:
		return fmt.Errorf("clock skew %s is more than %s", c.ClockSkew, MaxClockSkew)
	case c.CacheTTL < 0:
		return fmt.Errorf("cache TTL %s is negative", c.CacheTTL)
	case c.MaxInFlight < 0 || c.MaxEntries < 0 || c.MaxWait < 0:
		return errors.New("introspection limits must not be negative")
	}
	return c.Claims.validate()
}

// Introspector checks opaque tokens at an RFC 7662 endpoint and keeps
// the answers, by the token's SHA-256 (never the token), for no longer
// than the token lives. Concurrent checks of one token share one
// request. An endpoint that cannot be reached, fails, or answers
// nonsense makes the check auth.ErrUnavailable: nobody is let in on a
// failure, and it is not cached.
type Introspector struct {
	cfg  IntrospectConfig
	skew time.Duration
	hc   *http.Client
	sem  chan struct{} // one token per request in flight

	mu      sync.Mutex // guards the following fields
	cache   map[[32]byte]cached
	flights map[[32]byte]*flight
	calls   int
}

type cached struct {
	p     *auth.Principal // nil: inactive
	err   error           // the refusal, when p is nil
	until time.Time
}

type flight struct {
	done chan struct{}
	p    *auth.Principal
	err  error
}

// NewIntrospector returns an introspector for cfg.
func NewIntrospector(cfg IntrospectConfig) (*Introspector, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.CacheTTL == 0 {
		cfg.CacheTTL = DefaultCacheTTL
	}
	if cfg.NegativeTTL == 0 {
		cfg.NegativeTTL = DefaultNegativeTTL
	}
	if cfg.MaxInFlight == 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	if cfg.MaxWait == 0 {
		cfg.MaxWait = 5 * time.Second
	}
	if cfg.MaxEntries == 0 {
		cfg.MaxEntries = DefaultMaxEntries
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.Claims = cfg.Claims.withDefaults()
	skew := cfg.ClockSkew
	switch {
	case skew == 0:
		skew = DefaultClockSkew
	case skew < 0:
		skew = 0
	}
	return &Introspector{
		cfg: cfg, skew: skew, hc: noRedirects(cfg.Client),
		sem:   make(chan struct{}, cfg.MaxInFlight),
		cache: map[[32]byte]cached{}, flights: map[[32]byte]*flight{},
	}, nil
}

// Calls returns how many requests were sent to the endpoint.
func (in *Introspector) Calls() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.calls
}

// VerifyToken returns the caller tok stands for, from the cache or the
// endpoint.
func (in *Introspector) VerifyToken(ctx context.Context, tok string) (*auth.Principal, error) {
	if !auth.IsB64Token(tok) || len(tok) > auth.MaxTokenBytes {
		return nil, fmt.Errorf("%w: not a b64token", auth.ErrTokenMalformed)
	}
	key := sha256.Sum256([]byte(tok))
	in.mu.Lock()
	if c, ok := in.cache[key]; ok {
		if in.cfg.Now().Before(c.until) {
			in.mu.Unlock()
			if c.p == nil {
				return nil, c.err
			}
			return c.p.Clone(), nil
		}
		delete(in.cache, key)
	}
	f := in.flights[key]
	if f == nil { // this check asks; the others wait for its answer
		f = &flight{done: make(chan struct{})}
		in.flights[key] = f
		in.mu.Unlock()
		f.p, f.err = in.ask(ctx, tok)
		in.mu.Lock()
		delete(in.flights, key)
		in.keep(key, f.p, f.err)
		in.mu.Unlock()
		close(f.done)
	} else {
		in.mu.Unlock()
		select {
		case <-f.done:
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %w", auth.ErrUnavailable, ctx.Err())
		}
	}
	if f.p == nil {
		return nil, f.err
	}
	return f.p.Clone(), nil
}

// keep caches an answer: an active one until the token's expiry or
// CacheTTL, whichever is first; a refusal for NegativeTTL; an
// unavailable endpoint not at all. in.mu must be held.
func (in *Introspector) keep(key [32]byte, p *auth.Principal, err error) {
	now := in.cfg.Now()
	var until time.Time
	switch {
	case p != nil:
		until = now.Add(in.cfg.CacheTTL)
		if !p.Expiry.IsZero() && p.Expiry.Before(until) {
			until = p.Expiry
		}
	case errors.Is(err, auth.ErrUnavailable) || in.cfg.NegativeTTL < 0:
		return
	default:
		until = now.Add(in.cfg.NegativeTTL)
	}
	if len(in.cache) >= in.cfg.MaxEntries {
		for k, c := range in.cache {
			if !now.Before(c.until) {
				delete(in.cache, k)
			}
		}
		for k := range in.cache { // still full: drop arbitrary ones
			if len(in.cache) < in.cfg.MaxEntries {
				break
			}
			delete(in.cache, k)
		}
	}
	in.cache[key] = cached{p: p, err: err, until: until}
}

// ask sends one introspection request, within MaxInFlight.
func (in *Introspector) ask(ctx context.Context, tok string) (*auth.Principal, error) {
	wait := time.NewTimer(in.cfg.MaxWait)
	defer wait.Stop()
	select {
	case in.sem <- struct{}{}:
	case <-wait.C:
		return nil, fmt.Errorf("%w: %d token checks already in flight", auth.ErrUnavailable, in.cfg.MaxInFlight)
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: %w", auth.ErrUnavailable, ctx.Err())
	}
	defer func() { <-in.sem }()
	in.mu.Lock()
	in.calls++
	in.mu.Unlock()
	// The answer may serve other callers waiting for it: the request
	// does not end with this caller's context, only with its own
	// timeout.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), RequestTimeout)
	defer cancel()
	form := url.Values{"token": {tok}, "token_type_hint": {"access_token"}}
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, in.cfg.URL, strings.NewReader(form.Encode()))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", auth.ErrUnavailable, err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	// RFC 6749 2.3.1: the id and secret are form-encoded before Basic.
	req.SetBasicAuth(url.QueryEscape(in.cfg.ClientID), url.QueryEscape(in.cfg.Secret))
	resp, err := in.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: introspection request: %w", auth.ErrUnavailable, stripURL(err))
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return nil, fmt.Errorf("%w: the introspection endpoint refused the gateway's client credentials (HTTP %d): check the client id and secret", auth.ErrUnavailable, resp.StatusCode)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("%w: the introspection endpoint answered HTTP %d", auth.ErrUnavailable, resp.StatusCode)
	}
	body, err := readBody(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%w: introspection answer: %w", auth.ErrUnavailable, err)
	}
	return in.answer(body)
}

// stripURL drops the *url.Error wrapper, whose text repeats the URL:
// harmless here, but the cause is what matters.
func stripURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// answer turns an introspection response body into a principal or a
// refusal. A body that is not a JSON object with a boolean "active" is
// the endpoint's fault: auth.ErrUnavailable.
func (in *Introspector) answer(body []byte) (*auth.Principal, error) {
	claims, err := decodeClaims(body)
	if err != nil {
		return nil, fmt.Errorf("%w: introspection answer is not a JSON object", auth.ErrUnavailable)
	}
	active, ok := claims["active"].(bool)
	if !ok {
		return nil, fmt.Errorf("%w: introspection answer has no boolean \"active\"", auth.ErrUnavailable)
	}
	if !active {
		return nil, fmt.Errorf("%w: the introspection endpoint says so", auth.ErrTokenInactive)
	}
	if tt, ok := claims["token_type"].(string); ok && !strings.EqualFold(tt, "bearer") && !strings.EqualFold(tt, "access_token") {
		return nil, fmt.Errorf("%w: token_type is not an access token", auth.ErrTokenMalformed)
	}
	if in.cfg.Issuer != "" {
		if iss, _ := claims["iss"].(string); iss != in.cfg.Issuer {
			return nil, fmt.Errorf("%w: not %s", auth.ErrTokenIssuer, in.cfg.Issuer)
		}
	}
	if in.cfg.Audience != "" && !slices.Contains(audiences(claims), in.cfg.Audience) {
		return nil, fmt.Errorf("%w: not for %q", auth.ErrTokenAudience, in.cfg.Audience)
	}
	t, err := readTimes(claims)
	if err != nil {
		return nil, fmt.Errorf("%w: introspection answer: %w", auth.ErrUnavailable, err)
	}
	if err := t.check(in.cfg.Now(), in.skew); err != nil {
		return nil, err
	}
	return in.cfg.Claims.principal(claims, auth.SourceIntrospection, t.exp)
}
