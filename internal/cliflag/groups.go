package cliflag

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// A daemon with dozens of flags lists them by concern, not by name: an
// operator looking for what governs TLS or quotas reads one group. The
// groups are a list the command keeps beside its flag set; the same
// list orders --help (PrintGroups) and the sections of its
// configuration file (cfgfile.Schema.Groups), and CheckGroups, in the
// command's tests, keeps it complete as flags are added.

// Group is a titled set of flags.
type Group struct {
	// Title heads the group in --help and in the configuration file,
	// e.g. "Identity and access".
	Title string
	// Flags are the canonical names (not the aliases AddAliases adds),
	// in the order they are listed.
	Flags []string
}

// OtherTitle heads the flags that are in no group: Arrange lists them
// last rather than leave them out.
const OtherTitle = "Other flags"

// isAlias reports whether f is the twin spelling AddAliases registered.
func isAlias(f *flag.Flag) bool {
	return strings.HasPrefix(f.Usage, "alias of --")
}

// CheckGroups returns an error naming every flag of fs (aliases aside)
// that is in no group or in more than one, every name in groups that is
// not a flag of fs or is an alias, and every group without a title or
// without flags. A command's test calls it, so that a flag added
// later lands in a group.
func CheckGroups(fs *flag.FlagSet, groups []Group) error {
	var errs []error
	in := map[string][]string{}
	for _, g := range groups {
		if g.Title == "" {
			errs = append(errs, fmt.Errorf("a group without a title holds %v", g.Flags))
		}
		if len(g.Flags) == 0 {
			errs = append(errs, fmt.Errorf("group %q holds no flag", g.Title))
		}
		for _, name := range g.Flags {
			switch f := fs.Lookup(name); {
			case f == nil:
				errs = append(errs, fmt.Errorf("group %q names --%s, which is no flag", g.Title, name))
			case isAlias(f):
				errs = append(errs, fmt.Errorf("group %q names --%s, an alias: name the flag (%s)", g.Title, name, strings.TrimPrefix(f.Usage, "alias of ")))
			}
			in[name] = append(in[name], g.Title)
		}
	}
	fs.VisitAll(func(f *flag.Flag) {
		if isAlias(f) {
			return
		}
		switch titles := in[f.Name]; {
		case len(titles) == 0:
			errs = append(errs, fmt.Errorf("--%s is in no group: add it to the group of its concern", f.Name))
		case len(titles) > 1:
			errs = append(errs, fmt.Errorf("--%s is in %d groups (%s): keep it in one", f.Name, len(titles), strings.Join(titles, ", ")))
		}
	})
	return errors.Join(errs...)
}

// Arrange returns the flags of fs by group: each group's flags of fs
// in the group's order (a name that is no flag, or an alias, is
// skipped, as is a flag already listed in an earlier group), then
// under OtherTitle, by name, the flags that are in no group. Groups
// left empty are dropped. With no groups at all, every flag is under
// OtherTitle.
func Arrange(fs *flag.FlagSet, groups []Group) []Group {
	listed := map[string]bool{}
	var out []Group
	for _, g := range groups {
		var names []string
		for _, name := range g.Flags {
			if f := fs.Lookup(name); f != nil && !isAlias(f) && !listed[name] {
				names = append(names, name)
				listed[name] = true
			}
		}
		if len(names) > 0 {
			out = append(out, Group{Title: g.Title, Flags: names})
		}
	}
	var other []string
	fs.VisitAll(func(f *flag.Flag) {
		if !isAlias(f) && !listed[f.Name] {
			other = append(other, f.Name)
		}
	})
	if len(other) > 0 {
		out = append(out, Group{Title: OtherTitle, Flags: other})
	}
	return out
}

// helpWidth is the width --help's text is wrapped to, indent included.
const helpWidth = 80

// PrintGroups writes the flags of fs to w by group (Arrange): each
// group's title, then each flag, "--name type" on a line and its usage
// below it, indented and wrapped at 80 columns, with its default.
// Aliases are not listed. The default is printed as the flag would
// take it, a string quoted only if it must be (has a space, is empty),
// a duration in its short form (10m, not 10m0s); a default that is its
// type's zero value (0, 0s, "", false) is not printed: it means "unset",
// and the usage says what that does.
func PrintGroups(w io.Writer, fs *flag.FlagSet, groups []Group) {
	for i, g := range Arrange(fs, groups) {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%s:\n", g.Title)
		for _, name := range g.Flags {
			writeEntry(w, fs.Lookup(name))
		}
	}
}

// writeEntry writes one flag as PrintGroups lists it.
func writeEntry(w io.Writer, f *flag.Flag) {
	typ, usage := flag.UnquoteUsage(f)
	head := "  --" + f.Name
	if typ != "" {
		head += " " + typ
	}
	if d, ok := DefaultText(f); ok {
		// One word to wrap, so that "(default" and its value stay
		// on one line.
		usage += " (default\x00" + d + ")"
	}
	const indent = "        "
	fmt.Fprintln(w, head)
	for _, para := range strings.Split(usage, "\n") {
		text := strings.ReplaceAll(Wrap(para, helpWidth-len(indent)), "\n", "\n"+indent)
		fmt.Fprintln(w, indent+strings.ReplaceAll(text, "\x00", " "))
	}
}

// DefaultText is f's default as PrintGroups prints it, and false if it
// prints none: the default is its type's zero value.
func DefaultText(f *flag.Flag) (string, bool) {
	if zero(f) {
		return "", false
	}
	var v any = f.Value
	if g, ok := f.Value.(flag.Getter); ok {
		v = g.Get()
	}
	switch v.(type) {
	case time.Duration:
		if d, err := time.ParseDuration(f.DefValue); err == nil {
			return shortDuration(d), true
		}
	case string:
		if f.DefValue == "" || strings.ContainsFunc(f.DefValue, func(r rune) bool { return r <= ' ' || r == '"' || r == 0x7f || !strconv.IsPrint(r) }) {
			return strconv.Quote(f.DefValue), true
		}
	}
	return f.DefValue, true
}

// zero reports whether f's default is the zero value of its type, as
// the flag package tells it (a new Value of the type, printed).
func zero(f *flag.Flag) (z bool) {
	t := reflect.TypeOf(f.Value)
	var v reflect.Value
	if t.Kind() == reflect.Pointer {
		v = reflect.New(t.Elem())
	} else {
		v = reflect.Zero(t)
	}
	// A Value type of a command's own may not print its zero value
	// (a nil map inside): then the default is printed.
	defer func() {
		if recover() != nil {
			z = false
		}
	}()
	fv, ok := v.Interface().(flag.Value)
	return ok && fv.String() == f.DefValue
}

// shortDuration writes d as time.Duration.String does, without the
// zero minutes and seconds it ends with: 10m, 24h, 1h30m, 1m30s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// Wrap breaks text into lines of at most width bytes at spaces (a
// longer word stands alone on its line): the usage printers' and the
// configuration file's comments.
func Wrap(text string, width int) string {
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
