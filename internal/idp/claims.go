package idp

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"scistream/internal/auth"
)

// ClaimMap says how a token's claims name its caller.
type ClaimMap struct {
	// Alias prefixes the identity and each group the provider names:
	// "<alias>:<value>", so that two providers (or a provider and the
	// token file) never name the same caller. Lower-case letters,
	// digits, '.' and '-', at most 64 bytes, e.g. "auth.globus.org".
	// Required.
	Alias string
	// Identity is the claim that names the caller ("sub",
	// "preferred_username", "email", "username"). If empty, "sub".
	Identity string
	// Groups is the claim that lists the caller's groups, an array of
	// strings or one string. If empty, "groups".
	Groups string
}

var aliasRE = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{0,63}$`)

// ValidAlias reports whether a is a usable ClaimMap.Alias.
func ValidAlias(a string) bool { return aliasRE.MatchString(a) }

var claimNameRE = regexp.MustCompile(`^[A-Za-z0-9_.:/-]{1,64}$`)

func (m ClaimMap) validate() error {
	switch {
	case !ValidAlias(m.Alias):
		return fmt.Errorf("alias %.70q: give 1-64 lower-case letters, digits, '.' or '-', e.g. the issuer's host name", m.Alias)
	case m.Identity != "" && !claimNameRE.MatchString(m.Identity):
		return fmt.Errorf("identity claim %.70q is not a claim name", m.Identity)
	case m.Groups != "" && !claimNameRE.MatchString(m.Groups):
		return fmt.Errorf("groups claim %.70q is not a claim name", m.Groups)
	}
	return nil
}

func (m ClaimMap) withDefaults() ClaimMap {
	if m.Identity == "" {
		m.Identity = "sub"
	}
	if m.Groups == "" {
		m.Groups = "groups"
	}
	return m
}

// Limits on what a principal takes from a token: more groups or scopes
// than this are ignored, as is a name that is not printable UTF-8 of at
// most maxNameBytes.
const (
	maxGroups    = 256
	maxScopes    = 256
	maxNameBytes = 256
)

// principal builds the caller of a token from its claims (decoded with
// UseNumber). The identity claim must be a string that, prefixed,
// is a valid identity (auth.ValidIdentity).
func (m ClaimMap) principal(claims map[string]any, source string, expiry time.Time) (*auth.Principal, error) {
	v, _ := claims[m.Identity].(string)
	if v == "" {
		return nil, fmt.Errorf("%w: no string claim %q", auth.ErrTokenIdentity, m.Identity)
	}
	id := m.Alias + ":" + v
	if !auth.ValidIdentity(id) {
		return nil, fmt.Errorf("%w: claim %q is not 1-128 letters, digits or ._@+:/- once prefixed", auth.ErrTokenIdentity, m.Identity)
	}
	p := &auth.Principal{Identity: id, Source: source, Expiry: expiry}
	for _, g := range stringList(claims[m.Groups], false) {
		if len(p.Groups) == maxGroups {
			break
		}
		if validName(g) {
			p.Groups = append(p.Groups, m.Alias+":"+g)
		}
	}
	scopes := claims["scope"]
	if scopes == nil {
		scopes = claims["scp"]
	}
	for _, s := range stringList(scopes, true) {
		if len(p.Scopes) == maxScopes {
			break
		}
		if validName(s) {
			p.Scopes = append(p.Scopes, s)
		}
	}
	return p, nil
}

// stringList reads a claim that is an array of strings or one string
// (split at spaces if split); anything else is no strings.
func stringList(v any, split bool) []string {
	switch v := v.(type) {
	case string:
		if split {
			return strings.Fields(v)
		}
		return []string{v}
	case []any:
		var out []string
		for _, e := range v {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

func validName(s string) bool {
	if s == "" || len(s) > maxNameBytes || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) || unicode.IsSpace(r) {
			return false
		}
	}
	return true
}

// decodeClaims decodes a JSON object of claims, numbers as json.Number.
func decodeClaims(b []byte) (map[string]any, error) {
	d := json.NewDecoder(strings.NewReader(string(b)))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		return nil, err
	}
	if m == nil {
		return nil, errors.New("not a JSON object")
	}
	return m, nil
}

// numericDate reads a NumericDate claim (seconds since the epoch, RFC
// 7519); a claim absent gives the zero time, one of another type or out
// of range an error.
func numericDate(claims map[string]any, name string) (time.Time, error) {
	v, ok := claims[name]
	if !ok || v == nil {
		return time.Time{}, nil
	}
	n, ok := v.(json.Number)
	if !ok {
		return time.Time{}, fmt.Errorf("claim %q is not a number", name)
	}
	f, err := n.Float64()
	if err != nil || math.IsNaN(f) || f < 0 || f > 1e11 { // 1e11 s: year 5138
		return time.Time{}, fmt.Errorf("claim %q is not a time", name)
	}
	sec, frac := math.Modf(f)
	return time.Unix(int64(sec), int64(frac*1e9)), nil
}

// times are a token's validity claims.
type times struct{ exp, nbf, iat time.Time }

func readTimes(claims map[string]any) (times, error) {
	var t times
	var err error
	if t.exp, err = numericDate(claims, "exp"); err != nil {
		return t, err
	}
	if t.nbf, err = numericDate(claims, "nbf"); err != nil {
		return t, err
	}
	t.iat, err = numericDate(claims, "iat")
	return t, err
}

// check refuses a token that expired, or is not valid yet, at now,
// allowing skew either way.
func (t times) check(now time.Time, skew time.Duration) error {
	switch {
	case !t.exp.IsZero() && now.After(t.exp.Add(skew)):
		return fmt.Errorf("%w: at %s, %s ago", auth.ErrTokenExpired, t.exp.UTC().Format(time.RFC3339), now.Sub(t.exp).Round(time.Second))
	case !t.nbf.IsZero() && now.Add(skew).Before(t.nbf):
		return fmt.Errorf("%w: not before %s, %s from now", auth.ErrTokenNotYetValid, t.nbf.UTC().Format(time.RFC3339), t.nbf.Sub(now).Round(time.Second))
	case !t.iat.IsZero() && now.Add(skew).Before(t.iat):
		return fmt.Errorf("%w: issued at %s, %s from now", auth.ErrTokenNotYetValid, t.iat.UTC().Format(time.RFC3339), t.iat.Sub(now).Round(time.Second))
	}
	return nil
}

// audiences reads the "aud" claim: one string or an array of strings.
func audiences(claims map[string]any) []string { return stringList(claims["aud"], false) }
