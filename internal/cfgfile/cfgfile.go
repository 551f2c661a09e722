// Package cfgfile reads a daemon's YAML configuration file into its
// flag set, and writes a flag set back as such a file.
//
// The keys are not a second list kept beside the flags: every flag of
// the set is a key, named by its snake_case spelling (--port_range is
// port_range), so a flag added later is settable from the file without
// anyone remembering to. The file is one flat YAML mapping:
//
//	listener_ip: 10.0.0.3
//	port_range: 5100-5199
//	insecure_tcp_wan: false
//	pending_timeout: 5m
//	allow: [10.0.0.0/8, 192.168.1.0/24]   # a repeated flag: one Set per item
//
// Decoding is strict: an unknown key (with the nearest known one
// suggested), a key given twice, a value of the wrong kind (a list for a
// single-valued flag, a string for a bool, a number for a string) and a
// value the flag refuses are errors naming the file, the line and the
// key. Values go through the flag's own Set, so the file accepts
// exactly what the command line accepts, and the daemon's one validator
// sees both the same way.
//
// Secrets never stand in the file: a flag whose name ends in a secret's
// word (_secret, _token, _password...) has no key and is never written
// (see Secret); secrets live in files of their own, named by a flag
// (--tokens, --server_key), whose paths are ordinary settings.
package cfgfile

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"scistream/internal/cliflag"
)

// MaxBytes is the largest configuration file Apply reads: a real one is a
// few KiB.
const MaxBytes = 1 << 20

// Schema is the set of keys of a configuration file: one per flag of
// FlagSet.
type Schema struct {
	// FlagSet holds the flags. Aliases (flags whose usage is "alias of
	// --NAME", as cliflag.AddAliases registers them) have no key of
	// their own.
	FlagSet *flag.FlagSet
	// Actions are flags that do something rather than configure
	// something (the flag naming the file itself, --print_config,
	// --version): they have no key, and a key of that name is refused.
	Actions []string
	// Groups, if any, are the sections Write writes the keys in, each
	// under its title as a comment, in the order of the groups and of
	// their flags (as --help lists them, cliflag.PrintGroups); keys in
	// no group come last, under cliflag.OtherTitle. If nil, Write writes
	// the keys in one section, by name. Reading ignores them: the file
	// is one flat mapping whatever its sections.
	Groups []cliflag.Group
}

// Error is a problem with one key of a configuration file.
type Error struct {
	File string // as given to Apply
	Line int    // 1-based; 0 if the problem is the whole file
	Key  string // empty if the problem is not one key's
	Msg  string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Key != "" {
		b.WriteString(e.Key + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// KeyName is the key of the flag called name: its snake_case spelling.
func KeyName(name string) string {
	return strings.ReplaceAll(name, "-", "_")
}

// secretWords end the names of flags that would carry a secret itself
// rather than the path of a file holding it.
var secretWords = []string{"secret", "password", "passwd", "passphrase", "token", "apikey", "credential", "credentials"}

// Secret reports whether a flag called name looks like it carries a
// secret inline: its last word (split at '_' or '-') is secret, token,
// password or the like. Such a flag has no key: a configuration file
// sits under configuration management and in backups, and Write's
// output is pasted into tickets. --tokens (a file) and
// --client_secret_file are not secrets by this rule; --client_secret is.
func Secret(name string) bool {
	words := strings.FieldsFunc(strings.ToLower(name), func(r rune) bool { return r == '_' || r == '-' })
	return len(words) > 0 && slices.Contains(secretWords, words[len(words)-1])
}

// alias reports whether f is another spelling of a flag
// (cliflag.AddAliases).
func alias(f *flag.Flag) bool {
	return strings.HasPrefix(f.Usage, "alias of --")
}

// Keys returns the flags that have a key, by key, in the flag set's
// order (sorted by name).
func (s Schema) Keys() ([]string, map[string]*flag.Flag) {
	var keys []string
	flags := map[string]*flag.Flag{}
	s.FlagSet.VisitAll(func(f *flag.Flag) {
		if alias(f) || slices.Contains(s.Actions, f.Name) || Secret(f.Name) {
			return
		}
		k := KeyName(f.Name)
		if _, dup := flags[k]; dup {
			return
		}
		keys = append(keys, k)
		flags[k] = f
	})
	return keys, flags
}

// kind is how a flag's value is spelled in YAML.
type kind int

const (
	kindString   kind = iota // any scalar but a bool, its text as written
	kindBool                 // true or false
	kindInt                  // a whole number
	kindFloat                // a number
	kindDuration             // a string such as 30s
	kindList                 // a repeated flag: a sequence, one Set per item
)

// kindOf tells a flag's kind from its value's Get (flag.Getter, which
// every flag of package flag implements); a Value whose Get returns a
// slice, or whose type is a slice, is a repeated flag.
func kindOf(f *flag.Flag) kind {
	var v any = f.Value
	if g, ok := f.Value.(flag.Getter); ok {
		v = g.Get()
	}
	switch v.(type) {
	case bool:
		return kindBool
	case int, int64, uint, uint64:
		return kindInt
	case float64:
		return kindFloat
	case time.Duration:
		return kindDuration
	}
	t := reflect.TypeOf(v)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t != nil && t.Kind() == reflect.Slice {
		return kindList
	}
	return kindString
}

// Apply reads data, the configuration file called name, into the flag
// set: each key's value goes through its flag's Set. Keys whose flag is
// in keep (the flags given on the command line, which override the
// file) are checked for their kind but not set. It returns the names of
// the flags it set. Apply stops at the first problem and returns it as
// an *Error; flags set before it stay set.
func (s Schema) Apply(name string, data []byte, keep map[string]bool) (set []string, err error) {
	fail := func(line int, key, format string, args ...any) ([]string, error) {
		return set, &Error{File: name, Line: line, Key: key, Msg: fmt.Sprintf(format, args...)}
	}
	if len(data) > MaxBytes {
		return fail(0, "", "larger than %d bytes: is this the configuration file?", MaxBytes)
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil // empty: every setting from defaults and flags
		}
		return fail(0, "", "not YAML: %s", strings.TrimPrefix(err.Error(), "yaml: "))
	}
	var more yaml.Node
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
		return fail(more.Line, "", "a second YAML document (or garbage after the first): keep one mapping of keys to values")
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	switch {
	case root.Kind == yaml.ScalarNode && root.Tag == "!!null":
		return nil, nil // only comments
	case root.Kind != yaml.MappingNode:
		return fail(root.Line, "", "the file must be a mapping of keys to values (key: value per line), not a %s", kindName(root))
	}
	keys, flags := s.Keys()
	seen := map[string]int{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		kn, vn := root.Content[i], root.Content[i+1]
		if kn.Kind != yaml.ScalarNode || kn.Tag == "!!merge" || kn.Tag == "!!null" {
			return fail(kn.Line, "", "a key must be a plain name such as listener_ip")
		}
		key := kn.Value
		if first, dup := seen[key]; dup {
			return fail(kn.Line, key, "given twice (first on line %d): keep one", first)
		}
		seen[key] = kn.Line
		f := flags[key]
		if f == nil {
			return fail(kn.Line, key, "%s", s.unknown(key, keys))
		}
		vals, err := values(vn, kindOf(f))
		if err != nil {
			return fail(vn.Line, key, "%v", err)
		}
		if keep[f.Name] {
			continue
		}
		for _, v := range vals {
			if err := f.Value.Set(v.Value); err != nil {
				return fail(v.Line, key, "invalid value %.80q: %v", v.Value, err)
			}
		}
		set = append(set, f.Name)
	}
	return set, nil
}

// unknown says why key is not a key of the schema, and what is.
func (s Schema) unknown(key string, keys []string) string {
	k := KeyName(key)
	switch {
	case slices.Contains(s.Actions, key) || slices.Contains(s.Actions, k):
		return "not a setting but an action of the command line (--" + k + ")"
	case Secret(key):
		return "a secret never stands in the configuration file: put it in a file of its own (mode 0600) and give that file's path with the flag that takes it"
	case k != key && slices.Contains(keys, k):
		return fmt.Sprintf("unknown key; keys are spelled in snake_case: %s", k)
	}
	help := s.FlagSet.Name() + " --help"
	if near := cliflag.Nearest(key, keys); near != "" {
		return fmt.Sprintf("unknown key; did you mean %s? (%s lists every flag; each is a key)", near, help)
	}
	return fmt.Sprintf("unknown key (%s lists every flag; each flag is a key, spelled in snake_case)", help)
}

// values returns the scalars of a value node of a flag of kind k, having
// checked that they are what such a flag takes.
func values(n *yaml.Node, k kind) ([]*yaml.Node, error) {
	if n.Kind == yaml.AliasNode || n.Anchor != "" {
		return nil, errors.New("anchors and aliases (&x, *x) are not supported: write the value out")
	}
	if n.Kind == yaml.SequenceNode {
		if k != kindList {
			return nil, errors.New("a list, but this setting takes one value")
		}
		for _, item := range n.Content {
			if item.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("line %d: a list item must be a single value, not a %s", item.Line, kindName(item))
			}
			if err := checkScalar(item, kindString); err != nil {
				return nil, fmt.Errorf("line %d: %w", item.Line, err)
			}
		}
		return n.Content, nil
	}
	if n.Kind != yaml.ScalarNode {
		return nil, fmt.Errorf("a %s, but this setting takes a single value", kindName(n))
	}
	if k == kindList {
		k = kindString // one item
	}
	if err := checkScalar(n, k); err != nil {
		return nil, err
	}
	return []*yaml.Node{n}, nil
}

// checkScalar checks that the scalar n is spelled as a flag of kind k
// takes it: the tag YAML resolved (or the one written, !!str) must fit.
func checkScalar(n *yaml.Node, k kind) error {
	tag := n.Tag
	if tag == "!!null" {
		return errors.New("no value: give one, or remove the key to keep the default")
	}
	switch k {
	case kindBool:
		if tag != "!!bool" {
			return fmt.Errorf("%.80q: want true or false", n.Value)
		}
	case kindInt:
		if tag != "!!int" {
			return fmt.Errorf("%.80q: want a whole number", n.Value)
		}
	case kindFloat:
		if tag != "!!int" && tag != "!!float" {
			return fmt.Errorf("%.80q: want a number", n.Value)
		}
	case kindDuration:
		// 0 is the one duration without a unit (as on the command line).
		if tag != "!!str" && (tag != "!!int" || n.Value != "0") {
			return fmt.Errorf("%.80q: want a duration with its unit, such as 30s, 5m or 1h", n.Value)
		}
	default:
		switch tag {
		case "!!str", "!!int", "!!float":
		case "!!bool":
			return fmt.Errorf("%s: want a string; quote it (%q) if that is the value", n.Value, n.Value)
		default:
			return fmt.Errorf("%.80q (YAML type %s): want a string", n.Value, tag)
		}
	}
	return nil
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	case yaml.AliasNode:
		return "alias"
	}
	return "single value"
}
