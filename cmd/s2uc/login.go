package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"scistream/internal/login"
)

func runLogin(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cl := newLocalCmdline("login", "--issuer URL --client_id ID [--scope SCOPES] [--ca FILE]", stderr)
	issuer := cl.fs.String("issuer", "", "the OpenID Connect issuer the gateways trust, an https URL (their operator names it)")
	clientID := cl.fs.String("client_id", "", "s2uc's client id at the issuer (the gateways' operator names it)")
	scope := cl.fs.String("scope", "", "the scopes to ask for, separated by spaces (default: the issuer's)")
	ca := cl.fs.String("ca", "", "PEM CA certificate(s) that verify the issuer's HTTPS (default: the system's roots)")
	if _, err := cl.parse(args, 0, 0, ""); err != nil {
		return err
	}
	switch {
	case *issuer == "":
		return usagef("missing --issuer URL of the identity provider the gateways trust (their operator names it)")
	case *clientID == "":
		return usagef("missing --client_id: s2uc's client id at the issuer (the gateways' operator names it)")
	}
	cfg := login.Config{Issuer: *issuer, ClientID: *clientID, Scopes: strings.Fields(*scope)}
	if *ca != "" {
		abs, err := filepath.Abs(*ca)
		if err != nil {
			return usagef("--ca: %w", err)
		}
		cfg.CAFile = abs
	}
	st, err := login.DefaultStore()
	if err != nil {
		return err
	}
	p, err := login.Start(ctx, cfg)
	if err != nil {
		return loginFlagError(err)
	}
	fmt.Fprintf(stdout, "To log in, open %s in a browser and enter the code %s\n", p.VerificationURI, p.UserCode)
	if p.VerificationURIComplete != "" {
		fmt.Fprintf(stdout, "  (or open %s)\n", p.VerificationURIComplete)
	}
	if !p.Expiry.IsZero() {
		fmt.Fprintf(stdout, "The code expires in %s. Waiting for the approval...\n", time.Until(p.Expiry).Round(time.Second))
	}
	saved, err := p.Wait(ctx)
	if err != nil {
		return err
	}
	if err := st.Save(saved); err != nil {
		return fmt.Errorf("save the login: %w", err)
	}
	until := "no expiry given"
	if !saved.Expiry.IsZero() {
		until = "valid until " + saved.Expiry.Local().Format(time.RFC3339)
	}
	renew := "s2uc renews it while the issuer allows"
	if saved.RefreshToken == "" {
		renew = "the issuer gave no refresh token: log in again when it expires"
	}
	fmt.Fprintf(stdout, "Logged in to %s. The token is kept in %s (%s; %s).\n", saved.Issuer, st.Path, until, renew)
	return nil
}

// loginFlagError adds to login's configuration errors the flag that set
// the value.
func loginFlagError(err error) error {
	msg := err.Error()
	switch {
	case strings.HasPrefix(msg, "issuer "), strings.HasPrefix(msg, "discovery of"):
		return usagef("--issuer: %w", err)
	case strings.HasPrefix(msg, "CA file"):
		return usagef("--ca: %w", err)
	}
	return err
}

func runLogout(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cl := newLocalCmdline("logout", "", stderr)
	if _, err := cl.parse(args, 0, 0, ""); err != nil {
		return err
	}
	st, err := login.DefaultStore()
	if err != nil {
		return err
	}
	s, err := st.Load()
	switch {
	case errors.Is(err, login.ErrNoLogin):
		fmt.Fprintln(stdout, "Not logged in.")
		return nil
	case err != nil:
		if rerr := st.Remove(); rerr != nil {
			return rerr
		}
		fmt.Fprintf(stdout, "Removed %s (%v).\n", st.Path, err)
		return nil
	}
	offered, rerr := login.Revoke(ctx, s)
	if err := st.Remove(); err != nil {
		return err
	}
	switch {
	case rerr != nil:
		fmt.Fprintf(stdout, "Logged out of %s: the token is removed, but the issuer did not revoke it (%v); it stays valid until it expires.\n", s.Issuer, rerr)
	case offered:
		fmt.Fprintf(stdout, "Logged out of %s: the token is revoked and removed.\n", s.Issuer)
	default:
		fmt.Fprintf(stdout, "Logged out of %s: the token is removed; the issuer offers no revocation, so it stays valid until it expires.\n", s.Issuer)
	}
	return nil
}
