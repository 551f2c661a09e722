package controlport

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"scistream/internal/waitfor"
)

// h2Client opens an HTTP/2 connection to p from src: TLS with ALPN h2,
// the preface and an empty SETTINGS, and returns its framer.
func (p *testPort) h2Client(t *testing.T, src string) (*http2.Framer, net.Conn) {
	t.Helper()
	c := dialFrom(t, src, p.addr)
	tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if err := tc.Handshake(); err != nil || tc.ConnectionState().NegotiatedProtocol != "h2" {
		t.Fatalf("handshake: %v, protocol %q", err, tc.ConnectionState().NegotiatedProtocol)
	}
	io.WriteString(tc, http2.ClientPreface)
	fr := http2.NewFramer(tc, tc)
	fr.WriteSettings()
	return fr, tc
}

// headerBlock is the HPACK block of a GET / with auth.
func headerBlock(auth string) []byte {
	var b bytes.Buffer
	e := hpack.NewEncoder(&b)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", "gw"}, {":path", "/"}, {"authorization", auth}} {
		e.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	return b.Bytes()
}

// TestRapidReset: a client that opens streams and resets them at once
// (HEADERS then RST_STREAM, 5,000 of them, bounded) is sent GOAWAY with
// ENHANCE_YOUR_CALM and closed long before it is done; a client that
// completes its requests is never closed, however many it makes.
func TestRapidReset(t *testing.T) {
	p := startPort(t, Limits{}, true)

	fr, c := p.h2Client(t, "127.0.0.2")
	block := headerBlock("ok")
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		for id := uint32(1); id < 10000; id += 2 {
			if fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndStream: true, EndHeaders: true}) != nil ||
				fr.WriteRSTStream(id, http2.ErrCodeCancel) != nil {
				return
			}
		}
	}()
	var goAway *http2.GoAwayFrame
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			if goAway == nil {
				t.Fatalf("connection ended without GOAWAY: %v", err)
			}
			break
		}
		if g, ok := f.(*http2.GoAwayFrame); ok {
			goAway = g
		}
	}
	if goAway.ErrCode != http2.ErrCodeEnhanceYourCalm {
		t.Fatalf("GOAWAY %v; want ENHANCE_YOUR_CALM", goAway.ErrCode)
	}
	c.Close()
	<-wrote
	waitfor.Must(t, 5*time.Second, "the reset counted", func() bool { return p.gate.RefusedSince()["h2_resets"] == 1 })

	// A client that completes its requests (sequentially, 600 of them,
	// more than the bucket's depth) keeps its connection.
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: true,
		DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.3")}}).DialContext}
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	for i := range 600 {
		req, _ := http.NewRequest("GET", "https://"+p.addr+"/", nil)
		req.Header.Set("Authorization", "ok")
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.ProtoMajor != 2 || resp.StatusCode != 200 {
			t.Fatalf("request %d: %s %d", i, resp.Proto, resp.StatusCode)
		}
	}
	if n := p.gate.RefusedSince()["h2_resets"]; n != 1 {
		t.Fatalf("h2_resets %d after the well-behaved client; want still 1", n)
	}
	tr.CloseIdleConnections()
}

// TestH2IdleStranger: an HTTP/2 connection that completes TLS and the
// preface and then sends nothing is closed at StrangerIdle, not held for
// the server's idle timeout.
func TestH2IdleStranger(t *testing.T) {
	p := startPort(t, Limits{StrangerIdle: 300 * time.Millisecond}, true)
	fr, _ := p.h2Client(t, "127.0.0.2")
	start := time.Now()
	for {
		if _, err := fr.ReadFrame(); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("still open after %v", time.Since(start))
			}
			break
		}
	}
	waitfor.Must(t, 5*time.Second, "the close counted", func() bool { return p.gate.RefusedSince()["stranger_idle"] == 1 })
}

// TestFrameScan: the frame headers found do not depend on how the bytes
// are split.
func TestFrameScan(t *testing.T) {
	var b bytes.Buffer
	b.WriteString(http2.ClientPreface)
	fr := http2.NewFramer(&b, nil)
	fr.WriteSettings()
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: headerBlock("x"), EndHeaders: true})
	fr.WriteData(1, false, bytes.Repeat([]byte("d"), 40000))
	fr.WriteRSTStream(1, http2.ErrCodeCancel)
	fr.WritePing(false, [8]byte{})
	want := scanAll(b.Bytes(), len(b.Bytes()))
	if len(want) != 5 || want[1].typ != frameHeaders || want[3].typ != frameRSTStream || want[2].length != 40000 {
		t.Fatalf("headers %+v", want)
	}
	for _, step := range []int{1, 2, 7, 9, 10, 4096} {
		got := scanAll(b.Bytes(), step)
		if len(got) != len(want) {
			t.Fatalf("step %d: %d headers, want %d", step, len(got), len(want))
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("step %d: header %d %+v, want %+v", step, i, got[i], want[i])
			}
		}
	}
}

func scanAll(b []byte, step int) []frameHeader {
	s := frameScan{skip: clientPrefaceLen}
	var out []frameHeader
	for len(b) > 0 {
		n := min(step, len(b))
		s.feed(b[:n], func(h frameHeader) { out = append(out, h) })
		b = b[n:]
	}
	return out
}

// FuzzFrameScan feeds the scanner anything, split anywhere: it never
// panics, and a split never changes what it finds.
func FuzzFrameScan(f *testing.F) {
	var b bytes.Buffer
	b.WriteString(http2.ClientPreface)
	fr := http2.NewFramer(&b, nil)
	fr.WriteSettings()
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: headerBlock("x"), EndHeaders: true})
	fr.WriteRSTStream(1, http2.ErrCodeCancel)
	f.Add(b.Bytes(), uint8(3))
	f.Add([]byte{}, uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, step uint8) {
		whole := scanAll(data, len(data)+1)
		split := scanAll(data, int(step)+1)
		if len(whole) != len(split) {
			t.Fatalf("%d headers whole, %d split", len(whole), len(split))
		}
		for i := range whole {
			if whole[i] != split[i] {
				t.Fatalf("header %d: %+v whole, %+v split", i, whole[i], split[i])
			}
		}
	})
}
