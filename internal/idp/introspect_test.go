package idp

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"scistream/internal/auth"
	"scistream/internal/oidctest"
	"scistream/internal/waitfor"
)

func introspector(t *testing.T, is *oidctest.Issuer, clk *clock, mod ...func(*IntrospectConfig)) *Introspector {
	t.Helper()
	cfg := IntrospectConfig{
		URL: is.URL + "/introspect", ClientID: is.IntrospectionClientID, Secret: is.IntrospectionSecret,
		Client: is.Client(), Now: clk.Now, Claims: ClaimMap{Alias: "globus", Identity: "username"},
	}
	for _, m := range mod {
		m(&cfg)
	}
	in, err := NewIntrospector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// TestIntrospect: an active token is its user, with groups and scopes;
// a revoked, unknown or expired one is refused; answers are cached,
// never past the token's expiry.
func TestIntrospect(t *testing.T) {
	is := oidctest.Start(t, oidctest.Options{Opaque: true, Alg: "ES256"})
	clk := newClock()
	in := introspector(t, is, clk, func(c *IntrospectConfig) { c.ClockSkew = -1 })
	ctx := context.Background()
	tok := is.MintOpaque(oidctest.Claims{Subject: "alice@uchicago.edu", Scope: "scistream", Groups: []string{"ops"}, Expiry: time.Now().Add(30 * time.Second)})
	p, err := in.VerifyToken(ctx, tok)
	if err != nil {
		t.Fatal(err)
	}
	if p.Identity != "globus:alice@uchicago.edu" || p.Source != auth.SourceIntrospection ||
		!slices.Equal(p.Groups, []string{"globus:ops"}) || !slices.Equal(p.Scopes, []string{"scistream"}) {
		t.Fatalf("principal %+v", p)
	}
	// Cached: a second check asks nobody; the copy is the caller's own.
	p.Roles = append(p.Roles, auth.RoleOperator)
	if p2, err := in.VerifyToken(ctx, tok); err != nil || in.Calls() != 1 || len(p2.Roles) != 0 {
		t.Fatalf("second check: %+v, %v, %d calls", p2, err, in.Calls())
	}
	// Past its expiry the cached answer is dropped and the token is
	// expired, whatever the cache's TTL.
	clk.Add(31 * time.Second)
	if _, err := in.VerifyToken(ctx, tok); !errors.Is(err, auth.ErrTokenExpired) || in.Calls() != 2 {
		t.Fatalf("after expiry: %v, %d calls", err, in.Calls())
	}
	// Revoked and unknown tokens are inactive; the refusal is kept for
	// NegativeTTL.
	tok2 := is.MintOpaque(oidctest.Claims{Subject: "bob", Expiry: time.Now().Add(time.Hour)})
	is.Revoke(tok2)
	for _, bad := range []string{tok2, "never-issued"} {
		calls := in.Calls()
		for range 3 {
			if _, err := in.VerifyToken(ctx, bad); !errors.Is(err, auth.ErrTokenInactive) {
				t.Fatalf("%s: %v", bad, err)
			}
		}
		if in.Calls() != calls+1 {
			t.Fatalf("3 checks of a refused token made %d calls, want 1", in.Calls()-calls)
		}
	}
	clk.Add(DefaultNegativeTTL)
	if _, err := in.VerifyToken(ctx, "never-issued"); !errors.Is(err, auth.ErrTokenInactive) || in.Calls() != 5 {
		t.Fatalf("after NegativeTTL: %v, %d calls", err, in.Calls())
	}
	// Malformed tokens are refused before any call.
	for _, bad := range []string{"a b", "", strings.Repeat("x", auth.MaxTokenBytes+1), "é"} {
		if _, err := in.VerifyToken(ctx, bad); !errors.Is(err, auth.ErrTokenMalformed) {
			t.Fatalf("%.20q: %v", bad, err)
		}
	}
	if in.Calls() != 5 {
		t.Fatalf("malformed tokens made calls: %d", in.Calls())
	}
}

// TestIntrospectChecks: the answer's times, audience, issuer and token
// type are checked.
func TestIntrospectChecks(t *testing.T) {
	is := oidctest.Start(t, oidctest.Options{Opaque: true, Alg: "ES256"})
	in := introspector(t, is, newClock(), func(c *IntrospectConfig) { c.Audience = is.Audience; c.Issuer = is.URL })
	now := time.Now()
	cases := []struct {
		name string
		c    oidctest.Claims
		err  error
	}{
		{"good", oidctest.Claims{Subject: "alice"}, nil},
		{"no expiry", oidctest.Claims{Subject: "alice", NoExpiry: true}, nil},
		{"nbf in the future", oidctest.Claims{Subject: "alice", NotBefore: now.Add(10 * time.Minute)}, auth.ErrTokenNotYetValid},
		{"wrong audience", oidctest.Claims{Subject: "alice", Audience: []string{"other"}}, auth.ErrTokenAudience},
		{"wrong issuer", oidctest.Claims{Subject: "alice", Issuer: "https://other.example"}, auth.ErrTokenIssuer},
		{"refresh token", oidctest.Claims{Subject: "alice", Extra: map[string]any{"token_type": "refresh_token"}}, auth.ErrTokenMalformed},
		{"no username", oidctest.Claims{Subject: "alice", Extra: map[string]any{"username": nil}}, auth.ErrTokenIdentity},
		{"exp garbage", oidctest.Claims{Subject: "alice", Extra: map[string]any{"exp": "soon"}}, auth.ErrUnavailable},
	}
	for _, c := range cases {
		p, err := in.VerifyToken(context.Background(), is.MintOpaque(c.c))
		if !errors.Is(err, c.err) || (err == nil) != (p != nil) {
			t.Errorf("%s: %+v, %v; want %v", c.name, p, err, c.err)
		}
	}
}

// TestIntrospectUnavailable: an endpoint that is down, or refuses the
// gateway's credentials, lets nobody in and is not cached; the secret
// appears in no error.
func TestIntrospectUnavailable(t *testing.T) {
	is := oidctest.Start(t, oidctest.Options{Opaque: true, Alg: "ES256"})
	tok := is.MintOpaque(oidctest.Claims{Subject: "alice"})
	ctx := context.Background()
	in := introspector(t, is, newClock())
	is.SetDown(true)
	for range 2 {
		if _, err := in.VerifyToken(ctx, tok); !errors.Is(err, auth.ErrUnavailable) {
			t.Fatalf("endpoint down: %v", err)
		}
	}
	if in.Calls() != 2 {
		t.Fatalf("unavailable answers were cached: %d calls", in.Calls())
	}
	is.SetDown(false)
	if _, err := in.VerifyToken(ctx, tok); err != nil {
		t.Fatalf("endpoint back: %v", err)
	}
	const wrong = "wrong-secret-value"
	bad := introspector(t, is, newClock(), func(c *IntrospectConfig) { c.Secret = wrong })
	_, err := bad.VerifyToken(ctx, tok)
	if !errors.Is(err, auth.ErrUnavailable) || !strings.Contains(err.Error(), "client credentials") {
		t.Fatalf("wrong secret: %v", err)
	}
	if strings.Contains(err.Error(), wrong) || strings.Contains(err.Error(), tok) || strings.Contains(err.Error(), is.IntrospectionSecret) {
		t.Fatal("error carries a secret or the token")
	}
	// An endpoint nobody listens on.
	gone := introspector(t, is, newClock(), func(c *IntrospectConfig) { c.URL = "https://127.0.0.1:1/introspect" })
	if _, err := gone.VerifyToken(ctx, tok); !errors.Is(err, auth.ErrUnavailable) {
		t.Fatalf("no endpoint: %v", err)
	}
}

// TestIntrospectFlood: distinct garbage tokens reach the endpoint at
// most MaxInFlight at a time, and those that wait longer than MaxWait
// are unavailable; many checks of one token make one request. (From a
// known source, which may use every request slot: TestIntrospectFair
// is about strangers.)
func TestIntrospectFlood(t *testing.T) {
	is := oidctest.Start(t, oidctest.Options{Opaque: true, Alg: "ES256"})
	const inFlight = 4
	in := introspector(t, is, newClock(), func(c *IntrospectConfig) { c.MaxInFlight = inFlight; c.MaxWait = time.Minute })
	is.Hold()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	known := auth.WithKnownSource(context.Background())
	for i := 0; i < 64; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := in.VerifyToken(known, fmt.Sprintf("garbage-%d", i%32)) // each twice
			errs <- err
		}()
	}
	waitfor.Must(t, 10*time.Second, "the endpoint to hold MaxInFlight requests", func() bool { return is.InFlight() == inFlight })
	is.Release()
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, auth.ErrTokenInactive) {
			t.Fatalf("garbage token: %v", err)
		}
	}
	if st := is.Stats(); st.MaxInFlight > inFlight || st.Introspections > 32 {
		t.Fatalf("endpoint saw %d at once, %d in all; want at most %d and 32", st.MaxInFlight, st.Introspections, inFlight)
	}

	// With a short MaxWait, the checks beyond MaxInFlight give up.
	short := introspector(t, is, newClock(), func(c *IntrospectConfig) { c.MaxInFlight = 1; c.MaxWait = 50 * time.Millisecond })
	is.Hold()
	held := make(chan error, 1)
	go func() { _, err := short.VerifyToken(context.Background(), "held-token"); held <- err }()
	waitfor.Must(t, 10*time.Second, "one held request", func() bool { return is.InFlight() == 1 })
	if _, err := short.VerifyToken(context.Background(), "another-token"); !errors.Is(err, auth.ErrUnavailable) || !strings.Contains(err.Error(), "in flight") {
		t.Fatalf("beyond MaxInFlight: %v", err)
	}
	is.Release()
	if err := <-held; !errors.Is(err, auth.ErrTokenInactive) {
		t.Fatalf("held token: %v", err)
	}
}

// TestIntrospectCacheBound: a flood of distinct tokens, good or
// garbage, never grows the caches past MaxEntries and MaxRefusals.
func TestIntrospectCacheBound(t *testing.T) {
	is := oidctest.Start(t, oidctest.Options{Opaque: true, Alg: "ES256"})
	in := introspector(t, is, newClock(), func(c *IntrospectConfig) { c.MaxEntries = 10; c.MaxRefusals = 5 })
	for i := 0; i < 50; i++ {
		in.VerifyToken(context.Background(), fmt.Sprintf("t%d", i))
		in.VerifyToken(context.Background(), is.MintOpaque(oidctest.Claims{Subject: "alice"}))
		in.mu.Lock()
		good, bad := len(in.cache), len(in.refusals)
		in.mu.Unlock()
		if good > 10 || bad > 5 {
			t.Fatalf("caches hold %d answers and %d refusals, more than MaxEntries 10 or MaxRefusals 5", good, bad)
		}
	}
}

// TestIntrospectGarbageKeepsAnswers: a flood of distinct garbage tokens
// does not push a valid token's answer out of the cache, so its next
// check asks nobody. (Before, one cache of MaxEntries held both, and
// the garbage made room by dropping arbitrary answers.)
func TestIntrospectGarbageKeepsAnswers(t *testing.T) {
	is := oidctest.Start(t, oidctest.Options{Opaque: true, Alg: "ES256"})
	in := introspector(t, is, newClock(), func(c *IntrospectConfig) { c.MaxEntries = 10 })
	ctx := context.Background()
	tok := is.MintOpaque(oidctest.Claims{Subject: "alice"})
	if _, err := in.VerifyToken(ctx, tok); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if _, err := in.VerifyToken(ctx, fmt.Sprintf("garbage-%d", i)); !errors.Is(err, auth.ErrTokenInactive) {
			t.Fatalf("garbage: %v", err)
		}
	}
	calls := in.Calls()
	if _, err := in.VerifyToken(ctx, tok); err != nil || in.Calls() != calls {
		t.Fatalf("valid token after the garbage: %v, %d more calls; want its cached answer", err, in.Calls()-calls)
	}
}

func TestIntrospectConfigValidate(t *testing.T) {
	is := oidctest.Start(t, oidctest.Options{Opaque: true, Alg: "ES256"})
	base := IntrospectConfig{URL: is.URL + "/introspect", ClientID: "c", Secret: "s", Client: is.Client(), Claims: ClaimMap{Alias: "idp"}}
	checkValidate(t, base, IntrospectConfig.Validate, []validateCase[IntrospectConfig]{
		{"ok", func(*IntrospectConfig) {}, ""},
		{"http", func(c *IntrospectConfig) { c.URL = "http://x/introspect" }, "https://"},
		{"credentials in URL", func(c *IntrospectConfig) { c.URL = "https://u:p@x/introspect" }, "credentials"},
		{"no client id", func(c *IntrospectConfig) { c.ClientID = "" }, "client id"},
		{"no secret", func(c *IntrospectConfig) { c.Secret = "" }, "secret"},
		{"negative TTL", func(c *IntrospectConfig) { c.CacheTTL = -1 }, "negative"},
		{"every request reserved", func(c *IntrospectConfig) { c.MaxInFlight = 4; c.ReservedInFlight = 4 }, "reserve fewer"},
		{"default in flight reserved", func(c *IntrospectConfig) { c.ReservedInFlight = DefaultMaxInFlight }, "reserve fewer"},
		{"some reserved", func(c *IntrospectConfig) { c.MaxInFlight = 4; c.ReservedInFlight = 3 }, ""},
		{"negative refusals", func(c *IntrospectConfig) { c.MaxRefusals = -1 }, "negative"},
		{"bad alias", func(c *IntrospectConfig) { c.Claims.Alias = "" }, "alias"},
	})
}

func FuzzIntrospectAnswer(f *testing.F) {
	in := &Introspector{cfg: IntrospectConfig{Now: time.Now, Claims: ClaimMap{Alias: "idp"}.withDefaults()}, skew: time.Minute}
	f.Add(`{"active":true,"sub":"alice","exp":99999999999,"scope":"a b","groups":["g"]}`)
	f.Add(`{"active":false}`)
	f.Add(`{"active":"true","sub":"alice"}`)
	f.Add(`{"active":true,"sub":"alice","exp":1e300}`)
	f.Add(`{"active":true,"sub":["alice"]}`)
	f.Add(`null`)
	f.Add(`[]`)
	f.Fuzz(func(t *testing.T, body string) {
		p, err := in.answer([]byte(body))
		if (err == nil) == (p == nil) {
			t.Fatalf("answer = %+v, %v", p, err)
		}
		if p != nil && (!strings.HasPrefix(p.Identity, "idp:") || !auth.ValidIdentity(p.Identity)) {
			t.Fatalf("identity %q", p.Identity)
		}
	})
}
