package cfgfile

import (
	"flag"
	"fmt"
	"io"
	"reflect"
	"strings"

	"go.yaml.in/yaml/v3"

	"scistream/internal/cliflag"
)

// Write writes the flag set's current values as a configuration file
// that Apply reads back to the same values: every key, each under its
// flag's usage as a comment, after header (comment lines, without
// their "# "); with Groups, the keys by group, each group under its
// title. Flags that look like secrets (Secret) are named in a comment,
// never written with their value.
func (s Schema) Write(w io.Writer, header string) error {
	root := &yaml.Node{Kind: yaml.MappingNode}
	for j, g := range s.sections() {
		for i, k := range g.keys {
			f := g.flags[i]
			comment := cliflag.Wrap(f.Usage, 76)
			if i == 0 && g.title != "" {
				// yaml.v3 writes the blank lines: the title stands
				// apart from the group before it (the header stands
				// apart from the first on its own) and from the
				// first key's usage.
				comment = cliflag.Wrap(g.title, 76) + "\n\n" + comment
				if j > 0 {
					comment = "\n" + comment
				}
			}
			kn := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: k, HeadComment: comment}
			root.Content = append(root.Content, kn, valueNode(f))
		}
	}
	var withheld []string
	s.FlagSet.VisitAll(func(f *flag.Flag) {
		if !alias(f) && Secret(f.Name) {
			withheld = append(withheld, "--"+f.Name)
		}
	})
	if len(withheld) > 0 {
		root.FootComment = "not written, as secrets never are: " + strings.Join(withheld, ", ")
	}
	doc := &yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{root}, HeadComment: header}
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return fmt.Errorf("write configuration: %w", err)
	}
	return enc.Close()
}

// section is a run of keys Write writes under one title.
type section struct {
	title string // empty without Groups
	keys  []string
	flags []*flag.Flag // of keys, in order
}

// sections are the keys by Groups (cliflag.Arrange: then those in no
// group), or all of them, by name, under no title if there are no
// Groups. Groups that end up with no key (--config, --version) are
// left out.
func (s Schema) sections() []section {
	keys, flags := s.Keys()
	if s.Groups == nil {
		sec := section{keys: keys}
		for _, k := range keys {
			sec.flags = append(sec.flags, flags[k])
		}
		return []section{sec}
	}
	var out []section
	for _, g := range cliflag.Arrange(s.FlagSet, s.Groups) {
		sec := section{title: g.Title}
		for _, name := range g.Flags {
			if f := flags[KeyName(name)]; f != nil && f.Name == name {
				sec.keys = append(sec.keys, KeyName(name))
				sec.flags = append(sec.flags, f)
			}
		}
		if len(sec.keys) > 0 {
			out = append(out, sec)
		}
	}
	return out
}

// valueNode is the YAML spelling of f's current value, tagged so that
// Apply's kind check accepts it and Set reads it back unchanged.
func valueNode(f *flag.Flag) *yaml.Node {
	scalar := func(tag, v string) *yaml.Node {
		n := &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: v}
		if strings.ContainsFunc(v, func(r rune) bool { return r < ' ' || r == 0x7f }) {
			// A control character (a newline, a tab) in the literal
			// style yaml.v3 picks for it can make a file YAML refuses
			// (a tab where an indentation space is expected): double
			// quotes escape every one of them.
			n.Style = yaml.DoubleQuotedStyle
		}
		return n
	}
	switch kindOf(f) {
	case kindBool:
		return scalar("!!bool", f.Value.String())
	case kindInt:
		return scalar("!!int", f.Value.String())
	case kindFloat:
		return scalar("!!float", f.Value.String())
	case kindList:
		seq := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
		for _, item := range items(f.Value) {
			seq.Content = append(seq.Content, scalar("!!str", item))
		}
		return seq
	}
	return scalar("!!str", f.Value.String())
}

// items are the values a repeated flag holds, each as its Set took it.
func items(v flag.Value) []string {
	var x any = v
	if g, ok := v.(flag.Getter); ok {
		x = g.Get()
	}
	rv := reflect.ValueOf(x)
	for rv.Kind() == reflect.Pointer && !rv.IsNil() {
		rv = rv.Elem()
	}
	if rv.Kind() != reflect.Slice {
		return nil
	}
	out := make([]string, rv.Len())
	for i := range out {
		out[i] = fmt.Sprint(rv.Index(i).Interface())
	}
	return out
}
