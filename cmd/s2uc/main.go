// Package main is the s2uc command, the SciStream user client: it asks the
// control servers (s2cs) of two gateways to wire a stream between a
// producer and a consumer, and lists, watches and releases streams.
package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"

	"scistream/internal/subcmd"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	report(os.Stderr, os.Args[1:], err)
	os.Exit(exitCode(err))
}

// uidArgs are the arguments with which s2uc prints the UIDs the shell
// completes for the commands about one stream (runCompletion).
var uidArgs = []string{"completion", "uids"}

// tool is s2uc's command table, in the order of a stream's life.
func tool() *subcmd.Tool {
	return &subcmd.Tool{
		Name: "s2uc",
		Commands: []subcmd.Command{
			{Name: "inbound-request", Summary: "open the inbound side (gateway in front of the listening application)", Run: runInbound},
			{Name: "outbound-request", Summary: "open the outbound side and connect it to the inbound side", Run: runOutbound, ArgsFrom: uidArgs},
			{Name: "stream", Summary: "open both sides in one go (for a third party reaching both gateways)", Run: runStream},
			{Name: "update", Summary: "change a running stream's rate, allow-list or lease without dropping its connections", Run: runUpdate, ArgsFrom: uidArgs},
			{Name: "release", Summary: "release a stream on its gateway(s)", Run: runRelease, ArgsFrom: uidArgs},
			{Name: "list", Summary: "list your streams on a gateway", Run: runList},
			{Name: "status", Summary: "show one stream's state, connections, bytes and rates", Run: runStatus, ArgsFrom: uidArgs},
			{Name: "watch", Summary: "a live view of one or all of your streams on a gateway, with their rates (q quits)", Run: runWatch, ArgsFrom: uidArgs},
			{Name: "info", Summary: "show what a gateway offers (engines, WAN transports, port range)", Run: runInfo},
			{Name: "hash-token", Summary: "print the token-file line for a token read from stdin (on a terminal: typed, not shown)", Run: runHashToken},
			{Name: "login", Summary: "log in at the identity provider the gateways trust (device code in a browser)", Run: runLogin},
			{Name: "logout", Summary: "remove (and revoke) the token s2uc login stored", Run: runLogout},
			{Name: "version", Summary: "print the version and the commit s2uc was built from (as --version)", Run: runVersion},
			{Name: "completion", Summary: "print the shell completion script: completion bash|zsh|fish", Run: runCompletion},
		},
		Footer: "The bearer token comes from --token_file, else SCISTREAM_TOKEN, else the login of s2uc login.\n" +
			"Defaults for --s2cs, --server_cert, --token_file and --output come from the environment\n" +
			"(SCISTREAM_S2CS...) and the configuration file, with profiles (docs/client.md).\n\n" + exitTable,
	}
}

// run runs s2uc with args, the command line after its name. The message
// of the error it returns is printable (printableError): it may carry a
// gateway's text.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if err := hint(tool().Run(ctx, args, stdout, stderr)); err != nil {
		return printableError{err}
	}
	return nil
}
