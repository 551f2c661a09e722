package cfgfile

import (
	"flag"
	"fmt"
	"io"
	"reflect"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Write writes the flag set's current values as a configuration file
// that Apply reads back to the same values: every key, in order, each
// under its flag's usage as a comment, after header (comment lines,
// without their "# "). Flags that look like secrets (Secret) are named
// in a comment, never written with their value.
func (s Schema) Write(w io.Writer, header string) error {
	keys, flags := s.Keys()
	root := &yaml.Node{Kind: yaml.MappingNode}
	for _, k := range keys {
		f := flags[k]
		kn := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: k, HeadComment: wrap(f.Usage, 76)}
		root.Content = append(root.Content, kn, valueNode(f))
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

// wrap breaks text into lines of at most width bytes at spaces.
func wrap(text string, width int) string {
	var b strings.Builder
	n := 0
	for _, w := range strings.Fields(text) {
		switch {
		case n == 0:
		case n+1+len(w) > width:
			b.WriteByte('\n')
			n = 0
		default:
			b.WriteByte(' ')
			n++
		}
		b.WriteString(w)
		n += len(w)
	}
	return b.String()
}
