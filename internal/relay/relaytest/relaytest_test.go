package relaytest_test

import (
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"

	"scistream/internal/leakcheck"
	"scistream/internal/relay"
	"scistream/internal/relay/relaytest"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// A session relays both ways between A and B, counts what it moved, and
// its Wait returns Relay's result once both sides ended.
func TestSession(t *testing.T) {
	for _, name := range relay.Names() {
		t.Run(name, func(t *testing.T) {
			leakcheck.Check(t)
			s := relaytest.Start(t, relaytest.Engine(t, name, relay.Options{}))
			if s.RA.RemoteAddr().String() != s.A.LocalAddr().String() || s.RB.RemoteAddr().String() != s.B.LocalAddr().String() {
				t.Fatal("RA and RB are not the peers of A and B")
			}
			for _, c := range []interface{ SetDeadline(time.Time) error }{s.A, s.B} {
				c.SetDeadline(time.Now().Add(relaytest.Timeout))
			}
			if _, err := s.A.Write([]byte("request")); err != nil {
				t.Fatal(err)
			}
			s.A.CloseWrite()
			if b, err := io.ReadAll(s.B); err != nil || string(b) != "request" {
				t.Fatalf("B read %q, %v", b, err)
			}
			select {
			case <-s.Done():
				t.Fatalf("Done while B->A is open; Relay returned %v", s.Wait(t))
			default:
			}
			if _, err := s.B.Write([]byte("the reply")); err != nil {
				t.Fatal(err)
			}
			s.B.CloseWrite()
			if b, err := io.ReadAll(s.A); err != nil || string(b) != "the reply" {
				t.Fatalf("A read %q, %v", b, err)
			}
			if err := s.Wait(t); err != nil {
				t.Fatalf("Wait = %v", err)
			}
			if err := s.Wait(t); err != nil {
				t.Fatalf("second Wait = %v", err)
			}
			if s.AB() != 7 || s.BA() != 9 || s.MaxChunkAB() < 1 || s.MaxChunkAB() > 7 {
				t.Fatalf("counted %d a->b (largest %d), %d b->a; want 7 (1 to 7), 9", s.AB(), s.MaxChunkAB(), s.BA())
			}
		})
	}
}

// A session the test leaves running ends with the test.
func TestSessionEndsWithTest(t *testing.T) {
	leakcheck.Check(t)
	var s *relaytest.Session
	t.Run("open", func(t *testing.T) {
		s = relaytest.Start(t, relaytest.Engine(t, "buffer", relay.Options{}))
	})
	if s == nil {
		t.Fatal("Start failed")
	}
	select {
	case <-s.Done():
	default:
		t.Fatal("Relay still runs after the test that started it ended")
	}
}

// fatalRecorder is a testing.TB whose Fatal records the message and ends
// the goroutine, as the real one does, without failing the real test.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Helper()           {}
func (r *fatalRecorder) Fatal(args ...any) { r.msg = fmt.Sprint(args...); runtime.Goexit() }

func TestEngine(t *testing.T) {
	for _, name := range relay.Names() {
		if e := relaytest.Engine(t, name, relay.Options{BufferSize: relay.MinBufferSize}); e.Name() != name {
			t.Fatalf("Engine(%q) is %q", name, e.Name())
		}
	}
	for _, c := range []struct {
		name string
		o    relay.Options
		want string
	}{
		{"zerocopy", relay.Options{}, "unknown engine"},
		{"buffer", relay.Options{BufferSize: -1}, "buffer size"},
	} {
		r := &fatalRecorder{TB: t}
		ended := make(chan struct{})
		go func() {
			defer close(ended)
			relaytest.Engine(r, c.name, c.o)
		}()
		<-ended
		if !strings.Contains(r.msg, c.want) {
			t.Errorf("Engine(%q, %+v) failed with %q; want %q", c.name, c.o, r.msg, c.want)
		}
	}
}
