package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"scistream/internal/api"
	"scistream/internal/auth"
	"scistream/internal/client"
	"scistream/internal/localgw"
	"scistream/internal/stream"
	"scistream/internal/waitfor"
)

// TestMaxActiveConns checks a stream's cap on connections at once over
// real sockets, at the outbound gateway's LAN accept and at the inbound
// gateway's WAN accept (TLS and QUIC legs): with max_active_conns 3, the
// first three connections work, the fourth is reset at once and counted
// in over_cap_conns (and rejected_conns), and once one of the three ends
// its slot admits a new one.
func TestMaxActiveConns(t *testing.T) {
	for _, c := range []struct {
		capped string // the side whose request carries the cap
		wan    string
	}{
		{"outbound", api.WANTLS},
		{"inbound", api.WANTLS},
		{"inbound", api.WANQUIC},
	} {
		t.Run(c.capped+"-"+c.wan, func(t *testing.T) {
			const limit = 3
			tok := localgw.NewToken()
			tokens, err := auth.ParseTokens(strings.NewReader(auth.HashToken(tok) + " alice\n"))
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			prod, cons := startGW(t, tokens), startGW(t, tokens)
			app, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
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
			inReq := &api.InboundRequest{RemoteIP: "127.0.0.1", ReceiverPorts: []int{app.Addr().(*net.TCPAddr).Port}, NumConn: 1, WAN: c.wan}
			outReq := api.OutboundRequest{NumConn: 1, Allow: []string{"127.0.0.0/8"}}
			capped, gw := out, prod
			if c.capped == "inbound" {
				inReq.MaxActiveConns = limit
				capped, gw = in, cons
			} else {
				outReq.MaxActiveConns = limit
			}
			inS, outS, err := client.Wire(ctx, in, out, inReq, outReq, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer out.Release(ctx, outS.UID)
			defer in.Release(ctx, inS.UID)
			if got, err := capped.Get(ctx, inS.UID); err != nil || got.MaxActiveConns != limit {
				t.Fatalf("the %s side reports max_active_conns %v (%v), want %d", c.capped, got, err, limit)
			}

			// open connects a producer, sends tag and returns both ends
			// once the application has read it.
			open := func(tag string) (net.Conn, net.Conn) {
				t.Helper()
				p, err := net.Dial("tcp", outS.Listeners[0])
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { p.Close() })
				if _, err := p.Write([]byte(tag)); err != nil {
					t.Fatal(err)
				}
				app.SetDeadline(time.Now().Add(10 * time.Second))
				a, err := app.Accept()
				if err != nil {
					t.Fatalf("connection %s never reached the application: %v", tag, err)
				}
				t.Cleanup(func() { a.Close() })
				expect(t, a, tag)
				return p, a
			}
			var prods, apps []net.Conn
			for i := range limit {
				p, a := open(fmt.Sprint(i))
				prods, apps = append(prods, p), append(apps, a)
			}

			// One over the cap: reset, never relayed.
			// (Over QUIC the refusal can come back before the dial
			// returns: the outbound gateway opens the QUIC stream at
			// accept, and the reset then meets the connect.)
			over, err := net.Dial("tcp", outS.Listeners[0])
			if err == nil {
				defer over.Close()
				over.Write([]byte("x"))
				over.SetReadDeadline(time.Now().Add(10 * time.Second))
				_, err = over.Read(make([]byte, 1))
			}
			if !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("connection %d over the cap of %d: %v, want a reset", limit+1, limit, err)
			}
			st, err := capped.Get(ctx, inS.UID)
			if err != nil {
				t.Fatal(err)
			}
			if st.Stats.OverCapConns != 1 || st.Stats.RejectedConns != 1 || st.Stats.ActiveConns != limit {
				t.Errorf("the %s side counts over_cap %d, rejected %d, active %d; want 1, 1, %d",
					c.capped, st.Stats.OverCapConns, st.Stats.RejectedConns, st.Stats.ActiveConns, limit)
			}

			// The first ones still carry bytes.
			for i := range limit {
				tag := fmt.Sprint("again", i)
				if _, err := prods[i].Write([]byte(tag)); err != nil {
					t.Fatal(err)
				}
				expect(t, apps[i], tag)
			}

			// A freed slot admits a new connection.
			prods[0].Close()
			apps[0].Close()
			s := streamOf(t, gw, inS.UID)
			waitfor.Must(t, 10*time.Second, "the ended connection's slot to be free", func() bool { return s.Admitted() == limit-1 })
			open("after")
			if st, err := capped.Get(ctx, inS.UID); err != nil || st.Stats.OverCapConns != 1 || st.Stats.ActiveConns != limit {
				t.Errorf("after a slot was freed: %+v (%v); want over_cap 1, active %d", st.Stats, err, limit)
			}
		})
	}
}

// expect reads len(want) bytes from c and fails t unless they are want.
func expect(t *testing.T, c net.Conn, want string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != want {
		t.Fatalf("read %q, %v; want %q", got, err, want)
	}
}

// streamOf returns g's running stream uid.
func streamOf(t *testing.T, g *testGW, uid string) *stream.Stream {
	t.Helper()
	return liveStream(t, g.srv, uid)
}

// liveStream returns the running stream uid of s.
func liveStream(t *testing.T, s *Server, uid string) *stream.Stream {
	t.Helper()
	for _, st := range s.live() {
		if st.UID == uid {
			return st
		}
	}
	t.Fatalf("no running stream %s", uid)
	return nil
}
