package cliflag

import (
	"errors"
	"flag"
	"fmt"
	"strings"
)

// Nearest returns the name among names closest to name by edit
// distance, if it is close enough to be a typo of it ("listner_ip" for
// "listener_ip"), else "".
func Nearest(name string, names []string) string {
	best, bestD := "", len(name)/3+2
	for _, n := range names {
		if d := distance(name, n); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

// distance is the Levenshtein distance between a and b (bytes).
func distance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return max(len(a), len(b)) // too long to be a typo of a name
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// Names returns the canonical names of fs's flags (the aliases
// AddAliases registered left out), in the flag package's order (by
// name).
func Names(fs *flag.FlagSet) []string {
	var names []string
	fs.VisitAll(func(f *flag.Flag) {
		if !isAlias(f) {
			names = append(names, f.Name)
		}
	})
	return names
}

// ErrUnknownFlag is matched (errors.Is) by the error ParseError makes
// of a flag the command does not have.
var ErrUnknownFlag = errors.New("unknown flag")

// unknownFlag is a flag fs does not have, with the nearest it has.
type unknownFlag struct {
	name, nearest, help string
}

func (e *unknownFlag) Error() string {
	s := "unknown flag --" + e.name
	if e.nearest != "" {
		s += ": did you mean --" + e.nearest + "?"
	}
	return s + " (" + e.help + " lists the flags)"
}

func (e *unknownFlag) Is(target error) bool { return target == ErrUnknownFlag }

// ParseError turns an error of fs.Parse into one line that names the
// fault and where the flags are listed (help, e.g. "s2cs --help"): a
// flag fs does not have is "unknown flag --listner_ip: did you mean
// --listener_ip? (s2cs --help lists the flags)", the nearest flag
// (snake_case or kebab-case alike) suggested when there is one close
// enough; any other error (a value the flag refuses) keeps the flag
// package's message. flag.ErrHelp and nil pass unchanged. Give fs an
// Output of io.Discard, so that the flag package's own message and
// usage dump are not printed too.
func ParseError(fs *flag.FlagSet, err error, help string) error {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return err
	}
	if name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -"); ok {
		// The flag package echoes the name with one dash whatever was typed.
		e := &unknownFlag{name: name, help: help}
		key := strings.ReplaceAll(strings.ToLower(name), "-", "_")
		var canon []string
		byKey := map[string]string{}
		for _, n := range Names(fs) {
			k := strings.ReplaceAll(n, "-", "_")
			canon = append(canon, k)
			byKey[k] = n
		}
		if near := Nearest(key, canon); near != "" {
			e.nearest = byKey[near]
		}
		return e
	}
	return fmt.Errorf("%w (%s lists the flags)", err, help)
}
