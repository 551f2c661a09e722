// Package login is the client's side of identity providers (s2uc login):
// the OAuth 2.0 device authorization grant (RFC 8628) against an issuer
// found by OpenID Connect discovery, the token it yields kept in a file
// only its owner may read (store.go), renewed with the refresh_token
// grant when it is about to expire, and revoked (RFC 7009) at logout
// when the issuer offers it.
//
// Nothing here prints or logs a token, nor puts one, or an issuer's raw
// answer, in an error.
package login

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"scistream/internal/idp"
)

// Config says where to log in.
type Config struct {
	// Issuer is the OpenID Connect issuer (https). Required.
	Issuer string
	// ClientID is the public client the issuer knows the client by.
	// Required.
	ClientID string
	// Scopes are asked for; if empty, the issuer's defaults.
	Scopes []string
	// CAFile verifies the issuer's HTTPS; if empty, the system's roots.
	// It is kept with the token, so that its renewal trusts the same.
	CAFile string
}

func (c Config) validate() error {
	if err := idp.CheckHTTPS("issuer", c.Issuer); err != nil {
		return err
	}
	if c.ClientID == "" {
		return errors.New("client id is required: the issuer's client id for s2uc (ask the gateway's operator)")
	}
	return nil
}

// Pending is a device authorization waiting for the user.
type Pending struct {
	// VerificationURI is where the user goes, in a browser, to enter
	// UserCode; VerificationURIComplete, if the issuer gives it, holds
	// the code already.
	VerificationURI, VerificationURIComplete string
	UserCode                                 string
	// Expiry is when the code expires.
	Expiry time.Time

	cfg        Config
	hc         *http.Client
	oc         *oauth2.Config
	revocation string
	da         *oauth2.DeviceAuthResponse
}

// Start discovers the issuer's endpoints and asks for a device code.
func Start(ctx context.Context, cfg Config) (*Pending, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	hc, err := idp.HTTPClient(cfg.CAFile)
	if err != nil {
		return nil, fmt.Errorf("CA file: %w", err)
	}
	ctx = oidc.ClientContext(ctx, hc)
	p, err := oidc.NewProvider(ctx, cfg.Issuer)
	if err != nil {
		return nil, fmt.Errorf("discovery of %s: %w", cfg.Issuer, err)
	}
	var doc struct {
		Revocation string `json:"revocation_endpoint"`
	}
	p.Claims(&doc)
	ep := p.Endpoint()
	if ep.DeviceAuthURL == "" {
		return nil, fmt.Errorf("the issuer %s offers no device authorization endpoint: s2uc login needs one (RFC 8628)", cfg.Issuer)
	}
	for _, u := range []struct{ what, url string }{{"device_authorization_endpoint", ep.DeviceAuthURL}, {"token_endpoint", ep.TokenURL}} {
		if err := idp.CheckHTTPS(u.what, u.url); err != nil {
			return nil, fmt.Errorf("discovery of %s: %w", cfg.Issuer, err)
		}
	}
	if doc.Revocation != "" && idp.CheckHTTPS("revocation_endpoint", doc.Revocation) != nil {
		doc.Revocation = ""
	}
	// A public client: its id goes in the form, with no secret.
	ep.AuthStyle = oauth2.AuthStyleInParams
	oc := &oauth2.Config{ClientID: cfg.ClientID, Endpoint: ep, Scopes: cfg.Scopes}
	da, err := oc.DeviceAuth(ctx)
	if err != nil {
		return nil, fmt.Errorf("device authorization at %s: %w", cfg.Issuer, oauthError(err))
	}
	if da.UserCode == "" || da.VerificationURI == "" || da.DeviceCode == "" {
		return nil, fmt.Errorf("device authorization at %s: the answer lacks a user code, verification URI or device code", cfg.Issuer)
	}
	return &Pending{
		VerificationURI: da.VerificationURI, VerificationURIComplete: da.VerificationURIComplete,
		UserCode: da.UserCode, Expiry: da.Expiry,
		cfg: cfg, hc: hc, oc: oc, revocation: doc.Revocation, da: da,
	}, nil
}

// Wait polls the issuer, at the interval it asked for, until the user
// approves (it returns the token to save), denies, or the code expires,
// or ctx ends.
func (p *Pending) Wait(ctx context.Context) (*Saved, error) {
	tok, err := p.oc.DeviceAccessToken(oidc.ClientContext(ctx, p.hc), p.da)
	if err != nil {
		var re *oauth2.RetrieveError
		switch {
		case errors.As(err, &re) && re.ErrorCode == "access_denied":
			return nil, errors.New("the login was denied at the issuer")
		case errors.As(err, &re) && re.ErrorCode == "expired_token", errors.Is(err, context.DeadlineExceeded):
			return nil, errors.New("the code expired before the login was approved: run s2uc login again")
		}
		return nil, fmt.Errorf("waiting for approval at %s: %w", p.cfg.Issuer, oauthError(err))
	}
	return p.saved(tok), nil
}

func (p *Pending) saved(tok *oauth2.Token) *Saved {
	s := &Saved{
		Issuer: p.cfg.Issuer, ClientID: p.cfg.ClientID, Scopes: p.cfg.Scopes, CAFile: p.cfg.CAFile,
		TokenEndpoint: p.oc.Endpoint.TokenURL, RevocationEndpoint: p.revocation,
	}
	s.set(tok)
	return s
}

// oauthError says what an issuer refused without its raw answer, which
// oauth2.RetrieveError's text includes.
func oauthError(err error) error {
	var re *oauth2.RetrieveError
	if !errors.As(err, &re) {
		var ue *url.Error
		if errors.As(err, &ue) {
			return ue.Err
		}
		return err
	}
	msg := re.ErrorCode
	if msg == "" && re.Response != nil {
		msg = "HTTP " + re.Response.Status
	}
	if d := strings.TrimSpace(re.ErrorDescription); d != "" {
		msg += ": " + limit(d, 200)
	}
	return errors.New(msg)
}

func limit(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// Margin is how long before its expiry a stored token is renewed, so
// that it does not expire during the request it is sent with.
const Margin = 60 * time.Second

// refresh renews s with its refresh token.
func (s *Saved) refresh(ctx context.Context) error {
	if s.RefreshToken == "" {
		return fmt.Errorf("your login to %s has expired and holds no refresh token: run s2uc login", s.Issuer)
	}
	hc, err := idp.HTTPClient(s.CAFile)
	if err != nil {
		return fmt.Errorf("CA file of the login: %w", err)
	}
	oc := &oauth2.Config{ClientID: s.ClientID, Scopes: s.Scopes,
		Endpoint: oauth2.Endpoint{TokenURL: s.TokenEndpoint, AuthStyle: oauth2.AuthStyleInParams}}
	// An expired token makes the source use its refresh token.
	tok, err := oc.TokenSource(oidc.ClientContext(ctx, hc), &oauth2.Token{RefreshToken: s.RefreshToken, Expiry: time.Unix(1, 0)}).Token()
	if err != nil {
		return fmt.Errorf("your login to %s could not be renewed (%w): run s2uc login", s.Issuer, oauthError(err))
	}
	refresh := s.RefreshToken
	s.set(tok)
	if s.RefreshToken == "" { // RFC 6749 6: the issuer may keep the old one
		s.RefreshToken = refresh
	}
	return nil
}

// Revoke asks the issuer to revoke s's tokens, refresh token first (RFC
// 7009 section 2.1: that revokes the access tokens it made, at issuers
// that track them). It reports whether the issuer offers revocation.
func Revoke(ctx context.Context, s *Saved) (bool, error) {
	if s.RevocationEndpoint == "" {
		return false, nil
	}
	hc, err := idp.HTTPClient(s.CAFile)
	if err != nil {
		return true, fmt.Errorf("CA file of the login: %w", err)
	}
	for _, t := range []struct{ tok, hint string }{{s.RefreshToken, "refresh_token"}, {s.AccessToken, "access_token"}} {
		if t.tok == "" {
			continue
		}
		form := url.Values{"token": {t.tok}, "token_type_hint": {t.hint}, "client_id": {s.ClientID}}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.RevocationEndpoint, strings.NewReader(form.Encode()))
		if err != nil {
			return true, err
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := hc.Do(req)
		if err != nil {
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err
			}
			return true, fmt.Errorf("revocation at %s: %w", s.RevocationEndpoint, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return true, fmt.Errorf("revocation at %s: HTTP %s", s.RevocationEndpoint, resp.Status)
		}
	}
	return true, nil
}
