package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"

	"scistream/internal/api"
	"scistream/internal/client"
	"scistream/internal/cliflag"
)

func runStream(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cl := newCmdline("stream", "--inbound_s2cs HOST:PORT --inbound_server_cert FILE --outbound_s2cs HOST:PORT --outbound_server_cert FILE --remote_ip IP --receiver_ports P[,...] [--num_conn N]", stdout, stderr)
	ig := cl.gateway("inbound_", "inbound gateway", " (in front of the listening application)")
	og := cl.gateway("outbound_", "outbound gateway", " (in front of the connecting application)")
	tokenFile := cl.fs.String("token_file", "", "file holding the bearer token for both gateways, unless --inbound_token_file or --outbound_token_file names one's (default: $SCISTREAM_TOKEN_FILE or the configuration file's; without one: $SCISTREAM_TOKEN, else the login of s2uc login)")
	remoteIP := cl.fs.String("remote_ip", "", "address of the listening application, as the inbound gateway reaches it")
	recvPorts := cl.fs.String("receiver_ports", "", "port(s) of the listening application")
	numConn := cl.fs.Int("num_conn", 1, "number of channels (listeners) on each gateway")
	allow := cl.fs.String("allow", "", "comma-separated addresses or CIDR prefixes whose applications may connect to the outbound listeners (default: the listener's own subnet)")
	wanT := cl.fs.String("wan", "tls", "WAN transport between the gateways: tls, quic (one QUIC connection per channel), or tcp for trusted circuits")
	engine := cl.fs.String("engine", "", "data-plane engine on both gateways (default: each gateway's)")
	wanPool := cl.fs.Int("wan_pool", 0, "pooled WAN legs: keep this many idle legs per channel dialed ahead of need, so a connection starts without a handshake and a cleanly ended one leaves its leg for the next (tls only; default 0: a leg per connection)")
	wanListener := cl.fs.String("wan_listener", "", "where the inbound gateway takes the WAN legs: shared (its shared WAN port, s2cs --wan_port) or ports (ports of the stream's own); default: shared if it has one and --wan is tls or quic")
	appWait := cl.fs.String("app_wait", "", appWaitUsage)
	resumeWindow := cl.fs.String("resume_window", "", resumeWindowUsage)
	stripe := cl.fs.Int("stripe", 1, stripeUsage)
	maxActive := cl.fs.Int("max_active_conns", 0, "most application connections the stream relays at once on each gateway; one more is reset (0: each gateway's cap)")
	peers := cl.fs.String("peer_listeners", "", "HOST:PORT list the outbound gateway dials instead of the inbound listeners (when NAT sits between the gateways)")
	tf := cl.terms()
	if _, err := cl.parse(args, 0, 0, ""); err != nil {
		return err
	}
	rate, least, lease, err := tf.parse()
	if err != nil {
		return err
	}
	if *remoteIP == "" {
		return usagef("missing --remote_ip: the address of the application that listens")
	}
	rp, err := parsePorts("receiver_ports", *recvPorts)
	if err != nil {
		return err
	}
	if err := checkNumConn(*numConn); err != nil {
		return err
	}
	wait, err := parseAppWait(*appWait)
	if err != nil {
		return err
	}
	resume, err := parseResumeWindow(*resumeWindow)
	if err != nil {
		return err
	}
	if err := checkStripe(*stripe); err != nil {
		return err
	}
	if *stripe > 1 && *wanT != api.WANTLS {
		return usagef("--stripe %d with --wan %s: striping carries TLS legs (a QUIC connection's streams share one flow; tcp legs carry no frames); use --wan tls, or --stripe 1", *stripe, *wanT)
	}
	if err := checkMaxActive(*maxActive); err != nil {
		return err
	}
	seen := cliflag.Seen(cl.fs)
	for _, g := range []*gatewayFlags{ig, og} {
		// --token_file on the command line wins over a side's default
		// (configuration file), not over --inbound_token_file.
		if *tokenFile != "" && !seen[g.prefix+"token_file"] {
			g.tokenFile, g.tokenFrom = *tokenFile, "--token_file"
		}
	}
	if ig.s2cs == "" || og.s2cs == "" {
		return usagef("give both --inbound_s2cs and --outbound_s2cs")
	}
	in, err := ig.client(cl.timeout)
	if err != nil {
		return fmt.Errorf("inbound gateway: %w", err)
	}
	defer in.Close()
	out, err := og.client(cl.timeout)
	if err != nil {
		return fmt.Errorf("outbound gateway: %w", err)
	}
	defer out.Close()
	ss, err := sessions()
	if err != nil {
		return err
	}
	if err := ss.Check(); err != nil { // before a stream exists whose record would have nowhere safe to go
		return err
	}
	inS, outS, err := client.Wire(ctx, in, out,
		&api.InboundRequest{RemoteIP: *remoteIP, ReceiverPorts: rp, NumConn: *numConn, WAN: *wanT, Engine: *engine, WANListener: *wanListener, AppWaitS: wait, ResumeWindowS: resume, MaxActiveConns: *maxActive,
			Rate: rate, MinRate: least, LeaseS: lease},
		api.OutboundRequest{NumConn: *numConn, Allow: splitList(*allow), Engine: *engine, WANPool: *wanPool, MaxActiveConns: *maxActive, ResumeWindowS: resume, Stripe: api.StripeField(*stripe)},
		splitList(*peers))
	if err != nil {
		return err
	}
	err = ss.Save(&client.Session{
		UID: inS.UID, WAN: inS.WAN, Secret: inS.Secret, Rate: inS.Rate, MinRate: inS.MinRate, LeaseS: inS.LeaseS,
		Inbound:  &client.Endpoint{S2CS: ig.s2cs, ServerCert: absOrEmpty(ig.cert), TokenFile: absOrEmpty(ig.tokenFile), Listeners: inS.Listeners, WANCert: inS.WANCert, ServerName: inS.WANServerName, Nodes: inS.Nodes},
		Outbound: &client.Endpoint{S2CS: og.s2cs, ServerCert: absOrEmpty(og.cert), TokenFile: absOrEmpty(og.tokenFile), Listeners: outS.Listeners},
	})
	if err != nil {
		fmt.Fprintf(stderr, "s2uc: warning: could not save the local record of %s (%v); release it on each gateway with --s2cs\n", inS.UID, err)
	}
	if cl.output == "json" {
		return printJSON(stdout, map[string]any{
			"uid":       inS.UID,
			"listeners": outS.Listeners,
			"inbound":   public(inS),
			"outbound":  public(outS),
		})
	}
	fmt.Fprintf(stdout, "uid: %s\nlisteners: %s\ninbound listeners: %s\n", inS.UID,
		printableList(outS.Listeners, " "), printableList(inS.Listeners, " "))
	printTerms(stdout, outS)
	// Named by role, not as producer and consumer: with ZeroMQ PUB/SUB
	// the producer is the one that listens.
	fmt.Fprintf(stdout, "the application that connects: connect it to %s\n", printableList(outS.Listeners, " "))
	fmt.Fprintf(stdout, "the application that listens: listen on %s; the inbound gateway connects to it\n", printableList(inS.Targets, " "))
	return nil
}

func absOrEmpty(p string) string {
	if p == "" {
		return ""
	}
	a, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	return a
}
