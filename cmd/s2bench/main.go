// Command s2bench measures what the SciStream gateways cost: it starts a
// local pair of real s2cs gateways, wires a stream through them, and runs
// the same verified workload directly and through the gateways.
//
//	s2bench compare [--bytes 1GiB] [--size 64KiB] [--reps 3] [--engine splice|buffer] [--wan tls|tcp] [--json FILE]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "s2bench:", oneLine(err))
		var ue usageError
		if errors.As(err, &ue) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// usageError is a wrong command line (exit status 2).
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

func usagef(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// command is one s2bench subcommand.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var commands = map[string]command{
	"compare": {"run the same verified workload directly and through a local gateway pair", runCompare},
	"testbed": {"two facilities in network namespaces with an emulated WAN: up, run, down (root)", runTestbed},
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return usagef("no command given; see the list above")
		}
		return nil
	}
	c, ok := commands[args[0]]
	if !ok {
		return usagef("unknown command %q; run s2bench --help for the list", args[0])
	}
	return c.run(ctx, args[1:], stdout, stderr)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: s2bench COMMAND [flags]   (s2bench COMMAND --help for its flags)")
	fmt.Fprintln(w)
	var names []string
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-9s %s\n", n, commands[n].summary)
	}
}

// oneLine folds a multi-line error (errors.Join) into one line.
func oneLine(err error) string {
	return strings.ReplaceAll(err.Error(), "\n", "; ")
}
