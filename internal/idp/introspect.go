package idp

import (
	"cmp"
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
	// NegativeTTL is how long a refusal (an inactive token, one for
	// another audience...) is reused: a client that retries a revoked
	// token asks once per NegativeTTL. If zero, DefaultNegativeTTL; if
	// negative, refusals are not kept.
	NegativeTTL time.Duration
	// MaxInFlight bounds the requests to the endpoint at once: a flood
	// of distinct garbage tokens costs the endpoint at most this many
	// requests at a time. If zero, DefaultMaxInFlight.
	MaxInFlight int
	// ReservedInFlight of the MaxInFlight requests are kept for checks
	// from sources that authenticated lately (auth.KnownSource, which
	// auth.Chain's Budget says): strangers, whose checks may all be
	// garbage, never hold them all. It must be less than MaxInFlight. If
	// zero, a quarter of MaxInFlight, and at least one when MaxInFlight
	// is 2 or more; if negative, none.
	ReservedInFlight int
	// MaxWait is how long a check waits for one of MaxInFlight before it
	// answers auth.ErrUnavailable. If zero, 5 seconds.
	MaxWait time.Duration
	// MaxEntries bounds the cache of accepted tokens; when it is full,
	// expired answers go first, then arbitrary ones. If zero,
	// DefaultMaxEntries.
	MaxEntries int
	// MaxRefusals bounds the cache of refusals, apart from the accepted
	// ones, so that a flood of garbage tokens never pushes a valid
	// token's answer out. When it is full, expired refusals go first,
	// then arbitrary ones. If zero, DefaultMaxRefusals.
	MaxRefusals int
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
	DefaultMaxRefusals = 4096
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
	case c.MaxInFlight < 0 || c.MaxEntries < 0 || c.MaxRefusals < 0 || c.MaxWait < 0:
		return errors.New("introspection limits must not be negative")
	case c.ReservedInFlight > 0 && c.ReservedInFlight >= cmp.Or(c.MaxInFlight, DefaultMaxInFlight):
		return fmt.Errorf("%d requests reserved for known sources leave none of %d for the others: reserve fewer", c.ReservedInFlight, cmp.Or(c.MaxInFlight, DefaultMaxInFlight))
	}
	return c.Claims.validate()
}

// Introspector checks opaque tokens at an RFC 7662 endpoint and keeps
// the answers, by the token's SHA-256 (never the token), for no longer
// than the token lives: accepted ones and refusals in caches of their
// own, each bounded. Concurrent checks of one token share one request.
// Of the MaxInFlight requests at once, ReservedInFlight serve only
// checks from known sources (auth.KnownSource). An endpoint that cannot
// be reached, fails, or answers nonsense makes the check
// auth.ErrUnavailable: nobody is let in on a failure, and it is not
// cached.
type Introspector struct {
	cfg  IntrospectConfig
	skew time.Duration
	hc   *http.Client
	// One token per request in flight: open serves every check,
	// reserved only those from known sources.
	open, reserved chan struct{}

	mu       sync.Mutex          // guards the following fields
	cache    map[[32]byte]cached // accepted tokens
	refusals map[[32]byte]cached
	flights  map[[32]byte]*flight
	calls    int
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
	if cfg.MaxRefusals == 0 {
		cfg.MaxRefusals = DefaultMaxRefusals
	}
	switch {
	case cfg.ReservedInFlight < 0:
		cfg.ReservedInFlight = 0
	case cfg.ReservedInFlight == 0 && cfg.MaxInFlight >= 2:
		cfg.ReservedInFlight = max(1, cfg.MaxInFlight/4)
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
		open:     make(chan struct{}, cfg.MaxInFlight-cfg.ReservedInFlight),
		reserved: make(chan struct{}, cfg.ReservedInFlight),
		cache:    map[[32]byte]cached{}, refusals: map[[32]byte]cached{}, flights: map[[32]byte]*flight{},
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
	for _, m := range []map[[32]byte]cached{in.cache, in.refusals} {
		if c, ok := m[key]; ok {
			if in.cfg.Now().Before(c.until) {
				in.mu.Unlock()
				if c.p == nil {
					return nil, c.err
				}
				return c.p.Clone(), nil
			}
			delete(m, key)
		}
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
// CacheTTL, whichever is first; a refusal for NegativeTTL, in its own
// cache; an unavailable endpoint not at all. in.mu must be held.
func (in *Introspector) keep(key [32]byte, p *auth.Principal, err error) {
	now := in.cfg.Now()
	switch {
	case p != nil:
		until := now.Add(in.cfg.CacheTTL)
		if !p.Expiry.IsZero() && p.Expiry.Before(until) {
			until = p.Expiry
		}
		put(in.cache, in.cfg.MaxEntries, now, key, cached{p: p, until: until})
	case errors.Is(err, auth.ErrUnavailable) || in.cfg.NegativeTTL < 0:
	default:
		put(in.refusals, in.cfg.MaxRefusals, now, key, cached{err: err, until: now.Add(in.cfg.NegativeTTL)})
	}
}

// put sets m[key] to c, first making room when m holds limit answers:
// expired ones go first, then arbitrary ones.
func put(m map[[32]byte]cached, limit int, now time.Time, key [32]byte, c cached) {
	if len(m) >= limit {
		for k, old := range m {
			if !now.Before(old.until) {
				delete(m, k)
			}
		}
		for k := range m { // still full: drop arbitrary ones
			if len(m) < limit {
				break
			}
			delete(m, k)
		}
	}
	m[key] = c
}

// ask sends one introspection request, within MaxInFlight: a check
// from a known source takes whichever request slot frees first, any
// other only one of those not reserved.
func (in *Introspector) ask(ctx context.Context, tok string) (*auth.Principal, error) {
	wait := time.NewTimer(in.cfg.MaxWait)
	defer wait.Stop()
	reserved := in.reserved
	if !auth.KnownSource(ctx) {
		reserved = nil // never ready
	}
	var slot chan struct{}
	select {
	case in.open <- struct{}{}:
		slot = in.open
	case reserved <- struct{}{}:
		slot = reserved
	case <-wait.C:
		if reserved == nil && in.cfg.ReservedInFlight > 0 {
			return nil, fmt.Errorf("%w: %d token checks already in flight, %d more kept for addresses that authenticated lately: retry shortly",
				auth.ErrUnavailable, cap(in.open), in.cfg.ReservedInFlight)
		}
		return nil, fmt.Errorf("%w: %d token checks already in flight: retry shortly", auth.ErrUnavailable, in.cfg.MaxInFlight)
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: %w", auth.ErrUnavailable, ctx.Err())
	}
	defer func() { <-slot }()
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
