package auth_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"scistream/internal/auth"
)

var (
	hAlice = auth.HashToken("alice-token")
	hBob   = auth.HashToken("bob-token")
)

func TestHashToken(t *testing.T) {
	// printf %s abc | sha256sum
	const want = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
	if got := auth.HashToken("abc"); got != want {
		t.Fatalf("HashToken(abc) = %s, want %s", got, want)
	}
}

func TestParseTokens(t *testing.T) {
	cases := []struct {
		name    string
		in      string
		wantLen int    // when no error
		wantErr string // substring; "" means success
	}{
		{"one entry", hAlice + " alice\n", 1, ""},
		{"no trailing newline", hAlice + " alice", 1, ""},
		{"two entries", hAlice + " alice\n" + hBob + " bob\n", 2, ""},
		{"crlf line endings", hAlice + " alice\r\n" + hBob + " bob\r\n", 2, ""},
		{"tabs and surrounding space", "  \t" + hAlice + "\t\talice  \t\n", 1, ""},
		{"comments and blank lines", "# token file\n\n   \n\t# indented comment\n" + hAlice + " alice\n\n", 1, ""},
		{"upper-case hex accepted", strings.ToUpper(hAlice) + " alice\n", 1, ""},
		{"same identity twice is fine", hAlice + " ops\n" + hBob + " ops\n", 2, ""},
		{"identity charset", hAlice + " a.b_c@d+e:f/g-h\n", 1, ""},
		{"identity 128 chars", hAlice + " " + strings.Repeat("a", 128) + "\n", 1, ""},

		{"empty file", "", 0, "no tokens"},
		{"only comments", "# nothing\n\n# here\n", 0, "no tokens"},
		{"only whitespace", " \n\t\n\r\n", 0, "no tokens"},
		{"bad hex", strings.Repeat("zz", 32) + " alice\n", 0, "line 1: first field"},
		{"odd-length hex", hAlice[:63] + " alice\n", 0, "line 1: first field"},
		{"short hash", hAlice[:62] + " alice\n", 0, "line 1: first field"},
		{"long hash", hAlice + "00 alice\n", 0, "line 1: first field"},
		{"sha1-sized hash", hAlice[:40] + " alice\n", 0, "line 1: first field"},
		{"0x prefix", "0x" + hAlice[:62] + " alice\n", 0, "line 1: first field"},
		{"clear token instead of hash", "alice-token alice\n", 0, "line 1: first field"},
		{"hash only", hAlice + "\n", 0, "line 1: want"},
		{"identity only", "alice\n", 0, "line 1: want"},
		{"extra field", hAlice + " alice admin\n", 0, "line 1: want"},
		{"inline comment", hAlice + " alice # the admin\n", 0, "line 1: want"},
		{"error names line", "# c\n\n" + hAlice + " alice\n" + hBob + "\n", 0, "line 4:"},
		{"identity bad char", hAlice + " alice!\n", 0, "line 1: identity"},
		{"identity quote", hAlice + " \"alice\"\n", 0, "line 1: identity"},
		{"identity leading dot", hAlice + " .alice\n", 0, "line 1: identity"},
		{"identity leading dash", hAlice + " -alice\n", 0, "line 1: identity"},
		{"identity non-ascii", hAlice + " alicé\n", 0, "line 1: identity"},
		{"identity 129 chars", hAlice + " " + strings.Repeat("a", 129) + "\n", 0, "line 1: identity"},
		{"identity NUL", hAlice + " ali\x00ce\n", 0, "line 1: identity"},
		{"duplicate hash", hAlice + " alice\n" + hAlice + " mallory\n", 0, "line 2: same token hash as line 1"},
		{"duplicate hash differing case", hAlice + " alice\n\n" + strings.ToUpper(hAlice) + " alice2\n", 0, "line 3: same token hash as line 1"},
		{"line too long", hAlice + " " + strings.Repeat("a", 70000) + "\n", 0, "too long"},
		{"good then bad", hAlice + " alice\nnonsense\n", 0, "line 2:"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tok, err := auth.ParseTokens(strings.NewReader(c.in))
			if c.wantErr != "" {
				if err == nil {
					t.Fatalf("ParseTokens succeeded with %d tokens, want error containing %q", tok.Len(), c.wantErr)
				}
				if !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("error %q does not contain %q", err, c.wantErr)
				}
				if tok != nil {
					t.Fatal("non-nil Tokens with an error")
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseTokens: %v", err)
			}
			if tok.Len() != c.wantLen {
				t.Fatalf("Len = %d, want %d", tok.Len(), c.wantLen)
			}
		})
	}
}

func TestParseTokensErrorHidesHash(t *testing.T) {
	// An error about a malformed line must not echo what might be a
	// clear-text token pasted by mistake.
	_, err := auth.ParseTokens(strings.NewReader("s3cr3t-clear-token alice\n"))
	if err == nil || strings.Contains(err.Error(), "s3cr3t") {
		t.Fatalf("error = %v", err)
	}
}

func mustParse(t *testing.T, s string) *auth.Tokens {
	t.Helper()
	tok, err := auth.ParseTokens(strings.NewReader(s))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestLookup(t *testing.T) {
	tok := mustParse(t, hAlice+" alice\n"+strings.ToUpper(hBob)+" bob\n")
	cases := []struct {
		token, id string
		err       error
	}{
		{"alice-token", "alice", nil},
		{"bob-token", "bob", nil},
		{"", "", auth.ErrBadToken},
		{"alice-token ", "", auth.ErrBadToken},
		{"Alice-token", "", auth.ErrBadToken},
		{"alice-tok", "", auth.ErrBadToken},
		{hAlice, "", auth.ErrBadToken}, // the hash itself is not a token
		{"mallory", "", auth.ErrBadToken},
	}
	for _, c := range cases {
		id, err := tok.Lookup(c.token)
		if id != c.id || !errors.Is(err, c.err) {
			t.Errorf("Lookup(%q) = %q, %v; want %q, %v", c.token, id, err, c.id, c.err)
		}
	}
}

func TestBearerToken(t *testing.T) {
	cases := []struct {
		name   string
		header []string // nil: no header
		tok    string
		err    error
	}{
		{"bearer", []string{"Bearer x"}, "x", nil},
		{"lower-case scheme", []string{"bearer x"}, "x", nil},
		{"upper-case scheme", []string{"BEARER x"}, "x", nil},
		{"extra spaces", []string{"Bearer    x  "}, "x", nil},
		{"token with inner space kept", []string{"Bearer a b"}, "a b", nil},
		{"basic", []string{"Basic x"}, "", auth.ErrNoToken},
		{"scheme only", []string{"Bearer"}, "", auth.ErrNoToken},
		{"scheme and space", []string{"Bearer "}, "", auth.ErrNoToken},
		{"scheme and spaces", []string{"Bearer    "}, "", auth.ErrNoToken},
		{"empty", []string{""}, "", auth.ErrNoToken},
		{"missing", nil, "", auth.ErrNoToken},
		{"bearer prefix word", []string{"Bearerx y"}, "", auth.ErrNoToken},
		{"tab separator", []string{"Bearer\tx"}, "", auth.ErrNoToken},
		{"first of several headers", []string{"Bearer first", "Bearer second"}, "first", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			for _, h := range c.header {
				r.Header.Add("Authorization", h)
			}
			tok, err := auth.BearerToken(r)
			if tok != c.tok || !errors.Is(err, c.err) {
				t.Fatalf("BearerToken = %q, %v; want %q, %v", tok, err, c.tok, c.err)
			}
		})
	}
}

func TestAuthenticate(t *testing.T) {
	tok := mustParse(t, hAlice+" alice\n")
	var _ auth.Authenticator = tok
	var _ auth.Authenticator = auth.Anonymous{}
	cases := []struct {
		header, id string
		err        error
	}{
		{"Bearer alice-token", "alice", nil},
		{"bearer alice-token", "alice", nil},
		{"Bearer bob-token", "", auth.ErrBadToken},
		{"Basic YWxpY2U6eA==", "", auth.ErrNoToken},
		{"", "", auth.ErrNoToken},
	}
	for _, c := range cases {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		if c.header != "" {
			r.Header.Set("Authorization", c.header)
		}
		id, err := tok.Authenticate(r)
		if id != c.id || !errors.Is(err, c.err) {
			t.Errorf("Authenticate(%q) = %q, %v; want %q, %v", c.header, id, err, c.id, c.err)
		}
	}
	id, err := auth.Anonymous{Identity: "anon"}.Authenticate(httptest.NewRequest(http.MethodGet, "/", nil))
	if id != "anon" || err != nil {
		t.Fatalf("Anonymous = %q, %v", id, err)
	}
}

func TestLoadTokens(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "tokens")
	if err := os.WriteFile(good, []byte(hAlice+" alice\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tok, err := auth.LoadTokens(good)
	if err != nil || tok.Len() != 1 {
		t.Fatalf("LoadTokens = %v, %v", tok, err)
	}
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("junk\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := auth.LoadTokens(bad); err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("LoadTokens(bad) error %v should name the file and line", err)
	}
	if _, err := auth.LoadTokens(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("LoadTokens(missing) error %v, want ErrNotExist", err)
	}
}

func FuzzParseTokens(f *testing.F) {
	f.Add(hAlice + " alice\n")
	f.Add("# c\n\n" + hAlice + " alice\n" + hBob + " bob\r\n")
	f.Add(strings.ToUpper(hAlice) + "\talice")
	f.Add(hAlice + " alice\n" + hAlice + " bob\n")
	f.Add(hAlice + " alice extra\n")
	f.Add(hAlice[:63] + " a\n")
	f.Add("")
	f.Add("\x00\xff\n#")
	f.Fuzz(func(t *testing.T, in string) {
		tok, err := auth.ParseTokens(strings.NewReader(in))
		if err != nil {
			if tok != nil {
				t.Fatal("non-nil Tokens with an error")
			}
			return
		}
		if tok.Len() < 1 {
			t.Fatalf("success with %d tokens", tok.Len())
		}
		// A token that is not in the file is never accepted, and no
		// lookup panics.
		if id, err := tok.Lookup(in); err == nil && id == "" {
			t.Fatal("empty identity accepted")
		}
		// Every accepted line has a well-formed identity.
		for _, line := range strings.Split(in, "\n") {
			f := strings.Fields(line)
			if len(f) == 2 && !strings.HasPrefix(strings.TrimSpace(line), "#") {
				if len(f[1]) > 128 {
					t.Fatalf("identity of %d bytes accepted", len(f[1]))
				}
			}
		}
	})
}
