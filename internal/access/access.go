// Package access says who the caller of a control request is (its
// auth.Principal, kept in the request's context) and what it may do, by
// the roles an auth.Policy gives it (a user's only when the policy is
// nil: nobody is a reader then):
//
//   - user: create streams, and list, read, attach and release its own;
//   - operator: all a user and a reader may, and list, read and release
//     any identity's streams (owner= and all_owners=, OwnerParam);
//   - reader: read the gateway's description (/v1/info), status and
//     metrics.
//
// A caller without the role a route needs is refused with
// permission_denied; a stream of another identity is still not found
// for a user, exactly as before roles existed. Every refusal is an
// *api.Error with a public message that says what to do; the
// authenticator's reason is kept as its cause, for the log.
package access

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"scistream/internal/api"
	"scistream/internal/auth"
)

type principalKey struct{}

// Principal returns the authenticated caller of r; nil outside an
// authenticated route.
func Principal(r *http.Request) *auth.Principal {
	p, _ := r.Context().Value(principalKey{}).(*auth.Principal)
	return p
}

// Identity returns the authenticated caller's identity, or "" outside
// an authenticated route.
func Identity(r *http.Request) string {
	if p := Principal(r); p != nil {
		return p.Identity
	}
	return ""
}

// Authenticate returns the caller of r, as authn vouches for it, with
// the roles pol gives it, or the error to answer: unauthenticated (the
// token was refused), unavailable (its identity provider could not be
// asked) or permission_denied (the caller holds none of roles). It sets
// the WWW-Authenticate header RFC 6750 asks for with a 401 or 403.
func Authenticate(authn auth.Authenticator, pol *auth.Policy, w http.ResponseWriter, r *http.Request, roles []auth.Role) (*auth.Principal, error) {
	p, err := auth.PrincipalOf(authn, r)
	if err != nil {
		ae := Refusal(err)
		switch {
		case ae.Code != api.CodeUnauthenticated:
		case errors.Is(err, auth.ErrNoToken):
			w.Header().Set("WWW-Authenticate", `Bearer realm="s2cs"`)
		default:
			w.Header().Set("WWW-Authenticate", `Bearer realm="s2cs", error="invalid_token"`)
		}
		return nil, ae
	}
	p.Roles = pol.RolesOf(p)
	for _, role := range roles {
		if p.Has(role) {
			return p, nil
		}
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="s2cs", error="insufficient_scope"`)
	return nil, api.Errorf(api.CodePermissionDenied, "%s holds %s on this gateway; this needs the role %s: ask the gateway's operator (s2cs --roles)",
		p.Identity, rolesText(p.Roles), joinRoles(roles))
}

func rolesText(rs []auth.Role) string {
	if len(rs) == 0 {
		return "no role"
	}
	return "the role " + joinRoles(rs)
}

func joinRoles(rs []auth.Role) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = string(r)
	}
	return strings.Join(s, " or ")
}

// tokenRefusals pairs each refusal of a token with what its caller is told.
var tokenRefusals = []struct {
	err error
	msg string
}{
	{auth.ErrNoToken, "missing bearer token: run s2uc login, set SCISTREAM_TOKEN or pass --token_file"},
	{auth.ErrTokenTooLarge, fmt.Sprintf("bearer token longer than %d bytes: check what SCISTREAM_TOKEN or --token_file holds", auth.MaxTokenBytes)},
	{auth.ErrTokenMalformed, "malformed bearer token: check what SCISTREAM_TOKEN or --token_file holds, or " + relogin},
	{auth.ErrTokenExpired, "token expired; " + relogin},
	{auth.ErrTokenNotYetValid, "token not valid yet: the clocks of this gateway and the token's issuer disagree; check both"},
	{auth.ErrTokenAudience, "token issued for another audience, not for this gateway: log in for this gateway (s2uc login) or ask its operator for its audience"},
	{auth.ErrTokenIssuer, "token from an issuer this gateway does not trust: log in with the issuer its operator names (s2uc login --issuer)"},
	{auth.ErrTokenAlgorithm, "token signed with an algorithm this gateway does not accept"},
	{auth.ErrTokenSignature, "token signature does not verify with the issuer's keys; " + relogin},
	{auth.ErrTokenInactive, "token not active (expired, revoked or unknown to the identity provider); " + relogin},
	{auth.ErrTokenIdentity, "token names no identity this gateway can use; ask its operator which claim it reads"},
}

const relogin = "run s2uc login again, or get a new token"

// Refusal turns an authenticator's refusal into the API's answer: a
// public message that says what to do, the refusal kept as the cause
// for the log (it never holds the token). A provider that could not be
// asked is unavailable, not a refusal.
func Refusal(err error) *api.Error {
	var be *auth.BudgetError
	if errors.As(err, &be) {
		return api.Errorf(api.CodeUnavailable, "%s", be.Public()).WithCause(err)
	}
	if errors.Is(err, auth.ErrUnavailable) {
		return api.Errorf(api.CodeUnavailable, "the identity provider that vouches for this token could not be asked; retry shortly").WithCause(err)
	}
	for _, r := range tokenRefusals {
		if errors.Is(err, r.err) {
			return api.Errorf(api.CodeUnauthenticated, "%s", r.msg).WithCause(err)
		}
	}
	// auth.ErrBadToken, and anything else.
	return api.Errorf(api.CodeUnauthenticated, "bearer token not recognised by this gateway: check the token and the gateway's --tokens file, or run s2uc login").WithCause(err)
}

// RoleNames lists p's roles for the API.
func RoleNames(p *auth.Principal) []string {
	var out []string
	for _, r := range p.Roles {
		out = append(out, string(r))
	}
	return out
}

// With returns r with p as its authenticated caller.
func With(r *http.Request, p *auth.Principal) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), principalKey{}, p))
}

// OwnerParam returns whose streams a request is about: the caller's own,
// or, for an operator, those of the identity its "owner" parameter
// names. all reports all_owners=true (operators only), for a list of
// every identity's streams.
func OwnerParam(r *http.Request) (owner string, all bool, err error) {
	p := Principal(r)
	q := r.URL.Query()
	owner = q.Get("owner")
	switch v := q.Get("all_owners"); v {
	case "", "false", "0":
	case "true", "1":
		all = true
	default:
		return "", false, api.Errorf(api.CodeInvalidArgument, "all_owners=%.20q: use true or false", v)
	}
	switch {
	case (owner == "" || owner == p.Identity) && !all:
		return p.Identity, false, nil
	case !p.Has(auth.RoleOperator):
		return "", false, api.Errorf(api.CodePermissionDenied, "only an operator may name another owner's streams (owner=, all_owners=); %s holds %s on this gateway", p.Identity, rolesText(p.Roles))
	case all && owner != "":
		return "", false, api.Errorf(api.CodeInvalidArgument, "give owner= or all_owners=true, not both")
	case !all && !auth.ValidIdentity(owner):
		return "", false, api.Errorf(api.CodeInvalidArgument, "owner=%.140q is not an identity: 1-128 letters, digits or ._@+:/-", owner)
	}
	return owner, all, nil
}
