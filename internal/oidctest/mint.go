package oidctest

import (
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// Claims describe a token to mint. Zero fields take the issuer's
// values: Issuer its URL, Audience its audience, IssuedAt and NotBefore
// now, Expiry now plus Options.AccessTTL.
type Claims struct {
	Subject   string
	Groups    []string
	Scope     string
	Issuer    string
	Audience  []string
	IssuedAt  time.Time
	NotBefore time.Time
	Expiry    time.Time
	// NoExpiry leaves "exp" out.
	NoExpiry bool
	// Extra claims, added last (they may replace the others).
	Extra map[string]any
}

func (is *Issuer) claims(c Claims) map[string]any {
	c = is.fill(c)
	m := map[string]any{
		"iss": c.Issuer, "sub": c.Subject, "aud": c.Audience,
		"iat": c.IssuedAt.Unix(), "nbf": c.NotBefore.Unix(), "exp": c.Expiry.Unix(),
		"jti": randHex(8), "client_id": is.ClientID,
	}
	if c.NoExpiry {
		delete(m, "exp")
	}
	if c.Groups != nil {
		m["groups"] = c.Groups
	}
	if c.Scope != "" {
		m["scope"] = c.Scope
	}
	for k, v := range c.Extra {
		m[k] = v
	}
	return m
}

// Mint returns a JWT for c signed with the issuer's current key.
func (is *Issuer) Mint(c Claims) string {
	return sign(is.current(), is.claims(c))
}

// MintForeign returns a JWT for c with the current key's kid but signed
// by another key of the same type: a forgery.
func (is *Issuer) MintForeign(c Claims) string {
	cur := is.current()
	k, err := newKey(cur.alg)
	if err != nil {
		panic(err)
	}
	k.kid = cur.kid
	return sign(k, is.claims(c))
}

// MintUnknownKey returns a JWT for c signed by a key the JWKS does not
// hold, under a kid it does not know: each call a new key and kid.
func (is *Issuer) MintUnknownKey(c Claims) string {
	k, err := newKey(is.current().alg)
	if err != nil {
		panic(err)
	}
	return sign(k, is.claims(c))
}

// MintNone returns an unsigned JWT for c ("alg": "none").
func (is *Issuer) MintNone(c Claims) string {
	return compact(map[string]any{"alg": "none", "typ": "JWT"}, is.claims(c), nil)
}

// MintHMACPublic returns a JWT for c "signed" with HS256 keyed by the
// issuer's public key in PEM, under its kid: the algorithm-confusion
// forgery that fools a verifier which takes the algorithm from the
// token.
func (is *Issuer) MintHMACPublic(c Claims) string {
	cur := is.current()
	der, err := x509.MarshalPKIXPublicKey(cur.priv.Public())
	if err != nil {
		panic(err)
	}
	secret := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.HS256, Key: secret},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", cur.kid))
	if err != nil {
		panic(err)
	}
	return signWith(signer, is.claims(c))
}

// MintOpaque returns an opaque access token for c that the
// introspection endpoint knows.
func (is *Issuer) MintOpaque(c Claims) string {
	tok := "op_" + randHex(24)
	c = is.fill(c)
	is.mu.Lock()
	is.opaque[tok] = c
	is.mu.Unlock()
	return tok
}

// fill sets c's zero times, issuer and audience as claims does.
func (is *Issuer) fill(c Claims) Claims {
	now := time.Now()
	if c.Issuer == "" {
		c.Issuer = is.URL
	}
	if c.Audience == nil {
		c.Audience = []string{is.Audience}
	}
	if c.IssuedAt.IsZero() {
		c.IssuedAt = now
	}
	if c.NotBefore.IsZero() {
		c.NotBefore = now
	}
	if c.Expiry.IsZero() {
		c.Expiry = now.Add(is.accessTTL())
	}
	return c
}

// Revoke marks a token the issuer issued (access or refresh) as revoked.
func (is *Issuer) Revoke(tok string) {
	is.mu.Lock()
	is.revoked[tok] = true
	delete(is.refresh, tok)
	is.mu.Unlock()
}

func sign(k signingKey, claims map[string]any) string {
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: k.alg, Key: k.priv},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", k.kid))
	if err != nil {
		panic(err)
	}
	return signWith(signer, claims)
}

func signWith(signer jose.Signer, claims map[string]any) string {
	payload, err := json.Marshal(claims)
	if err != nil {
		panic(err)
	}
	obj, err := signer.Sign(payload)
	if err != nil {
		panic(err)
	}
	s, err := obj.CompactSerialize()
	if err != nil {
		panic(err)
	}
	return s
}

// compact builds a compact JWS from a header, claims and a signature of
// the caller's making.
func compact(header, claims map[string]any, sig []byte) string {
	h, _ := json.Marshal(header)
	p, _ := json.Marshal(claims)
	enc := base64.RawURLEncoding
	return strings.Join([]string{enc.EncodeToString(h), enc.EncodeToString(p), enc.EncodeToString(sig)}, ".")
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }
