package auth

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"time"
)

// A Principal is an authenticated caller: who it is, what its identity
// provider says of it, and the roles the gateway's policy gives it.
type Principal struct {
	// Identity names the caller; the gateway's streams are owned by it.
	// A static token's identity is its name in the token file; one an
	// identity provider vouches for is "<alias>:<claim value>" (package
	// idp), so two providers never speak for the same name.
	Identity string
	// Source says how the caller was authenticated: SourceStatic,
	// SourceJWT, SourceIntrospection or SourceAnonymous.
	Source string
	// Groups are the caller's groups as its identity provider names
	// them, each prefixed like Identity ("<alias>:<group>"); none for a
	// static token.
	Groups []string
	// Scopes are the scopes the token was granted (the "scope" or "scp"
	// claim); none for a static token.
	Scopes []string
	// Expiry is when the token stops being valid; zero when it does not
	// expire (a static token).
	Expiry time.Time
	// Roles are what the gateway's policy gives the caller
	// (Policy.RolesOf); the authenticators leave them empty.
	Roles []Role
}

// The sources of a Principal.
const (
	SourceStatic        = "static"        // a hashed token of the token file
	SourceJWT           = "jwt"           // a JWT signed by a trusted issuer
	SourceIntrospection = "introspection" // an opaque token an RFC 7662 endpoint vouched for
	SourceAnonymous     = "anonymous"     // s2cs --insecure_no_auth
)

// A Role is what a caller may do on a gateway.
type Role string

// The roles. An operator may do everything a user and a reader may.
const (
	// RoleUser creates streams and manages its own.
	RoleUser Role = "user"
	// RoleOperator manages every identity's streams.
	RoleOperator Role = "operator"
	// RoleReader reads the gateway's status and metrics.
	RoleReader Role = "reader"
)

// Roles lists every role, in the order messages name them.
func Roles() []Role { return []Role{RoleUser, RoleOperator, RoleReader} }

// DefaultRoles are the roles of every authenticated caller of a gateway
// with no policy (s2cs without --roles): each creates and manages its
// own streams and reads the gateway's info, as before roles existed.
// Reading the status and metrics, which show every identity's streams,
// takes a roles file that names the readers.
func DefaultRoles() []Role { return []Role{RoleUser} }

// Has reports whether p holds role r, directly or through
// RoleOperator, which implies the others.
func (p *Principal) Has(r Role) bool {
	return slices.Contains(p.Roles, r) || slices.Contains(p.Roles, RoleOperator)
}

// Clone returns a copy of p that shares no slice with it.
func (p *Principal) Clone() *Principal {
	c := *p
	c.Groups = slices.Clone(p.Groups)
	c.Scopes = slices.Clone(p.Scopes)
	c.Roles = slices.Clone(p.Roles)
	return &c
}

// A PrincipalAuthenticator knows more of a caller than its name.
type PrincipalAuthenticator interface {
	Authenticator
	// AuthenticatePrincipal returns the caller of r. Its errors are
	// those of TokenVerifier.VerifyToken, and ErrNoToken.
	AuthenticatePrincipal(r *http.Request) (*Principal, error)
}

// PrincipalOf authenticates r with a: through AuthenticatePrincipal
// when a has it, else as a bare identity (SourceStatic, or
// SourceAnonymous for Anonymous).
func PrincipalOf(a Authenticator, r *http.Request) (*Principal, error) {
	if pa, ok := a.(PrincipalAuthenticator); ok {
		return pa.AuthenticatePrincipal(r)
	}
	id, err := a.Authenticate(r)
	if err != nil {
		return nil, err
	}
	src := SourceStatic
	if _, ok := a.(Anonymous); ok {
		src = SourceAnonymous
	}
	return &Principal{Identity: id, Source: src}, nil
}

// A TokenVerifier checks one kind of bearer token: JWTs against an
// issuer's keys, opaque tokens through an introspection endpoint.
type TokenVerifier interface {
	// VerifyToken returns the principal token stands for, without
	// roles. A refusal wraps one of the ErrToken* errors, or
	// ErrBadToken; a verifier that could not decide (its identity
	// provider did not answer) returns ErrUnavailable. No error names
	// the token.
	VerifyToken(ctx context.Context, token string) (*Principal, error)
}

// Why a token is refused. The verifiers wrap them with detail that never
// includes the token; the gateway tells the caller which one it was.
var (
	// ErrTokenTooLarge: longer than MaxTokenBytes.
	ErrTokenTooLarge = errors.New("bearer token too large")
	// ErrTokenMalformed: not a token of any form the gateway accepts
	// (characters outside RFC 6750's b64token, a JWT that does not
	// parse, claims of the wrong type).
	ErrTokenMalformed = errors.New("malformed bearer token")
	// ErrTokenExpired: past its expiry, clock skew allowed.
	ErrTokenExpired = errors.New("token expired")
	// ErrTokenNotYetValid: its not-before (or issued-at) time is ahead of
	// this host's clock by more than the skew allowed.
	ErrTokenNotYetValid = errors.New("token not valid yet")
	// ErrTokenAudience: issued for another audience.
	ErrTokenAudience = errors.New("token issued for another audience")
	// ErrTokenIssuer: issued by an issuer the gateway does not trust.
	ErrTokenIssuer = errors.New("token from an issuer this gateway does not trust")
	// ErrTokenAlgorithm: signed with an algorithm the gateway does not
	// accept (among them "none" and every HMAC).
	ErrTokenAlgorithm = errors.New("token signed with an algorithm this gateway does not accept")
	// ErrTokenSignature: its signature does not verify with any of the
	// issuer's keys.
	ErrTokenSignature = errors.New("token signature does not verify")
	// ErrTokenInactive: the introspection endpoint says it is not active
	// (expired, revoked, or never issued).
	ErrTokenInactive = errors.New("token not active")
	// ErrTokenIdentity: valid, but without a usable identity claim.
	ErrTokenIdentity = errors.New("token carries no usable identity")
	// ErrUnavailable: the identity provider could not be asked (down,
	// failing, or too many checks in flight); the token is neither
	// accepted nor refused.
	ErrUnavailable = errors.New("identity provider unavailable")
)
