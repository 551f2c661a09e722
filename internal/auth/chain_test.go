package auth_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"scistream/internal/auth"
)

// countingVerifier records how often it was asked; it accepts "good".
type countingVerifier struct {
	name  string
	calls atomic.Int64
}

func (v *countingVerifier) VerifyToken(_ context.Context, tok string) (*auth.Principal, error) {
	v.calls.Add(1)
	if strings.HasPrefix(tok, "good") {
		return &auth.Principal{Identity: v.name + ":x"}, nil
	}
	return nil, auth.ErrTokenSignature
}

const aJWT = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln"

func TestChain(t *testing.T) {
	static := mustParse(t, hAlice+" alice\n")
	cases := []struct {
		name          string
		tok           string
		id            string
		err           error
		jwtN, opaqueN int64 // calls expected
	}{
		{"static", "alice-token", "alice", nil, 0, 0},
		{"jwt shape goes to JWT", aJWT, "", auth.ErrTokenSignature, 1, 0},
		{"four parts is opaque", "good." + aJWT[5:], "opaque:x", nil, 0, 1},
		{"opaque goes to introspection", "good-opaque-token", "opaque:x", nil, 0, 1},
		{"too large: nobody asked", strings.Repeat("a", auth.MaxTokenBytes+1), "", auth.ErrTokenTooLarge, 0, 0},
		{"largest allowed", "good" + strings.Repeat("a", auth.MaxTokenBytes-4), "opaque:x", nil, 0, 1},
		{"space inside: nobody asked", "good token", "", auth.ErrTokenMalformed, 0, 0},
		{"quote: nobody asked", `good"`, "", auth.ErrTokenMalformed, 0, 0},
		{"non-ascii: nobody asked", "goodé", "", auth.ErrTokenMalformed, 0, 0},
		{"control char: nobody asked", "good\x00", "", auth.ErrTokenMalformed, 0, 0},
		{"padding only: nobody asked", "====", "", auth.ErrTokenMalformed, 0, 0},
		{"padding in the middle: nobody asked", "go=od", "", auth.ErrTokenMalformed, 0, 0},
		{"jwt with padding is opaque", aJWT + "=", "", auth.ErrTokenSignature, 0, 1},
		{"empty jwt part is opaque", "..sig", "", auth.ErrTokenSignature, 0, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			jwt, opaque := &countingVerifier{name: "jwt"}, &countingVerifier{name: "opaque"}
			ch := &auth.Chain{Static: static, JWT: jwt, Opaque: opaque}
			p, err := ch.VerifyToken(context.Background(), c.tok)
			if !errors.Is(err, c.err) {
				t.Fatalf("err = %v, want %v", err, c.err)
			}
			if c.err == nil && p.Identity != c.id {
				t.Fatalf("identity %q, want %q", p.Identity, c.id)
			}
			if jwt.calls.Load() != c.jwtN || opaque.calls.Load() != c.opaqueN {
				t.Fatalf("calls: jwt %d opaque %d, want %d and %d", jwt.calls.Load(), opaque.calls.Load(), c.jwtN, c.opaqueN)
			}
		})
	}
}

func TestChainWithout(t *testing.T) {
	static := mustParse(t, hAlice+" alice\n")
	opaque := &countingVerifier{name: "opaque"}
	// Static tokens alone: any unknown token is ErrBadToken, whatever its
	// characters, as with Tokens.
	for _, tok := range []string{"a b", "bob-token", aJWT} {
		if _, err := (&auth.Chain{Static: static}).VerifyToken(context.Background(), tok); !errors.Is(err, auth.ErrBadToken) {
			t.Errorf("static only, %q: %v", tok, err)
		}
	}
	// No JWT verifier: a JWT goes to introspection (which accepts JWTs
	// at some providers).
	if _, err := (&auth.Chain{Opaque: opaque}).VerifyToken(context.Background(), aJWT); !errors.Is(err, auth.ErrTokenSignature) || opaque.calls.Load() != 1 {
		t.Errorf("JWT without a JWT verifier: %v, %d introspections", err, opaque.calls.Load())
	}
	// No introspection: an opaque token is not recognised.
	jwt := &countingVerifier{name: "jwt"}
	if _, err := (&auth.Chain{JWT: jwt}).VerifyToken(context.Background(), "opaque"); !errors.Is(err, auth.ErrBadToken) || jwt.calls.Load() != 0 {
		t.Errorf("opaque without introspection: %v", err)
	}
}

func TestChainRequest(t *testing.T) {
	ch := &auth.Chain{Static: mustParse(t, hAlice+" alice\n"), Opaque: &countingVerifier{name: "opaque"}}
	var _ auth.PrincipalAuthenticator = ch
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	if _, err := ch.Authenticate(r); !errors.Is(err, auth.ErrNoToken) {
		t.Fatalf("no header: %v", err)
	}
	r.Header.Set("Authorization", "Bearer good-x")
	id, err := ch.Authenticate(r)
	if err != nil || id != "opaque:x" {
		t.Fatalf("Authenticate = %q, %v", id, err)
	}
	// A plain Authenticator becomes a principal of its source.
	r.Header.Set("Authorization", "Bearer alice-token")
	p, err := auth.PrincipalOf(mustParse(t, hAlice+" alice\n"), r)
	if err != nil || p.Identity != "alice" || p.Source != auth.SourceStatic {
		t.Fatalf("PrincipalOf(Tokens) = %+v, %v", p, err)
	}
	p, err = auth.PrincipalOf(auth.Anonymous{Identity: "anonymous"}, r)
	if err != nil || p.Source != auth.SourceAnonymous {
		t.Fatalf("PrincipalOf(Anonymous) = %+v, %v", p, err)
	}
}

func FuzzChain(f *testing.F) {
	f.Add("alice-token")
	f.Add(aJWT)
	f.Add("good.x.y")
	f.Add("a b")
	f.Add("==")
	f.Fuzz(func(t *testing.T, tok string) {
		jwt, opaque := &countingVerifier{name: "jwt"}, &countingVerifier{name: "opaque"}
		ch := &auth.Chain{Static: mustParse(t, hAlice+" alice\n"), JWT: jwt, Opaque: opaque}
		p, err := ch.VerifyToken(context.Background(), tok)
		asked := jwt.calls.Load() + opaque.calls.Load()
		switch {
		case err == nil && p.Identity == "":
			t.Fatal("empty identity accepted")
		case len(tok) > auth.MaxTokenBytes && (err == nil || asked != 0):
			t.Fatalf("oversized token: err %v, %d verifier calls", err, asked)
		case !auth.IsB64Token(tok) && tok != "alice-token" && asked != 0:
			t.Fatalf("malformed token %q reached a verifier", tok)
		case asked > 1:
			t.Fatalf("token asked of %d verifiers", asked)
		}
	})
}

// closingVerifier counts its Close calls.
type closingVerifier struct {
	countingVerifier
	closes atomic.Int64
}

func (v *closingVerifier) Close() error { v.closes.Add(1); return nil }

// TestChainClose: Close closes the verifiers that can be closed (an
// issuer's keys refreshed in the background) and skips the others.
func TestChainClose(t *testing.T) {
	jwt := &closingVerifier{}
	ch := &auth.Chain{JWT: jwt, Opaque: &countingVerifier{}}
	if err := ch.Close(); err != nil || jwt.closes.Load() != 1 {
		t.Fatalf("Close = %v, %d closes of the JWT verifier", err, jwt.closes.Load())
	}
	if err := (&auth.Chain{}).Close(); err != nil {
		t.Fatalf("Close of an empty chain = %v", err)
	}
}
