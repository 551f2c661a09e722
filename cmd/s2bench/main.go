// Package main is the s2bench command. It measures what the SciStream
// gateways cost a stream, the way the SciStream papers do (seeds 000 and
// 001): message-size sweeps,
// Dstream and Lstream workloads, rates, request-reply RTT and N pairs,
// every message verified (sequence, length, CRC-32C).
//
//	s2bench compare   [--workload sweep|dstream|lstream|SIZE] ...   direct vs a local gateway pair, one command
//	s2bench consumer  --listen ADDR [--runs N] [--json FILE]        the consumer role, as its own process
//	s2bench producer  --connect ADDR [--workload ...] [--json FILE] the producer role, as its own process
//	s2bench run       --direct ADDR --gateways ADDR [--workload ...] the driver across hosts (direct vs remote gateways)
//	s2bench testbed   up|run|down [--preset shortwan] [--workload ...] compare's experiment over an emulated WAN (root)
//	s2bench naiveproxy --role in|out --wan tcp|tls|quic ...          one side of compare --baseline's naive proxy pair
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"scistream/internal/cliflag"
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
	"compare":    {"run the same verified workload directly and through a local gateway pair", runCompare},
	"consumer":   {"receive and verify runs from s2bench producers (one process per host)", runConsumer},
	"producer":   {"send a verified workload to an s2bench consumer, directly or through gateways", runProducer},
	"run":        {"drive an experiment across hosts: direct and through remote gateways to an s2bench consumer", runDriver},
	"testbed":    {"two facilities in network namespaces with an emulated WAN: up, run, down (root)", runTestbed},
	"naiveproxy": {"one side of the naive baseline proxy pair that compare --baseline starts", runNaiveProxy},
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

// parseFlags parses a subcommand's flags: both spellings of every flag
// (cliflag), usage text then the flags on --help, and no positional
// arguments.
func parseFlags(fs *flag.FlagSet, args []string, usage string, stderr io.Writer) error {
	fs.SetOutput(stderr)
	cliflag.AddAliases(fs)
	fs.Usage = func() {
		fmt.Fprintln(stderr, usage)
		fmt.Fprintln(stderr)
		cliflag.PrintDefaults(fs)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q: every %s option is a --flag", fs.Arg(0), fs.Name())
	}
	return nil
}
