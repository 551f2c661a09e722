package legacy12_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"scistream/internal/api"
	"scistream/internal/auth"
	"scistream/internal/certs"
	"scistream/internal/client"
	"scistream/internal/gateway"
	"scistream/internal/leakcheck"
	"scistream/internal/legacy12"
	"scistream/internal/localgw"
	"scistream/internal/ports"
	"scistream/internal/store"
	"scistream/internal/waitfor"
)

const (
	aliceToken = "alice-token-for-legacy12-tests"
	bobToken   = "bob-token-for-legacy12-tests"
)

// TestMain fails a run whose tests left goroutines running: the
// gateway's, the service's waits and the client's.
func TestMain(m *testing.M) { leakcheck.Main(m) }

// testWriter logs to t.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// env is a real gateway serving the 1.2 service on its control port, and
// a gRPC client of it.
type env struct {
	gw     *gateway.Server
	svc    *legacy12.Service
	addr   string
	leaf   *x509.Certificate // the gateway's certificate
	cert   string            // its file
	store  store.Store
	peerCA *x509.CertPool // --peer_ca: empty
	cc     *grpc.ClientConn
	client legacy12.ControlClient
}

// start runs a gateway of one node with the 1.2 service (hello waits
// bounded by wait) on a random loopback address, stopped at the test's
// end; each of set changes the gateway's or the service's configuration
// first.
func start(t testing.TB, wait time.Duration, set ...func(*gateway.Config, *legacy12.Config)) *env {
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
	tokens, err := auth.ParseTokens(strings.NewReader(auth.HashToken(aliceToken) + " alice\n" + auth.HashToken(bobToken) + " bob\n"))
	if err != nil {
		t.Fatal(err)
	}
	lo := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	var w io.Writer = testWriter{t}
	if _, ok := t.(*testing.F); ok {
		w = io.Discard // a fuzz target may not log through f
	}
	log := slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
	gc := gateway.Config{
		ListenerIP: ip, PortRange: ports.Range{Lo: 5100, Hi: 5199}, Identity: id, Auth: tokens, Store: st,
		Logger: log, AllowTargets: lo, AllowPeers: lo,
		// No name resolves: a test asks no DNS server.
		LookupHost: func(ctx context.Context, host string) ([]netip.Addr, error) {
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		},
	}
	lc := legacy12.Config{Logger: log, HelloWait: wait}
	for _, f := range set {
		f(&gc, &lc)
	}
	gw, err := gateway.New(gc)
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	lc.Backend = legacy12.NewBackend(gw)
	svc, err := legacy12.New(lc)
	if err != nil {
		t.Fatal(err)
	}
	gs := legacy12.NewServer(svc)
	gw.SetGRPC(gs)
	peerCA := x509.NewCertPool() // TestPartner12 adds its partner's
	gw.SetPeerCA(peerCA)
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		gw.Serve(context.Background(), ln)
	}()
	t.Cleanup(func() {
		gw.Shutdown(context.Background())
		wg.Wait()
		gs.Stop()
	})
	waitfor.Must(t, 10*time.Second, "the gateway to be ready", gw.Ready)
	roots := x509.NewCertPool()
	roots.AddCert(id.Leaf)
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: roots, ServerName: ip})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return &env{gw: gw, svc: svc, addr: ln.Addr().String(), leaf: id.Leaf, cert: certFile, store: st, peerCA: peerCA, cc: cc, client: legacy12.NewControlClient(cc)}
}

// as is a context whose calls carry token as the 1.2 client sends it.
// The calls are bounded by the service's own waits and the test's
// deadline.
func as(token string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "authorization", token)
}

// uid returns the i-th UID of a test, a version-1 UUID as 1.2 makes.
func uid(i int) string { return fmt.Sprintf("%08x-ea8b-11f1-8301-02fc00000001", i) }

// codeOf is err's gRPC code; the test fails on UNKNOWN.
func codeOf(t *testing.T, err error) codes.Code {
	t.Helper()
	c := status.Code(err)
	if c == codes.Unknown {
		t.Errorf("UNKNOWN status: %v", err)
	}
	return c
}

// inbound runs 1.2's inbound-request: req beside its hello (sent after
// it unless helloFirst), returning req's answer.
func (e *env) inbound(t *testing.T, token, id string, targets []string, n int32, helloFirst bool) (*legacy12.Response, error) {
	t.Helper()
	hello := func() error {
		_, err := e.client.Hello(as(token), &legacy12.Hello{Uid: id, ProdListeners: targets, Role: "PROD"})
		return err
	}
	if helloFirst {
		if err := hello(); err != nil {
			return nil, err
		}
		return e.client.Req(as(token), &legacy12.Request{Uid: id, Role: "PROD", NumConn: n})
	}
	type answer struct {
		r   *legacy12.Response
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		r, err := e.client.Req(as(token), &legacy12.Request{Uid: id, Role: "PROD", NumConn: n})
		ch <- answer{r, err}
	}()
	// The hello goes only once the req waits, as 1.2 sends it later.
	waitfor.Must(t, 10*time.Second, "the req to wait for its hello", func() bool { return e.svc.Waiting() > 0 })
	if err := hello(); err != nil {
		return nil, err
	}
	a := <-ch
	return a.r, a.err
}

func TestHelloEitherOrder(t *testing.T) {
	e := start(t, 10*time.Second)
	for i, first := range []bool{false, true} {
		r, err := e.inbound(t, aliceToken, uid(i), []string{"127.0.0.1:7001", "127.0.0.1:7002"}, 3, first)
		if err != nil {
			t.Fatalf("hello first %v: %v", first, err)
		}
		if len(r.Listeners) != 3 || strings.Join(r.ProdListeners, ",") != "127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7001" {
			t.Errorf("hello first %v: listeners %v prod_listeners %v; want 3 and the targets round-robin", first, r.Listeners, r.ProdListeners)
		}
		// update(PROD) with what req answered changes nothing.
		if _, err := e.client.Update(as(aliceToken), &legacy12.UpdateTargets{Uid: uid(i), RemoteListeners: r.ProdListeners, Role: "PROD"}); err != nil {
			t.Errorf("update PROD: %v", err)
		}
		v, err := legacy12.NewBackend(e.gw).Get(context.Background(), "alice", uid(i))
		if err != nil || v.Owner != "alice" || len(v.Listeners) != 3 {
			t.Errorf("the gateway's view: %+v, %v", v, err)
		}
	}
}

// TestSessionsNeverCross: concurrent sessions, and two users' sessions
// of one UID, each get their own hello's targets (1.2 crossed them).
func TestSessionsNeverCross(t *testing.T) {
	e := start(t, 10*time.Second, func(gc *gateway.Config, _ *legacy12.Config) { gc.Quota.Pending = 64 })
	const n = 20
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for i := range n {
		for _, who := range []struct{ token, port string }{{aliceToken, "71"}, {bobToken, "72"}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				target := fmt.Sprintf("127.0.0.1:%s%02d", who.port, i)
				id := uid(100 + i) // the same UID for alice and bob
				type answer struct {
					r   *legacy12.Response
					err error
				}
				ch := make(chan answer, 1)
				go func() {
					r, err := e.client.Req(as(who.token), &legacy12.Request{Uid: id, Role: "PROD", NumConn: 1})
					ch <- answer{r, err}
				}()
				if _, err := e.client.Hello(as(who.token), &legacy12.Hello{Uid: id, ProdListeners: []string{target}, Role: "PROD"}); err != nil {
					errs <- err
					return
				}
				a := <-ch
				switch {
				case a.err != nil:
					errs <- a.err
				case len(a.r.ProdListeners) != 1 || a.r.ProdListeners[0] != target:
					errs <- fmt.Errorf("session %s got %v, want its own %s: sessions crossed", id, a.r.ProdListeners, target)
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestReqWithoutHello(t *testing.T) {
	e := start(t, 300*time.Millisecond)
	_, err := e.client.Req(as(aliceToken), &legacy12.Request{Uid: uid(1), Role: "PROD", NumConn: 1})
	if codeOf(t, err) != codes.DeadlineExceeded || !strings.Contains(status.Convert(err).Message(), "no hello") {
		t.Fatalf("req never followed by hello: %v; want DEADLINE_EXCEEDED naming the missing hello", err)
	}
	// Nothing was created, and the UID is free again.
	if _, err := legacy12.NewBackend(e.gw).Get(context.Background(), "alice", uid(1)); codeOf(t, statusOf(err)) != codes.NotFound {
		t.Errorf("after the refused req: %v; want no stream", err)
	}
	if e.svc.Waiting() != 0 {
		t.Errorf("%d sessions left waiting", e.svc.Waiting())
	}
}

// statusOf maps a backend error as the service does.
func statusOf(err error) error { return legacy12.StatusOf(err) }

func TestRefusals(t *testing.T) {
	e := start(t, 300*time.Millisecond)
	if _, err := e.inbound(t, aliceToken, uid(1), []string{"127.0.0.1:7001"}, 1, true); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		call func() error
		want codes.Code
	}{
		{"no token", func() error {
			_, err := e.client.Req(context.Background(), &legacy12.Request{Uid: uid(2), Role: "PROD", NumConn: 1})
			return err
		}, codes.Unauthenticated},
		{"INVALID_TOKEN", func() error {
			_, err := e.client.Release(as("INVALID_TOKEN"), &legacy12.Release{Uid: uid(1)})
			return err
		}, codes.Unauthenticated},
		{"bad role", func() error {
			_, err := e.client.Req(as(aliceToken), &legacy12.Request{Uid: uid(2), Role: "prod", NumConn: 1})
			return err
		}, codes.InvalidArgument},
		{"bad uid", func() error {
			_, err := e.client.Hello(as(aliceToken), &legacy12.Hello{Uid: "not-a-uuid", Role: "PROD"})
			return err
		}, codes.InvalidArgument},
		{"second req for a live uid", func() error {
			_, err := e.client.Req(as(aliceToken), &legacy12.Request{Uid: uid(1), Role: "PROD", NumConn: 1})
			return err
		}, codes.AlreadyExists},
		{"second hello", func() error {
			e.client.Hello(as(aliceToken), &legacy12.Hello{Uid: uid(3), ProdListeners: []string{"127.0.0.1:1"}, Role: "PROD"})
			_, err := e.client.Hello(as(aliceToken), &legacy12.Hello{Uid: uid(3), ProdListeners: []string{"127.0.0.1:2"}, Role: "PROD"})
			return err
		}, codes.AlreadyExists},
		{"unknown uid: update", func() error {
			_, err := e.client.Update(as(aliceToken), &legacy12.UpdateTargets{Uid: uid(9), RemoteListeners: []string{"127.0.0.1:1"}, Role: "CONS"})
			return err
		}, codes.NotFound},
		{"another user's stream", func() error {
			_, err := e.client.Release(as(bobToken), &legacy12.Release{Uid: uid(1)})
			return err
		}, codes.NotFound},
		{"update PROD with other targets", func() error {
			_, err := e.client.Update(as(aliceToken), &legacy12.UpdateTargets{Uid: uid(1), RemoteListeners: []string{"127.0.0.1:9"}, Role: "PROD"})
			return err
		}, codes.InvalidArgument},
		{"update CONS of a PROD stream", func() error {
			_, err := e.client.Update(as(aliceToken), &legacy12.UpdateTargets{Uid: uid(1), RemoteListeners: []string{"127.0.0.1:9"}, Role: "CONS"})
			return err
		}, codes.InvalidArgument},
		{"targets on two hosts", func() error {
			_, err := e.inbound(t, aliceToken, uid(4), []string{"127.0.0.1:1", "127.0.0.2:1"}, 1, true)
			return err
		}, codes.InvalidArgument},
		{"a target the policy refuses", func() error {
			_, err := e.inbound(t, aliceToken, uid(5), []string{"10.1.2.3:80"}, 1, true)
			return err
		}, codes.PermissionDenied},
		{"more channels than ports", func() error {
			_, err := e.inbound(t, aliceToken, uid(6), []string{"127.0.0.1:80"}, 101, true)
			return err
		}, codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if got := codeOf(t, err); got != tc.want {
				t.Errorf("%v; want %s", err, tc.want)
			}
		})
	}
	if _, err := e.client.Release(as(aliceToken), &legacy12.Release{Uid: uid(1)}); err != nil {
		t.Errorf("release: %v", err)
	}
	if _, err := e.client.Release(as(aliceToken), &legacy12.Release{Uid: uid(1)}); err != nil {
		t.Errorf("release again: %v; want success, as the API's", err)
	}
}

// TestAPIBeside: the control port serves the HTTPS API to HTTP/1.1 and
// HTTP/2 clients as before, and gRPC beside it, told apart by content
// type.
func TestAPIBeside(t *testing.T) {
	e := start(t, time.Second)
	roots := x509.NewCertPool()
	roots.AddCert(e.leaf)
	host, _, _ := net.SplitHostPort(e.addr)
	for _, h2 := range []bool{false, true} {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: host}, ForceAttemptHTTP2: h2}
		c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
		resp, err := c.Get("https://" + e.addr + "/healthz")
		if err != nil {
			t.Fatalf("HTTP/2 %v: %v", h2, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || (resp.ProtoMajor == 2) != h2 {
			t.Errorf("HTTP/2 %v: /healthz answered %s over %s", h2, resp.Status, resp.Proto)
		}
		tr.CloseIdleConnections()
	}
	if _, err := e.client.Release(as(aliceToken), &legacy12.Release{Uid: uid(1)}); codeOf(t, err) != codes.NotFound {
		t.Errorf("gRPC beside the API: %v; want NOT_FOUND for an unknown uid", err)
	}
}

// rawCodec sends a *[]byte as the bytes it holds and reads the answer
// into one: a client that sends whatever bytes it likes.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

// invokeRaw calls method with b as its request message, as it is.
func (e *env) invokeRaw(ctx context.Context, method string, b []byte) error {
	var out []byte
	return e.cc.Invoke(ctx, method, &b, &out, grpc.ForceCodecV2(rawCodec{}))
}

// TestMalformed: bytes that are no protobuf message of the method are
// answered INVALID_ARGUMENT naming the method and the problem (grpc's
// own codec answers INTERNAL), with or without a valid token, on every
// method; the gateway goes on serving.
func TestMalformed(t *testing.T) {
	e := start(t, time.Second)
	methods := map[string]string{
		"req": legacy12.Control_Req_FullMethodName, "hello": legacy12.Control_Hello_FullMethodName,
		"update": legacy12.Control_Update_FullMethodName, "release": legacy12.Control_Release_FullMethodName,
	}
	if len(methods) != len(legacy12.Control_ServiceDesc.Methods) {
		t.Fatalf("the service has %d methods, the test knows %d", len(legacy12.Control_ServiceDesc.Methods), len(methods))
	}
	for _, bad := range []struct {
		name, problem string
		b             []byte
	}{
		{"uid's length past the end", "invalid wire-format", []byte{0x0a, 0x05, 'a'}},
		{"uid's length overflows", "invalid wire-format", []byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f}},
		{"uid not UTF-8", "invalid UTF-8", []byte{0x0a, 0x01, 0xff}},
		{"wire type 7", "invalid wire-format", []byte{0x0f}},
		{"field number 0", "invalid wire-format", []byte{0x02, 0x00}},
		{"truncated varint", "invalid wire-format", []byte{0x18, 0x80}},
	} {
		for name, full := range methods {
			for _, token := range []string{aliceToken, "INVALID_TOKEN"} {
				err := e.invokeRaw(as(token), full, bad.b)
				msg := status.Convert(err).Message()
				if codeOf(t, err) != codes.InvalidArgument || !strings.Contains(msg, "the "+name+" request") || !strings.Contains(msg, bad.problem) {
					t.Errorf("%s, %s to %s: %v; want INVALID_ARGUMENT naming %s and %q", bad.name, token[:5], name, err, name, bad.problem)
				}
			}
		}
	}
	// A valid message sent the same way is decoded: an unknown uid is
	// not found.
	b, err := proto.Marshal(&legacy12.Release{Uid: uid(1)})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.invokeRaw(as(aliceToken), legacy12.Control_Release_FullMethodName, b); codeOf(t, err) != codes.NotFound {
		t.Errorf("a valid release sent as bytes: %v; want NOT_FOUND", err)
	}
	if !e.gw.Ready() {
		t.Error("the gateway stopped serving")
	}
}

// native is a client of e's HTTPS API (the gateway's own protocol) with
// token.
func (e *env) native(t *testing.T, token string) *client.Client {
	t.Helper()
	c, err := client.New(client.Config{Addr: e.addr, ServerCert: e.cert, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// state is the state of owner's stream id on e's gateway.
func (e *env) state(t *testing.T, owner, id string) api.Stream {
	t.Helper()
	v, err := legacy12.NewBackend(e.gw).Get(context.Background(), owner, id)
	if err != nil {
		t.Fatalf("stream %s of %s: %v", id, owner, err)
	}
	return v
}

// TestHelloFlood: one identity that sends hellos in a loop (1,100, each
// of a new uid, as fast as they are answered) holds only its own share of
// the sessions waiting for their partner: past its bound (its
// --quota_pending, or the service's bound per identity when that quota
// is larger) each is refused RESOURCE_EXHAUSTED naming that bound, while
// another identity's req and hello are served at once. Its hellos count
// against its pending quota: its own native inbound request is refused
// naming --quota_pending too. Before, the flood filled the table of the
// whole gateway (1,024) and every identity was refused.
func TestHelloFlood(t *testing.T) {
	for _, c := range []struct {
		name  string
		quota int    // alice's --quota_pending (0: the default, 16)
		held  int    // hellos of alice's held
		bound string // the refusal names it
	}{
		{"quota_pending", 0, 16, "--quota_pending"},
		{"per identity", 5000, 64, "the most one identity may have"},
	} {
		t.Run(c.name, func(t *testing.T) {
			// Held hellos lapse only after the flood's deadline.
			e := start(t, 10*time.Minute, func(gc *gateway.Config, _ *legacy12.Config) { gc.Quota.Pending = c.quota })
			ctx, cancel := context.WithTimeout(as(aliceToken), time.Minute)
			defer cancel()
			const flood = 1100
			held, wrong := 0, 0
			for i := range flood {
				_, err := e.client.Hello(ctx, &legacy12.Hello{Uid: uid(10000 + i), ProdListeners: []string{"127.0.0.1:7001"}, Role: "PROD"})
				if err == nil {
					held++
					continue
				}
				if msg := status.Convert(err).Message(); codeOf(t, err) != codes.ResourceExhausted || !strings.Contains(msg, c.bound) || !strings.Contains(msg, "alice") {
					if wrong++; wrong == 1 {
						t.Errorf("hello %d of the flood: %v; want RESOURCE_EXHAUSTED naming alice's bound (%s)", i, err, c.bound)
					}
				}
			}
			if wrong > 0 {
				t.Errorf("%d of alice's hellos refused otherwise", wrong)
			}
			if held != c.held {
				t.Errorf("%d of alice's %d hellos held; want %d, her bound", held, flood, c.held)
			}
			// Bob is served at once: hello, then req, answered.
			r, err := e.inbound(t, bobToken, uid(1), []string{"127.0.0.1:7002"}, 1, true)
			if err != nil {
				t.Fatalf("bob's req and hello after alice's flood: %v; want them served", err)
			}
			if len(r.Listeners) != 1 {
				t.Errorf("bob's req answered listeners %v, want 1", r.Listeners)
			}
			if c.quota != 0 {
				return
			}
			_, err = e.native(t, aliceToken).Inbound(context.Background(), &api.InboundRequest{RemoteIP: "127.0.0.1", ReceiverPorts: []int{7003}, NumConn: 1})
			var ae *api.Error
			if !errors.As(err, &ae) || ae.Code != api.CodeNoResources || !strings.Contains(ae.Message, "--quota_pending") {
				t.Errorf("alice's native inbound request beside her %d hellos: %v; want no_resources naming --quota_pending", held, err)
			}
		})
	}
}

// TestPendingQuota12: a stream of a 1.2 client waits for its partner as
// a native inbound stream waits for its attach, under the owner's
// --quota_pending: with a quota of 1, a second 1.2 PROD request of the
// same user is refused as a native one is, until the first is released;
// a CONS side is pending until its update gives its peers (then wired,
// and its place free). Another user is not concerned. Before, 1.2 streams
// were wired from their creation and held ports for their whole lease.
func TestPendingQuota12(t *testing.T) {
	e := start(t, 10*time.Second, func(gc *gateway.Config, _ *legacy12.Config) { gc.Quota.Pending = 1 })
	if _, err := e.inbound(t, aliceToken, uid(1), []string{"127.0.0.1:7001"}, 1, true); err != nil {
		t.Fatal(err)
	}
	if v := e.state(t, "alice", uid(1)); v.State != api.StateListening {
		t.Errorf("a PROD stream whose partner never came: %s; want listening", v.State)
	}
	// Nor does a native attach wire it, past its quota and its expiry.
	pemCert := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: e.leaf.Raw}))
	_, err := e.native(t, aliceToken).Attach(context.Background(), uid(1), &api.AttachRequest{PeerCert: pemCert})
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != api.CodeInvalidArgument || !strings.Contains(ae.Message, "1.2") {
		t.Errorf("a native attach of the 1.2 PROD stream: %v; want invalid_argument naming 1.2", err)
	}
	if v := e.state(t, "alice", uid(1)); v.State != api.StateListening {
		t.Errorf("the PROD stream after the refused attach: %s; want listening", v.State)
	}
	refused := func(what string, err error) {
		t.Helper()
		if codeOf(t, err) != codes.ResourceExhausted || !strings.Contains(status.Convert(err).Message(), "--quota_pending") {
			t.Errorf("%s: %v; want RESOURCE_EXHAUSTED naming --quota_pending", what, err)
		}
	}
	_, err = e.inbound(t, aliceToken, uid(2), []string{"127.0.0.1:7001"}, 1, true)
	refused("a second 1.2 PROD request (hello first)", err)
	_, err = e.client.Req(as(aliceToken), &legacy12.Request{Uid: uid(3), Role: "PROD", NumConn: 1})
	refused("a second 1.2 PROD request (req first)", err)
	_, err = e.native(t, aliceToken).Inbound(context.Background(), &api.InboundRequest{RemoteIP: "127.0.0.1", ReceiverPorts: []int{7003}, NumConn: 1})
	if !errors.As(err, &ae) || ae.Code != api.CodeNoResources || !strings.Contains(ae.Message, "--quota_pending") {
		t.Errorf("a native inbound request beside it: %v; want no_resources naming --quota_pending", err)
	}
	if _, err := e.inbound(t, bobToken, uid(2), []string{"127.0.0.1:7001"}, 1, true); err != nil {
		t.Errorf("bob's PROD request: %v; want it served", err)
	}
	if _, err := e.client.Release(as(aliceToken), &legacy12.Release{Uid: uid(1)}); err != nil {
		t.Fatal(err)
	}

	// The CONS side: pending until its update, wired with it.
	cons := func(id string) error {
		ch := make(chan error, 1)
		go func() {
			_, err := e.client.Req(as(aliceToken), &legacy12.Request{Uid: id, Role: "CONS", NumConn: 1})
			ch <- err
		}()
		waitfor.Must(t, 10*time.Second, "the req to wait for its hello", func() bool { return e.svc.Waiting() > 0 })
		if _, err := e.client.Hello(as(aliceToken), &legacy12.Hello{Uid: id, Role: "PROD"}); err != nil {
			return err
		}
		return <-ch
	}
	if err := cons(uid(4)); err != nil {
		t.Fatal(err)
	}
	if v := e.state(t, "alice", uid(4)); v.State != api.StateListening {
		t.Errorf("a CONS stream before its update: %s; want listening", v.State)
	}
	_, err = e.client.Req(as(aliceToken), &legacy12.Request{Uid: uid(5), Role: "CONS", NumConn: 1})
	refused("a second CONS request before the first's update", err)
	if _, err := e.client.Update(as(aliceToken), &legacy12.UpdateTargets{Uid: uid(4), RemoteListeners: []string{"127.0.0.1:5999"}, Role: "CONS"}); err != nil {
		t.Fatal(err)
	}
	if v := e.state(t, "alice", uid(4)); v.State != api.StateWired {
		t.Errorf("a CONS stream after its update: %s; want wired", v.State)
	}
	if rec, err := e.store.Get(store.Key{Owner: "alice", UID: uid(4)}); err != nil || rec.State != api.StateWired {
		t.Errorf("the stored CONS stream after its update: %v; want wired", err)
		if err == nil {
			t.Errorf("stored %s", rec.State)
		}
	}
	if err := cons(uid(5)); err != nil {
		t.Errorf("a CONS request once the first is wired: %v; want it served", err)
	}
}

// TestPendingExpiry12: a 1.2 stream whose partner never comes expires
// after --pending_timeout, as a native inbound stream that is never
// attached: its ports are free again, and the 1.2 client's next call
// about it is answered FAILED_PRECONDITION saying it expired and why.
func TestPendingExpiry12(t *testing.T) {
	e := start(t, 10*time.Second, func(gc *gateway.Config, _ *legacy12.Config) { gc.PendingTimeout = time.Second })
	r, err := e.inbound(t, aliceToken, uid(1), []string{"127.0.0.1:7001"}, 2, true)
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan error, 1)
	go func() {
		_, err := e.client.Req(as(aliceToken), &legacy12.Request{Uid: uid(2), Role: "CONS", NumConn: 1})
		ch <- err
	}()
	waitfor.Must(t, 10*time.Second, "the req to wait for its hello", func() bool { return e.svc.Waiting() > 0 })
	if _, err := e.client.Hello(as(aliceToken), &legacy12.Hello{Uid: uid(2), Role: "PROD"}); err != nil {
		t.Fatal(err)
	}
	if err := <-ch; err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{uid(1), uid(2)} {
		waitfor.Must(t, 30*time.Second, "the 1.2 stream to expire", func() bool { return e.state(t, "alice", id).State == api.StateExpired })
		if v := e.state(t, "alice", id); !strings.Contains(v.Reason, "--pending_timeout") {
			t.Errorf("%s expired for %q; want the reason to name --pending_timeout", id, v.Reason)
		}
	}
	for _, l := range r.Listeners {
		ln, err := net.Listen("tcp", l)
		if err != nil {
			t.Errorf("the expired PROD stream's port %s: %v; want it free", l, err)
			continue
		}
		ln.Close()
	}
	for _, u := range []*legacy12.UpdateTargets{
		{Uid: uid(1), RemoteListeners: r.ProdListeners, Role: "PROD"},
		{Uid: uid(2), RemoteListeners: r.Listeners, Role: "CONS"},
	} {
		_, err := e.client.Update(as(aliceToken), u)
		if msg := status.Convert(err).Message(); codeOf(t, err) != codes.FailedPrecondition || !strings.Contains(msg, "expired") || !strings.Contains(msg, "--pending_timeout") {
			t.Errorf("update %s of the expired stream: %v; want FAILED_PRECONDITION saying it expired (--pending_timeout)", u.Role, err)
		}
	}
	if _, err := e.client.Release(as(aliceToken), &legacy12.Release{Uid: uid(1)}); err != nil {
		t.Errorf("release of the expired stream: %v; want success", err)
	}
}

// TestPartner12: two real gateways, the WAN leg between them verified
// under each one's --peer_ca. Each side of a 1.2 stream is listening
// until its partner is known and wired then, in its record and in the
// store: the CONS side at its update, the PROD side when the CONS
// gateway's first WAN leg (its watch leg) came, before any data; the
// first data makes both connected.
func TestPartner12(t *testing.T) {
	prod, cons := start(t, 10*time.Second), start(t, 10*time.Second)
	// Each trusts the other's certificate, before any leg is dialed.
	prod.peerCA.AddCert(cons.leaf)
	cons.peerCA.AddCert(prod.leaf)
	app, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	got := make(chan []byte, 1)
	go func() {
		c, err := app.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		b, _ := io.ReadAll(c)
		got <- b
	}()
	r, err := prod.inbound(t, aliceToken, uid(1), []string{app.Addr().String()}, 1, true)
	if err != nil {
		t.Fatal(err)
	}
	stored := func(e *env) api.State {
		rec, err := e.store.Get(store.Key{Owner: "alice", UID: uid(1)})
		if err != nil {
			t.Fatal(err)
		}
		return rec.State
	}
	if v, st := prod.state(t, "alice", uid(1)).State, stored(prod); v != api.StateListening || st != api.StateListening {
		t.Errorf("PROD side before its partner came: %s (stored %s); want listening", v, st)
	}
	ch := make(chan error, 1)
	go func() {
		_, err := cons.client.Req(as(aliceToken), &legacy12.Request{Uid: uid(1), Role: "CONS", NumConn: 1})
		ch <- err
	}()
	waitfor.Must(t, 10*time.Second, "the CONS req to wait for its hello", func() bool { return cons.svc.Waiting() > 0 })
	if _, err := cons.client.Hello(as(aliceToken), &legacy12.Hello{Uid: uid(1), Role: "PROD"}); err != nil {
		t.Fatal(err)
	}
	if err := <-ch; err != nil {
		t.Fatal(err)
	}
	if v, st := cons.state(t, "alice", uid(1)).State, stored(cons); v != api.StateListening || st != api.StateListening {
		t.Errorf("CONS side before its update: %s (stored %s); want listening", v, st)
	}
	u, err := cons.client.Update(as(aliceToken), &legacy12.UpdateTargets{Uid: uid(1), RemoteListeners: r.Listeners, Role: "CONS"})
	if err != nil {
		t.Fatal(err)
	}
	if v, st := cons.state(t, "alice", uid(1)).State, stored(cons); v != api.StateWired || st != api.StateWired {
		t.Errorf("CONS side after its update: %s (stored %s); want wired", v, st)
	}
	waitfor.Must(t, 30*time.Second, "the PROD side to be wired by its partner's first leg, and stored so", func() bool {
		return prod.state(t, "alice", uid(1)).State == api.StateWired && stored(prod) == api.StateWired
	})
	select {
	case b := <-got:
		t.Fatalf("the producer got %q before any application connected", b)
	default:
	}
	c, err := net.DialTimeout("tcp", u.Listeners[0], 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "through both"); err != nil {
		t.Fatal(err)
	}
	c.(*net.TCPConn).CloseWrite()
	select {
	case b := <-got:
		if string(b) != "through both" {
			t.Errorf("the producer got %q", b)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("nothing reached the producer")
	}
	for _, e := range []*env{prod, cons} {
		waitfor.Must(t, 30*time.Second, "both sides to be connected, and stored so", func() bool {
			return e.state(t, "alice", uid(1)).State == api.StateConnected && stored(e) == api.StateConnected
		})
	}
}
