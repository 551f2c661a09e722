package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"scistream/internal/api"
	"scistream/internal/client"
)

func runOutbound(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cl := newCmdline("outbound-request", "--s2cs HOST:PORT --server_cert FILE --remote_ip PEER_IP --receiver_ports PROXY_C[,...] --num_conn N UID [PEER_IP:PROXY_C[,...]]", stdout, stderr)
	gw := cl.gateway("", "outbound gateway", " (in front of the connecting application)")
	remoteIP := cl.fs.String("remote_ip", "", "address of the inbound gateway, as the outbound gateway reaches it")
	recvPorts := cl.fs.String("receiver_ports", "", "the inbound gateway's listener port(s) (PROXY_C)")
	numConn := cl.fs.Int("num_conn", 1, "number of channels (listeners)")
	allow := cl.fs.String("allow", "", "comma-separated addresses or CIDR prefixes whose applications may connect (default: the listener's own subnet)")
	engine := cl.fs.String("engine", "", "data-plane engine (default: the gateway's)")
	wanPool := cl.fs.Int("wan_pool", 0, "pooled WAN legs: keep this many idle legs per channel dialed ahead of need, so a connection starts without a handshake and a cleanly ended one leaves its leg for the next (tls only; default 0: a leg per connection)")
	maxActive := cl.fs.Int("max_active_conns", 0, "most application connections this side relays at once; one more is reset (0: the gateway's cap)")
	resumeWindow := cl.fs.String("resume_window", "", resumeWindowUsage)
	stripe := cl.fs.Int("stripe", 1, stripeUsage)
	inTokenFile := cl.fs.String("inbound_token_file", "", "file holding the bearer token for the inbound gateway (default: the one inbound-request used, else $SCISTREAM_TOKEN_FILE or the configuration file's; without one: $SCISTREAM_TOKEN, else the login of s2uc login)")
	tf := cl.terms()
	pos, err := cl.parse(args, 1, 2, "missing UID: give the stream UID printed by inbound-request")
	if err != nil {
		return err
	}
	uid := pos[0]
	rate, least, lease, err := tf.parse()
	if err != nil {
		return err
	}
	if err := checkNumConn(*numConn); err != nil {
		return err
	}
	if err := checkMaxActive(*maxActive); err != nil {
		return err
	}
	resume, err := parseResumeWindow(*resumeWindow)
	if err != nil {
		return err
	}
	if err := checkStripe(*stripe); err != nil {
		return err
	}
	var peers []string
	if *remoteIP != "" || *recvPorts != "" {
		if *remoteIP == "" {
			return usagef("missing --remote_ip: the inbound gateway's address")
		}
		rp, err := parsePorts("receiver_ports", *recvPorts)
		if err != nil {
			return err
		}
		for _, p := range rp {
			peers = append(peers, hostPort(*remoteIP, p))
		}
	}
	if len(pos) == 2 {
		given := splitList(pos[1])
		if peers == nil {
			peers = given
		} else if strings.Join(given, ",") != strings.Join(peers, ",") {
			return usagef("%s disagrees with --remote_ip/--receiver_ports (%s); give one of them", pos[1], strings.Join(peers, ","))
		}
	}
	ss, err := sessions()
	if err != nil {
		return err
	}
	sess, err := loadRecord(ss, uid, fmt.Sprintf("s2uc keeps them in %s: run outbound-request as the same user (same SCISTREAM_HOME) that ran inbound-request, or use s2uc stream", ss.Dir))
	if err != nil {
		return err
	}
	if sess.Inbound == nil {
		return fmt.Errorf("local record of stream %s has no inbound side; request it with inbound-request first", uid)
	}
	if rate > 0 && sess.Rate == 0 {
		return usagef("--rate: the inbound side of stream %s reserved no rate (best effort), so the two sides could not settle on one; give --rate to inbound-request, or raise the inbound side first with s2uc update %s --rate --s2cs %s", uid, uid, sess.Inbound.S2CS)
	}
	if sess.Outbound != nil {
		return conflictf("stream %s already has an outbound side on %s; release it first", uid, sess.Outbound.S2CS)
	}
	out, err := gw.client(cl.timeout)
	if err != nil {
		return err
	}
	defer out.Close()
	ig := cl.recordSide(uid, "inbound", sess.Inbound, "inbound_token_file", *inTokenFile)
	in, err := ig.client(cl.timeout)
	if err != nil {
		return fmt.Errorf("inbound gateway %s: %w", sess.Inbound.S2CS, err)
	}
	defer in.Close()
	if peers, err = checkPeers(ctx, in, sess, peers); err != nil {
		return err
	}
	req := &api.OutboundRequest{
		UID: uid, PeerListeners: peers, NumConn: *numConn, PeerCert: sess.Inbound.WANCert,
		Secret: sess.Secret, Allow: splitList(*allow), WAN: sess.WAN, Engine: *engine,
		PeerServerName: sess.Inbound.ServerName, WANPool: *wanPool, MaxActiveConns: *maxActive, ResumeWindowS: resume, Stripe: api.StripeField(*stripe),
		Rate: rate, MinRate: least, LeaseS: lease, PeerNodes: sess.Inbound.Nodes,
	}
	client.Settle(req, &api.Stream{Rate: sess.Rate, MinRate: sess.MinRate, LeaseS: sess.LeaseS})
	_, s, err := client.Connect(ctx, in, out, req)
	if err != nil {
		return err
	}
	sess.Outbound = &client.Endpoint{S2CS: gw.s2cs, ServerCert: absOrEmpty(gw.cert), TokenFile: absOrEmpty(gw.tokenFile), Listeners: s.Listeners}
	if err := ss.Save(sess); err != nil {
		fmt.Fprintf(stderr, "s2uc: warning: could not update the local record of %s: %v\n", uid, err)
	}
	if cl.output == "json" {
		return printJSON(stdout, public(s))
	}
	fmt.Fprintf(stdout, "uid: %s\nlisteners: %s\n", s.UID, printableList(s.Listeners, " "))
	printTerms(stdout, s)
	return nil
}

// checkPeers checks the inbound listeners the command line gives
// (peers) against those the inbound side gave: s2uc's record of it, or,
// when the record holds none, the inbound gateway, if it answers. A
// mismatch is refused, naming both: the outbound side would dial a port
// the inbound side never opened, and say "connected" until data failed.
// With none given, the inbound side's are used.
func checkPeers(ctx context.Context, in *client.Client, sess *client.Session, peers []string) ([]string, error) {
	gave, from := sess.Inbound.Listeners, "s2uc's record of the inbound side"
	if len(gave) == 0 {
		if s, err := in.Get(ctx, sess.UID); err == nil {
			gave, from = s.Listeners, "the inbound gateway "+sess.Inbound.S2CS
		}
	}
	switch {
	case len(peers) == 0 && len(gave) == 0:
		return nil, usagef("missing the inbound gateway's listener(s): give --remote_ip and --receiver_ports, or PEER_IP:PROXY_C after the UID")
	case len(peers) == 0:
		return gave, nil
	case len(gave) == 0 || slices.Equal(peers, gave):
		return peers, nil
	}
	return nil, conflictf("the inbound listeners given, %s, are not those the inbound side of %s gave, %s (%s): give --remote_ip %s --receiver_ports %s, or %s after the UID, or nothing (s2uc takes them from its record)",
		strings.Join(peers, ","), sess.UID, printableList(gave, ","), from, hostOf(gave[0]), portsOf(gave), printableList(gave, ","))
}
