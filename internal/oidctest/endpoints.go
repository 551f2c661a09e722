package oidctest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// The issuer's endpoints, under its URL.
const (
	pathDiscovery  = "/.well-known/openid-configuration"
	pathJWKS       = "/jwks"
	pathDevice     = "/device"
	pathActivate   = "/activate"
	pathToken      = "/token"
	pathIntrospect = "/introspect"
	pathRevoke     = "/revoke"
)

func (is *Issuer) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+pathDiscovery, is.discovery)
	mux.HandleFunc("GET "+pathJWKS, is.jwks)
	mux.HandleFunc("POST "+pathDevice, is.deviceAuth)
	mux.HandleFunc("GET "+pathActivate, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "<form method=post><input name=user_code><input name=user></form>\n")
	})
	mux.HandleFunc("POST "+pathActivate, is.activatePage)
	mux.HandleFunc("POST "+pathToken, is.token)
	mux.HandleFunc("POST "+pathIntrospect, is.introspect)
	mux.HandleFunc("POST "+pathRevoke, is.revoke)
	return mux
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

// oauthError writes an RFC 6749 error response.
func oauthError(w http.ResponseWriter, code int, errCode, desc string) {
	writeJSON(w, code, map[string]string{"error": errCode, "error_description": desc})
}

func (is *Issuer) isDown(w http.ResponseWriter) bool {
	is.mu.Lock()
	down := is.down
	is.mu.Unlock()
	if down {
		http.Error(w, "down for the test", http.StatusServiceUnavailable)
	}
	return down
}

func (is *Issuer) discovery(w http.ResponseWriter, r *http.Request) {
	is.mu.Lock()
	is.stats.Discoveries++
	is.mu.Unlock()
	doc := map[string]any{
		"issuer":                                is.URL,
		"authorization_endpoint":                is.URL + "/authorize",
		"token_endpoint":                        is.URL + pathToken,
		"device_authorization_endpoint":         is.URL + pathDevice,
		"introspection_endpoint":                is.URL + pathIntrospect,
		"jwks_uri":                              is.URL + pathJWKS,
		"response_types_supported":              []string{"code"},
		"subject_types_supported":               []string{"public"},
		"id_token_signing_alg_values_supported": []string{is.opts.Alg},
		"grant_types_supported":                 []string{"urn:ietf:params:oauth:grant-type:device_code", "refresh_token"},
	}
	if !is.opts.NoRevocation {
		doc["revocation_endpoint"] = is.URL + pathRevoke
	}
	writeJSON(w, http.StatusOK, doc)
}

func (is *Issuer) jwks(w http.ResponseWriter, r *http.Request) {
	is.mu.Lock()
	is.stats.JWKSFetches++
	is.mu.Unlock()
	if is.isDown(w) {
		return
	}
	writeJSON(w, http.StatusOK, is.publicKeys())
}

// deviceAuth starts a device authorization (RFC 8628 section 3.1).
func (is *Issuer) deviceAuth(w http.ResponseWriter, r *http.Request) {
	if r.PostFormValue("client_id") != is.ClientID {
		oauthError(w, http.StatusUnauthorized, "invalid_client", "unknown client")
		return
	}
	dc := &deviceCode{
		code:     "dc_" + randHex(20),
		userCode: strings.ToUpper(randHex(2) + "-" + randHex(2)),
		scope:    r.PostFormValue("scope"),
		expiry:   time.Now().Add(10 * time.Minute),
	}
	if dc.scope == "" {
		dc.scope = is.opts.Scope
	}
	is.mu.Lock()
	is.devices[dc.code] = dc
	is.stats.DeviceAuths++
	is.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{
		"device_code":               dc.code,
		"user_code":                 dc.userCode,
		"verification_uri":          is.URL + pathActivate,
		"verification_uri_complete": is.URL + pathActivate + "?user_code=" + dc.userCode,
		"expires_in":                600,
		"interval":                  is.opts.Interval,
	})
}

// activatePage is the verification page a user's browser posts to.
func (is *Issuer) activatePage(w http.ResponseWriter, r *http.Request) {
	code, user, action := r.PostFormValue("user_code"), r.PostFormValue("user"), r.PostFormValue("action")
	is.mu.Lock()
	defer is.mu.Unlock()
	for _, dc := range is.devices {
		if dc.userCode == code && time.Now().Before(dc.expiry) {
			if action == "deny" {
				dc.denied = true
			} else {
				dc.subject = user
			}
			io.WriteString(w, "done\n")
			return
		}
	}
	http.Error(w, "no such code", http.StatusNotFound)
}

func (is *Issuer) activate(ctx context.Context, userCode, subject, action string) error {
	form := url.Values{"user_code": {userCode}, "user": {subject}, "action": {action}}
	req, err := http.NewRequestWithContext(ctx, "POST", is.URL+pathActivate, strings.NewReader(form.Encode()))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := is.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("oidctest: %s user code %q: %s", action, userCode, resp.Status)
	}
	return nil
}

// token serves the device_code and refresh_token grants.
func (is *Issuer) token(w http.ResponseWriter, r *http.Request) {
	if is.isDown(w) {
		return
	}
	if r.PostFormValue("client_id") != is.ClientID {
		oauthError(w, http.StatusUnauthorized, "invalid_client", "unknown client")
		return
	}
	var g grant
	switch r.PostFormValue("grant_type") {
	case "urn:ietf:params:oauth:grant-type:device_code":
		is.mu.Lock()
		dc := is.devices[r.PostFormValue("device_code")]
		switch {
		case dc == nil:
			is.mu.Unlock()
			oauthError(w, http.StatusBadRequest, "invalid_grant", "unknown device code")
			return
		case time.Now().After(dc.expiry):
			delete(is.devices, dc.code)
			is.mu.Unlock()
			oauthError(w, http.StatusBadRequest, "expired_token", "device code expired")
			return
		case dc.denied:
			delete(is.devices, dc.code)
			is.mu.Unlock()
			oauthError(w, http.StatusBadRequest, "access_denied", "the user denied the request")
			return
		case dc.subject == "":
			is.mu.Unlock()
			oauthError(w, http.StatusBadRequest, "authorization_pending", "waiting for the user")
			return
		}
		delete(is.devices, dc.code)
		is.stats.DeviceGrants++
		is.mu.Unlock()
		g = grant{subject: dc.subject, scope: dc.scope}
	case "refresh_token":
		rt := r.PostFormValue("refresh_token")
		is.mu.Lock()
		old, ok := is.refresh[rt]
		if ok {
			delete(is.refresh, rt) // refresh tokens rotate: each is good once
			is.stats.Refreshes++
		}
		is.mu.Unlock()
		if !ok {
			oauthError(w, http.StatusBadRequest, "invalid_grant", "unknown or used refresh token")
			return
		}
		g = old
	default:
		oauthError(w, http.StatusBadRequest, "unsupported_grant_type", "device_code and refresh_token only")
		return
	}
	c := Claims{Subject: g.subject, Scope: g.scope, Groups: is.opts.Groups[g.subject]}
	var access string
	if is.opts.Opaque {
		access = is.MintOpaque(c)
	} else {
		access = is.Mint(c)
	}
	rt := "rt_" + randHex(24)
	is.mu.Lock()
	is.refresh[rt] = g
	is.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{
		"access_token":  access,
		"token_type":    "Bearer",
		"expires_in":    int(is.accessTTL() / time.Second),
		"refresh_token": rt,
		"scope":         g.scope,
	})
}

// introspect answers RFC 7662 requests from the gateway's client.
func (is *Issuer) introspect(w http.ResponseWriter, r *http.Request) {
	is.mu.Lock()
	is.stats.Introspections++
	is.inflight++
	is.stats.MaxInFlight = max(is.stats.MaxInFlight, is.inflight)
	gate := is.gate
	is.mu.Unlock()
	defer func() {
		is.mu.Lock()
		is.inflight--
		is.mu.Unlock()
	}()
	if gate != nil {
		select {
		case <-gate:
		case <-r.Context().Done():
			return
		}
	}
	if is.isDown(w) {
		return
	}
	id, secret, ok := r.BasicAuth()
	if ok {
		id, _ = url.QueryUnescape(id)
		secret, _ = url.QueryUnescape(secret)
	}
	if !ok || id != is.IntrospectionClientID || secret != is.IntrospectionSecret {
		w.Header().Set("WWW-Authenticate", `Basic realm="introspection"`)
		oauthError(w, http.StatusUnauthorized, "invalid_client", "bad client credentials")
		return
	}
	tok := r.PostFormValue("token")
	is.mu.Lock()
	c, known := is.opaque[tok]
	revoked := is.revoked[tok]
	is.mu.Unlock()
	if !known || revoked || time.Now().After(c.Expiry) {
		writeJSON(w, http.StatusOK, map[string]any{"active": false})
		return
	}
	resp := map[string]any{
		"active": true, "token_type": "Bearer", "client_id": is.ClientID,
		"sub": c.Subject, "username": c.Subject, "iss": c.Issuer, "aud": c.Audience,
		"iat": c.IssuedAt.Unix(), "nbf": c.NotBefore.Unix(), "exp": c.Expiry.Unix(),
	}
	if c.NoExpiry {
		delete(resp, "exp")
	}
	if c.Scope != "" {
		resp["scope"] = c.Scope
	}
	if c.Groups != nil {
		resp["groups"] = c.Groups
	}
	for k, v := range c.Extra {
		resp[k] = v
	}
	writeJSON(w, http.StatusOK, resp)
}

// revoke serves RFC 7009: the token is forgotten, whatever it was.
func (is *Issuer) revoke(w http.ResponseWriter, r *http.Request) {
	tok := r.PostFormValue("token")
	is.Revoke(tok)
	is.mu.Lock()
	is.stats.Revocations++
	is.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}
