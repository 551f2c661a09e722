package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"scistream/internal/api"
	"scistream/internal/client"
	"scistream/internal/subcmd"
)

// s2uc's exit status says what kind of failure it was, so that a script
// can tell "wrong command line" from "the gateway is down" from "no such
// stream" without reading the message. The table is in the help's
// footer and in docs/cli.md.
const (
	exitOK          = 0 // done, or help asked for
	exitFailed      = 1 // any other failure (a certificate that does not match, a gateway's internal error...)
	exitUsage       = 2 // the command line is wrong: a flag, an argument, a value (the gateway's invalid_argument too)
	exitDenied      = 3 // the gateway refused the token: unauthenticated or permission denied
	exitNotFound    = 4 // no such stream, on the gateway or in s2uc's local records
	exitUnavailable = 5 // a gateway could not be reached, or is unavailable or full: try again later
	exitConflict    = 6 // the stream's state forbids it (already wired, a listener mismatch with the inbound side)
)

// exitTable is the exit statuses as the help's footer lists them.
const exitTable = `Exit status: 0 done; 1 other failure; 2 wrong command line (usage);
3 unauthenticated or permission denied; 4 not found (stream or local
record); 5 gateway unreachable or unavailable; 6 conflict with the
stream's state. With --output json, an error is one JSON object on
stderr: {"code", "message", "request_id", "exit_code"}.`

// classified is an error s2uc raised itself, with its exit status and
// the API code it reports under --output json.
type classified struct {
	status int
	code   api.Code
	err    error
}

func (e *classified) Error() string { return e.err.Error() }
func (e *classified) Unwrap() error { return e.err }

// usagef is a wrong command line (exit status 2).
func usagef(format string, args ...any) error {
	return &classified{exitUsage, api.CodeInvalidArgument, fmt.Errorf(format, args...)}
}

// notFoundf is a stream s2uc knows nothing of (exit status 4).
func notFoundf(format string, args ...any) error {
	return &classified{exitNotFound, api.CodeNotFound, fmt.Errorf(format, args...)}
}

// conflictf is a request the stream's state forbids (exit status 6).
func conflictf(format string, args ...any) error {
	return &classified{exitConflict, api.CodeConflict, fmt.Errorf(format, args...)}
}

// exitCode is s2uc's exit status for what run returned (the table
// above).
func exitCode(err error) int {
	status, _ := classify(err)
	return status
}

// classify returns err's exit status and the code an --output json
// error carries: a gateway's refusal keeps the gateway's code; s2uc's
// own errors the code of their kind ("failed" for the rest).
func classify(err error) (int, api.Code) {
	var c *classified
	var ae *api.Error
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return exitOK, ""
	case errors.As(err, &c):
		return c.status, c.code
	case errors.Is(err, subcmd.ErrUsage):
		return exitUsage, api.CodeInvalidArgument
	case errors.As(err, &ae):
		switch ae.Code {
		case api.CodeInvalidArgument:
			return exitUsage, ae.Code
		case api.CodeUnauthenticated, api.CodePermissionDenied:
			return exitDenied, ae.Code
		case api.CodeNotFound:
			return exitNotFound, ae.Code
		case api.CodeUnavailable, api.CodeNoResources:
			return exitUnavailable, ae.Code
		case api.CodeConflict:
			return exitConflict, ae.Code
		}
		return exitFailed, ae.Code
	case errors.Is(err, client.ErrUnreachable), errors.Is(err, client.ErrNotHTTPS):
		return exitUnavailable, api.CodeUnavailable
	case errors.Is(err, client.ErrWANPort): // --s2cs names the wrong port
		return exitUsage, api.CodeInvalidArgument
	}
	return exitFailed, "failed"
}

// jsonError is an error as --output json reports it on stderr.
type jsonError struct {
	// Code is the gateway's API code of a refusal, or the code of
	// s2uc's own error's kind.
	Code api.Code `json:"code"`
	// Message is the one-line message text output prints.
	Message string `json:"message"`
	// RequestID names the refused request in the gateway's log.
	RequestID string `json:"request_id,omitempty"`
	ExitCode  int    `json:"exit_code"`
}

// report writes err, which run returned for args, on w: one line
// "s2uc: message", or, when args ask for --output json (or the
// defaults do), one JSON object. Nothing for success and help.
func report(w io.Writer, args []string, err error) {
	if status, _ := classify(err); status == exitOK {
		return
	}
	if !jsonOutput(args) {
		subcmd.Report(w, "s2uc", err)
		return
	}
	writeJSON(w, jsonErrorOf(err), "")
}

// jsonErrorOf is err as --output json reports it.
func jsonErrorOf(err error) jsonError {
	status, code := classify(err)
	je := jsonError{Code: code, Message: subcmd.OneLine(err), ExitCode: status}
	var ae *api.Error
	if errors.As(err, &ae) {
		je.RequestID = ae.RequestID
	}
	return je
}

// jsonOutput reports whether the command line args asks for --output
// json, or leaves --output to the defaults (configuration file,
// SCISTREAM_OUTPUT) and they say json. It reads the command line as
// the flag package would, without the command's flag set: a command
// line too wrong to parse may still have said it.
func jsonOutput(args []string) bool {
	profile := ""
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") {
			continue
		}
		if !hasValue && i+1 < len(args) {
			value = args[i+1]
		}
		switch name {
		case "output":
			return value == "json"
		case "profile":
			profile = value
		}
	}
	d, err := loadDefaults(profile)
	return err == nil && d.Output == "json"
}
