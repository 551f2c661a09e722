package wan_test

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"testing"

	"scistream/internal/api"
	"scistream/internal/wan"
)

// TestAnswerNegotiated: two gateways of this release negotiate framed
// legs on a TLS leg (both ends say Framed); a dialer or an acceptor
// that offers no ALPN (an older s2cs) gets none, and the leg carries the
// application's bytes from its first, as before.
func TestAnswerNegotiated(t *testing.T) {
	d, a := legs(t, api.WANTLS)
	addr, acc := listen(t, a)
	dc, err := dial(t, addr, d)
	if err != nil {
		t.Fatal(err)
	}
	ac := waitAccept(t, acc)
	if ac.err != nil {
		t.Fatal(ac.err)
	}
	if !wan.Framed(dc) || !wan.Framed(ac.conn) || wan.Answers(dc) {
		t.Fatalf("framed: dialer %v, acceptor %v (answers %v); want both framed, the preferred protocol", wan.Framed(dc), wan.Framed(ac.conn), wan.Answers(dc))
	}
	dc.Close()
	ac.conn.Close()

	// An older acceptor: TLS with the pins, no ALPN; it reads the
	// preface and writes the application's bytes at once.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{*certB}, ClientAuth: tls.RequireAnyClientCert, MinVersion: tls.VersionTLS13})
		if _, err := wan.ReadPreface(tc); err != nil {
			done <- err
			return
		}
		_, err = io.WriteString(tc, "app bytes")
		tc.Close()
		done <- err
	}()
	oc, err := dial(t, ln.Addr().String(), d)
	if err != nil {
		t.Fatal(err)
	}
	defer oc.Close()
	if wan.Answers(oc) {
		t.Fatal("a leg to an acceptor without ALPN says it answers")
	}
	got, _ := io.ReadAll(oc)
	if string(got) != "app bytes" {
		t.Fatalf("read %q from the older acceptor, want its application's bytes", got)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// An older dialer: no ALPN offered; the acceptor answers nothing.
	addr, acc = listen(t, a)
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	tc := tls.Client(raw, &tls.Config{Certificates: []tls.Certificate{*certA}, InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	binding, err := wan.ExportBinding(tc.ConnectionState())
	if err != nil {
		t.Fatal(err)
	}
	tc.Write(wan.AppendPreface(nil, d.Preface(binding)))
	ac = waitAccept(t, acc)
	if ac.err != nil {
		t.Fatal(ac.err)
	}
	defer ac.conn.Close()
	if wan.Answers(ac.conn) {
		t.Fatal("a leg from a dialer without ALPN says its acceptor answers")
	}
}

// TestAnswerRoundTrip: an accepting answer, a refusal with its reason,
// and what the dialer reads after them; a reason with terminal escapes
// and bidi overrides comes out printable, a long one bounded.
func TestAnswerRoundTrip(t *testing.T) {
	var b bytes.Buffer
	wan.WriteAnswer(&b, "")
	b.WriteString("data")
	if err := wan.ReadAnswer(&b); err != nil {
		t.Fatalf("accepted: %v", err)
	}
	if b.String() != "data" {
		t.Fatalf("after the answer %q remains, want the data", b.String())
	}
	b.Reset()
	evil := "app down \x1b]0;pwned\x07\u202egnp.exe\x1b[31m"
	wan.WriteAnswer(&b, evil)
	err := wan.ReadAnswer(&b)
	var ae *wan.AnswerError
	if !errors.As(err, &ae) || ae.Err != nil {
		t.Fatalf("refused: %v, want a refusal", err)
	}
	if strings.ContainsAny(ae.Reason, "\x1b\x07\u202e") || !strings.HasPrefix(ae.Reason, "app down ") {
		t.Fatalf("reason %q: want it printable", ae.Reason)
	}
	wan.WriteAnswer(&b, strings.Repeat("x", 5000))
	if err := wan.ReadAnswer(&b); !errors.As(err, &ae) || len(ae.Reason) != wan.MaxReason {
		t.Fatalf("a long reason: %v; want one of %d bytes", err, wan.MaxReason)
	}
	for _, bad := range [][]byte{{}, {'X'}, {'R', 0}, {'R', 0x10, 0}, {'R', 0, 5, 'a'}} {
		if err := wan.ReadAnswer(bytes.NewReader(bad)); !errors.As(err, &ae) || ae.Err == nil {
			t.Errorf("answer %q: %v; want an AnswerError with its cause", bad, err)
		}
	}
}

// FuzzReadAnswer: whatever a peer sends first, ReadAnswer returns nil or
// an AnswerError, reads at most the answer, and a refusal's reason is
// bounded and holds no control character.
func FuzzReadAnswer(f *testing.F) {
	f.Add([]byte("A"))
	f.Add([]byte("R\x00\x03abc"))
	f.Add([]byte("R\xff\xff"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		err := wan.ReadAnswer(r)
		var ae *wan.AnswerError
		if err != nil && !errors.As(err, &ae) {
			t.Fatalf("%T %v", err, err)
		}
		if read := len(b) - r.Len(); read > 3+wan.MaxReason {
			t.Fatalf("read %d bytes", read)
		}
		if ae != nil && ae.Err == nil {
			if len(ae.Reason) > 3*wan.MaxReason || strings.ContainsFunc(ae.Reason, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
				t.Fatalf("reason %q", ae.Reason)
			}
		}
	})
}
