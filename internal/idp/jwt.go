// Package idp verifies bearer tokens from identity providers for the
// gateway: JWT access tokens checked against an issuer's keys (jwt.go,
// keys.go), and opaque tokens checked by an RFC 7662 introspection
// endpoint, as Globus Auth issues them (introspect.go). Both map a
// token's claims to an auth.Principal (claims.go) and implement
// auth.TokenVerifier; auth.Chain puts them beside the static tokens.
//
// A verifier's errors wrap auth's ErrToken* refusals or
// auth.ErrUnavailable, and never contain the token, a claim's value or
// anything a provider answered.
package idp

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"scistream/internal/auth"
)

// DefaultAlgorithms are the signature algorithms a JWT may use when the
// operator names none: asymmetric ones only.
func DefaultAlgorithms() []string { return []string{"RS256", "ES256", "EdDSA"} }

// asymmetric are the algorithms JWTConfig.Algorithms may name. "none"
// and the HMACs are not among them: a gateway holds no secret shared
// with the issuer, and an HMAC "verified" with a public key proves
// nothing.
var asymmetric = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}

// DefaultClockSkew is how far the clocks of the issuer and the gateway
// may disagree when JWTConfig.ClockSkew is zero.
const DefaultClockSkew = 60 * time.Second

// MaxClockSkew bounds JWTConfig.ClockSkew and IntrospectConfig.ClockSkew.
const MaxClockSkew = 10 * time.Minute

// JWTConfig configures a JWTVerifier.
type JWTConfig struct {
	// Issuer is the "iss" a token must carry, exactly. Required.
	Issuer string
	// Audience is a value the token's "aud" must hold: the gateway's
	// name at the issuer. Required.
	Audience string
	// Algorithms are the signature algorithms accepted, among RS*, PS*,
	// ES* and EdDSA. If empty, DefaultAlgorithms.
	Algorithms []string
	// ClockSkew is how far exp, nbf and iat may be off, either way, at
	// most MaxClockSkew. If zero, DefaultClockSkew; if negative, none.
	ClockSkew time.Duration
	// Keys are the issuer's keys. Required (RemoteKeys, StaticKeys).
	Keys KeySource
	// Claims names the caller; Claims.Alias is required.
	Claims ClaimMap
	// Now is the clock. If nil, time.Now.
	Now func() time.Time
}

// Validate reports what in c NewJWT would refuse.
func (c JWTConfig) Validate() error {
	if err := CheckHTTPS("issuer", c.Issuer); err != nil {
		return err
	}
	if c.Audience == "" || len(c.Audience) > maxNameBytes {
		return errors.New("audience is required: give the gateway's name at the issuer (the \"aud\" its tokens carry)")
	}
	for _, a := range c.Algorithms {
		if !slices.Contains(asymmetric, a) {
			return fmt.Errorf("algorithm %.20q is not accepted: give some of %s (never none or HMAC)", a, strings.Join(asymmetric, ","))
		}
	}
	if c.ClockSkew > MaxClockSkew {
		return fmt.Errorf("clock skew %s is more than %s", c.ClockSkew, MaxClockSkew)
	}
	if c.Keys == nil {
		return errors.New("idp: JWTConfig.Keys is required")
	}
	return c.Claims.validate()
}

// JWTVerifier checks JWT access tokens of one issuer.
type JWTVerifier struct {
	cfg  JWTConfig
	algs []jose.SignatureAlgorithm
	skew time.Duration
}

// NewJWT returns a verifier for cfg.
func NewJWT(cfg JWTConfig) (*JWTVerifier, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(cfg.Algorithms) == 0 {
		cfg.Algorithms = DefaultAlgorithms()
	}
	v := &JWTVerifier{cfg: cfg, skew: cfg.ClockSkew}
	for _, a := range cfg.Algorithms {
		v.algs = append(v.algs, jose.SignatureAlgorithm(a))
	}
	switch {
	case v.skew == 0:
		v.skew = DefaultClockSkew
	case v.skew < 0:
		v.skew = 0
	}
	if v.cfg.Now == nil {
		v.cfg.Now = time.Now
	}
	v.cfg.Claims = cfg.Claims.withDefaults()
	return v, nil
}

// Close closes the verifier's KeySource when it is an io.Closer
// (RemoteKeys: its background refresh): the verifier owns its keys. It
// still verifies afterwards.
func (v *JWTVerifier) Close() error {
	if c, ok := v.cfg.Keys.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// header is what a JWT's protected header must say before any key is
// looked up.
type header struct {
	Alg string `json:"alg"`
	Kid string `json:"kid"`
}

// peekHeader decodes a compact JWS's header, which auth.LooksLikeJWT
// said is base64url, without trusting it beyond choosing a key.
func peekHeader(tok string) (header, error) {
	var h header
	part, _, _ := strings.Cut(tok, ".")
	b, err := base64.RawURLEncoding.DecodeString(part)
	if err != nil {
		return h, fmt.Errorf("%w: header is not base64url", auth.ErrTokenMalformed)
	}
	if err := json.Unmarshal(b, &h); err != nil {
		return h, fmt.Errorf("%w: header is not a JSON object with a string alg", auth.ErrTokenMalformed)
	}
	return h, nil
}

// VerifyToken checks tok: header, algorithm, signature against the
// issuer's key of its kid, then issuer, audience and times, and maps
// its claims to a principal.
func (v *JWTVerifier) VerifyToken(ctx context.Context, tok string) (*auth.Principal, error) {
	if !auth.LooksLikeJWT(tok) || len(tok) > auth.MaxTokenBytes {
		return nil, fmt.Errorf("%w: not a compact JWS", auth.ErrTokenMalformed)
	}
	h, err := peekHeader(tok)
	if err != nil {
		return nil, err
	}
	if !slices.Contains(v.cfg.Algorithms, h.Alg) {
		return nil, fmt.Errorf("%w: %.20q", auth.ErrTokenAlgorithm, h.Alg)
	}
	jws, err := jose.ParseSignedCompact(tok, v.algs)
	if err != nil {
		return nil, fmt.Errorf("%w: does not parse as a JWS", auth.ErrTokenMalformed)
	}
	keys, err := v.cfg.Keys.Keys(ctx, h.Kid)
	if err != nil {
		return nil, err
	}
	var payload []byte
	for _, k := range keys {
		if k.Algorithm != "" && k.Algorithm != h.Alg {
			continue // RFC 7517 4.4: a key names the one algorithm it is for
		}
		if payload, err = jws.Verify(k.Key); err == nil {
			break
		}
		payload = nil
	}
	if payload == nil {
		if len(keys) == 0 {
			return nil, fmt.Errorf("%w: the issuer has no key of this token's kid", auth.ErrTokenSignature)
		}
		return nil, fmt.Errorf("%w: by none of the issuer's keys", auth.ErrTokenSignature)
	}
	claims, err := decodeClaims(payload)
	if err != nil {
		return nil, fmt.Errorf("%w: claims are not a JSON object", auth.ErrTokenMalformed)
	}
	if iss, _ := claims["iss"].(string); iss != v.cfg.Issuer {
		return nil, fmt.Errorf("%w: not %s", auth.ErrTokenIssuer, v.cfg.Issuer)
	}
	if !slices.Contains(audiences(claims), v.cfg.Audience) {
		return nil, fmt.Errorf("%w: not for %q", auth.ErrTokenAudience, v.cfg.Audience)
	}
	t, err := readTimes(claims)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", auth.ErrTokenMalformed, err)
	}
	if t.exp.IsZero() {
		return nil, fmt.Errorf("%w: no expiry (exp)", auth.ErrTokenMalformed)
	}
	if err := t.check(v.cfg.Now(), v.skew); err != nil {
		return nil, err
	}
	return v.cfg.Claims.principal(claims, auth.SourceJWT, t.exp)
}
