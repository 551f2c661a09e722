package gateway

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"scistream/internal/api"
	"scistream/internal/auth"
	"scistream/internal/certs"
	"scistream/internal/client"
	"scistream/internal/leakcheck"
	"scistream/internal/localgw"
	"scistream/internal/ports"
	"scistream/internal/store"
	"scistream/internal/waitfor"
)

type testGW struct {
	srv  *Server
	addr string
	cert string
	done chan error
}

// startGW runs an in-process gateway on a fresh loopback address; mods
// may change its config first.
func startGW(t *testing.T, tokens *auth.Tokens, mods ...func(*Config)) *testGW {
	t.Helper()
	dir := t.TempDir()
	ip := localgw.RandomLoopback()
	id, certFile, _, err := certs.LoadOrGenerate(dir, []string{ip})
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.OpenBolt(filepath.Join(dir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		ListenerIP: ip, PortRange: ports.Range{Lo: 5100, Hi: 5120}, Identity: id, Auth: tokens, Store: st,
		Logger:       slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
		AllowTargets: loopback, AllowPeers: loopback,
	}
	for _, mod := range mods {
		mod(&cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	g := &testGW{srv: srv, addr: ln.Addr().String(), cert: certFile, done: make(chan error, 1)}
	go func() { g.done <- srv.Serve(context.Background(), ln) }()
	t.Cleanup(func() { srv.Shutdown(context.Background()); <-g.done })
	return g
}

// loopback is the allow-list of a gateway whose applications and peers
// run on its own host, as every test's do (s2cs --allow_targets and
// --allow_peers 127.0.0.0/8,::1).
var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(b []byte) (int, error) { w.t.Logf("%s", b); return len(b), nil }

// TestNoGoroutineLeft wires a stream between two in-process gateways,
// moves data with a connection still open, releases, shuts down, and
// checks every goroutine the gateways started has ended.
func TestNoGoroutineLeft(t *testing.T) {
	base := runtime.NumGoroutine()
	tok := localgw.NewToken()
	tokens, err := auth.ParseTokens(strings.NewReader(auth.HashToken(tok) + " alice\n"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	func() {
		prod, cons := startGW(t, tokens), startGW(t, tokens)
		app, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer app.Close()
		in, _ := client.New(client.Config{Addr: cons.addr, ServerCert: cons.cert, Token: tok})
		out, _ := client.New(client.Config{Addr: prod.addr, ServerCert: prod.cert, Token: tok})
		defer in.Close()
		defer out.Close()
		waitReady(t, prod)
		waitReady(t, cons)
		inS, outS, err := client.Wire(ctx, in, out,
			&api.InboundRequest{RemoteIP: "127.0.0.1", ReceiverPorts: []int{app.Addr().(*net.TCPAddr).Port}, NumConn: 2},
			api.OutboundRequest{NumConn: 2, Allow: []string{"127.0.0.0/8"}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		c, err := net.Dial("tcp", outS.Listeners[1])
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write([]byte("hello"))
		ac, err := app.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer ac.Close()
		buf := make([]byte, 5)
		if _, err := io.ReadFull(ac, buf); err != nil || string(buf) != "hello" {
			t.Fatalf("app read %q, %v", buf, err)
		}
		// Release with the connection still open: the app side is aborted.
		if _, err := out.Release(ctx, inS.UID); err != nil {
			t.Fatal(err)
		}
		if _, err := in.Release(ctx, inS.UID); err != nil {
			t.Fatal(err)
		}
		ac.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := ac.Read(buf); err == nil || os.IsTimeout(err) {
			t.Fatalf("application connection not closed by release: %v", err)
		}
		for _, g := range []*testGW{prod, cons} {
			if n := g.srv.alloc.InUse(); n != 0 {
				t.Fatalf("%d ports still allocated after release", n)
			}
			if err := g.srv.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			if err := g.srv.Shutdown(ctx); err != nil { // idempotent
				t.Fatal(err)
			}
			<-g.done
			g.done <- nil // for the cleanup
		}
	}()
	waitfor.Goroutines(t, base+2, 10*time.Second) // +2: the runtime's own stragglers
}

// gwPair is a consumer and a producer gateway in this process, with
// alice's clients of them (in: the consumer's, out: the producer's).
type gwPair struct {
	cons, prod *testGW
	in, out    *client.Client
}

// startPair starts two in-process gateways that know alice's token;
// consMod and prodMod, if not nil, change each one's config first. It
// returns once both serve.
func startPair(t *testing.T, consMod, prodMod func(*Config)) *gwPair {
	t.Helper()
	tokens, err := auth.ParseTokens(strings.NewReader(auth.HashToken(aliceToken) + " alice\n"))
	if err != nil {
		t.Fatal(err)
	}
	var cm, pm []func(*Config)
	if consMod != nil {
		cm = append(cm, consMod)
	}
	if prodMod != nil {
		pm = append(pm, prodMod)
	}
	p := &gwPair{cons: startGW(t, tokens, cm...), prod: startGW(t, tokens, pm...)}
	waitReady(t, p.cons)
	waitReady(t, p.prod)
	p.in, _ = client.New(client.Config{Addr: p.cons.addr, ServerCert: p.cons.cert, Token: aliceToken})
	p.out, _ = client.New(client.Config{Addr: p.prod.addr, ServerCert: p.prod.cert, Token: aliceToken})
	t.Cleanup(func() { p.in.Close(); p.out.Close() })
	return p
}

// waitReady waits until g has restored its streams and serves.
func waitReady(t *testing.T, g *testGW) {
	t.Helper()
	waitfor.Must(t, 10*time.Second, "the gateway to be ready", g.srv.Ready)
}

// TestMain fails the package's run if any goroutine a test started (a
// stream's accept loop, a relay, the janitor, an HTTP server) outlives
// the tests.
func TestMain(m *testing.M) { leakcheck.Main(m) }
