package main

import (
	"context"
	"io"
	"strings"

	"scistream/internal/cliflag"
	"scistream/internal/subcmd"
)

// runVersion prints the version line, as --version does.
func runVersion(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cl := newLocalCmdline("version", "  (the same as s2uc --version)", stderr)
	if _, err := cl.parse(args, 0, 0, ""); err != nil {
		return err
	}
	return tool().Run(ctx, []string{"--version"}, stdout, stderr)
}

// runCompletion prints the completion script of a shell, each
// command's flags read from the usage its --help prints (its flag set
// is built as it runs).
func runCompletion(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	shells := strings.Join(cliflag.Shells, "|")
	cl := newLocalCmdline("completion", shells+"   (e.g. source <(s2uc completion bash))", stderr)
	pos, err := cl.parse(args, 1, 1, "give the shell: s2uc completion "+shells)
	if err != nil {
		return err
	}
	if !cliflag.HasShell(pos[0]) {
		return usagef("no completion for shell %q: give one of %s", pos[0], shells)
	}
	c := cliflag.Completion{Program: "s2uc", Flags: []cliflag.CompletionFlag{{Name: "help"}, {Name: "version"}}}
	return toolCompletion(ctx, tool(), c).Write(stdout, pos[0])
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
