package gateway

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"scistream/internal/api"
	"scistream/internal/auth"
	"scistream/internal/client"
	"scistream/internal/intake"
	"scistream/internal/waitfor"
)

// outboundBody is an outbound request to peer_listeners pl.
func outboundBody(pl string) string {
	return `{"uid":"0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b6c","num_conn":1,"peer_listeners":["` + pl +
		`"],"secret":"` + strings.Repeat("A", 43) + `=","wan":"tls"}`
}

// TestTargetValidation: remote_ip and peer_listeners must lead to one
// host: unicast addresses, or names that resolve now to unicast ones,
// whatever the allow-lists say.
func TestTargetValidation(t *testing.T) {
	s := newTestServer(t, nil)
	for host, mention := range map[string]string{
		"0.0.0.0":                "unspecified",
		"::":                     "unspecified",
		"255.255.255.255":        "broadcast",
		"::ffff:255.255.255.255": "broadcast",
		"224.0.0.1":              "multicast",
		"ff02::1":                "multicast",
		"999.1.1.1":              "does not resolve",
		"-":                      "does not resolve",
		"nonexistent.invalid":    "does not resolve",
		"zero.test":              "zero.test (0.0.0.0) port 9: it is the unspecified address",
		"multicast.test":         "multicast.test (239.1.2.3) port 9: it is a multicast address",
	} {
		body := `{"remote_ip":"` + host + `","receiver_ports":[9],"num_conn":1}`
		callErr(t, s, "POST", "/v1/streams/inbound", aliceToken, body, 400, api.CodeInvalidArgument, "remote_ip")
		callErr(t, s, "POST", "/v1/streams/inbound", aliceToken, body, 400, api.CodeInvalidArgument, mention)
		mention = strings.ReplaceAll(mention, "port 9", "port 5100")
		callErr(t, s, "POST", "/v1/streams/outbound", aliceToken, outboundBody(net.JoinHostPort(host, "5100")), 400, api.CodeInvalidArgument, mention)
	}
	for _, host := range []string{"127.0.0.1", "::1", "192.0.2.9", "consumer.example"} {
		body := `{"remote_ip":"` + host + `","receiver_ports":[9],"num_conn":1}`
		var st api.Stream
		callOK(t, s, "POST", "/v1/streams/inbound", aliceToken, body, 201, &st)
		callOK(t, s, "DELETE", "/v1/streams/"+st.UID, aliceToken, "", 200, nil)
	}
}

// hostAddr returns an address of one of this host's interfaces that is
// not loopback, or an invalid one if it has none.
func hostAddr(t *testing.T) netip.Addr {
	as, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range as {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok && !ip.Unmap().IsLoopback() && !ip.IsLinkLocalUnicast() {
				return ip.Unmap()
			}
		}
	}
	return netip.Addr{}
}

// TestTargetPolicyDefault (issue 25, finding 1): started without
// --allow_targets or --allow_peers, a gateway dials neither its own host
// (loopback, its own addresses) nor a link-local address (a cloud
// metadata service) for a user's stream; the refusal names the flag.
func TestTargetPolicyDefault(t *testing.T) {
	s := newTestServer(t, func(c *Config) { c.AllowTargets, c.AllowPeers = nil, nil })
	hosts := map[string]string{
		"127.0.0.1":        "a loopback address",
		"::1":              "a loopback address",
		"127.9.9.9":        "a loopback address",
		"::ffff:127.0.0.1": "a loopback address",
		s.cfg.ListenerIP:   "a loopback address",
		"169.254.169.254":  "a link-local address",
		"fe80::1":          "a link-local address",
	}
	if a := hostAddr(t); a.IsValid() {
		hosts[a.String()] = "an address of this gateway's own host"
	}
	for host, rule := range hosts {
		body := `{"remote_ip":"` + host + `","receiver_ports":[9],"num_conn":1}`
		callErr(t, s, "POST", "/v1/streams/inbound", aliceToken, body, 403, api.CodePermissionDenied, "remote_ip "+host)
		callErr(t, s, "POST", "/v1/streams/inbound", aliceToken, body, 403, api.CodePermissionDenied, rule)
		callErr(t, s, "POST", "/v1/streams/inbound", aliceToken, body, 403, api.CodePermissionDenied, "s2cs --allow_targets")
		callErr(t, s, "POST", "/v1/streams/outbound", aliceToken, outboundBody(net.JoinHostPort(host, "443")), 403, api.CodePermissionDenied, "s2cs --allow_peers")
	}
	// peer_nodes: the peer facility's other nodes, dialled at the
	// listeners' ports.
	ob := `{"uid":"0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b6c","num_conn":1,"peer_listeners":["192.0.2.9:5100"],"peer_nodes":["192.0.2.10","169.254.169.254"],"secret":"` +
		strings.Repeat("A", 43) + `=","wan":"tls","peer_cert":` + strconv.Quote(string(s.cfg.Identity.PEM)) + `}`
	callErr(t, s, "POST", "/v1/streams/outbound", aliceToken, ob, 403, api.CodePermissionDenied, "peer_nodes 169.254.169.254 port 5100: it is a link-local address")
	// Elsewhere is fine.
	for _, host := range []string{"192.0.2.9", "2001:db8::9", "consumer.example"} {
		var st api.Stream
		callOK(t, s, "POST", "/v1/streams/inbound", aliceToken, `{"remote_ip":"`+host+`","receiver_ports":[9],"num_conn":1}`, 201, &st)
		callOK(t, s, "DELETE", "/v1/streams/"+st.UID, aliceToken, "", 200, nil)
	}
}

// TestTargetPolicyOwnEndpoints (issue 25, finding 1): even where the
// operator allows loopback (applications on the gateway's host), a
// stream reaches none of the gateway's own endpoints: not its control
// port, not its metrics listener (a user the roles refuse /metrics read
// it through a stream), not its data ports, where another user's
// listener would take the gateway's own connection as one from an
// allowed source and relay it to that user's consumer.
func TestTargetPolicyOwnEndpoints(t *testing.T) {
	tokens, err := auth.ParseTokens(strings.NewReader(auth.HashToken(aliceToken) + " alice\n" + auth.HashToken(bobToken) + " bob\n"))
	if err != nil {
		t.Fatal(err)
	}
	ip := "127.0.0.1"
	metrics, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	g := startGW(t, tokens, func(c *Config) { c.Observe.MetricsListener = metrics })
	cons := startGW(t, tokens)
	waitReady(t, g)
	waitReady(t, cons)
	gw := func(tok string) *client.Client {
		c, err := client.New(client.Config{Addr: g.addr, ServerCert: g.cert, Token: tok})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	alice, bob := gw(aliceToken), gw(bobToken)
	aliceIn, err := client.New(client.Config{Addr: cons.addr, ServerCert: cons.cert, Token: aliceToken})
	if err != nil {
		t.Fatal(err)
	}
	defer aliceIn.Close()
	ctx := context.Background()

	// Alice's stream: her producer connects to g's data port, relayed to
	// her consumer behind cons.
	app, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	in, out, err := client.Wire(ctx, aliceIn, alice,
		&api.InboundRequest{RemoteIP: "127.0.0.1", ReceiverPorts: []int{app.Addr().(*net.TCPAddr).Port}, NumConn: 1},
		api.OutboundRequest{NumConn: 1, Allow: []string{"127.0.0.1/32"}}, nil) // not bob's host, nor g's own address
	if err != nil {
		t.Fatal(err)
	}
	defer aliceIn.Release(ctx, in.UID)
	defer alice.Release(ctx, in.UID)
	aliceListener := out.Listeners[0]

	gwHost, ctlPort, _ := net.SplitHostPort(g.addr)
	_, metricsPort, _ := net.SplitHostPort(metrics.Addr().String())
	_, alicePort, _ := net.SplitHostPort(aliceListener)
	port := func(p string) int { n, _ := strconv.Atoi(p); return n }
	pem, err := os.ReadFile(cons.cert)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		host string
		port int
		rule string
	}{
		{gwHost, port(ctlPort), "this gateway's own control port"},
		{ip, port(metricsPort), "this gateway's own metrics listener"},
		{gwHost, port(alicePort), "this gateway's own data-port range"},
		{gwHost, 5120, "this gateway's own data-port range"},
	} {
		_, err := bob.Inbound(ctx, &api.InboundRequest{RemoteIP: c.host, ReceiverPorts: []int{c.port}, NumConn: 1})
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Code != api.CodePermissionDenied || !strings.Contains(ae.Message, c.rule) || !strings.Contains(ae.Message, "whatever") {
			t.Errorf("bob's stream to %s:%d: %v; want permission_denied saying %q, whatever the lists say", c.host, c.port, err, c.rule)
		}
		_, err = bob.Outbound(ctx, &api.OutboundRequest{UID: intake.NewUID(), NumConn: 1, PeerCert: string(pem),
			PeerListeners: []string{net.JoinHostPort(c.host, strconv.Itoa(c.port))}, Secret: strings.Repeat("A", 43) + "="})
		if !errors.As(err, &ae) || ae.Code != api.CodePermissionDenied || !strings.Contains(ae.Message, "peer_listeners") || !strings.Contains(ae.Message, c.rule) {
			t.Errorf("bob's outbound stream to %s:%d: %v; want a refusal saying %q", c.host, c.port, err, c.rule)
		}
	}
	// The gateway's host at a port of no endpoint is an application
	// the operator allowed (127.0.0.0/8).
	if _, err := bob.Inbound(ctx, &api.InboundRequest{RemoteIP: "127.0.0.1", ReceiverPorts: []int{app.Addr().(*net.TCPAddr).Port}, NumConn: 1}); err != nil {
		t.Fatalf("an application on 127.0.0.1: %v", err)
	}
	// Alice's stream still works, and her consumer saw nothing of bob.
	c, err := net.Dial("tcp", aliceListener)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("alice"))
	ac, err := app.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	b := make([]byte, 5)
	ac.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := ac.Read(b); err != nil || string(b) != "alice" {
		t.Fatalf("alice's consumer read %q, %v", b, err)
	}
}

// TestTargetPolicyAtDial (issue 25, finding 1): the policy holds at the
// dial, not only when the request arrived: a name that resolved to an
// allowed address then and to a refused one now (DNS rebinding) leads
// nowhere, and the connection's end says why.
func TestTargetPolicyAtDial(t *testing.T) {
	// The internal service the name leads to at the dial: "localhost".
	svc, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	_, svcPort, _ := net.SplitHostPort(svc.Addr().String())
	p := startPair(t, func(c *Config) {
		c.AllowTargets = nil // the default: no loopback
		c.LookupHost = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return []netip.Addr{netip.MustParseAddr("192.0.2.1")}, nil // what the name said when asked
		}
	}, nil)
	ctx := context.Background()
	port, _ := strconv.Atoi(svcPort)
	in, out, err := client.Wire(ctx, p.in, p.out,
		&api.InboundRequest{RemoteIP: "localhost", ReceiverPorts: []int{port}, NumConn: 1, AppWaitS: new(int)},
		api.OutboundRequest{NumConn: 1, Allow: []string{"127.0.0.0/8"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.in.Release(ctx, in.UID)
	defer p.out.Release(ctx, in.UID)
	// The refusal may come back so fast (the leg reset, then the
	// application's connection) that the connect itself reads it.
	if c, err := net.Dial("tcp", out.Listeners[0]); err == nil {
		defer c.Close()
		c.Write([]byte("to an internal service"))
	} else if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatal(err)
	}
	var v *api.Stream
	waitfor.Must(t, 20*time.Second, "the connection's end to be counted", func() bool {
		v, err = p.in.Get(ctx, in.UID)
		return err == nil && v.Stats.AbortedByKind[api.EndDialFailed] == 1
	})
	if le := v.Stats.LastErrors[api.EndDialFailed]; !strings.Contains(le.Reason, "loopback") || !strings.Contains(le.Reason, "does not dial") {
		t.Errorf("last dial_failed %+v does not say the policy refused the address", le)
	}
	// Had the dial connected, the connection would wait in svc's queue.
	svc.(*net.TCPListener).SetDeadline(time.Now().Add(100 * time.Millisecond))
	if sc, err := svc.Accept(); err == nil {
		sc.Close()
		t.Fatal("the gateway connected to the internal service the name resolved to at the dial")
	}
}
