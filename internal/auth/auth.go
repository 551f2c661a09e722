// Package auth authenticates control-API callers by bearer token and
// gives them roles.
//
// Static tokens are never held in clear: a token file lists, one per
// line, "<sha256 hex of the token> <identity>", and a presented token is
// hashed and compared in constant time against every entry. Blank lines
// and lines starting with '#' are ignored.
//
// Tokens from identity providers (JWTs, opaque tokens checked by
// introspection) are verified by package idp, through the TokenVerifier
// interface; Chain tries the static tokens and those verifiers in turn
// (chain.go) and returns a Principal (principal.go), within a Budget of
// checks per source address for callers no token was accepted from
// lately (budget.go). A Policy, the
// gateway's roles file, gives a principal its roles (roles.go).
package auth

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"

	"scistream/internal/trustfile"
)

// ErrNoToken is returned when a request carries no bearer token.
var ErrNoToken = errors.New("no bearer token")

// ErrBadToken is returned when a token matches no entry.
var ErrBadToken = errors.New("token not recognised")

// Authenticator maps a request to the identity that made it.
type Authenticator interface {
	Authenticate(r *http.Request) (identity string, err error)
}

type entry struct {
	hash     [sha256.Size]byte
	identity string
}

// Tokens authenticates against a fixed list of token hashes.
type Tokens struct {
	entries []entry
}

var identityRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@+:/-]{0,127}$`)

// ParseTokens reads a token file. Errors name the offending line.
func ParseTokens(r io.Reader) (*Tokens, error) {
	t := &Tokens{}
	sc := bufio.NewScanner(r)
	seen := map[[sha256.Size]byte]int{}
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, fmt.Errorf("line %d: want \"<sha256 hex> <identity>\", got %d fields", n, len(f))
		}
		raw, err := hex.DecodeString(f[0])
		if err != nil || len(raw) != sha256.Size {
			return nil, fmt.Errorf("line %d: first field must be the 64-character hex SHA-256 of the token (try: printf %%s TOKEN | sha256sum)", n)
		}
		if !identityRE.MatchString(f[1]) {
			return nil, fmt.Errorf("line %d: identity %q must be 1-128 letters, digits or ._@+:/-", n, f[1])
		}
		var e entry
		copy(e.hash[:], raw)
		e.identity = f[1]
		if prev, dup := seen[e.hash]; dup {
			return nil, fmt.Errorf("line %d: same token hash as line %d", n, prev)
		}
		seen[e.hash] = n
		t.entries = append(t.entries, e)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(t.entries) == 0 {
		return nil, errors.New("no tokens: add lines \"<sha256 hex of token> <identity>\"")
	}
	return t, nil
}

// LoadTokens reads a token file from disk, under the rule of every file
// that decides whom the gateway trusts (internal/trustfile): whoever can
// change it can add a token of their own.
func LoadTokens(path string) (*Tokens, error) {
	b, err := trustfile.ReadFile("tokens file", path)
	if err != nil {
		return nil, err
	}
	t, err := ParseTokens(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// Len returns the number of tokens.
func (t *Tokens) Len() int { return len(t.entries) }

// Identities returns the identities of the tokens, in file order, each
// once.
func (t *Tokens) Identities() []string {
	var out []string
	seen := map[string]bool{}
	for _, e := range t.entries {
		if !seen[e.identity] {
			seen[e.identity] = true
			out = append(out, e.identity)
		}
	}
	return out
}

// Authenticate checks the request's "Authorization: Bearer" header.
func (t *Tokens) Authenticate(r *http.Request) (string, error) {
	tok, err := BearerToken(r)
	if err != nil {
		return "", err
	}
	return t.Lookup(tok)
}

// Lookup returns the identity of a clear-text token.
func (t *Tokens) Lookup(token string) (string, error) {
	h := sha256.Sum256([]byte(token))
	id := ""
	// Compare against every entry so the time taken does not depend on
	// which entry (if any) matches.
	for i := range t.entries {
		if subtle.ConstantTimeCompare(h[:], t.entries[i].hash[:]) == 1 {
			id = t.entries[i].identity
		}
	}
	if id == "" {
		return "", ErrBadToken
	}
	return id, nil
}

// BearerToken extracts the token of an "Authorization: Bearer" header.
func BearerToken(r *http.Request) (string, error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return "", ErrNoToken
	}
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "" {
		return "", ErrNoToken
	}
	return strings.TrimSpace(tok), nil
}

// Anonymous admits every caller as one identity. It exists only for
// s2cs --insecure_no_auth, which logs a warning.
type Anonymous struct{ Identity string }

// Authenticate always succeeds.
func (a Anonymous) Authenticate(*http.Request) (string, error) { return a.Identity, nil }

// HashToken returns the hex SHA-256 of a token, as a token file stores it.
func HashToken(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}
