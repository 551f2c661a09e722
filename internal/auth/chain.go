package auth

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"sync"
)

// MaxTokenBytes bounds a bearer token. A longer one is refused before
// any hashing, key lookup or introspection: an identity provider's access
// tokens are a few hundred bytes to a few KiB.
const MaxTokenBytes = 8 << 10

// Chain authenticates a request's bearer token against every way a
// gateway may be configured to trust one, cheapest first:
//
//  1. a token longer than MaxTokenBytes is refused (ErrTokenTooLarge);
//  2. a token of the token file (Static) is that identity;
//  3. a token outside RFC 6750's b64token characters is refused
//     (ErrTokenMalformed): nothing else is asked about it;
//  4. a token shaped as a JWT (three dot-separated base64url parts) goes
//     to JWT, if set; its answer is final;
//  5. any other token, or a JWT when JWT is nil, goes to Opaque (the
//     introspection endpoint), if set, when the caller's source is
//     within its Budget (which may answer ErrUnavailable instead); its
//     answer is final;
//  6. else the token is not recognised (ErrBadToken).
//
// A nil field is a way of trust the gateway does not have. With neither
// JWT nor Opaque, step 3 is skipped: a chain of static tokens alone
// answers ErrBadToken to any token not in the file, as Tokens does.
//
// A token accepted at any step makes its source known to the Budget.
// Only AuthenticatePrincipal (and Authenticate) know the source, from
// the request; VerifyToken counts every check against one source, the
// unknown address.
type Chain struct {
	Static *Tokens
	JWT    TokenVerifier
	Opaque TokenVerifier
	// Budget limits the checks a source that did not authenticate lately
	// may send to Opaque; it is read at the first check. If nil, one of
	// NewBudget(BudgetConfig{}) made then.
	Budget *Budget

	once   sync.Once // makes budget
	budget *Budget   // Budget, or the default
}

// budgetOf returns the budget in use.
func (c *Chain) budgetOf() *Budget {
	c.once.Do(func() {
		c.budget = c.Budget
		if c.budget == nil {
			c.budget = NewBudget(BudgetConfig{})
		}
	})
	return c.budget
}

// Close closes the verifiers that are io.Closers (an idp.JWTVerifier
// stops its keys' background refresh) and waits for what they run. The
// chain still answers afterwards.
func (c *Chain) Close() error {
	var errs []error
	for _, v := range []TokenVerifier{c.JWT, c.Opaque} {
		if cl, ok := v.(io.Closer); ok {
			errs = append(errs, cl.Close())
		}
	}
	return errors.Join(errs...)
}

// Authenticate returns the caller's identity.
func (c *Chain) Authenticate(r *http.Request) (string, error) {
	p, err := c.AuthenticatePrincipal(r)
	if err != nil {
		return "", err
	}
	return p.Identity, nil
}

// AuthenticatePrincipal returns the caller of r.
func (c *Chain) AuthenticatePrincipal(r *http.Request) (*Principal, error) {
	tok, err := BearerToken(r)
	if err != nil {
		return nil, err
	}
	return c.verify(r.Context(), SourceOf(r.RemoteAddr), tok)
}

// VerifyToken checks a bearer token as Chain's doc says, from the
// unknown address.
func (c *Chain) VerifyToken(ctx context.Context, tok string) (*Principal, error) {
	return c.verify(ctx, netip.Prefix{}, tok)
}

// verify checks tok from src.
func (c *Chain) verify(ctx context.Context, src netip.Prefix, tok string) (*Principal, error) {
	if len(tok) > MaxTokenBytes {
		return nil, ErrTokenTooLarge
	}
	if c.Static != nil {
		if id, err := c.Static.Lookup(tok); err == nil {
			c.budgetOf().accepted(src)
			return &Principal{Identity: id, Source: SourceStatic}, nil
		}
	}
	if c.JWT == nil && c.Opaque == nil {
		return nil, ErrBadToken
	}
	if !IsB64Token(tok) {
		return nil, ErrTokenMalformed
	}
	if c.JWT != nil && LooksLikeJWT(tok) {
		// A JWT costs the issuer nothing (a new kid, one fetch per
		// interval): not budgeted.
		p, err := c.JWT.VerifyToken(ctx, tok)
		if err == nil {
			c.budgetOf().accepted(src)
		}
		return p, err
	}
	if c.Opaque == nil {
		return nil, ErrBadToken
	}
	known, done, err := c.budgetOf().admit(src)
	if err != nil {
		return nil, err
	}
	if known {
		ctx = WithKnownSource(ctx)
	}
	accepted := false
	defer func() { done(accepted) }() // even if the verifier panics: the source's checks in flight must go down
	p, err := c.Opaque.VerifyToken(ctx, tok)
	accepted = err == nil
	return p, err
}

// IsB64Token reports whether tok is a non-empty RFC 6750 b64token:
// letters, digits and "-._~+/", then any "=" padding.
func IsB64Token(tok string) bool {
	body := strings.TrimRight(tok, "=")
	if body == "" {
		return false
	}
	for i := 0; i < len(body); i++ {
		if !b64tokenChar(body[i]) {
			return false
		}
	}
	return true
}

func b64tokenChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("-._~+/", c) >= 0
}

// LooksLikeJWT reports whether tok has the shape of a JWS in compact
// serialization: three parts of base64url characters separated by dots,
// the first two non-empty. It decodes nothing.
func LooksLikeJWT(tok string) bool {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" {
		return false
	}
	for _, p := range parts {
		for i := 0; i < len(p); i++ {
			c := p[i]
			if !(c == '-' || c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9') {
				return false
			}
		}
	}
	return true
}
