package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"scistream/internal/auth"
)

// runHashToken prints the token-file line of a token: read from stdin
// as it comes (a pipe, a file), or, on a terminal, typed twice at a
// prompt on stderr without being shown.
func runHashToken(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cl := newLocalCmdline("hash-token", "--identity NAME < token   (on a terminal: typed at a prompt, not shown, twice)", stdout, stderr)
	id := cl.fs.String("identity", "", "identity the token stands for")
	if _, err := cl.parse(args, 0, 0, ""); err != nil {
		return err
	}
	if *id == "" {
		return usagef("missing --identity NAME")
	}
	var tok string
	if isTerminal(os.Stdin) {
		var err error
		if tok, err = promptToken(ctx, os.Stdin, stderr, *id); err != nil {
			return err
		}
	} else {
		line, err := bufio.NewReader(os.Stdin).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		tok = strings.TrimSpace(line)
	}
	if tok == "" {
		return usagef("no token on stdin")
	}
	fmt.Fprintf(stdout, "%s %s\n", auth.HashToken(tok), *id)
	return nil
}

// promptToken reads a token typed on terminal f: it asks on w (stderr:
// stdout is the token-file line, often redirected), with the terminal's
// echo off so that the token is not shown (nor left in the scrollback),
// then asks again to confirm it. The terminal is given back as it was,
// on an interrupt too (Ctrl-C cancels ctx, main's signal context).
func promptToken(ctx context.Context, f *os.File, w io.Writer, id string) (string, error) {
	restore, err := noEcho(f)
	if err != nil {
		return "", fmt.Errorf("turn the terminal's echo off: %w (or give the token on stdin: s2uc hash-token --identity %s < FILE)", err, id)
	}
	defer restore()
	var typed [2]string
	for i, prompt := range []string{"token for " + printable(id) + " (not shown): ", "the same token again: "} {
		fmt.Fprint(w, prompt)
		typed[i], err = readLine(ctx, f)
		fmt.Fprintln(w) // the newline typed was not echoed
		if err != nil {
			return "", err
		}
		if typed[i] == "" {
			return "", usagef("no token typed")
		}
	}
	if typed[0] != typed[1] {
		return "", usagef("the two tokens typed differ: run s2uc hash-token again")
	}
	return typed[0], nil
}

// noEcho turns terminal f's echo off (lines are still read whole, and
// Ctrl-C is still a signal) and returns what restores it.
func noEcho(f *os.File) (restore func(), err error) {
	fd := int(f.Fd())
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, err
	}
	t := *old
	t.Lflag &^= unix.ECHO | unix.ECHONL
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &t); err != nil {
		return nil, err
	}
	return func() { unix.IoctlSetTermios(fd, unix.TCSETS, old) }, nil
}

// readLine reads one line typed on terminal f (in canonical mode: the
// terminal hands it over once Enter is pressed), without its end and
// surrounding space; polling, so that it never blocks past ctx. End of
// input (Ctrl-D) ends the line.
func readLine(ctx context.Context, f *os.File) (string, error) {
	fd := int(f.Fd())
	var line []byte
	buf := make([]byte, 4096)
	for {
		if ctx.Err() != nil {
			return "", errors.New("interrupted: no token read")
		}
		p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(p, 100)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return "", fmt.Errorf("read the token: %w", err)
		}
		if n == 0 || p[0].Revents&unix.POLLIN == 0 {
			if n > 0 && p[0].Revents&(unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0 {
				return strings.TrimSpace(string(line)), nil
			}
			continue
		}
		k, err := unix.Read(fd, buf)
		if errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("read the token: %w", err)
		}
		if k == 0 { // end of input
			return strings.TrimSpace(string(line)), nil
		}
		line = append(line, buf[:k]...)
		if i := bytes.IndexByte(line, '\n'); i >= 0 {
			return strings.TrimSpace(string(line[:i])), nil
		}
		if len(line) > 64<<10 {
			return "", usagef("a line of more than 64 KiB: not a token")
		}
	}
}
