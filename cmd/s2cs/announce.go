package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// s2cs says on stdout, at start, what an operator acts on: where the
// control API listens, the certificate to give s2uc and its
// fingerprint, the metrics listener, the open-file plan, the etcd
// store. The log (stderr) does not repeat them: on a terminal, in a
// journal or a container's log, both land in one place, and each fact
// is said once (TestStartupFactsOnce). Read by eye
// they are "s2cs: ..." lines; under --log_format json, where a log
// collector parses every line, each is a JSON record like the log's
// (jsonLines), with the same message, so that nothing s2cs writes is
// plain text there.

// jsonLines is an io.Writer that turns each line written to it into
// one JSON record, level INFO, its message the line without its
// "s2cs: " prefix, written by h. A line is written once complete; Flush
// writes a last line without its newline. It is safe for concurrent use.
type jsonLines struct {
	h slog.Handler

	mu  sync.Mutex // guards buf
	buf []byte
}

func newJSONLines(w io.Writer) *jsonLines {
	return &jsonLines{h: slog.NewJSONHandler(w, nil)}
}

func (j *jsonLines) Write(p []byte) (int, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.buf = append(j.buf, p...)
	for {
		i := bytes.IndexByte(j.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		line := string(j.buf[:i])
		j.buf = j.buf[i+1:]
		if err := j.record(line); err != nil {
			return len(p), err
		}
	}
}

// Flush writes what is left of an unfinished line.
func (j *jsonLines) Flush() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if len(j.buf) == 0 {
		return nil
	}
	line := string(j.buf)
	j.buf = nil
	return j.record(line)
}

func (j *jsonLines) record(line string) error {
	msg := strings.TrimPrefix(strings.TrimRight(line, "\r"), "s2cs: ")
	if strings.TrimSpace(msg) == "" {
		return nil
	}
	return j.h.Handle(context.Background(), slog.NewRecord(time.Now(), slog.LevelInfo, msg, 0))
}

// loggedError is an error run has logged already (under --log_format
// json, as a JSON record): main exits with its status without writing
// it again as plain text.
type loggedError struct{ error }

func (e loggedError) Unwrap() error { return e.error }
