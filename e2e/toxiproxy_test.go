package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"scistream/internal/api"
	"scistream/internal/client"
	"scistream/internal/waitfor"
)

// Toxiproxy (github.com/Shopify/toxiproxy/v2, a tool of this module:
// go.mod's tool line) between the two gateways' WAN legs: each case
// wires a stream whose peer listener is a proxy of Toxiproxy's in front
// of the inbound gateway's, and breaks the legs through it with one of
// Toxiproxy's toxics while a transfer runs.

// toxiproxy is a Toxiproxy server the test started, by its HTTP API.
type toxiproxy struct {
	api string // http://host:port
	hc  *http.Client
}

// startToxiproxy builds Toxiproxy's server and runs it on loopback
// until t ends.
func startToxiproxy(t *testing.T) *toxiproxy {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "toxiproxy")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/Shopify/toxiproxy/v2/cmd/server").CombinedOutput(); err != nil {
		t.Fatalf("build toxiproxy: %v\n%s", err, out)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close() // Toxiproxy takes a port, not a listener: the moment between is the test's risk
	var logs bytes.Buffer
	cmd := exec.Command(bin, "-host", "127.0.0.1", "-port", port)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("toxiproxy's log:\n%s", lastLines(logs.String(), 40))
		}
	})
	tp := &toxiproxy{api: "http://127.0.0.1:" + port, hc: &http.Client{Timeout: 10 * time.Second}}
	waitfor.Must(t, 20*time.Second, "toxiproxy's API", func() bool {
		resp, err := tp.hc.Get(tp.api + "/version")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	return tp
}

func (tp *toxiproxy) call(t *testing.T, method, path string, in, out any) {
	t.Helper()
	var body io.Reader
	if in != nil {
		b, _ := json.Marshal(in)
		body = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, tp.api+path, body)
	resp, err := tp.hc.Do(req)
	if err != nil {
		t.Fatalf("toxiproxy %s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		t.Fatalf("toxiproxy %s %s: %s %s", method, path, resp.Status, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("toxiproxy %s %s: %v: %s", method, path, err, b)
		}
	}
}

// proxy makes a proxy to upstream and returns the address it listens on.
func (tp *toxiproxy) proxy(t *testing.T, name, upstream string) string {
	t.Helper()
	var p struct {
		Listen string `json:"listen"`
	}
	tp.call(t, "POST", "/proxies", map[string]any{"name": name, "listen": "127.0.0.1:0", "upstream": upstream}, &p)
	return p.Listen
}

// toxic adds a toxic of kind with attributes to proxy name, on the
// upstream (outbound to inbound gateway) or downstream stream; remove
// takes it away.
func (tp *toxiproxy) toxic(t *testing.T, name, kind, stream string, attrs map[string]any) (remove func()) {
	t.Helper()
	tname := kind + "_" + stream
	tp.call(t, "POST", "/proxies/"+name+"/toxics", map[string]any{"name": tname, "type": kind, "stream": stream, "toxicity": 1.0, "attributes": attrs}, nil)
	return func() { tp.call(t, "DELETE", "/proxies/"+name+"/toxics/"+tname, nil, nil) }
}

// TestResumeThroughToxiproxy: for each of Toxiproxy's toxics that break
// or bend a WAN leg, a paced transfer through the gateways completes
// byte-exact and neither application sees a reset; where a toxic ended
// a leg, the outbound side counts the legs it resumed.
func TestResumeThroughToxiproxy(t *testing.T) {
	tp := startToxiproxy(t)
	p := newPair(t, pairOpts{})
	ctx := context.Background()
	for i, c := range []struct {
		kind, stream string
		attrs        map[string]any
		hold         time.Duration // how long the toxic stays, 0: the whole transfer
		resumes      int64         // the least legs resumed it forces
	}{
		// A reset of every connection through it: the leg and the
		// dials of new ones, for a second.
		{"reset_peer", "upstream", map[string]any{"timeout": 0}, time.Second, 1},
		// Nothing gets through, and the connection is closed after a
		// second; the dials of new ones meet the same while it stays.
		{"timeout", "upstream", map[string]any{"timeout": 1000}, 1500 * time.Millisecond, 1},
		// Each connection closed once 24 MiB went through: a leg per
		// 24 MiB of the transfer.
		{"limit_data", "upstream", map[string]any{"bytes": 24 << 20}, 0, 3},
		// Bytes in small slices with delays: frames cut anywhere.
		{"slicer", "downstream", map[string]any{"average_size": 700, "size_variation": 600, "delay": 10}, 0, 0},
		// A long path.
		{"latency", "upstream", map[string]any{"latency": 30, "jitter": 10}, 0, 0},
	} {
		t.Run(c.kind, func(t *testing.T) {
			app := newTimedSink(t, "127.0.0.1")
			in, err := p.cons.Client(p.tokens["alice"])
			if err != nil {
				t.Fatal(err)
			}
			defer in.Close()
			out, err := p.prod.Client(p.tokens["alice"])
			if err != nil {
				t.Fatal(err)
			}
			defer out.Close()
			// The outbound side's peer listener is the proxy, which
			// leads to the inbound side's listener once that exists.
			name := fmt.Sprintf("leg%d", i)
			addr := tp.proxy(t, name, "127.0.0.1:9")
			is, so, err := client.Wire(ctx, in, out,
				&api.InboundRequest{RemoteIP: "127.0.0.1", ReceiverPorts: []int{app.port()}, NumConn: 1, Rate: 400e6},
				api.OutboundRequest{NumConn: 1, Allow: []string{"127.0.0.0/8"}}, []string{addr})
			if err != nil {
				t.Fatal(err)
			}
			tp.call(t, "POST", "/proxies/"+name, map[string]any{"upstream": is.Listeners[0]}, nil)
			conn, err := dialFrom("", so.Listeners[0])
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			const total = 96 << 20
			pr := produce(conn, total, uint64(40+i), total/4) // held until the fault is in place
			eventually(t, time.Minute, "a quarter of the transfer", func() bool { return app.n.Load() >= total/4 })
			remove := tp.toxic(t, name, c.kind, c.stream, c.attrs)
			pr.release()
			if c.hold > 0 {
				time.Sleep(c.hold) // the outage's length is the fault itself
				remove()
			}
			r := pr.result(app)
			if c.hold == 0 {
				remove()
			}
			pr.check(t, r)
			st, err := out.Get(ctx, so.UID)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: the consumer's largest pause %v; the outbound side resumed %d legs, resent %d bytes", c.kind, r.maxGap.Round(time.Millisecond), st.Stats.ResumedLegs, st.Stats.ResentBytes)
			if st.Stats.Resume != api.ResumeOn || st.Stats.ResumedLegs < c.resumes || st.Stats.AbortedConns != 0 {
				t.Errorf("the outbound side: resume %q, %d legs resumed, %d aborted; want on, at least %d, none", st.Stats.Resume, st.Stats.ResumedLegs, st.Stats.AbortedConns, c.resumes)
			}
		})
	}
}
