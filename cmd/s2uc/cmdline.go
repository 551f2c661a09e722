package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"scistream/internal/cliflag"
)

// cmdline is one s2uc command's command line: its flag set, the flags
// shared by every command that talks to a gateway (--output, --timeout),
// and the checks every command makes before it does anything.
type cmdline struct {
	name, synopsis string
	stderr         io.Writer
	fs             *flag.FlagSet
	commonFlags    // registered if checkCommon
	checkCommon    bool
}

// newCmdline starts the command line of a command that talks to a
// gateway; synopsis follows "usage: s2uc NAME" in its usage.
func newCmdline(name, synopsis string, stderr io.Writer) *cmdline {
	c := newLocalCmdline(name, synopsis, stderr)
	c.commonFlags.register(c.fs)
	c.checkCommon = true
	return c
}

// newLocalCmdline starts the command line of a command that talks to no
// gateway, so it has no --output or --timeout.
func newLocalCmdline(name, synopsis string, stderr io.Writer) *cmdline {
	return &cmdline{
		name: name, synopsis: synopsis, stderr: stderr,
		fs: flag.NewFlagSet("s2uc "+name, flag.ContinueOnError),
	}
}

// gateway registers the flags that reach one gateway (--s2cs,
// --server_cert, --token_file, each after prefix); what names the gateway
// in their help.
func (c *cmdline) gateway(prefix, what string) *gatewayFlags {
	g := &gatewayFlags{}
	g.register(c.fs, prefix, what)
	return g
}

// parse parses args, in which flags may follow positional arguments (as
// in the reference runbooks), after adding the alias spellings of every
// flag. It then checks the count of positional arguments against min
// and max, and the common flags, and returns the positional arguments.
//
// A wrong count is reported as want, except that an argument beyond max
// is named ("unexpected argument") when want is empty or min < max. On
// -h or --help parse prints the usage and returns flag.ErrHelp. A flag
// the command does not have, or a bad flag value, is a one-line error
// (the flag package's own message and usage dump are held back).
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
			return nil, fmt.Errorf("%w; run s2uc %s --help for its flags", err, c.name)
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
		return nil, fmt.Errorf("unexpected argument %q", pos[max])
	case len(pos) < min || len(pos) > max:
		return nil, errors.New(want)
	}
	if !c.checkCommon {
		return pos, nil
	}
	return pos, c.commonFlags.check()
}

// usage writes the command's usage, listing only canonical flag names.
func (c *cmdline) usage() {
	fmt.Fprintf(c.stderr, "usage: s2uc %s %s\n\n", c.name, c.synopsis)
	c.fs.SetOutput(c.stderr)
	cliflag.PrintDefaults(c.fs)
}
