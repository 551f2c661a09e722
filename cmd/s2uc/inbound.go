package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"scistream/internal/api"
	"scistream/internal/client"
)

func runInbound(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cl := newCmdline("inbound-request", "--s2cs HOST:PORT --server_cert FILE --remote_ip IP --receiver_ports P[,P...] --num_conn N", stdout, stderr)
	gw := cl.gateway("", "inbound gateway", " (in front of the listening application)")
	remoteIP := cl.fs.String("remote_ip", "", "address of the listening application, as the inbound gateway reaches it")
	recvPorts := cl.fs.String("receiver_ports", "", "port(s) of the listening application; channel i leads to port i (round-robin)")
	numConn := cl.fs.Int("num_conn", 1, "number of channels (listeners)")
	wanT := cl.fs.String("wan", "tls", "WAN transport between the gateways: tls, quic (one QUIC connection per channel), or tcp for trusted circuits")
	engine := cl.fs.String("engine", "", "data-plane engine (default: the gateway's)")
	wanListener := cl.fs.String("wan_listener", "", "where the gateway takes the WAN legs: shared (its shared WAN port, s2cs --wan_port) or ports (ports of the stream's own); default: shared if it has one and --wan is tls or quic")
	maxActive := cl.fs.Int("max_active_conns", 0, "most application connections this side relays at once; one more is reset (0: the gateway's cap)")
	uid := cl.fs.String("uid", "", "fix the stream UID (default: the gateway chooses)")
	appWait := cl.fs.String("app_wait", "", appWaitUsage)
	resumeWindow := cl.fs.String("resume_window", "", resumeWindowUsage)
	tf := cl.terms()
	if _, err := cl.parse(args, 0, 0, ""); err != nil {
		return err
	}
	rate, least, lease, err := tf.parse()
	if err != nil {
		return err
	}
	if *remoteIP == "" {
		return usagef("missing --remote_ip: the address of the application that listens (e.g. the consumer)")
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
	if err := checkMaxActive(*maxActive); err != nil {
		return err
	}
	c, err := gw.client(cl.timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	ss, err := sessions()
	if err != nil {
		return err
	}
	if err := ss.Check(); err != nil { // before a stream exists whose record would have nowhere safe to go
		return err
	}
	s, err := c.Inbound(ctx, &api.InboundRequest{
		UID: *uid, RemoteIP: *remoteIP, ReceiverPorts: rp, NumConn: *numConn, WAN: *wanT, Engine: *engine, WANListener: *wanListener, AppWaitS: wait, ResumeWindowS: resume, MaxActiveConns: *maxActive,
		Rate: rate, MinRate: least, LeaseS: lease,
	})
	if err != nil {
		return err
	}
	err = ss.Save(&client.Session{
		UID: s.UID, WAN: s.WAN, Secret: s.Secret, Rate: s.Rate, MinRate: s.MinRate, LeaseS: s.LeaseS,
		Inbound: &client.Endpoint{S2CS: gw.s2cs, ServerCert: absOrEmpty(gw.cert), TokenFile: absOrEmpty(gw.tokenFile), Listeners: s.Listeners, WANCert: s.WANCert, ServerName: s.WANServerName, Nodes: s.Nodes},
	})
	if err != nil {
		return fmt.Errorf("stream %s was created but its local record could not be saved (%v); release it with s2uc release %s --s2cs %s", s.UID, err, s.UID, gw.s2cs)
	}
	if cl.output == "json" {
		return printJSON(stdout, public(s))
	}
	// The UID, listeners and server name were checked by client.Inbound:
	// the next line quotes them as a command to run.
	fmt.Fprintf(stdout, "uid: %s\nlisteners: %s\n", s.UID, printableList(s.Listeners, " "))
	if s.WANServerName != "" {
		fmt.Fprintf(stdout, "server name: %s (on the shared WAN port; outbound-request sends it)\n", printable(s.WANServerName))
	}
	printTerms(stdout, s)
	// Every listener, once: as the UID's argument (flags would say the
	// same again, and the two must agree).
	fmt.Fprintf(stdout, "next: s2uc outbound-request --s2cs PRODUCER_GATEWAY:PORT --server_cert FILE --num_conn %d %s %s\n",
		s.NumConn, s.UID, strings.Join(s.Listeners, ","))
	return nil
}

func hostOf(hp string) string {
	i := strings.LastIndex(hp, ":")
	return strings.Trim(hp[:i], "[]")
}

func portsOf(hps []string) string {
	var ps []string
	for _, hp := range hps {
		ps = append(ps, hp[strings.LastIndex(hp, ":")+1:])
	}
	return strings.Join(ps, ",")
}
