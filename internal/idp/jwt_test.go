package idp

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"scistream/internal/auth"
	"scistream/internal/leakcheck"
	"scistream/internal/oidctest"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// clock is a settable clock for the verifiers' Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Now()} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// remoteVerifier returns a verifier of is's tokens with remote keys on
// clk, and the keys.
func remoteVerifier(t *testing.T, is *oidctest.Issuer, clk *clock, mod ...func(*JWTConfig)) (*JWTVerifier, *RemoteKeys) {
	t.Helper()
	keys, err := NewRemoteKeys(RemoteConfig{Issuer: is.URL, Client: is.Client(), Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { keys.Close() })
	cfg := JWTConfig{Issuer: is.URL, Audience: is.Audience, Keys: keys, Now: clk.Now, Claims: ClaimMap{Alias: "idp.test"}}
	for _, m := range mod {
		m(&cfg)
	}
	v, err := NewJWT(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return v, keys
}

// TestJWTVerify: a good token of each key type is accepted and mapped;
// every kind of bad token is refused with the error that names its
// fault, and no error repeats the token.
func TestJWTVerify(t *testing.T) {
	for _, alg := range []string{"RS256", "ES256", "EdDSA"} {
		t.Run(alg, func(t *testing.T) {
			is := oidctest.Start(t, oidctest.Options{Alg: alg})
			v, _ := remoteVerifier(t, is, newClock())
			testJWTCases(t, is, v)
		})
	}
}

func testJWTCases(t *testing.T, is *oidctest.Issuer, v *JWTVerifier) {
	now := time.Now()
	sub := func(c oidctest.Claims) oidctest.Claims {
		if c.Subject == "" {
			c.Subject = "alice"
		}
		return c
	}
	cases := []struct {
		name string
		tok  string
		err  error
	}{
		{"good", is.Mint(sub(oidctest.Claims{})), nil},
		{"expired within the skew", is.Mint(sub(oidctest.Claims{Expiry: now.Add(-30 * time.Second)})), nil},
		{"expired", is.Mint(sub(oidctest.Claims{Expiry: now.Add(-2 * time.Minute)})), auth.ErrTokenExpired},
		{"nbf within the skew", is.Mint(sub(oidctest.Claims{NotBefore: now.Add(30 * time.Second)})), nil},
		{"nbf in the future", is.Mint(sub(oidctest.Claims{NotBefore: now.Add(5 * time.Minute)})), auth.ErrTokenNotYetValid},
		{"issued in the future", is.Mint(sub(oidctest.Claims{IssuedAt: now.Add(5 * time.Minute)})), auth.ErrTokenNotYetValid},
		{"no expiry", is.Mint(sub(oidctest.Claims{NoExpiry: true})), auth.ErrTokenMalformed},
		{"exp not a number", is.Mint(sub(oidctest.Claims{Extra: map[string]any{"exp": "tomorrow"}})), auth.ErrTokenMalformed},
		{"exp negative", is.Mint(sub(oidctest.Claims{Extra: map[string]any{"exp": -1}})), auth.ErrTokenMalformed},
		{"one of several audiences", is.Mint(sub(oidctest.Claims{Audience: []string{"other", is.Audience}})), nil},
		{"audience as a string", is.Mint(sub(oidctest.Claims{Extra: map[string]any{"aud": is.Audience}})), nil},
		{"wrong audience", is.Mint(sub(oidctest.Claims{Audience: []string{"another-gateway"}})), auth.ErrTokenAudience},
		{"no audience", is.Mint(sub(oidctest.Claims{Audience: []string{}})), auth.ErrTokenAudience},
		{"audience prefix", is.Mint(sub(oidctest.Claims{Audience: []string{is.Audience + "x"}})), auth.ErrTokenAudience},
		{"wrong issuer", is.Mint(sub(oidctest.Claims{Issuer: "https://evil.example"})), auth.ErrTokenIssuer},
		{"issuer with a trailing slash", is.Mint(sub(oidctest.Claims{Issuer: is.URL + "/"})), auth.ErrTokenIssuer},
		{"alg none", is.MintNone(sub(oidctest.Claims{})), auth.ErrTokenAlgorithm},
		{"foreign key under the issuer's kid", is.MintForeign(sub(oidctest.Claims{})), auth.ErrTokenSignature},
		{"unknown kid", is.MintUnknownKey(sub(oidctest.Claims{})), auth.ErrTokenSignature},
		{"HMAC keyed with the public key", is.MintHMACPublic(sub(oidctest.Claims{})), auth.ErrTokenAlgorithm},
		{"no identity claim", is.Mint(oidctest.Claims{Extra: map[string]any{"sub": nil}}), auth.ErrTokenIdentity},
		{"identity not a string", is.Mint(oidctest.Claims{Extra: map[string]any{"sub": 42}}), auth.ErrTokenIdentity},
		{"identity with a space", is.Mint(oidctest.Claims{Subject: "alice smith"}), auth.ErrTokenIdentity},
		{"identity too long", is.Mint(oidctest.Claims{Subject: strings.Repeat("a", 120)}), auth.ErrTokenIdentity},
	}
	good := is.Mint(sub(oidctest.Claims{}))
	parts := strings.Split(good, ".")
	cases = append(cases, []struct {
		name string
		tok  string
		err  error
	}{
		{"payload swapped", parts[0] + "." + strings.Split(is.Mint(oidctest.Claims{Subject: "mallory"}), ".")[1] + "." + parts[2], auth.ErrTokenSignature},
		{"signature cut", parts[0] + "." + parts[1] + ".", auth.ErrTokenSignature},
		{"header not JSON", "bm90LWpzb24." + parts[1] + "." + parts[2], auth.ErrTokenMalformed},
		{"header not base64url", "!!!." + parts[1] + "." + parts[2], auth.ErrTokenMalformed},
		{"two parts", parts[0] + "." + parts[1], auth.ErrTokenMalformed},
	}...)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := v.VerifyToken(context.Background(), c.tok)
			if c.err == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if p.Identity != "idp.test:alice" || p.Source != auth.SourceJWT || p.Expiry.IsZero() {
					t.Fatalf("principal %+v", p)
				}
				return
			}
			if !errors.Is(err, c.err) {
				t.Fatalf("err = %v, want %v", err, c.err)
			}
			if p != nil {
				t.Fatal("principal with an error")
			}
			if strings.Contains(err.Error(), c.tok) || (len(parts[2]) > 8 && strings.Contains(err.Error(), parts[2])) {
				t.Fatal("error repeats the token")
			}
		})
	}
}

// TestJWTClaims: groups are prefixed by the alias, scopes read from
// "scope" or "scp", the identity from the claim configured.
func TestJWTClaims(t *testing.T) {
	is := oidctest.Start(t, oidctest.Options{Alg: "ES256"})
	v, _ := remoteVerifier(t, is, newClock(), func(c *JWTConfig) {
		c.Claims = ClaimMap{Alias: "globus", Identity: "preferred_username", Groups: "roles"}
	})
	tok := is.Mint(oidctest.Claims{Subject: "0f3c", Scope: "openid scistream:user",
		Extra: map[string]any{"preferred_username": "alice@uchicago.edu", "roles": []any{"ops", 7, "bad group", "", "users"}}})
	p, err := v.VerifyToken(context.Background(), tok)
	if err != nil {
		t.Fatal(err)
	}
	if p.Identity != "globus:alice@uchicago.edu" {
		t.Errorf("identity %q", p.Identity)
	}
	if !slices.Equal(p.Groups, []string{"globus:ops", "globus:users"}) {
		t.Errorf("groups %q", p.Groups)
	}
	if !slices.Equal(p.Scopes, []string{"openid", "scistream:user"}) {
		t.Errorf("scopes %q", p.Scopes)
	}
	tok = is.Mint(oidctest.Claims{Subject: "0f3c", Extra: map[string]any{"preferred_username": "bob", "scp": []any{"a", "b"}, "roles": "solo"}})
	if p, err = v.VerifyToken(context.Background(), tok); err != nil || !slices.Equal(p.Scopes, []string{"a", "b"}) || !slices.Equal(p.Groups, []string{"globus:solo"}) {
		t.Errorf("scp array / one group: %+v, %v", p, err)
	}
	many := make([]any, 1000)
	for i := range many {
		many[i] = "g"
	}
	tok = is.Mint(oidctest.Claims{Extra: map[string]any{"preferred_username": "carol", "roles": many}})
	if p, err = v.VerifyToken(context.Background(), tok); err != nil || len(p.Groups) != maxGroups {
		t.Errorf("1000 groups: %d kept, %v", len(p.Groups), err)
	}
}

func TestJWTConfigValidate(t *testing.T) {
	keys := &StaticKeys{}
	base := JWTConfig{Issuer: "https://idp.example", Audience: "gw", Keys: keys, Claims: ClaimMap{Alias: "idp"}}
	checkValidate(t, base, JWTConfig.Validate, []validateCase[JWTConfig]{
		{"ok", func(*JWTConfig) {}, ""},
		{"http issuer", func(c *JWTConfig) { c.Issuer = "http://idp.example" }, "https://"},
		{"no issuer", func(c *JWTConfig) { c.Issuer = "" }, "https://"},
		{"no audience", func(c *JWTConfig) { c.Audience = "" }, "audience is required"},
		{"none", func(c *JWTConfig) { c.Algorithms = []string{"RS256", "none"} }, `"none" is not accepted`},
		{"HMAC", func(c *JWTConfig) { c.Algorithms = []string{"HS256"} }, `"HS256" is not accepted`},
		{"lower case", func(c *JWTConfig) { c.Algorithms = []string{"rs256"} }, "not accepted"},
		{"skew", func(c *JWTConfig) { c.ClockSkew = time.Hour }, "clock skew"},
		{"alias with colon", func(c *JWTConfig) { c.Claims.Alias = "a:b" }, "alias"},
		{"alias upper", func(c *JWTConfig) { c.Claims.Alias = "IDP" }, "alias"},
		{"no alias", func(c *JWTConfig) { c.Claims.Alias = "" }, "alias"},
		{"bad claim", func(c *JWTConfig) { c.Claims.Identity = "a b" }, "identity claim"},
	})
}

type validateCase[C any] struct {
	name string
	mod  func(*C)
	want string // in the error; "" for none
}

// checkValidate runs validate on base as each case changes it.
func checkValidate[C any](t *testing.T, base C, validate func(C) error, cases []validateCase[C]) {
	t.Helper()
	for _, c := range cases {
		cfg := base
		c.mod(&cfg)
		err := validate(cfg)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: Validate = %v, want %q", c.name, err, c.want)
		}
	}
}

// TestRemoteKeysRotation: a token signed by a key the issuer added
// after the gateway fetched its keys is accepted once the keys are
// fetched again, which a new kid causes, at most once per MinInterval.
func TestRemoteKeysRotation(t *testing.T) {
	is := oidctest.Start(t, oidctest.Options{Alg: "ES256"})
	clk := newClock()
	v, keys := remoteVerifier(t, is, clk)
	ctx := context.Background()
	if _, err := v.VerifyToken(ctx, is.Mint(oidctest.Claims{Subject: "alice"})); err != nil {
		t.Fatal(err)
	}
	if err := is.Rotate(); err != nil {
		t.Fatal(err)
	}
	// Valid for a day: the test moves the clock on by hours.
	tok := is.Mint(oidctest.Claims{Subject: "alice", Expiry: time.Now().Add(24 * time.Hour)})
	// Fetched just now: the new kid waits for MinInterval.
	if _, err := v.VerifyToken(ctx, tok); !errors.Is(err, auth.ErrTokenSignature) || keys.Fetches() != 1 {
		t.Fatalf("within MinInterval: %v, %d fetches", err, keys.Fetches())
	}
	clk.Add(11 * time.Second)
	if _, err := v.VerifyToken(ctx, tok); err != nil || keys.Fetches() != 2 {
		t.Fatalf("after MinInterval: %v, %d fetches", err, keys.Fetches())
	}
	// Keys older than MaxAge are fetched again; while the issuer is
	// down, the old keys serve.
	is.SetDown(true)
	clk.Add(2 * time.Hour)
	if _, err := v.VerifyToken(ctx, tok); err != nil || keys.Fetches() != 3 {
		t.Fatalf("stale keys while the issuer is down: %v, %d fetches", err, keys.Fetches())
	}
	// A new kid now cannot be learned: unavailable, not forged.
	if err := is.Rotate(); err != nil {
		t.Fatal(err)
	}
	clk.Add(11 * time.Second)
	if _, err := v.VerifyToken(ctx, is.Mint(oidctest.Claims{Subject: "alice", Expiry: time.Now().Add(24 * time.Hour)})); !errors.Is(err, auth.ErrUnavailable) {
		t.Fatalf("new kid while the issuer is down: %v", err)
	}
}

// TestRemoteKeysDownAtStart: an issuer that cannot be reached makes
// tokens unavailable, not refused, until it answers.
func TestRemoteKeysDownAtStart(t *testing.T) {
	is := oidctest.Start(t, oidctest.Options{Alg: "ES256"})
	clk := newClock()
	v, keys := remoteVerifier(t, is, clk)
	is.SetDown(true)
	tok := is.Mint(oidctest.Claims{Subject: "alice"})
	if err := keys.Prefetch(context.Background()); !errors.Is(err, auth.ErrUnavailable) {
		t.Fatalf("Prefetch with the issuer down: %v", err)
	}
	if _, err := v.VerifyToken(context.Background(), tok); !errors.Is(err, auth.ErrUnavailable) {
		t.Fatalf("verify with the issuer down: %v", err)
	}
	is.SetDown(false)
	clk.Add(11 * time.Second)
	if _, err := v.VerifyToken(context.Background(), tok); err != nil {
		t.Fatalf("verify with the issuer back: %v", err)
	}
}

// TestRemoteKeysFlood: a flood of forged tokens, with new kids or the
// issuer's, costs the issuer at most one fetch of its keys.
func TestRemoteKeysFlood(t *testing.T) {
	is := oidctest.Start(t, oidctest.Options{Alg: "ES256"})
	v, keys := remoteVerifier(t, is, newClock())
	var toks []string
	for i := 0; i < 100; i++ {
		toks = append(toks, is.MintUnknownKey(oidctest.Claims{Subject: "mallory"}), is.MintForeign(oidctest.Claims{Subject: "mallory"}))
	}
	var wg sync.WaitGroup
	for _, tok := range toks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := v.VerifyToken(context.Background(), tok); !errors.Is(err, auth.ErrTokenSignature) {
				t.Errorf("forged token: %v", err)
			}
		}()
	}
	wg.Wait()
	if n := is.Stats().JWKSFetches; n != 1 || keys.Fetches() != 1 {
		t.Fatalf("%d forged tokens made %d JWKS fetches (%d counted by the key set), want 1", len(toks), n, keys.Fetches())
	}
}

// TestStaticKeys: a JWKS file verifies as the remote set does; a file
// with only a symmetric key is refused.
func TestStaticKeys(t *testing.T) {
	is := oidctest.Start(t, oidctest.Options{Alg: "EdDSA"})
	dir := t.TempDir()
	b, err := is.JWKS()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "jwks.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	keys, err := LoadKeys(path)
	if err != nil || keys.Len() != 1 {
		t.Fatalf("LoadKeys = %v, %v", keys, err)
	}
	v, err := NewJWT(JWTConfig{Issuer: is.URL, Audience: is.Audience, Keys: keys, Claims: ClaimMap{Alias: "idp.test"}})
	if err != nil {
		t.Fatal(err)
	}
	testJWTCases(t, is, v)
	for name, content := range map[string]string{
		"oct only":  `{"keys":[{"kty":"oct","k":"c2VjcmV0","kid":"x"}]}`,
		"enc only":  strings.Replace(string(b), `"use":"sig"`, `"use":"enc"`, 1),
		"not JSON":  `keys`,
		"no keys":   `{"keys":[]}`,
		"not a set": `[]`,
	} {
		p := filepath.Join(dir, "bad.json")
		os.WriteFile(p, []byte(content), 0o600)
		if _, err := LoadKeys(p); err == nil || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: LoadKeys error %v should name the file", name, err)
		}
	}
}

func FuzzJWTVerify(f *testing.F) {
	is := oidctest.Start(f, oidctest.Options{Alg: "ES256"})
	b, err := is.JWKS()
	if err != nil {
		f.Fatal(err)
	}
	set, err := parseKeySet(b)
	if err != nil {
		f.Fatal(err)
	}
	v, err := NewJWT(JWTConfig{Issuer: is.URL, Audience: is.Audience, Keys: &StaticKeys{keys: set}, Claims: ClaimMap{Alias: "idp.test"}})
	if err != nil {
		f.Fatal(err)
	}
	good := is.Mint(oidctest.Claims{Subject: "alice"})
	f.Add(good)
	f.Add(is.MintNone(oidctest.Claims{Subject: "alice"}))
	f.Add(is.MintHMACPublic(oidctest.Claims{Subject: "alice"}))
	f.Add(is.MintForeign(oidctest.Claims{Subject: "alice"}))
	f.Add("a.b.c")
	f.Add("")
	f.Fuzz(func(t *testing.T, tok string) {
		p, err := v.VerifyToken(context.Background(), tok)
		if err == nil && tok != good {
			// Only the one genuine token can pass: the fuzzer holds no
			// key of the issuer. (A re-encoding of good's parts would
			// have to keep its signature valid.)
			if p.Identity != "idp.test:alice" {
				t.Fatalf("accepted %q as %+v", tok, p)
			}
		}
		if err != nil && p != nil {
			t.Fatal("principal with an error")
		}
		if err != nil && len(tok) > 16 && strings.Contains(err.Error(), tok) {
			t.Fatal("error repeats the token")
		}
	})
}
