package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"scistream/internal/client"
	"scistream/internal/cliflag"
)

// cmdline is one s2uc command's command line: its flag set, the flags
// shared by every command that talks to a gateway (--output, --timeout,
// --profile), and the checks every command makes before it does
// anything.
type cmdline struct {
	name, synopsis string
	stdout, stderr io.Writer // --help goes to stdout, to be paged or grepped
	fs             *flag.FlagSet
	commonFlags    // registered if checkCommon
	checkCommon    bool
	// gateways are the gateway flags registered, to be given the
	// defaults of the configuration file and environment once parsed.
	gateways []*gatewayFlags
	// defaults are those defaults, loaded by parse (checkCommon only).
	defaults client.Defaults
}

// newCmdline starts the command line of a command that talks to a
// gateway; synopsis follows "usage: s2uc NAME" in its usage.
func newCmdline(name, synopsis string, stdout, stderr io.Writer) *cmdline {
	c := newLocalCmdline(name, synopsis, stdout, stderr)
	c.commonFlags.register(c.fs)
	c.checkCommon = true
	return c
}

// newLocalCmdline starts the command line of a command that talks to no
// gateway, so it has no --output or --timeout.
func newLocalCmdline(name, synopsis string, stdout, stderr io.Writer) *cmdline {
	return &cmdline{
		name: name, synopsis: synopsis, stdout: stdout, stderr: stderr,
		fs: flag.NewFlagSet("s2uc "+name, flag.ContinueOnError),
	}
}

// gateway registers the flags that reach one gateway (--s2cs,
// --server_cert, --token_file, each after prefix); what names the gateway
// in their help, and note, if not empty, follows the help of --s2cs
// (" (in front of ...)"). Once parsed, a flag not given takes its default
// from the configuration file or the environment (client.LoadDefaults).
func (c *cmdline) gateway(prefix, what, note string) *gatewayFlags {
	g := &gatewayFlags{}
	g.register(c.fs, prefix, what, note)
	c.gateways = append(c.gateways, g)
	return g
}

// recordGateway registers the flags of the gateway of a command about
// one stream (record says which gateways it reaches without --s2cs, in
// the help), which, without --s2cs, reaches every gateway its local
// record names (cmdline.recordSide): the defaults are then not applied
// by parse but kept for useDefault, for a stream s2uc has no record of.
// With --s2cs, the defaults fill the other two, as for any gateway.
func (c *cmdline) recordGateway(record string) *gatewayFlags {
	g := &gatewayFlags{record: true}
	g.register(c.fs, "", "gateway", " (default: "+record+", from its local record)")
	c.fs.Lookup("token_file").Usage = "file holding the bearer token (default: the one the stream was wired with, else $SCISTREAM_TOKEN_FILE or the configuration file's; without one: $SCISTREAM_TOKEN, else the login of s2uc login)"
	c.gateways = append(c.gateways, g)
	return g
}

// parse parses args, in which flags may follow positional arguments (as
// in the reference runbooks), after adding the alias spellings of every
// flag. It then checks the count of positional arguments against min
// and max, and the common flags, applies the defaults, and returns the
// positional arguments.
//
// A wrong count is reported as want, except that an argument beyond max
// is named ("unexpected argument") when want is empty or min < max. On
// -h or --help parse prints the usage and returns flag.ErrHelp. A flag
// the command does not have, or a bad flag value, is a one-line error
// (cliflag.ParseError: the nearest flag; the flag package's own message
// and usage dump are held back). Every error is a usage error.
func (c *cmdline) parse(args []string, min, max int, want string) ([]string, error) {
	cliflag.AddAliases(c.fs)
	c.fs.SetOutput(io.Discard)
	c.fs.Usage = func() {}
	var pos []string
	for {
		err := c.fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			c.usage()
			return nil, err
		}
		if err != nil {
			return nil, usagef("%w", cliflag.ParseError(c.fs, err, "s2uc "+c.name+" --help"))
		}
		args = c.fs.Args()
		if len(args) == 0 {
			break
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
	switch {
	case len(pos) > max && (want == "" || min < max):
		return nil, usagef("unexpected argument %q", pos[max])
	case len(pos) < min || len(pos) > max:
		return nil, usagef("%s", want)
	}
	if !c.checkCommon {
		return pos, nil
	}
	if err := c.applyDefaults(); err != nil {
		return nil, err
	}
	return pos, c.commonFlags.check()
}

// applyDefaults loads the defaults of the configuration file and the
// environment for --profile, and gives them to the flags not given.
func (c *cmdline) applyDefaults() error {
	d, err := loadDefaults(c.profile)
	if err != nil {
		return usagef("%w", err)
	}
	c.defaults = d
	if !cliflag.Seen(c.fs)["output"] {
		c.output = cmp.Or(d.Output, "text")
	}
	for _, g := range c.gateways {
		g.def = d.Side(g.prefix)
		if !g.record || g.s2cs != "" {
			g.fill()
		}
	}
	return nil
}

// loadDefaults reads the configuration file and the environment for
// profile (client.LoadDefaults).
func loadDefaults(profile string) (client.Defaults, error) {
	return client.LoadDefaults(profile, os.Getenv)
}

// usage writes the command's usage, listing only canonical flag names.
func (c *cmdline) usage() {
	fmt.Fprintf(c.stdout, "usage: s2uc %s %s\n\n", c.name, c.synopsis)
	c.fs.SetOutput(c.stdout)
	cliflag.PrintDefaults(c.fs)
	if c.checkCommon {
		fmt.Fprintln(c.stdout, "\nGateway flags and --output not given come from $SCISTREAM_S2CS, $SCISTREAM_SERVER_CERT,\n$SCISTREAM_TOKEN_FILE, $SCISTREAM_OUTPUT, then the configuration file (docs/client.md).\nExit statuses: s2uc --help.")
	}
}
