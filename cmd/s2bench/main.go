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
//	s2bench conns     [--conns 1000] [--wan tls|tcp|quic] ...       many connections at once: accept rate, memory per connection
//	s2bench pool      [--experiments warm,hotset,stealing] [--preset longwan]  pooled WAN legs: warm against cold, LRU against LRU-M
//	s2bench flood     [--conns 20000] [--wan tls|tcp]               a stream's goodput and the inbound gateway's memory under a flood
//	s2bench facility  [--experiments goodput,takeover,control]      a facility of several nodes on etcd: goodput, takeover time, control latency
//	s2bench naiveproxy --role in|out --wan tcp|tls|quic ...          one side of compare --baseline's naive proxy pair
//
// Each command here parses its flags into its experiment's Config and
// runs it: the experiments are packages of internal/exp (compare,
// roles, testbed, naive, flood, conns, pool, rate, facility), which
// print through the writers they are given.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"scistream/internal/cliflag"
	"scistream/internal/exp/conns"
	"scistream/internal/exp/localpair"
	"scistream/internal/exp/workload"
	"scistream/internal/subcmd"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	subcmd.Report(os.Stderr, "s2bench", err)
	os.Exit(exitCode(err))
}

// exitCode is s2bench's exit status for what run returned: 0 on success
// and when help was asked for, 2 for a wrong command line, 1 for any
// other error.
func exitCode(err error) int {
	var ue usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue), errors.Is(err, subcmd.ErrUsage):
		return 2
	}
	return 1
}

// usageError is a wrong command line (exit status 2).
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

func usagef(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// tool is s2bench's command table.
func tool() *subcmd.Tool {
	return &subcmd.Tool{
		Name: "s2bench",
		Commands: []subcmd.Command{
			{Name: "compare", Summary: "run the same verified workload directly and through a local gateway pair", Run: runCompare},
			{Name: "consumer", Summary: "receive and verify runs from s2bench producers (one process per host)", Run: runConsumer},
			{Name: "producer", Summary: "send a verified workload to an s2bench consumer, directly or through gateways", Run: runProducer},
			{Name: "run", Summary: "drive an experiment across hosts: direct and through remote gateways to an s2bench consumer", Run: runDriver},
			{Name: "testbed", Summary: "two facilities in network namespaces with an emulated WAN: up, run, down (root)", Run: runTestbed},
			{Name: "flood", Summary: "a stream's goodput and the inbound gateway's memory under a flood of stranger connections", Run: runFlood},
			{Name: "conns", Summary: "thousands of connections at once through a local gateway pair: accept rate, memory per connection, goodput", Run: runConns},
			{Name: "pool", Summary: "pooled WAN legs: first byte with a warm pool against without, LRU against LRU-M on seed 002's access patterns", Run: runPool},
			{Name: "rate", Summary: "rates granted to streams and kept to: goodput against the grant, and a reserved stream beside best-effort ones", Run: runRate},
			{Name: "facility", Summary: "a facility of several s2cs nodes on etcd: goodput over 1, 2, 3 nodes, takeover time after a SIGKILL, control latency against bbolt", Run: runFacility},
			{Name: "naiveproxy", Summary: "one side of the naive baseline proxy pair that compare --baseline starts", Run: runNaiveProxy},
			{Name: "version", Summary: "print the version and the commit s2bench was built from (as --version)", Run: runVersion},
			{Name: "completion", Summary: "print the shell completion script: completion bash|zsh|fish", Run: runCompletion},
		},
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return flagged(tool().Run(ctx, args, stdout, stderr))
}

// flagged makes a usage error (exit status 2) of what an experiment
// refused because of a flag once it ran: a WAN transport or an engine
// the s2cs binary does not offer, a count of connections that does not
// fit the limit of open files.
func flagged(err error) error {
	var ue usageError
	if errors.As(err, &ue) {
		return err
	}
	if errors.As(err, new(*localpair.NotOfferedError)) || errors.As(err, new(*conns.FitError)) {
		return usageError{err}
	}
	return err
}

// parseFlags parses a subcommand's flags: both spellings of every flag
// (cliflag), usage text then the flags on --help, and no positional
// arguments.
//
// A flag the command lacks, or a value its flag refuses, is one line
// (cliflag.ParseError: the nearest flag and where --help lists them),
// not the flag package's message and the usage.
func parseFlags(fs *flag.FlagSet, args []string, usage string, stderr io.Writer) error {
	cliflag.AddAliases(fs)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, usage)
			fmt.Fprintln(stderr)
			fs.SetOutput(stderr)
			cliflag.PrintDefaults(fs)
			return err
		}
		return usageError{cliflag.ParseError(fs, err, "s2bench "+strings.TrimPrefix(fs.Name(), "s2bench ")+" --help")}
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q: every %s option is a --flag", fs.Arg(0), fs.Name())
	}
	return nil
}

// maxReps bounds --reps.
const maxReps = 100

// flagsSet returns the names of the flags given on the command line.
func flagsSet(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[strings.ReplaceAll(f.Name, "-", "_")] = true })
	return set
}

// checkOutPath checks that a file can be created at path.
func checkOutPath(flagName, path string) error {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return usagef("%s %s is a directory: give a file name", flagName, path)
	}
	if st, err := os.Stat(filepath.Dir(path)); err != nil || !st.IsDir() {
		return usagef("%s %s: directory %s does not exist; create it or choose another path", flagName, path, filepath.Dir(path))
	}
	return nil
}

// resolveWorkload resolves the workload flags for up to pairs pairs:
// its errors are wrong flags.
func resolveWorkload(wf *workload.Flags, pairs int) (*workload.Plan, error) {
	p, err := wf.Resolve(pairs)
	if err != nil {
		return nil, usageError{err}
	}
	return p, nil
}

// parsePairs parses --pairs.
func parsePairs(s string) ([]int, error) {
	n, err := workload.ParsePairs(s)
	if err != nil {
		return nil, usageError{err}
	}
	return n, nil
}

// runVersion prints the version line, as --version does.
func runVersion(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	if err := parseFlags(fs, args, "usage: s2bench version   (the same as s2bench --version)", stderr); err != nil {
		return err
	}
	return tool().Run(ctx, []string{"--version"}, stdout, stderr)
}

// runCompletion prints the completion script of a shell, its commands'
// flags read from the usage each prints on --help.
func runCompletion(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	usage := "usage: s2bench completion " + strings.Join(cliflag.Shells, "|") + "   (e.g. source <(s2bench completion bash))"
	switch {
	case len(args) == 1 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help"):
		fmt.Fprintln(stderr, usage)
		return flag.ErrHelp
	case len(args) != 1 || !cliflag.HasShell(args[0]):
		return usagef("give the shell: s2bench completion %s", strings.Join(cliflag.Shells, "|"))
	}
	return toolCompletion(ctx, tool(), cliflag.Completion{Program: "s2bench", Flags: []cliflag.CompletionFlag{{Name: "help"}, {Name: "version"}}}).Write(stdout, args[0])
}

// toolCompletion adds to c every command of t, with the flags its
// --help lists.
func toolCompletion(ctx context.Context, t *subcmd.Tool, c cliflag.Completion) cliflag.Completion {
	for _, cmd := range t.Commands {
		var usage strings.Builder
		cmd.Run(ctx, []string{"--help"}, io.Discard, &usage)
		c.Commands = append(c.Commands, cliflag.CompletionCommand{Name: cmd.Name, Summary: cmd.Summary, Flags: cliflag.FlagsOfUsage(usage.String())})
	}
	return c
}
