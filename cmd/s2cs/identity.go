package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"scistream/internal/auth"
	"scistream/internal/idp"
	"scistream/internal/secretfile"
)

// idOptions are the flags of the identity providers s2cs trusts beside
// its token file, and of its roles file (docs/identity.md).
type idOptions struct {
	issuer, audience, jwksFile, ca, algs string
	skew                                 time.Duration
	idClaim, groupsClaim, alias          string

	introURL, introClientID, introSecretFile string
	introSecret                              string // inline, from a 1.2 command line's --client_secret (legacy12.go); "": read introSecretFile
	introAudience                            string
	introIDClaim, introGroupsClaim           string
	introAlias                               string
	introCacheTTL                            time.Duration
	introInFlight                            int

	rolesFile string
}

func (o *idOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.issuer, "oidc_issuer", "", "trust JWT access tokens of this OpenID Connect issuer (https URL; its keys come by discovery unless --oidc_jwks_file)")
	fs.StringVar(&o.audience, "oidc_audience", "", "the \"aud\" the issuer's tokens must carry: this gateway's name at the issuer (required with --oidc_issuer)")
	fs.StringVar(&o.jwksFile, "oidc_jwks_file", "", "read the issuer's keys from this JWKS file instead of fetching them")
	fs.StringVar(&o.ca, "oidc_ca", "", "PEM CA certificate(s) that verify the HTTPS of the issuer and the introspection endpoint (default: the system's roots)")
	fs.StringVar(&o.algs, "oidc_algs", strings.Join(idp.DefaultAlgorithms(), ","), "signature algorithms a JWT may use, among RS256-512, PS256-512, ES256-512 and EdDSA (never none or HMAC)")
	fs.DurationVar(&o.skew, "oidc_clock_skew", idp.DefaultClockSkew, "how far a token's exp, nbf and iat may be off this host's clock, at most 10m (also for introspection)")
	fs.StringVar(&o.idClaim, "oidc_identity_claim", "sub", "the JWT claim that names the caller, e.g. sub, preferred_username or email")
	fs.StringVar(&o.groupsClaim, "oidc_groups_claim", "groups", "the JWT claim that lists the caller's groups (for --roles)")
	fs.StringVar(&o.alias, "oidc_alias", "", "prefix of the identities and groups the issuer vouches for, \"ALIAS:name\" (default: the issuer's host name); must differ from --introspection_alias")
	fs.StringVar(&o.introURL, "introspection_url", "", "check opaque tokens at this RFC 7662 introspection endpoint (https URL), e.g. Globus Auth's")
	fs.StringVar(&o.introClientID, "introspection_client_id", "", "this gateway's client id at the introspection endpoint (required with --introspection_url)")
	fs.StringVar(&o.introSecretFile, "introspection_secret_file", "", "file holding the client secret for the introspection endpoint, readable by its owner only (required with --introspection_url)")
	fs.StringVar(&o.introAudience, "introspection_audience", "", "if set, a value the introspection answer's \"aud\" must hold")
	fs.StringVar(&o.introIDClaim, "introspection_identity_claim", "sub", "the introspection answer's field that names the caller, e.g. sub or username (Globus Auth)")
	fs.StringVar(&o.introGroupsClaim, "introspection_groups_claim", "groups", "the introspection answer's field that lists the caller's groups")
	fs.StringVar(&o.introAlias, "introspection_alias", "", "prefix of the identities and groups the endpoint vouches for (default: its host name); must differ from --oidc_alias")
	fs.DurationVar(&o.introCacheTTL, "introspection_cache_ttl", idp.DefaultCacheTTL, "longest an active introspection answer is reused (never past the token's expiry)")
	fs.IntVar(&o.introInFlight, "introspection_max_in_flight", idp.DefaultMaxInFlight, "most introspection requests at once, a quarter of them (at least 1 of 2 or more) kept for addresses a token was accepted from lately; more token checks wait, then answer unavailable (docs/identity.md: fair checks)")
	fs.StringVar(&o.rolesFile, "roles", "", "roles file: lines \"<user|operator|reader> <any | identity NAME | group NAME | scope NAME>\"; without it every authenticated caller is a user and nobody a reader: the status shows each caller its own streams, and the metrics, which show every identity's, answer permission_denied to every token; read again on SIGHUP, as --tokens is (docs/identity.md)")
}

// jwt reports whether JWTs of an issuer are trusted; opaque whether an
// introspection endpoint is.
func (o *idOptions) jwt() bool    { return o.issuer != "" }
func (o *idOptions) opaque() bool { return o.introURL != "" }

// check refuses a combination of the flags that cannot work, before
// anything is read.
func (o *idOptions) check() error {
	if !o.jwt() {
		for _, f := range []struct{ name, v string }{{"--oidc_audience", o.audience}, {"--oidc_jwks_file", o.jwksFile}, {"--oidc_alias", o.alias}} {
			if f.v != "" {
				return fmt.Errorf("%s needs --oidc_issuer", f.name)
			}
		}
	}
	if !o.opaque() {
		for _, f := range []struct{ name, v string }{{"--introspection_client_id", o.introClientID}, {"--introspection_secret_file", o.introSecretFile},
			{"--introspection_audience", o.introAudience}, {"--introspection_alias", o.introAlias}} {
			if f.v != "" {
				return fmt.Errorf("%s needs --introspection_url", f.name)
			}
		}
	}
	switch {
	case o.jwt() && o.audience == "":
		return errors.New("--oidc_issuer needs --oidc_audience: the \"aud\" this gateway's tokens carry at the issuer")
	case o.opaque() && o.introClientID == "":
		return errors.New("--introspection_url needs --introspection_client_id")
	case o.opaque() && o.introSecretFile == "" && o.introSecret == "":
		return errors.New("--introspection_url needs --introspection_secret_file")
	case o.skew < 0 || o.skew > idp.MaxClockSkew:
		return fmt.Errorf("--oidc_clock_skew %s: give 0s to %s", o.skew, idp.MaxClockSkew)
	case o.introCacheTTL <= 0:
		return fmt.Errorf("--introspection_cache_ttl %s: give a positive duration, e.g. 2m", o.introCacheTTL)
	case o.introInFlight < 1:
		return fmt.Errorf("--introspection_max_in_flight %d: give at least 1", o.introInFlight)
	}
	if o.jwt() && o.opaque() {
		if a, b := o.oidcAlias(), o.introspectionAlias(); a == b {
			return fmt.Errorf("--oidc_alias and --introspection_alias are both %q (each defaults to its provider's host name): "+
				"the users of the two providers would share one set of identities; give one of them another alias, e.g. --introspection_alias globus", a)
		}
	}
	return nil
}

// oidcAlias and introspectionAlias are the aliases the providers' users
// are named under: the flag's, or the host name of the provider's URL.
func (o *idOptions) oidcAlias() string {
	if o.alias != "" {
		return o.alias
	}
	return defaultAlias(o.issuer)
}

func (o *idOptions) introspectionAlias() string {
	if o.introAlias != "" {
		return o.introAlias
	}
	return defaultAlias(o.introURL)
}

// skewSetting is the skew in idp's terms: there a zero is the default,
// here it is none, which idp spells negative.
func (o *idOptions) skewSetting() time.Duration {
	if o.skew == 0 {
		return -1
	}
	return o.skew
}

// defaultAlias is the host name of u, lower-case, without its port.
func defaultAlias(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return ""
	}
	return strings.ToLower(p.Hostname())
}

// chain builds the authenticator of the token file (static, which may
// be nil) and the identity providers, checking their settings and
// saying what it trusts in the log. It fetches the issuer's keys once
// (warning, not failing, if the issuer does not answer: its tokens are
// then answered unavailable until it does).
func (o *idOptions) chain(ctx context.Context, static *auth.Tokens, log *slog.Logger) (*auth.Chain, error) {
	ch := &auth.Chain{Static: static}
	hc, err := idp.HTTPClient(o.ca)
	if err != nil {
		return nil, fmt.Errorf("--oidc_ca: %w", err)
	}
	var aliases []string
	if o.jwt() {
		o.alias = o.oidcAlias()
		cfg := idp.JWTConfig{
			Issuer: o.issuer, Audience: o.audience, Algorithms: strings.FieldsFunc(o.algs, func(r rune) bool { return r == ',' || r == ' ' }), ClockSkew: o.skewSetting(),
			Claims: idp.ClaimMap{Alias: o.alias, Identity: o.idClaim, Groups: o.groupsClaim},
		}
		var remote *idp.RemoteKeys
		if o.jwksFile != "" {
			keys, err := idp.LoadKeys(o.jwksFile)
			if err != nil {
				return nil, fmt.Errorf("--oidc_jwks_file: %w", err)
			}
			cfg.Keys = keys
		} else if err := idp.CheckHTTPS("--oidc_issuer", o.issuer); err != nil {
			return nil, err
		} else if remote, err = idp.NewRemoteKeys(idp.RemoteConfig{Issuer: o.issuer, Client: hc}); err != nil {
			return nil, fmt.Errorf("--oidc_issuer: %w", err)
		} else {
			cfg.Keys = remote
		}
		v, err := idp.NewJWT(cfg)
		if err != nil {
			return nil, fmt.Errorf("--oidc_issuer %s: %w", o.issuer, err)
		}
		ch.JWT = v
		aliases = append(aliases, o.alias)
		log.Info("trusting JWTs of an OIDC issuer", "issuer", o.issuer, "audience", o.audience, "algorithms", o.algs,
			"alias", o.alias, "identity_claim", o.idClaim, "keys", map[bool]string{true: o.jwksFile, false: "discovery"}[o.jwksFile != ""])
		if remote != nil {
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			if err := remote.Prefetch(pctx); err != nil {
				log.Warn("the OIDC issuer's keys could not be fetched: its tokens are answered unavailable until they are", "issuer", o.issuer, "err", err)
			}
			cancel()
		}
	}
	if o.opaque() {
		secret := o.introSecret
		if secret == "" {
			var err error
			if secret, err = readSecret(o.introSecretFile); err != nil {
				return nil, fmt.Errorf("--introspection_secret_file: %w", err)
			}
		}
		o.introAlias = o.introspectionAlias()
		in, err := idp.NewIntrospector(idp.IntrospectConfig{
			URL: o.introURL, ClientID: o.introClientID, Secret: secret, Client: hc, Audience: o.introAudience,
			ClockSkew: o.skewSetting(), CacheTTL: o.introCacheTTL, MaxInFlight: o.introInFlight,
			Claims: idp.ClaimMap{Alias: o.introAlias, Identity: o.introIDClaim, Groups: o.introGroupsClaim},
		})
		if err != nil {
			return nil, fmt.Errorf("--introspection_url %s: %w", o.introURL, err)
		}
		ch.Opaque = in
		aliases = append(aliases, o.introAlias)
		log.Info("checking opaque tokens by introspection", "url", o.introURL, "client_id", o.introClientID,
			"alias", o.introAlias, "identity_claim", o.introIDClaim, "cache_ttl", o.introCacheTTL, "max_in_flight", o.introInFlight)
	}
	if static != nil {
		for _, id := range static.Identities() {
			for _, a := range aliases {
				if strings.HasPrefix(id, a+":") {
					return nil, fmt.Errorf("--tokens: identity %q takes a name of the identity provider whose alias is %q: rename it in the token file, or give the provider another alias", id, a)
				}
			}
		}
	}
	return ch, nil
}

// maxSecret bounds a client secret file.
const maxSecret = 4 << 10

// readSecret reads a client secret from a file no other user may read
// (internal/secretfile): a secret others can read is no secret. The
// secret is never put in an error.
func readSecret(path string) (string, error) {
	f, err := secretfile.Open("client secret", path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSecret+1))
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	if len(b) > maxSecret {
		return "", fmt.Errorf("%s is larger than %d bytes: it should hold the client secret only", path, maxSecret)
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "", fmt.Errorf("%s is empty: put the client secret in it", path)
	}
	if strings.ContainsAny(s, "\r\n") {
		return "", fmt.Errorf("%s holds more than one line: it should hold the client secret only", path)
	}
	return s, nil
}

// policy loads --roles; nil when it is not given.
func (o *idOptions) policy(log *slog.Logger) (*auth.Policy, error) {
	if o.rolesFile == "" {
		return nil, nil
	}
	p, err := auth.LoadPolicy(o.rolesFile)
	if err != nil {
		return nil, fmt.Errorf("--roles: %w", err)
	}
	log.Info("loaded roles", "file", o.rolesFile, "rules", p.Len())
	return p, nil
}
