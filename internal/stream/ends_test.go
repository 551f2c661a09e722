package stream

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

// TestOutageSaidOnce: the log says an outage of a peer that answers and
// fails by turns once, and its end once, not at every turn.
func TestOutageSaidOnce(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	st := &Stream{}
	for range 50 {
		st.wanDown(log, "cannot reach the peer gateway", errors.New("refused"))
		st.wanUp(log)
	}
	if n := strings.Count(buf.String(), "level=WARN"); n != 1 {
		t.Errorf("%d warnings, want 1:\n%s", n, buf.String())
	}
	if n := strings.Count(buf.String(), "answers again"); n != 1 {
		t.Errorf("the end said %d times, want once:\n%s", n, buf.String())
	}
	if n := st.ends.peer.Flapped(); n != 49 {
		t.Errorf("%d flaps, want 49", n)
	}
}
