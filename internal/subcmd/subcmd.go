// Package subcmd runs a command-line tool made of subcommands, such as
// "s2uc list" or "s2bench compare": one table of names, one-line summaries
// and run functions, the dispatch, the usage listing, help and --version.
//
// Each subcommand owns its flag.FlagSet. On -h or --help it prints its
// usage and returns flag.ErrHelp, which a tool's main treats as success,
// as it treats help asked of the tool itself. Help that was asked for
// goes to stdout, to be paged or grepped, as --version does; the listing
// after a wrong command line goes to stderr with the error.
package subcmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"scistream/internal/cliflag"
	"scistream/internal/version"
)

// Func runs one subcommand with the arguments after its name.
type Func func(ctx context.Context, args []string, stdout, stderr io.Writer) error

// Command is one subcommand.
type Command struct {
	// Name is the kebab-case name ("inbound-request"); the snake_case
	// spelling ("inbound_request") is accepted too, as with flags.
	Name string
	// Summary is the one line the listing shows.
	Summary string
	Run     Func
	// ArgsFrom, if not empty, are the tool's arguments that print the
	// words completing the command's first argument
	// (cliflag.CompletionCommand.ArgsFrom).
	ArgsFrom []string
}

// Tool is a program made of subcommands.
type Tool struct {
	// Name is the program's name, as the user types it.
	Name string
	// Commands are listed in this order.
	Commands []Command
	// Footer, if not empty, follows the listing after a blank line.
	Footer string
}

// ErrUsage is matched (errors.Is) by the errors Run returns when the
// command line names no command or an unknown one; tools that give
// usage errors their own exit status test for it.
var ErrUsage = errors.New("usage error")

// usageError is a wrong command line, matched by ErrUsage.
type usageError string

func (e usageError) Error() string        { return string(e) }
func (e usageError) Is(target error) bool { return target == ErrUsage }

// Run dispatches args, the command line after the program's name:
//
//	(nothing)              the listing on stderr, and an ErrUsage error
//	-h, --help, help       the listing on stdout, nil
//	help COMMAND           COMMAND --help
//	--version, -version    the version line on stdout, nil
//	COMMAND [ARGS]         COMMAND's Run with ARGS
//
// Anything else is an ErrUsage error naming the command, and the
// nearest command when one is close enough to be what was meant
// ("stauts": did you mean status?), as cliflag.ParseError does for flags.
func (t *Tool) Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		t.Usage(stderr)
		return usageError("no command given; see the list above")
	}
	switch args[0] {
	case "-h", "--help", "-help", "help":
		if args[0] == "help" && len(args) > 1 {
			return t.Run(ctx, []string{args[1], "--help"}, stdout, stderr)
		}
		t.Usage(stdout)
		return nil
	case "--version", "-version":
		_, err := fmt.Fprintln(stdout, version.String(t.Name))
		return err
	}
	c, ok := t.lookup(args[0])
	if !ok {
		var names []string
		for _, c := range t.Commands {
			names = append(names, c.Name)
		}
		if near := cliflag.Nearest(strings.ReplaceAll(args[0], "_", "-"), names); near != "" {
			return usageError(fmt.Sprintf("unknown command %q: did you mean %s? (%s --help lists the commands)", args[0], near, t.Name))
		}
		return usageError(fmt.Sprintf("unknown command %q; run %s --help for the list", args[0], t.Name))
	}
	return c.Run(ctx, args[1:], stdout, stderr)
}

func (t *Tool) lookup(name string) (Command, bool) {
	for _, spelling := range []string{name, strings.ReplaceAll(name, "_", "-")} {
		for _, c := range t.Commands {
			if c.Name == spelling {
				return c, true
			}
		}
	}
	return Command{}, false
}

// Usage writes the tool's listing: how to call it, each command with
// its summary, then the footer.
func (t *Tool) Usage(w io.Writer) {
	fmt.Fprintf(w, "usage: %[1]s COMMAND [flags]   (%[1]s COMMAND --help for its flags, %[1]s --version for the version)\n\n", t.Name)
	width := 0
	for _, c := range t.Commands {
		width = max(width, len(c.Name))
	}
	for _, c := range t.Commands {
		fmt.Fprintf(w, "  %-*s %s\n", width+1, c.Name, c.Summary)
	}
	if t.Footer != "" {
		fmt.Fprintf(w, "\n%s\n", t.Footer)
	}
}

// OneLine flattens an error message to one line: the lines of a joined
// error (errors.Join) are separated by "; ".
func OneLine(err error) string {
	return strings.ReplaceAll(strings.TrimSpace(err.Error()), "\n", "; ")
}

// Report writes err to w as program's one-line message, "program:
// message", unless err is nil or flag.ErrHelp (the usage said it all).
func Report(w io.Writer, program string, err error) {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return
	}
	fmt.Fprintln(w, program+":", OneLine(err))
}

// Completion adds to c every command of t, with the flags its --help
// lists (cliflag.FlagsOfUsage: the commands build their flag sets as
// they run).
func (t *Tool) Completion(ctx context.Context, c cliflag.Completion) cliflag.Completion {
	for _, cmd := range t.Commands {
		var usage strings.Builder
		cmd.Run(ctx, []string{"--help"}, &usage, io.Discard)
		c.Commands = append(c.Commands, cliflag.CompletionCommand{Name: cmd.Name, Summary: cmd.Summary, Flags: cliflag.FlagsOfUsage(usage.String()), ArgsFrom: cmd.ArgsFrom})
	}
	return c
}
