package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"scistream/internal/access"
	"scistream/internal/api"
	"scistream/internal/auth"
	"scistream/internal/idp"
	"scistream/internal/oidctest"
)

// Tokens of the identities the role tests add.
const (
	opsToken   = "ops-token-for-tests"
	monToken   = "monitor-token-for-tests"
	carolToken = "carol-token-for-tests"
)

// rolesServer is a test server whose token file knows alice, bob, ops,
// mon and carol, under the roles file policy.
// mustPolicy parses a roles file's text.
func mustPolicy(t *testing.T, text string) *auth.Policy {
	t.Helper()
	pol, err := auth.ParsePolicy(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	return pol
}

func rolesServer(t *testing.T, policy string) *Server {
	t.Helper()
	var lines string
	for tok, id := range map[string]string{aliceToken: "alice", bobToken: "bob", opsToken: "ops", monToken: "mon", carolToken: "carol"} {
		lines += auth.HashToken(tok) + " " + id + "\n"
	}
	tokens, err := auth.ParseTokens(strings.NewReader(lines))
	if err != nil {
		t.Fatal(err)
	}
	var pol *auth.Policy
	if policy != "" {
		pol = mustPolicy(t, policy)
	}
	return newTestServer(t, func(c *Config) { c.Auth = tokens; c.Roles = pol })
}

// TestRoles: a user manages its own streams only, exactly as without
// roles; an operator lists, reads and releases anyone's; a reader reads
// the gateway's info but no stream; a caller no rule names may do
// nothing.
func TestRoles(t *testing.T) {
	s := rolesServer(t, "user identity alice\nuser identity bob\noperator identity ops\nreader identity mon\n")
	var alices api.Stream
	callOK(t, s, "POST", "/v1/streams/inbound", aliceToken, inboundBody(9), 201, &alices)
	path := "/v1/streams/" + alices.UID

	// carol holds no role; mon only reader.
	callErr(t, s, "GET", "/v1/info", carolToken, "", 403, api.CodePermissionDenied, "carol holds no role on this gateway; this needs the role user or reader")
	callErr(t, s, "POST", "/v1/streams/inbound", carolToken, inboundBody(9), 403, api.CodePermissionDenied, "s2cs --roles")
	var info api.Info
	callOK(t, s, "GET", "/v1/info", monToken, "", 200, &info)
	if info.Identity != "mon" || len(info.Roles) != 1 || info.Roles[0] != "reader" {
		t.Fatalf("mon's info: %s %v", info.Identity, info.Roles)
	}
	callErr(t, s, "GET", "/v1/streams", monToken, "", 403, api.CodePermissionDenied, "mon holds the role reader")
	callErr(t, s, "DELETE", path, monToken, "", 403, api.CodePermissionDenied, "needs the role user")

	// bob, a user: alice's stream is not found, and naming its owner is
	// an operator's right.
	callErr(t, s, "GET", path, bobToken, "", 404, api.CodeNotFound, "of yours")
	callErr(t, s, "DELETE", path, bobToken, "", 404, api.CodeNotFound, "of yours")
	callErr(t, s, "DELETE", path+"?owner=alice", bobToken, "", 403, api.CodePermissionDenied, "only an operator")
	callErr(t, s, "GET", "/v1/streams?all_owners=true", bobToken, "", 403, api.CodePermissionDenied, "only an operator")
	callErr(t, s, "GET", "/v1/streams?owner=alice", bobToken, "", 403, api.CodePermissionDenied, "only an operator")
	// Naming oneself is no privilege.
	callOK(t, s, "GET", path+"?owner=alice", aliceToken, "", 200, nil)

	// ops, an operator: alice's stream is found under its owner's name,
	// and in the list of every owner, with its owner.
	callErr(t, s, "GET", path, opsToken, "", 404, api.CodeNotFound, "of yours")
	callErr(t, s, "GET", path+"?owner=bob", opsToken, "", 404, api.CodeNotFound, "of bob on this gateway; list theirs with s2uc list --owner bob")
	var got api.Stream
	callOK(t, s, "GET", path+"?owner=alice", opsToken, "", 200, &got)
	if got.Owner != "alice" || got.UID != alices.UID || got.Secret != "" {
		t.Fatalf("operator's get: %+v", got)
	}
	var list api.StreamList
	callOK(t, s, "GET", "/v1/streams?all_owners=true", opsToken, "", 200, &list)
	if len(list.Streams) != 1 || list.Streams[0].Owner != "alice" {
		t.Fatalf("operator's list of every owner: %+v", list)
	}
	callOK(t, s, "GET", "/v1/streams?owner=bob", opsToken, "", 200, &list)
	if len(list.Streams) != 0 {
		t.Fatalf("operator's list of bob's: %+v", list)
	}
	callErr(t, s, "GET", "/v1/streams?owner=alice&all_owners=true", opsToken, "", 400, api.CodeInvalidArgument, "not both")
	callErr(t, s, "GET", "/v1/streams?all_owners=maybe", opsToken, "", 400, api.CodeInvalidArgument, "all_owners=")
	callErr(t, s, "GET", path+"?owner=ali%20ce", opsToken, "", 400, api.CodeInvalidArgument, "not an identity")
	callErr(t, s, "GET", path+"?all_owners=true", opsToken, "", 400, api.CodeInvalidArgument, "owner=")
	// An operator creates streams of its own too (operator implies user).
	callOK(t, s, "GET", "/v1/streams", opsToken, "", 200, nil)

	// Updates likewise: an operator may shorten alice's lease; bob may not.
	callErr(t, s, "PATCH", path+"?owner=alice", bobToken, `{"lease_s":60}`, 403, api.CodePermissionDenied, "only an operator")
	callErr(t, s, "PATCH", path, monToken, `{"lease_s":60}`, 403, api.CodePermissionDenied, "needs the role user")
	callOK(t, s, "PATCH", path+"?owner=alice", opsToken, `{"lease_s":60}`, 200, &got)
	if got.Owner != "alice" || got.LeaseS != 60 {
		t.Fatalf("operator's update: owner %s lease %d", got.Owner, got.LeaseS)
	}

	var rel api.Stream
	callOK(t, s, "DELETE", path+"?owner=alice", opsToken, "", 200, &rel)
	if rel.State != api.StateReleased || rel.Owner != "alice" || !strings.Contains(rel.Reason, "released by ops") {
		t.Fatalf("operator's release: %+v", rel)
	}
	callOK(t, s, "GET", "/v1/streams?all=true", aliceToken, "", 200, &list)
	if len(list.Streams) != 1 || list.Streams[0].State != api.StateReleased {
		t.Fatalf("alice's list after the operator's release: %+v", list)
	}
	callOK(t, s, "GET", "/v1/streams?all=true&all_owners=true", opsToken, "", 200, &list)
	if len(list.Streams) != 1 {
		t.Fatalf("operator's list of ended streams: %+v", list)
	}
}

// TestOperatorView: operatorView, the guard of GET /metrics and GET
// /v1/status, serves readers and operators, and answers everyone else
// as the API does.
func TestOperatorView(t *testing.T) {
	for _, c := range []struct {
		policy string
		status map[string]int // token -> status
	}{
		{"user any\noperator identity ops\nreader identity mon\n",
			map[string]int{monToken: 200, opsToken: 200, aliceToken: 403, "": 401, "wrong": 401}},
		// No policy: every authenticated caller is a user, and nobody a
		// reader (the status and metrics show every identity's streams).
		{"", map[string]int{aliceToken: 403, carolToken: 403, "": 401}},
	} {
		s := rolesServer(t, c.policy)
		h := s.operatorView(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte("metrics of " + access.Identity(r)))
		}))
		for tok, want := range c.status {
			req := httptest.NewRequest("GET", "/metrics", nil)
			if tok != "" {
				req.Header.Set("Authorization", "Bearer "+tok)
			}
			rr := httptest.NewRecorder()
			h.ServeHTTP(rr, req)
			if rr.Code != want {
				t.Errorf("policy %q, token %q: %d %s, want %d", c.policy, tok, rr.Code, rr.Body, want)
			}
			if want == 200 && !strings.HasPrefix(rr.Body.String(), "metrics of ") {
				t.Errorf("handler saw no identity: %s", rr.Body)
			}
			if want != 200 && rr.Header().Get("WWW-Authenticate") == "" {
				t.Errorf("token %q: %d without WWW-Authenticate", tok, rr.Code)
			}
		}
	}
}

// TestIdentityProviderTokens: a gateway that trusts an issuer's JWTs and
// its introspection endpoint, beside static tokens, admits good tokens
// under the provider's alias, refuses each bad one with a message that
// says what to do, answers unavailable while the endpoint is down, and
// writes no token into its log or any answer.
func TestIdentityProviderTokens(t *testing.T) {
	is := oidctest.Start(t, oidctest.Options{Alg: "ES256"})
	keys, err := idp.NewRemoteKeys(idp.RemoteConfig{Issuer: is.URL, Client: is.Client()})
	if err != nil {
		t.Fatal(err)
	}
	jv, err := idp.NewJWT(idp.JWTConfig{Issuer: is.URL, Audience: is.Audience, Keys: keys, Claims: idp.ClaimMap{Alias: "idp.test"}})
	if err != nil {
		t.Fatal(err)
	}
	in, err := idp.NewIntrospector(idp.IntrospectConfig{URL: is.URL + "/introspect", ClientID: is.IntrospectionClientID,
		Secret: is.IntrospectionSecret, Client: is.Client(), Claims: idp.ClaimMap{Alias: "idp.test"}, NegativeTTL: -1})
	if err != nil {
		t.Fatal(err)
	}
	static, err := auth.ParseTokens(strings.NewReader(auth.HashToken(aliceToken) + " alice\n"))
	if err != nil {
		t.Fatal(err)
	}
	policy := mustPolicy(t, "user identity alice\nuser identity idp.test:alice\noperator group idp.test:ops\n")
	logs := &logLines{} // strangers_test.go
	s := newTestServer(t, func(c *Config) {
		c.Auth = &auth.Chain{Static: static, JWT: jv, Opaque: in}
		c.Roles = policy
		c.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	now := time.Now()
	alice := oidctest.Claims{Subject: "alice"}
	with := func(c oidctest.Claims, mod func(*oidctest.Claims)) oidctest.Claims { mod(&c); return c }
	var toks []string
	tok := func(s string) string { toks = append(toks, s); return s }
	cases := []struct {
		name    string
		token   string
		status  int
		code    api.Code
		mention string
	}{
		{"static token", aliceToken, 200, "", "alice"},
		{"jwt", tok(is.Mint(alice)), 200, "", "idp.test:alice"},
		{"opaque", tok(is.MintOpaque(alice)), 200, "", "idp.test:alice"},
		{"operator by group", tok(is.Mint(oidctest.Claims{Subject: "carol", Groups: []string{"ops"}})), 200, "", "idp.test:carol"},
		{"valid but no role", tok(is.Mint(oidctest.Claims{Subject: "dave"})), 403, api.CodePermissionDenied, "idp.test:dave holds no role"},
		{"expired", tok(is.Mint(with(alice, func(c *oidctest.Claims) { c.Expiry = now.Add(-time.Hour) }))), 401, api.CodeUnauthenticated, "token expired; run s2uc login"},
		{"not yet valid", tok(is.Mint(with(alice, func(c *oidctest.Claims) { c.NotBefore = now.Add(time.Hour) }))), 401, api.CodeUnauthenticated, "not valid yet"},
		{"wrong audience", tok(is.Mint(with(alice, func(c *oidctest.Claims) { c.Audience = []string{"elsewhere"} }))), 401, api.CodeUnauthenticated, "another audience"},
		{"wrong issuer", tok(is.Mint(with(alice, func(c *oidctest.Claims) { c.Issuer = "https://evil.example" }))), 401, api.CodeUnauthenticated, "does not trust"},
		{"alg none", tok(is.MintNone(alice)), 401, api.CodeUnauthenticated, "algorithm"},
		{"HMAC with the public key", tok(is.MintHMACPublic(alice)), 401, api.CodeUnauthenticated, "algorithm"},
		{"forged", tok(is.MintForeign(alice)), 401, api.CodeUnauthenticated, "signature"},
		{"opaque expired", tok(is.MintOpaque(with(alice, func(c *oidctest.Claims) { c.Expiry = now.Add(-time.Hour) }))), 401, api.CodeUnauthenticated, "not active"},
		{"opaque unknown", tok("unknown-opaque-token-0123456789"), 401, api.CodeUnauthenticated, "not active"},
		{"oversized", tok(strings.Repeat("A", auth.MaxTokenBytes+1)), 401, api.CodeUnauthenticated, "longer than 8192 bytes"},
		{"malformed", tok("not/a token{}"), 401, api.CodeUnauthenticated, "malformed bearer token"},
	}
	calls := in.Calls()
	for _, c := range cases {
		if c.status == 200 {
			var info api.Info
			callOK(t, s, "GET", "/v1/info", c.token, "", 200, &info)
			if info.Identity != c.mention {
				t.Errorf("%s: identity %q, want %q", c.name, info.Identity, c.mention)
			}
			continue
		}
		code, body := call(t, s, "GET", "/v1/info", c.token, "")
		if code != c.status || !strings.Contains(string(body), string(c.code)) || !strings.Contains(string(body), c.mention) {
			t.Errorf("%s: %d %s; want %d %s mentioning %q", c.name, code, body, c.status, c.code, c.mention)
		}
		for _, tk := range toks {
			if strings.Contains(string(body), tk) {
				t.Errorf("%s: the answer holds a token", c.name)
			}
		}
	}
	if got := in.Calls() - calls; got != 3 {
		t.Errorf("%d introspections, want 3 (the oversized and malformed tokens must not reach the endpoint)", got)
	}
	// The endpoint down: the opaque token is neither admitted nor
	// refused; the JWT still works.
	is.SetDown(true)
	callErr(t, s, "GET", "/v1/info", is.MintOpaque(alice), "", 503, api.CodeUnavailable, "could not be asked")
	callOK(t, s, "GET", "/v1/info", toks[0], "", 200, nil)
	is.SetDown(false)
	log := logs.String()
	if !strings.Contains(log, "token expired") {
		t.Fatalf("the log does not say why tokens were refused:\n%s", log)
	}
	for _, tk := range append(toks, aliceToken, is.IntrospectionSecret) {
		if strings.Contains(log, tk) {
			t.Fatalf("the gateway's log holds a token or the client secret:\n%s", log)
		}
	}
}

// inactive is an opaque-token verifier that refuses every token, as an
// introspection endpoint does garbage.
type inactive struct{}

func (inactive) VerifyToken(context.Context, string) (*auth.Principal, error) {
	return nil, auth.ErrTokenInactive
}

// TestBudgetRefusalSaid: a caller over its address's budget of token
// checks (auth.Budget) hears that, and when to retry, not that the
// identity provider could not be asked.
func TestBudgetRefusalSaid(t *testing.T) {
	s := newTestServer(t, func(c *Config) {
		c.Auth = &auth.Chain{Opaque: inactive{}, Budget: auth.NewBudget(auth.BudgetConfig{Burst: 2, Refill: time.Hour})}
	})
	for i := range 2 {
		callErr(t, s, "GET", "/v1/streams", fmt.Sprintf("garbage-%d", i), "", 401, api.CodeUnauthenticated, "not active")
	}
	callErr(t, s, "GET", "/v1/streams", "garbage-2", "", 503, api.CodeUnavailable, "too many token checks from 192.0.2.1 that did not authenticate lately: retry in")
}
