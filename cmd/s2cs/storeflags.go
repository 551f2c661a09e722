package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"strings"

	"scistream/internal/certs"
	"scistream/internal/secretfile"
	"scistream/internal/store"
	"scistream/internal/trustfile"
)

// storeOptions are the flags that say where s2cs keeps its stream
// records: the embedded database in --state_dir, or an etcd cluster.
type storeOptions struct {
	url                string
	facility           string
	ca, cert, key      string
	user, passwordFile string
	insecure           bool
}

const etcdScheme = "etcd://"

func (o *storeOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.url, "store", "", "where stream records are kept: "+etcdScheme+"HOST:PORT[,HOST:PORT...] for an etcd cluster (docs/etcd.md); default: the embedded database in --state_dir, for a gateway of one node")
	fs.StringVar(&o.facility, "store_facility", "", "with --store "+etcdScheme+"...: the facility's name (letters, digits, '.', '_', '-'); its records live under the etcd key prefix /scistream/NAME/ (required)")
	fs.StringVar(&o.ca, "etcd_ca", "", "PEM file of the CA certificate(s) that verify etcd's server certificate; connects to etcd over TLS (default: plaintext)")
	fs.StringVar(&o.cert, "etcd_cert", "", "PEM client certificate to present to etcd (with --etcd_key and --etcd_ca)")
	fs.StringVar(&o.key, "etcd_key", "", "PEM private key of --etcd_cert")
	fs.StringVar(&o.user, "etcd_user", "", "etcd user to authenticate as (with --etcd_password_file)")
	fs.BoolVar(&o.insecure, "insecure_etcd", false, "talk to etcd without TLS although it is not on this host, or send --etcd_user's password without TLS: the password and every stream's secret (in its record) cross the network in plaintext (INSECURE; a network no one else can read only)")
	fs.StringVar(&o.passwordFile, "etcd_password_file", "", "file that holds the password of --etcd_user (one line; it is never printed or logged)")
}

// config checks the store flags and returns the etcd store's settings,
// or nil for the embedded database. It reads the files the flags name
// (CA, client certificate, password) and connects to nothing.
func (o *storeOptions) config() (*store.EtcdConfig, error) {
	if o.url == "" {
		for _, f := range []struct{ name, v string }{
			{"--store_facility", o.facility}, {"--etcd_ca", o.ca}, {"--etcd_cert", o.cert}, {"--etcd_key", o.key},
			{"--etcd_user", o.user}, {"--etcd_password_file", o.passwordFile}, {"--insecure_etcd", map[bool]string{true: "true"}[o.insecure]},
		} {
			if f.v != "" {
				return nil, fmt.Errorf("%s applies only to an etcd store: give --store %sHOST:PORT too, or leave %s out", f.name, etcdScheme, f.name)
			}
		}
		return nil, nil
	}
	eps, err := parseEtcdURL(o.url)
	if err != nil {
		return nil, err
	}
	cfg := &store.EtcdConfig{Endpoints: eps, Facility: o.facility}
	if o.facility == "" {
		return nil, fmt.Errorf("--store %s needs --store_facility NAME: the facility whose records these are (they live under /scistream/NAME/), e.g. --store_facility ornl", o.url)
	}
	if err := store.ValidFacility(o.facility); err != nil {
		return nil, fmt.Errorf("--store_facility %w", err)
	}
	if cfg.TLS, err = o.tls(); err != nil {
		return nil, err
	}
	switch {
	case o.user == "" && o.passwordFile != "":
		return nil, errors.New("--etcd_password_file needs --etcd_user: the user whose password it holds")
	case o.user != "" && o.passwordFile == "":
		return nil, fmt.Errorf("--etcd_user %q needs --etcd_password_file FILE: the password is read from a file, never from the command line", o.user)
	case o.user != "":
		if strings.ContainsFunc(o.user, func(r rune) bool { return r < ' ' || r == 0x7f }) {
			return nil, fmt.Errorf("--etcd_user %q holds a control character", o.user)
		}
		cfg.Username = o.user
		if cfg.Password, err = readPassword(o.passwordFile); err != nil {
			return nil, fmt.Errorf("--etcd_password_file %w", err)
		}
	}
	switch {
	case cfg.TLS != nil && o.insecure:
		return nil, errors.New("--insecure_etcd: the connection to etcd is TLS (--etcd_ca); leave --insecure_etcd out")
	case cfg.TLS == nil && o.user != "" && !o.insecure:
		return nil, fmt.Errorf("--etcd_user %q without TLS would send its password, and every stream's secret, to etcd in plaintext: give --etcd_ca (the CA of etcd's certificate) to connect over TLS, or --insecure_etcd on a network no one else can read", o.user)
	case cfg.TLS == nil && !o.insecure && !allLoopback(eps):
		return nil, fmt.Errorf("--store %s without TLS would send every stream's secret (in its record) to etcd in plaintext: give --etcd_ca (the CA of etcd's certificate) to connect over TLS, or --insecure_etcd on a network no one else can read", o.url)
	}
	return cfg, nil
}

// allLoopback reports whether every endpoint (host:port) is on this host:
// a loopback address, or localhost. Plaintext to them leaves no host.
func allLoopback(eps []string) bool {
	for _, ep := range eps {
		h, _, _ := net.SplitHostPort(ep)
		if ip := net.ParseIP(h); h != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return false
		}
	}
	return true
}

// parseEtcdURL returns the host:port endpoints of etcd://HOST:PORT[,...].
func parseEtcdURL(s string) ([]string, error) {
	rest, ok := strings.CutPrefix(s, etcdScheme)
	if !ok {
		return nil, fmt.Errorf("--store %q: give %sHOST:PORT[,HOST:PORT...], or leave --store out for the embedded database in --state_dir", s, etcdScheme)
	}
	if strings.Contains(rest, "@") {
		// Not echoed: it may hold a password.
		return nil, errors.New("--store holds a user name or password: give them with --etcd_user and --etcd_password_file (a command line is visible to every user of the host)")
	}
	if rest == "" || strings.ContainsAny(rest, "/?#") {
		return nil, fmt.Errorf("--store %q: give %sHOST:PORT[,HOST:PORT...], no path or query", s, etcdScheme)
	}
	var eps []string
	for _, ep := range strings.Split(rest, ",") {
		host, port, err := net.SplitHostPort(ep)
		if err != nil {
			return nil, fmt.Errorf("--store: endpoint %q: give HOST:PORT, e.g. etcd1.example.org:2379 (%v)", ep, err)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("--store: endpoint %q: port %q is not a number from 1 to 65535", ep, port)
		}
		if net.ParseIP(host) == nil && !validHostname(host) {
			return nil, fmt.Errorf("--store: endpoint %q: %q is neither an IP address nor a host name", ep, host)
		}
		for _, seen := range eps {
			if seen == ep {
				return nil, fmt.Errorf("--store: endpoint %q is given twice", ep)
			}
		}
		eps = append(eps, ep)
	}
	return eps, nil
}

// validHostname reports whether h is a DNS name: labels of letters,
// digits and '-', separated by dots.
func validHostname(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(strings.TrimSuffix(h, "."), ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

// tls returns the TLS settings --etcd_ca, --etcd_cert and --etcd_key ask
// for, nil for plaintext.
func (o *storeOptions) tls() (*tls.Config, error) {
	if (o.cert == "") != (o.key == "") {
		return nil, errors.New("give both --etcd_cert and --etcd_key, or neither")
	}
	if o.ca == "" {
		if o.cert != "" {
			return nil, errors.New("--etcd_cert needs --etcd_ca: a client certificate is presented over TLS, which --etcd_ca turns on (it names the CA that verifies etcd)")
		}
		return nil, nil
	}
	// The store holds every stream's owner and secret: whoever can
	// change this CA can stand in for etcd.
	pem, err := trustfile.ReadFile("etcd CA file", o.ca)
	if err != nil {
		return nil, fmt.Errorf("--etcd_ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--etcd_ca %s holds no PEM certificate", o.ca)
	}
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if o.cert != "" {
		pair, err := certs.LoadKeyPair(o.cert, o.key)
		if err != nil {
			return nil, fmt.Errorf("--etcd_cert/--etcd_key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// readPassword reads a password file: one line, its newline dropped,
// from a file no other user may read (internal/secretfile).
func readPassword(path string) (string, error) {
	f, err := secretfile.Open("password file", path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 4097))
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	if len(b) > 4096 {
		return "", fmt.Errorf("%s is longer than 4096 bytes: is it the password file?", path)
	}
	b = bytes.TrimSuffix(bytes.TrimSuffix(b, []byte("\n")), []byte("\r"))
	switch {
	case len(b) == 0:
		return "", fmt.Errorf("%s is empty: write the password of --etcd_user in it", path)
	case bytes.ContainsAny(b, "\r\n"):
		return "", fmt.Errorf("%s holds more than one line: write the password alone in it", path)
	}
	return string(b), nil
}

// openStore opens the etcd store cfg describes or, if cfg is nil, the
// embedded database in stateDir, and says which: etcd on stdout (an
// operator checks where the records go), the database in the log.
func openStore(cfg *store.EtcdConfig, stateDir string, log *slog.Logger, stdout io.Writer) (store.Store, error) {
	if cfg == nil {
		path := filepath.Join(stateDir, "state.db")
		s, err := store.OpenBolt(path)
		if err == nil {
			log.Info("state store", "kind", "bolt", "path", path)
		}
		return s, err
	}
	// The store's errors name the endpoints.
	s, err := store.OpenEtcd(*cfg)
	switch {
	case errors.Is(err, store.ErrUnavailable):
		return nil, fmt.Errorf("--store: %w; is etcd running there, and does it serve TLS (give --etcd_ca) or plaintext (leave --etcd_ca out)?", err)
	case errors.Is(err, store.ErrDenied):
		return nil, fmt.Errorf("--store: %w; check --etcd_user, --etcd_password_file, and that the user's role may read and write /scistream/%s/", err, cfg.Facility)
	case err != nil:
		return nil, fmt.Errorf("--store: %w", err)
	}
	where := strings.Join(cfg.Endpoints, ",")
	how := "plaintext"
	if cfg.TLS != nil {
		how = "TLS"
	}
	if cfg.Username != "" {
		how += ", user " + cfg.Username
	}
	fmt.Fprintf(stdout, "s2cs: stream records in etcd at %s under /scistream/%s/ (%s)\n", where, cfg.Facility, how)
	if cfg.TLS == nil && (cfg.Username != "" || !allLoopback(cfg.Endpoints)) {
		log.Warn("INSECURE: --insecure_etcd is set: the stream records, with every stream's secret, and the etcd password if any, go to etcd in plaintext", "endpoints", where)
	}
	return s, nil
}
