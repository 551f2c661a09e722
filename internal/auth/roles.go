package auth

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"scistream/internal/trustfile"
)

// A Policy gives roles to authenticated callers: the gateway's roles
// file (s2cs --roles). It is strict: a caller holds exactly the roles
// of the rules it matches, and a file with an unknown role, an unknown
// selector or a malformed line is refused, naming the line.
//
// The file has one rule per line, "<role> <selector>"; blank lines and
// lines starting with '#' are ignored:
//
//	user      any                           # every authenticated caller
//	operator  identity  idp.example.org:alice
//	operator  group     idp.example.org:scistream-ops
//	reader    scope     scistream:status
//	reader    identity  prometheus          # a static token's identity
//
// Roles are user, operator and reader (Role). The selectors: "any"
// (every authenticated caller), "identity NAME" (Principal.Identity,
// exactly), "group NAME" (one of Principal.Groups, which carry their
// provider's alias like identities do), "scope NAME" (one of
// Principal.Scopes).
type Policy struct {
	rules []rule
}

type rule struct {
	role  Role
	kind  string // selAny, selIdentity, selGroup, selScope
	value string
}

const (
	selAny      = "any"
	selIdentity = "identity"
	selGroup    = "group"
	selScope    = "scope"
)

// maxRuleValue bounds a group or scope name in a rule.
const maxRuleValue = 256

// ParsePolicy reads a roles file. Errors name the offending line.
func ParsePolicy(r io.Reader) (*Policy, error) {
	p := &Policy{}
	sc := bufio.NewScanner(r)
	seen := map[rule]int{}
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.Index(line, " #"); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		if i := strings.Index(line, "\t#"); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		ru, err := parseRule(strings.Fields(line))
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		if prev, dup := seen[ru]; dup {
			return nil, fmt.Errorf("line %d: same rule as line %d", n, prev)
		}
		seen[ru] = n
		p.rules = append(p.rules, ru)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(p.rules) == 0 {
		return nil, errors.New("no rules: add lines \"<role> <selector>\", e.g. \"user any\"")
	}
	return p, nil
}

func parseRule(f []string) (rule, error) {
	const want = `want "<role> any" or "<role> identity|group|scope NAME"`
	if len(f) < 2 || len(f) > 3 {
		return rule{}, fmt.Errorf("%s, got %d fields", want, len(f))
	}
	ru := rule{role: Role(f[0]), kind: f[1]}
	if !slices.Contains(Roles(), ru.role) {
		return rule{}, fmt.Errorf("unknown role %.40q: use user, operator or reader", f[0])
	}
	switch ru.kind {
	case selAny:
		if len(f) != 2 {
			return rule{}, fmt.Errorf("%q takes no name: %s", selAny, want)
		}
		return ru, nil
	case selIdentity, selGroup, selScope:
		if len(f) != 3 {
			return rule{}, fmt.Errorf("%q needs a name: %s", ru.kind, want)
		}
	default:
		return rule{}, fmt.Errorf("unknown selector %.40q: %s", f[1], want)
	}
	ru.value = f[2]
	if ru.kind == selIdentity {
		if !identityRE.MatchString(ru.value) {
			return rule{}, fmt.Errorf("identity %.40q must be 1-128 letters, digits or ._@+:/- (as s2uc info shows it)", ru.value)
		}
		return ru, nil
	}
	if !validName(ru.value) {
		return rule{}, fmt.Errorf("%s %.40q must be 1-%d bytes of printable UTF-8", ru.kind, ru.value, maxRuleValue)
	}
	return ru, nil
}

// validName reports whether s is a usable group or scope name: printable
// UTF-8 without spaces, at most maxRuleValue bytes.
func validName(s string) bool {
	if s == "" || len(s) > maxRuleValue || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) || unicode.IsSpace(r) {
			return false
		}
	}
	return true
}

// LoadPolicy reads a roles file from disk, under the rule of every file
// that decides whom the gateway trusts (internal/trustfile): whoever can
// change it can make themselves an operator.
func LoadPolicy(path string) (*Policy, error) {
	b, err := trustfile.ReadFile("roles file", path)
	if err != nil {
		return nil, err
	}
	p, err := ParsePolicy(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// Len returns the number of rules.
func (p *Policy) Len() int { return len(p.rules) }

// RolesOf returns the roles pr holds under p, in Roles order. A nil
// Policy gives DefaultRoles.
func (p *Policy) RolesOf(pr *Principal) []Role {
	if p == nil {
		return DefaultRoles()
	}
	var out []Role
	for _, role := range Roles() {
		for _, ru := range p.rules {
			if ru.role == role && ru.matches(pr) {
				out = append(out, role)
				break
			}
		}
	}
	return out
}

func (ru rule) matches(pr *Principal) bool {
	switch ru.kind {
	case selAny:
		return true
	case selIdentity:
		return pr.Identity == ru.value
	case selGroup:
		return slices.Contains(pr.Groups, ru.value)
	case selScope:
		return slices.Contains(pr.Scopes, ru.value)
	}
	return false
}

// ValidIdentity reports whether id is a usable identity: 1-128 letters,
// digits or ._@+:/-, starting with a letter or digit, as the token file
// and the roles file require.
func ValidIdentity(id string) bool { return identityRE.MatchString(id) }
