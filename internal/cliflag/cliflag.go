// Package cliflag holds the small conventions shared by the SciStream
// command-line tools: every multi-word flag answers to both its snake_case
// spelling (as in the reference documents' runbooks) and its kebab-case
// twin, and usage errors are one line that names the fix.
package cliflag

import (
	"flag"
	"fmt"
	"strings"
)

// AddAliases registers, for every flag of fs whose name contains '_' or
// '-', the twin spelling with the other separator, sharing the same value.
// Call it after all flags are defined.
func AddAliases(fs *flag.FlagSet) {
	var twins []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) { twins = append(twins, f) })
	for _, f := range twins {
		var twin string
		switch {
		case strings.Contains(f.Name, "_"):
			twin = strings.ReplaceAll(f.Name, "_", "-")
		case strings.Contains(f.Name, "-"):
			twin = strings.ReplaceAll(f.Name, "-", "_")
		default:
			continue
		}
		if fs.Lookup(twin) == nil {
			fs.Var(f.Value, twin, "alias of --"+f.Name)
		}
	}
}

// PrintDefaults writes usage without the alias entries.
func PrintDefaults(fs *flag.FlagSet) {
	out := fs.Output()
	fs.VisitAll(func(f *flag.Flag) {
		if strings.HasPrefix(f.Usage, "alias of --") {
			return
		}
		name, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if name != "" {
			line += " " + name
		}
		fmt.Fprintf(out, "%s\n    \t%s", line, strings.ReplaceAll(usage, "\n", "\n    \t"))
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "[]" {
			fmt.Fprintf(out, " (default %q)", f.DefValue)
		}
		fmt.Fprintln(out)
	})
}

// Seen reports which flags were set on the command line, by canonical
// (first-defined) name; aliases count for their twin.
func Seen(fs *flag.FlagSet) map[string]bool {
	seen := map[string]bool{}
	fs.Visit(func(f *flag.Flag) {
		if strings.HasPrefix(f.Usage, "alias of --") {
			seen[strings.TrimPrefix(f.Usage, "alias of --")] = true
			return
		}
		seen[f.Name] = true
	})
	return seen
}
