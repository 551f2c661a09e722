package main

import (
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strings"

	"scistream/internal/gateway"
	"scistream/internal/legacy12"
	"scistream/internal/trustfile"
)

// SciStream 1.2 clients: the gRPC control protocol on the control port
// (--control_grpc, with the partner facilities' CA bundle --peer_ca), and
// the 1.2 daemon's command line, so that an operator swaps the binary in
// a 1.2 systemd unit or pod spec (docs/migrating-from-1.2.md).

// legacyOptions are the flags of the 1.2 protocol.
type legacyOptions struct {
	grpc   bool
	peerCA string
}

func (o *legacyOptions) register(fs *flag.FlagSet) {
	fs.BoolVar(&o.grpc, "control_grpc", false, "also serve the SciStream 1.2 control protocol (gRPC, the Python s2uc's) on the control port, with its certificate and --tokens or identity providers; on by itself for a 1.2 command line; needs --peer_ca")
	fs.StringVar(&o.peerCA, "peer_ca", "", "PEM CA bundle of the partner facilities' gateways: the WAN legs of streams of 1.2 clients (which carry no pins) are mutual TLS 1.3 with a peer certificate issued under it, bound to the stream by its UID and owner (docs/migrating-from-1.2.md); required with --control_grpc")
}

// check refuses what cannot work, before anything opens.
func (o *legacyOptions) check(node string) error {
	switch {
	case o.grpc && o.peerCA == "":
		return errors.New("--control_grpc (the SciStream 1.2 control protocol) needs --peer_ca FILE: the CA bundle of the partner facilities' gateways, which authenticates the WAN legs of 1.2 streams in place of pins (docs/migrating-from-1.2.md)")
	case !o.grpc && o.peerCA != "":
		return errors.New("--peer_ca is for the streams of SciStream 1.2 clients: give --control_grpc too, or leave --peer_ca out")
	case o.grpc && node != "":
		return fmt.Errorf("--control_grpc: the 1.2 protocol is not served by a node of a facility (--node %s) yet; serve it on a gateway of one node", node)
	}
	return nil
}

// serve loads --peer_ca and puts the 1.2 service on srv's control port,
// when --control_grpc asks for it.
func (o *legacyOptions) serve(srv *gateway.Server, log *slog.Logger) error {
	if !o.grpc {
		return nil
	}
	// Every 1.2 stream's WAN legs trust what this CA issued: whoever
	// can change the file can add a CA of their own.
	pem, err := trustfile.ReadFile("peer CA file", o.peerCA)
	if err != nil {
		return fmt.Errorf("--peer_ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return fmt.Errorf("--peer_ca %s holds no PEM certificate: give the CA bundle of the partner facilities' gateways", o.peerCA)
	}
	svc, err := legacy12.New(legacy12.Config{Backend: legacy12.NewBackend(srv), Logger: log})
	if err != nil {
		return err
	}
	srv.SetPeerCA(pool)
	srv.SetGRPC(legacy12.NewServer(svc))
	log.Info("serving the SciStream 1.2 control protocol (gRPC) on the control port", "peer_ca", o.peerCA)
	return nil
}

// The 1.2 daemon's command line (1.2.1: s2cs --server_crt=... --type=...,
// Fire style; a later 1.2 branch puts "start" first). Most of its flags
// are s2cs's own (--server_crt, --server_key, --listener_ip, --port,
// --port_range, --verbose); translate12 rewrites the others.

// globusIntrospect is where 1.2 checked its users' tokens, with its
// --client_id and --client_secret.
const globusIntrospect = "https://auth.globus.org/v2/oauth2/token/introspect"

// engines12 maps the 1.2 proxy types to this gateway's engines: each ran
// an external proxy (or a subprocess of one) that copied in user space or
// with splice; splice is what copies here.
var engines12 = map[string]string{
	"haproxy": "splice", "nginx": "splice", "stunnel": "splice",
	"stunnelsubprocess": "splice", "haproxysubprocess": "splice",
}

// legacyArgs is what translate12 found of a 1.2 command line.
type legacyArgs struct {
	is12         bool     // the command line is 1.2's
	notes        []string // what was mapped, for the log
	clientSecret string   // --client_secret, inline as 1.2 takes it
}

// translate12 returns args with the 1.2 daemon's words turned into
// s2cs's flags: a leading "start" dropped, a 1.2 --type mapped to an
// engine, --client_id to introspection at Globus Auth (--client_secret is
// kept aside: an inline secret has no flag of s2cs). Any other args pass
// unchanged.
func translate12(args []string) ([]string, *legacyArgs) {
	l := &legacyArgs{}
	if len(args) > 0 && args[0] == "start" {
		args = args[1:]
		l.is12 = true
	}
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, val, inline := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if a == "--" {
			out = append(out, args[i:]...)
			break
		}
		if !strings.HasPrefix(a, "-") { // another flag's value
			out = append(out, a)
			continue
		}
		name = strings.ReplaceAll(name, "-", "_")
		if name != "type" && name != "client_id" && name != "client_secret" {
			out = append(out, a)
			continue
		}
		if !inline {
			if i+1 >= len(args) {
				out = append(out, a) // the flag package says what is missing
				continue
			}
			i++
			val = args[i]
		}
		switch name {
		case "type":
			if eng, ok := engines12[strings.ToLower(val)]; ok {
				l.is12 = true
				l.notes = append(l.notes, fmt.Sprintf("--type %s (1.2) runs as engine %s", val, eng))
				val = eng
			}
			out = append(out, "--type="+val)
		case "client_id":
			l.is12 = true
			l.notes = append(l.notes, "--client_id checks tokens by introspection at Globus Auth (--introspection_url "+globusIntrospect+")")
			out = append(out, "--introspection_url="+globusIntrospect, "--introspection_client_id="+val, "--introspection_identity_claim=username")
		case "client_secret":
			l.is12 = true
			l.clientSecret = val
		}
	}
	return out, l
}

// apply puts what the command line holds but the flags do not in o.
func (l *legacyArgs) apply(o *options) {
	if o == nil || !l.is12 {
		return
	}
	o.legacy.grpc = true
	if l.clientSecret != "" {
		o.id.introSecret = l.clientSecret
	}
}

// report says, once, what of a 1.2 command line was mapped to what.
func (l *legacyArgs) report(log *slog.Logger) {
	if !l.is12 {
		return
	}
	for _, n := range l.notes {
		log.Info("SciStream 1.2 command line: " + n)
	}
	if l.clientSecret != "" {
		log.Warn("SciStream 1.2 command line: --client_secret is visible to every user of this host (ps); prefer --introspection_secret_file")
	}
}
