package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"scistream/internal/auth"
)

func runHashToken(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cl := newLocalCmdline("hash-token", "--identity NAME < token", stderr)
	id := cl.fs.String("identity", "", "identity the token stands for")
	if _, err := cl.parse(args, 0, 0, ""); err != nil {
		return err
	}
	if *id == "" {
		return usagef("missing --identity NAME")
	}
	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	tok := strings.TrimSpace(line)
	if tok == "" {
		return usagef("no token on stdin")
	}
	fmt.Fprintf(stdout, "%s %s\n", auth.HashToken(tok), *id)
	return nil
}
