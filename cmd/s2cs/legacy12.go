package main

import (
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"scistream/internal/gateway"
	"scistream/internal/legacy12"
	"scistream/internal/trustfile"
)

// SciStream 1.2 clients: the gRPC control protocol on the control port
// (--control_grpc, with the partner facilities' CA bundle --peer_ca), and
// the 1.2 daemon's command line, so that an operator swaps the binary in
// a 1.2 systemd unit, pod spec or runbook (docs/migrating-from-1.2.md).

// legacyOptions are the flags of the 1.2 protocol.
type legacyOptions struct {
	grpc   bool
	peerCA string
	// why is what made the command line a 1.2 one, for the refusals
	// ("a SciStream 1.2 command line (-t)"); "" for one that is not.
	why string
}

func (o *legacyOptions) register(fs *flag.FlagSet) {
	fs.BoolVar(&o.grpc, "control_grpc", false, "also serve the SciStream 1.2 control protocol (gRPC, the Python s2uc's) on the control port, with its certificate and --tokens or identity providers; on by itself for a 1.2 command line (docs/migrating-from-1.2.md says which are); needs --peer_ca")
	fs.StringVar(&o.peerCA, "peer_ca", "", "PEM CA bundle of the partner facilities' gateways: the WAN legs of streams of 1.2 clients (which carry no pins) are mutual TLS 1.3 with a peer certificate issued under it, bound to the stream by its UID and owner (docs/migrating-from-1.2.md); required with --control_grpc; without --control_grpc it makes the command line a 1.2 one (the one line a 1.2 command line gains)")
}

// check refuses what cannot work, before anything opens.
func (o *legacyOptions) check(node string) error {
	switch {
	case o.grpc && o.peerCA == "":
		return o.needPeerCA()
	case !o.grpc && o.peerCA != "":
		return errors.New("--peer_ca is for the streams of SciStream 1.2 clients, and --control_grpc=false turns their protocol off: drop --control_grpc=false, or leave --peer_ca out")
	case o.grpc && node != "":
		return fmt.Errorf("--control_grpc: the 1.2 protocol is not served by a node of a facility (--node %s) yet; serve it on a gateway of one node", node)
	}
	return nil
}

// needPeerCA is the refusal of the 1.2 protocol without --peer_ca.
func (o *legacyOptions) needPeerCA() error {
	what := "--control_grpc (the SciStream 1.2 control protocol)"
	if o.why != "" {
		what = o.why + " serves the 1.2 control protocol, which"
	}
	return fmt.Errorf("%s needs --peer_ca FILE: the CA bundle of the partner facilities' gateways, which authenticates the WAN legs of 1.2 streams in place of pins; add it to the command line (docs/migrating-from-1.2.md)", what)
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

// The 1.2 daemon's command line. 1.2.1's s2cs is start() under Python
// Fire (a later 1.2 branch puts "start" first): its options are
// listener_ip (default 0.0.0.0), port (5000), port_range (5100-5200),
// type (Haproxy), v and verbose, client_id, client_secret, version,
// server_crt (server.crt, in the working directory), server_key
// (server.key) and ssl (True), each as --name=value, --name value or
// --kebab-name, a boolean also bare (--verbose) or as --noname, and a
// name whose first letter no other shares as -x (-t Haproxy, -l IP).
// Most are s2cs's own flags, with the same meaning; translate12 rewrites
// the others before the flags are parsed, and apply takes 1.2's defaults
// for a 1.2 command line once they are.

// globusIntrospect is where 1.2 checked its users' tokens, with its
// --client_id and --client_secret.
const globusIntrospect = "https://auth.globus.org/v2/oauth2/token/introspect"

// defaultClientID12 is 1.2's default --client_id (the SciStream
// project's client at Globus Auth), used with a --client_secret alone.
const defaultClientID12 = "c42c0dac-0a52-408e-a04f-5d31bfe0aef8"

// Defaults of 1.2 that differ from s2cs's: the data ports, and the
// certificate files, read from the working directory.
const (
	portRange12 = "5100-5200"
	serverCrt12 = "server.crt"
	serverKey12 = "server.key"
)

// engines12 maps the 1.2 proxy types to this gateway's engines: each ran
// an external proxy (HAProxy, Nginx, stunnel, in a container or a
// subprocess) or, S2DS, 1.2's own Python relay, copying in user space or
// with splice; splice is what copies here, in the kernel.
var engines12 = map[string]string{
	"haproxy": "splice", "nginx": "splice", "stunnel": "splice",
	"stunnelsubprocess": "splice", "haproxysubprocess": "splice", "s2ds": "splice",
}

// legacyArgs is what translate12 found of a 1.2 command line.
type legacyArgs struct {
	// marks are what make the command line 1.2's, as typed: "start",
	// "-t", "-l", "-v", "--ssl", "--client_id", "--client_secret", a
	// 1.2 --type; apply adds "--peer_ca" given without --control_grpc.
	marks []string
	// became is what each 1.2 option became, by its 1.2 name, in the
	// order found (the one log line; report).
	became []note
	// clientID and clientSecret are --client_id and --client_secret
	// (kept aside: s2cs has no inline secret flag); hasID and hasSecret
	// say whether each was given.
	clientID, clientSecret string
	hasID, hasSecret       bool
	// ssl is the --ssl that asked for plaintext, as typed
	// ("--ssl=False"), or could not be read (sslBad); "" if none did.
	ssl    string
	sslBad bool
}

// note is one 1.2 option and what it became.
type note struct{ name, became string }

func (l *legacyArgs) is12() bool { return len(l.marks) > 0 }

func (l *legacyArgs) mark(m string) {
	for _, x := range l.marks {
		if x == m {
			return
		}
	}
	l.marks = append(l.marks, m)
}

func (l *legacyArgs) say(name, became string) {
	for i, n := range l.became {
		if n.name == name {
			l.became[i].became = became // the last of a repeated option wins, as with flags
			return
		}
	}
	l.became = append(l.became, note{name, became})
}

// bool12 reads a boolean as 1.2's Fire took it: True/False, and also
// true/false, 1/0, yes/no (Fire would take "false" as a true string;
// a plaintext control plane is never what an operator who typed it
// meant).
func bool12(s string) (v, ok bool) {
	switch strings.ToLower(s) {
	case "true", "1", "yes":
		return true, true
	case "false", "0", "no":
		return false, true
	}
	return false, false
}

// translate12 returns args with the 1.2 daemon's words turned into
// s2cs's flags: a leading "start" dropped; -t (--t) and a 1.2 --type
// mapped to an engine; -l to --listener_ip; -v (--v) and a Fire-style
// "--verbose True" to --verbose; --ssl and --client_id/--client_secret
// kept aside (s2cs has no such flags: apply acts on them). What it finds
// of 1.2's options is noted for the log. Any other arg passes unchanged.
func translate12(args []string) ([]string, *legacyArgs) {
	l := &legacyArgs{}
	if len(args) > 0 && args[0] == "start" {
		args = args[1:]
		l.mark("start")
	}
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			out = append(out, args[i:]...)
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" { // another flag's value
			out = append(out, a)
			continue
		}
		raw, val, inline := strings.Cut(strings.TrimLeft(a, "-"), "=")
		name := strings.ReplaceAll(raw, "-", "_")
		// value takes the flag's value: after "=" or the next arg.
		value := func() (string, bool) {
			if inline {
				return val, true
			}
			if i+1 < len(args) {
				i++
				return args[i], true
			}
			return "", false
		}
		// boolValue takes a boolean's value: after "=", or the next arg
		// if it is one (Fire takes "--verbose True"), else true.
		boolValue := func() (string, bool) {
			if inline {
				return val, true
			}
			if i+1 < len(args) {
				if _, ok := bool12(args[i+1]); ok {
					i++
					return args[i], true
				}
			}
			return "True", false
		}
		switch name {
		case "t", "type":
			v, ok := value()
			if !ok {
				out = append(out, a) // the flag package says what is missing
				continue
			}
			if name == "t" {
				l.mark("-t")
			}
			if eng, ok := engines12[strings.ToLower(v)]; ok {
				l.mark("--type " + v)
				l.say("type", fmt.Sprintf("%s: engine %s (the 1.2 proxies are gone: this gateway relays itself)", v, eng))
				v = eng
			} else if name == "t" {
				l.say("type", "engine "+v)
			}
			out = append(out, "--type="+v)
		case "l":
			v, ok := value()
			if !ok {
				out = append(out, "--listener_ip")
				continue
			}
			l.mark("-l")
			l.say("listener_ip", v+": the address peers are told and bound, as --listener_ip")
			out = append(out, "--listener_ip="+v)
		case "v", "verbose":
			v, given := boolValue()
			if name == "v" {
				l.mark("-v")
			} else if !given {
				l.say(name, "the same (the debug log)")
				out = append(out, a)
				continue
			}
			b, ok := bool12(v)
			if !ok {
				out = append(out, "--verbose="+v) // the flag package refuses it
				continue
			}
			l.say(name, fmt.Sprintf("--verbose=%t (the debug log)", b))
			out = append(out, fmt.Sprintf("--verbose=%t", b))
		case "ssl", "nossl":
			l.mark("--" + raw)
			v, _ := boolValue()
			b, ok := bool12(v)
			if name == "nossl" {
				b, ok = false, true
			}
			if !ok || !b {
				l.ssl, l.sslBad = a, !ok
				if !inline && name == "ssl" {
					l.ssl = a + "=" + v
				}
				continue
			}
			l.say("ssl", "True: the control port is TLS, always")
		case "client_id", "client_secret":
			v, ok := value()
			if !ok {
				out = append(out, a) // an unknown flag to the flag package, which says so
				continue
			}
			l.mark("--" + name)
			if name == "client_id" {
				l.clientID, l.hasID = v, true
			} else {
				l.clientSecret, l.hasSecret = v, true
			}
		default:
			// s2cs's own flags that 1.2 has too, for the log.
			switch name {
			case "listener_ip", "port", "port_range", "server_crt", "server_key":
				if v := val; inline || i+1 < len(args) {
					if !inline {
						v = args[i+1]
					}
					l.say(name, v+": the same")
				}
			}
			out = append(out, a)
		}
	}
	return out, l
}

// apply puts what a 1.2 command line asks for, and 1.2's defaults for
// what it leaves out, in o, once the flags (and --config) are parsed:
// set are the flags given either way. A command line is a 1.2 one when
// translate12 found a mark of it, or --peer_ca is given without
// --control_grpc (the one line the migration adds to a 1.2 command
// line). Then the 1.2 protocol is on (it needs --peer_ca); --ssl=False is
// refused; --client_id and --client_secret check tokens at Globus Auth;
// and what the line does not give is 1.2's: the data ports 5100-5200,
// ./server.crt and ./server.key if they are there, and for the address
// 0.0.0.0, which this gateway binds, advertising this host's one IPv4
// address (pickAdvertised, among what addrs returns: hostAddrs). dir is
// the working directory the certificate files are looked for in.
func (l *legacyArgs) apply(o *options, set map[string]bool, dir string, addrs func() ([]ifAddr, error)) error {
	if !l.is12() && o.legacy.peerCA != "" && !set["control_grpc"] {
		l.mark("--peer_ca") // what marks a line that has no other mark
	}
	if !l.is12() {
		return nil
	}
	o.legacy.why = "a SciStream 1.2 command line (" + strings.Join(l.marks, ", ") + ")"
	if l.sslBad {
		return fmt.Errorf("%s: 1.2 took --ssl=True or --ssl=False, and s2cs serves its control port over TLS always: drop it", l.ssl)
	}
	if l.ssl != "" {
		return fmt.Errorf("%s: refused: 1.2 then served its control protocol in plaintext, where the users' tokens and the streams' listeners cross the network for anyone on the path to read or change; s2cs serves the 1.2 protocol over TLS only, with the certificate 1.2 used (./server.crt and ./server.key, or --server_crt and --server_key). Drop %s and give the 1.2 clients that certificate (s2uc --server_cert)", l.ssl, l.ssl)
	}
	if o.legacy.peerCA == "" {
		return o.legacy.needPeerCA()
	}
	o.legacy.grpc = true
	l.say("protocol", "the 1.2 control protocol (gRPC) on the control port, beside the HTTPS API; WAN legs of its streams under --peer_ca "+o.legacy.peerCA)
	if l.hasID || l.hasSecret {
		if err := l.applyClient(o, set); err != nil {
			return err
		}
	}
	if !set["port_range"] {
		o.portRange = portRange12
		l.say("port_range", portRange12+" (1.2's default)")
	}
	if !set["listener_ip"] {
		cands, err := addrs()
		if err != nil {
			return fmt.Errorf("%s without --listener_ip: the host's addresses: %w; give --listener_ip IP", o.legacy.why, err)
		}
		ip, err := pickAdvertised(cands)
		if err != nil {
			return fmt.Errorf("%s without --listener_ip: 1.2 then bound 0.0.0.0 and told its peers 0.0.0.0, which reaches only this host; this gateway binds 0.0.0.0 as well but tells its peers an address they reach, and %v: give --listener_ip IP, the address the partner facilities reach this gateway at", o.legacy.why, err)
		}
		o.listenerIP = ip.String()
		bind := o.bindIP
		if !set["bind"] {
			o.bindIP = "0.0.0.0"
			bind = o.bindIP
		}
		l.say("listener_ip", fmt.Sprintf("not given (1.2: 0.0.0.0): binds %s and tells peers %s, this host's one IPv4 address", bind, ip))
	}
	return l.applyCert(o, set, dir)
}

// applyClient turns --client_id and --client_secret into token
// introspection at Globus Auth, as 1.2 checked tokens, unless the
// introspection flags say otherwise.
func (l *legacyArgs) applyClient(o *options, set map[string]bool) error {
	id := l.clientID
	if !l.hasID {
		id = defaultClientID12
	}
	if !set["introspection_url"] {
		o.id.introURL = globusIntrospect
	}
	if !set["introspection_client_id"] {
		o.id.introClientID = id
	}
	if !set["introspection_identity_claim"] {
		o.id.introIDClaim = "username"
	}
	secret := "--introspection_secret_file " + o.id.introSecretFile
	switch {
	case set["introspection_secret_file"]:
	case l.clientSecret != "":
		o.id.introSecret = l.clientSecret
		secret = "--client_secret (inline, as 1.2 took it)"
	default:
		return fmt.Errorf("--client_id %s (1.2: Globus Auth) needs the client's secret: give --introspection_secret_file FILE (the secret alone, in a file only its owner reads), or --client_secret=S as 1.2 took it; 1.2 without a secret checked no token, and s2cs always checks them", id)
	}
	how := fmt.Sprintf("token introspection at %s as client %s, secret from %s, the identity its %s", o.id.introURL, o.id.introClientID, secret, o.id.introIDClaim)
	if l.hasID {
		l.say("client_id", how)
	} else {
		l.say("client_secret", "with 1.2's default --client_id: "+how)
	}
	return nil
}

// applyCert takes ./server.crt and ./server.key, as 1.2 read them, for
// the flags the command line leaves out, when they are in dir; without
// either, the gateway generates its self-signed pair as for any command
// line. One without the other is refused.
func (l *legacyArgs) applyCert(o *options, set map[string]bool, dir string) error {
	var found []string
	for _, f := range []struct {
		flag, name string
		to         *string
	}{{"server_crt", serverCrt12, &o.certFile}, {"server_key", serverKey12, &o.keyFile}} {
		if set[f.flag] {
			continue
		}
		p := filepath.Join(dir, f.name)
		if st, err := os.Stat(p); err != nil || st.IsDir() {
			continue
		}
		*f.to = p
		found = append(found, f.flag)
		l.say(f.flag, "not given: "+p+" (1.2's default, ./"+f.name+")")
	}
	if len(found) == 0 && !set["server_crt"] {
		l.say("server_crt", "not given and no ./"+serverCrt12+" in "+dir+": a self-signed pair generated in --state_dir (1.2 would not start without one)")
	}
	if (o.certFile == "") != (o.keyFile == "") && len(found) > 0 {
		have, want, wantFlag := serverCrt12, serverKey12, "--server_key"
		if o.certFile == "" {
			have, want, wantFlag = serverKey12, serverCrt12, "--server_crt"
		}
		return fmt.Errorf("%s reads ./%s and ./%s as 1.2 did, and %s holds %s but not %s: put it there, or give %s FILE", o.legacy.why, serverCrt12, serverKey12, dir, have, want, wantFlag)
	}
	return nil
}

// report says, in one line, what the 1.2 command line's options became;
// and warns once of an inline --client_secret (never printing it).
func (l *legacyArgs) report(log *slog.Logger) {
	if !l.is12() {
		return
	}
	attrs := []any{"marked_by", strings.Join(l.marks, ", ")}
	for _, n := range l.became {
		attrs = append(attrs, n.name, n.became)
	}
	log.Info("SciStream 1.2 command line: each 1.2 option as this gateway takes it", attrs...)
	if l.clientSecret != "" {
		log.Warn("SciStream 1.2 command line: --client_secret is on the command line, which every user of this host can read (ps, /proc): put the secret alone in a file only s2cs's user reads and give --introspection_secret_file FILE instead")
	}
}

// ifAddr is an address of one of the host's interfaces.
type ifAddr struct {
	iface string
	ip    netip.Addr
}

// hostAddrs are the addresses of the host's interfaces that are up and
// running (a bridge without a carrier is not) and not loopback.
func hostAddrs() ([]ifAddr, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	var out []ifAddr
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagRunning == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ifc.Name, err)
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(n.IP); ok {
					out = append(out, ifAddr{ifc.Name, ip.Unmap()})
				}
			}
		}
	}
	return out, nil
}

// pickAdvertised is the address a 1.2 command line without
// --listener_ip tells peers: the host's one IPv4 unicast address that is
// neither loopback nor link-local (1.2's 0.0.0.0 is IPv4's any address).
// None, or several, is an error that lists them.
func pickAdvertised(addrs []ifAddr) (netip.Addr, error) {
	var cands []ifAddr
	for _, a := range addrs {
		if a.ip.Is4() && a.ip.IsGlobalUnicast() {
			cands = append(cands, a)
		}
	}
	switch len(cands) {
	case 1:
		return cands[0].ip, nil
	case 0:
		return netip.Addr{}, errors.New("this host has no IPv4 address but loopback and link-local ones")
	}
	var list []string
	for _, c := range cands {
		list = append(list, c.ip.String()+" on "+c.iface)
	}
	return netip.Addr{}, fmt.Errorf("this host has %d IPv4 addresses (%s), and which one peers reach is not for s2cs to guess", len(cands), strings.Join(list, ", "))
}
