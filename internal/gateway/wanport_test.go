package gateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"scistream/internal/api"
	"scistream/internal/auth"
	"scistream/internal/certs"
	"scistream/internal/client"
	"scistream/internal/localgw"
	"scistream/internal/proxyproto"
	"scistream/internal/strangers"
	"scistream/internal/stream"
	"scistream/internal/waitfor"
	"scistream/internal/wan"
	"scistream/internal/wanport"
)

// sharedPort is the shared WAN port of the consumer gateways in these
// tests (each gateway has its own loopback address).
const sharedPort = 5443

// echoApp is a consumer application that echoes every connection.
func echoApp(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				io.Copy(c, c)
				c.(*net.TCPConn).CloseWrite()
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

// roundTrip sends n random bytes through the outbound listener addr,
// half-closes, and checks the echo comes back whole and in order,
// followed by a clean end.
func roundTrip(t *testing.T, addr string, n int) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	want := make([]byte, n)
	rand.Read(want)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Write(want)
		if err == nil {
			err = c.(*net.TCPConn).CloseWrite()
		}
		errc <- err
	}()
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("read the echo through %s: %v", addr, err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("echo through %s: %d bytes back of %d, or not the same", addr, len(got), n)
	}
}

// TestSharedWANPort: streams of two identities, over tls and over quic,
// share the consumer gateway's one WAN port; none takes a port of the
// range; each carries its bytes both ways; releasing one leaves the
// other's open connection working.
func TestSharedWANPort(t *testing.T) {
	alice, bob := localgw.NewToken(), localgw.NewToken()
	tokens, err := auth.ParseTokens(strings.NewReader(auth.HashToken(alice) + " alice\n" + auth.HashToken(bob) + " bob\n"))
	if err != nil {
		t.Fatal(err)
	}
	cons := startGW(t, tokens, func(c *Config) { c.WAN.Port = sharedPort; c.WAN.Domain = "wan.cons.test" })
	prod := startGW(t, tokens)
	waitReady(t, cons)
	waitReady(t, prod)
	echo := echoApp(t)
	ctx := context.Background()
	clients := func(tok string) (in, out *client.Client) {
		in, _ = client.New(client.Config{Addr: cons.addr, ServerCert: cons.cert, Token: tok})
		out, _ = client.New(client.Config{Addr: prod.addr, ServerCert: prod.cert, Token: tok})
		t.Cleanup(func() { in.Close(); out.Close() })
		return in, out
	}
	type wired struct {
		in, out *client.Client
		inS     *api.Stream
		outS    *api.Stream
	}
	var streams []wired
	names := map[string]bool{}
	for _, c := range []struct {
		tok, wan string
		pool     int
	}{{alice, api.WANTLS, 0}, {bob, api.WANTLS, 0}, {alice, api.WANQUIC, 0}, {bob, api.WANTLS, 1}} {
		in, out := clients(c.tok)
		inS, outS, err := client.Wire(ctx, in, out,
			&api.InboundRequest{RemoteIP: "127.0.0.1", ReceiverPorts: []int{echo}, NumConn: 3, WAN: c.wan},
			api.OutboundRequest{NumConn: 3, Allow: []string{"127.0.0.0/8"}, WANPool: c.pool}, nil)
		if err != nil {
			t.Fatal(err)
		}
		advertised := net.JoinHostPort(cons.srv.cfg.ListenerIP, "5443")
		if len(inS.Listeners) != 1 || inS.Listeners[0] != advertised {
			t.Fatalf("inbound listeners %v, want the shared port %s once", inS.Listeners, advertised)
		}
		if !strings.HasSuffix(inS.WANServerName, ".wan.cons.test") || names[inS.WANServerName] {
			t.Fatalf("server name %q: not under the domain, or not unique", inS.WANServerName)
		}
		names[inS.WANServerName] = true
		if outS.PeerServerName != inS.WANServerName {
			t.Fatalf("outbound side sends %q, inbound side is %q", outS.PeerServerName, inS.WANServerName)
		}
		streams = append(streams, wired{in, out, inS, outS})
	}
	if n := cons.srv.alloc.InUse(); n != 0 {
		t.Fatalf("streams on the shared port hold %d ports of the range", n)
	}
	for _, w := range streams {
		for ch := range 3 {
			roundTrip(t, w.outS.Listeners[ch], 256<<10)
			roundTrip(t, w.outS.Listeners[ch], 64<<10)
		}
	}
	// The pooled stream's legs through the shared port were reused.
	if s, err := streams[3].out.Get(ctx, streams[3].inS.UID); err != nil || s.Stats.LegsReused == 0 {
		t.Fatalf("pooled legs on the shared port: %+v, %v; want some reused", s.Stats, err)
	}

	// A connection of stream 1 stays open while stream 0 is released.
	c, err := net.Dial("tcp", streams[1].outS.Listeners[0])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	echoOnce := func(msg string) {
		t.Helper()
		if _, err := c.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, len(msg))
		if _, err := io.ReadFull(c, b); err != nil || string(b) != msg {
			t.Fatalf("echo %q: got %q, %v", msg, b, err)
		}
	}
	echoOnce("before")
	var st0 *stream.Stream
	for _, st := range cons.srv.live() {
		if st.UID == streams[0].inS.UID {
			st0 = st
		}
	}
	port := cons.srv.port
	if st0 == nil || !port.Trusts(st0) {
		t.Fatal("the shared port does not trust the source stream 0's peer authenticated from")
	}
	for _, cl := range []*client.Client{streams[0].out, streams[0].in} {
		if _, err := cl.Release(ctx, streams[0].inS.UID); err != nil {
			t.Fatal(err)
		}
	}
	if port.Trusts(st0) {
		t.Fatal("stream 0's trust outlived the stream")
	}
	echoOnce("after another stream's release")
	if _, err := net.Dial("tcp", streams[0].outS.Listeners[0]); err == nil {
		t.Fatal("a released stream's outbound listener still accepts")
	}
	roundTrip(t, streams[2].outS.Listeners[1], 64<<10) // quic still serves
}

// TestSharedWANPortRefusals: on the shared port, a name that no stream
// has, a malformed one and none at all fail the handshake exactly as a
// certificate that is not pinned does, so a caller learns nothing of
// which streams exist; the right name with the right certificate still
// needs the stream secret and one of the stream's channels.
func TestSharedWANPortRefusals(t *testing.T) {
	p := startPair(t, func(c *Config) { c.WAN.Port = sharedPort }, nil)
	cons, prod, in, out := p.cons, p.prod, p.in, p.out
	ctx := context.Background()
	inS, _, err := client.Wire(ctx, in, out,
		&api.InboundRequest{RemoteIP: "127.0.0.1", ReceiverPorts: []int{echoApp(t)}, NumConn: 2},
		api.OutboundRequest{NumConn: 2, Allow: []string{"127.0.0.0/8"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := inS.Listeners[0]
	pin := cons.srv.cfg.Identity.SHA256
	stranger, _, _, err := certs.LoadOrGenerate(t.TempDir(), []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	handshake := func(cert *tls.Certificate, name string) error {
		raw, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		raw.SetDeadline(time.Now().Add(10 * time.Second))
		tc := tls.Client(raw, &tls.Config{
			MinVersion: tls.VersionTLS13, ServerName: name, Certificates: []tls.Certificate{*cert},
			InsecureSkipVerify:    true,
			VerifyPeerCertificate: certs.VerifyPin(pin),
		})
		if err := tc.Handshake(); err != nil {
			return err
		}
		// TLS 1.3: the server's verdict on the client's certificate
		// arrives after the client's handshake completed.
		_, err = tc.Read(make([]byte, 1))
		return err
	}
	wrongCert := handshake(&stranger.TLS, inS.WANServerName)
	if wrongCert == nil || !strings.Contains(wrongCert.Error(), "bad certificate") {
		t.Fatalf("a certificate that is not pinned: %v, want a bad certificate alert", wrongCert)
	}
	prodCert := &prod.srv.cfg.Identity.TLS
	for _, name := range []string{
		"aaaaaaaaaaaaaaaaaaaaaaaaaa." + wanport.DefaultDomain, // well formed, nobody's
		"not a name!",
		"",
		"x." + inS.WANServerName, // a name under the stream's
	} {
		err := handshake(prodCert, name)
		if err == nil || err.Error() != wrongCert.Error() {
			t.Errorf("server name %q: %v; want exactly what a wrong certificate gets (%v)", name, err, wrongCert)
		}
	}

	// The right name and certificate, but not the secret, or not a
	// channel of the stream.
	secret := wan.NewSecret()
	bad := []struct {
		what    string
		channel int
		secret  []byte
	}{
		{"wrong secret", 0, secret},
		{"channel beyond num_conn", 2, nil},
	}
	sessSecret := streamSecret(t, cons, inS.UID)
	for _, b := range bad {
		s := b.secret
		if s == nil {
			s = sessSecret
		}
		leg := &wan.Leg{Transport: api.WANTLS, UID: inS.UID, Channel: b.channel, Secret: s, Cert: prodCert,
			PeerSHA256: func() string { return pin }, ServerName: inS.WANServerName}
		c, err := wan.Dial(ctx, addr, leg)
		if err != nil {
			t.Fatalf("%s: dial: %v", b.what, err)
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = c.Read(make([]byte, 1))
		c.Close()
		if err == nil || os.IsTimeout(err) {
			t.Fatalf("%s: the leg was not refused: %v", b.what, err)
		}
	}
	// The wrong certificate, the wrong secret and the wrong channel named
	// the stream; the unknown names did not.
	waitfor.Must(t, 10*time.Second, "three refusals counted on the stream", func() bool {
		st, err := in.Get(ctx, inS.UID)
		return err == nil && st.Stats.RejectedConns == 3
	})
}

// streamSecret reads the secret of inbound stream uid from gw's table.
func streamSecret(t *testing.T, gw *testGW, uid string) []byte {
	t.Helper()
	for _, st := range gw.srv.live() {
		if st.UID == uid {
			return st.Record().Secret
		}
	}
	t.Fatalf("no live stream %s", uid)
	return nil
}

// TestSharedWANPortStrangerCaps: the shared port serves every stream, so
// the per-listener cap does not apply to it; the per-source and total
// caps do, before any TLS state exists.
func TestSharedWANPortStrangerCaps(t *testing.T) {
	tokens, err := auth.ParseTokens(strings.NewReader(auth.HashToken(aliceToken) + " alice\n"))
	if err != nil {
		t.Fatal(err)
	}
	cons := startGW(t, tokens, func(c *Config) {
		c.WAN.Port = sharedPort
		c.Strangers = strangers.Limits{PerListener: 2, PerSource: 4, Total: 8, Trusted: 2} // strangers: 6 in all
	})
	waitReady(t, cons)
	addr := net.JoinHostPort(cons.srv.cfg.ListenerIP, "5443")
	refused := func(from string, k int) int { return refusedOf(t, addr, from, k) }
	if got := refused("127.0.0.71", 10); got != 6 {
		t.Fatalf("10 strangers from one source, a cap of 4 per source: %d refused, want 6 (the per-listener cap of 2 must not apply)", got)
	}
	if got := refused("127.0.0.72", 10); got != 8 {
		t.Fatalf("10 more from another source, a strangers' total of 6: %d refused, want 8", got)
	}
}

// TestSharedWANPortProxyProtocol: behind a router that sends the PROXY
// protocol, the caps count the source each header names, not the
// router's address, and a connection without a header is refused.
func TestSharedWANPortProxyProtocol(t *testing.T) {
	tokens, err := auth.ParseTokens(strings.NewReader(auth.HashToken(aliceToken) + " alice\n"))
	if err != nil {
		t.Fatal(err)
	}
	cons := startGW(t, tokens, func(c *Config) {
		c.WAN.Port = sharedPort
		c.WAN.ProxyProtocol = true
		c.WAN.ProxyFrom = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")} // the router: the test's address
		c.Strangers = strangers.Limits{PerSource: 2, Total: 100}
	})
	waitReady(t, cons)
	addr := net.JoinHostPort(cons.srv.cfg.ListenerIP, "5443")
	dst := netip.MustParseAddrPort(addr)
	// open connects from the router's address (the test's) and sends
	// first (a header, or anything), then reports whether the gateway
	// refused the connection within a moment.
	refused := func(first []byte) bool {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := c.Write(first); err != nil {
			return true
		}
		c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		_, err = c.Read(make([]byte, 1))
		return err != nil && !isTimeoutErr(err)
	}
	from := func(src string) []byte {
		return proxyproto.Append(nil, netip.MustParseAddrPort(src), dst)
	}
	for i, want := range []bool{false, false, true} {
		if got := refused(from("198.51.100.7:4000" + fmt.Sprint(i))); got != want {
			t.Fatalf("connection %d from 198.51.100.7 (a cap of 2 per source): refused %v, want %v", i+1, got, want)
		}
	}
	if refused(from("198.51.100.8:40000")) {
		t.Fatal("a second source behind the same router was refused: the cap counted the router")
	}
	// A peer that reaches the port directly, past the router, starts
	// with its ClientHello.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	err = tls.Client(c, &tls.Config{InsecureSkipVerify: true, ServerName: "x." + wanport.DefaultDomain}).Handshake()
	if err == nil || isTimeoutErr(err) {
		t.Fatalf("a connection without a PROXY header: handshake %v, want it refused at once", err)
	}
}

// TestSharedWANPortProxyFrom (issue 25, finding 6): behind a router that
// sends the PROXY protocol, only the routers' addresses may speak it: a
// client that reaches the port directly cannot name a source of its
// choosing, nor fill the budget of connections whose header has not come,
// and one router cannot take all of it from another.
func TestSharedWANPortProxyFrom(t *testing.T) {
	tokens, err := auth.ParseTokens(strings.NewReader(auth.HashToken(aliceToken) + " alice\n"))
	if err != nil {
		t.Fatal(err)
	}
	const total = 40
	cons := startGW(t, tokens, func(c *Config) {
		c.WAN.Port = sharedPort
		c.WAN.ProxyProtocol = true
		c.WAN.ProxyFrom = []netip.Prefix{netip.MustParsePrefix("127.0.0.101/32"), netip.MustParsePrefix("127.0.0.102/32")}
		c.Strangers = strangers.Limits{PerSource: 8, Total: total}
	})
	waitReady(t, cons)
	addr := net.JoinHostPort(cons.srv.cfg.ListenerIP, "5443")
	dst := netip.MustParseAddrPort(addr)
	strange := cons.srv.strange
	refusals := func(reason string) int64 {
		return strange.RefusedSince()[strangers.Key(reason)]
	}
	wp := cons.srv.port
	unheard := func() int {
		return wp.Unheard()
	}
	// dial connects from src and sends first, if not nil.
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	dial := func(src string, first []byte) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			if errors.Is(err, syscall.ECONNRESET) {
				return
			}
			t.Fatal(err)
		}
		conns = append(conns, c)
		if first != nil {
			c.Write(first)
		}
	}
	// A client past the router names 300 sources of its choosing.
	for i := range 300 {
		dial("127.0.0.91", proxyproto.Append(nil, netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 9, byte(i >> 8), byte(i)}), 4000), dst))
	}
	waitfor.Must(t, 30*time.Second, "300 connections past the router refused", func() bool { return refusals(strangers.ReasonProxyFrom) == 300 })
	blamed := strange.TopRefused(1)
	if !strings.HasPrefix(blamed, "127.0.0.91 ") {
		t.Fatalf("the refusals blame %q, want the real address 127.0.0.91", blamed)
	}
	// It opens as many silent connections as the budget holds: refused,
	// so a router's connection still gets in.
	for range total {
		dial("127.0.0.91", nil)
	}
	waitfor.Must(t, 30*time.Second, "the silent connections past the router refused", func() bool { return refusals(strangers.ReasonProxyFrom) == 300+total })
	// One router holds half the budget at most while its headers have
	// not come; the other router still gets in.
	for range total {
		dial("127.0.0.101", nil)
	}
	waitfor.Must(t, 30*time.Second, "one router's silent connections admitted or refused", func() bool {
		return unheard() == total/2 && refusals(strangers.ReasonCap) == total/2
	})
	before := refusals(strangers.ReasonCap) + refusals(strangers.ReasonProxyFrom) + refusals(strangers.ReasonProxy)
	dial("127.0.0.102", nil)
	waitfor.Must(t, 30*time.Second, "the second router's connection admitted", func() bool { return unheard() == total/2+1 })
	if after := refusals(strangers.ReasonCap) + refusals(strangers.ReasonProxyFrom) + refusals(strangers.ReasonProxy); after != before {
		t.Fatalf("the second router's connection was refused (%d refusals, %d before)", after, before)
	}
}
