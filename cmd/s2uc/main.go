// Command s2uc is the SciStream user client: it asks the control servers
// (s2cs) of two gateways to wire a stream between a producer and a
// consumer, and lists, watches and releases streams.
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
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "s2uc:", oneLine(err))
		}
		os.Exit(1)
	}
}

// command is one s2uc subcommand.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var commands = map[string]command{
	"inbound-request":  {"open the inbound side (gateway in front of the listening application)", runInbound},
	"outbound-request": {"open the outbound side and connect it to the inbound side", runOutbound},
	"stream":           {"open both sides in one go (for a third party reaching both gateways)", runStream},
	"release":          {"release a stream on its gateway(s)", runRelease},
	"list":             {"list your streams on a gateway", runList},
	"status":           {"show one stream's state, connections, bytes and rates", runStatus},
	"info":             {"show what a gateway offers (engines, WAN transports, port range)", runInfo},
	"hash-token":       {"print the token-file line for a token read from stdin", runHashToken},
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return errors.New("no command given; see the list above")
		}
		return nil
	}
	c, ok := commands[args[0]]
	if !ok {
		// Accept the snake_case spelling too (inbound_request).
		c, ok = commands[strings.ReplaceAll(args[0], "_", "-")]
	}
	if !ok {
		return fmt.Errorf("unknown command %q; run s2uc --help for the list", args[0])
	}
	return c.run(ctx, args[1:], stdout, stderr)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: s2uc COMMAND [flags]   (s2uc COMMAND --help for its flags)")
	fmt.Fprintln(w)
	var names []string
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-17s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nThe bearer token comes from SCISTREAM_TOKEN or --token_file.")
}

// oneLine flattens an error (errors.Join uses newlines) to one line.
func oneLine(err error) string {
	return strings.ReplaceAll(strings.TrimSpace(err.Error()), "\n", "; ")
}
