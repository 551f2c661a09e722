package gateway

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"scistream/internal/api"
	"scistream/internal/auth"
)

// TestErrorShapes: every error answer of the control API carries the
// documented JSON body, also those net/http gives before any handler
// runs, and odd paths are not found rather than redirected.
func TestErrorShapes(t *testing.T) {
	tokens, err := auth.ParseTokens(strings.NewReader(auth.HashToken(aliceToken) + " alice\n"))
	if err != nil {
		t.Fatal(err)
	}
	g := startGW(t, tokens)
	waitReady(t, g)
	auth := "Authorization: Bearer " + aliceToken + "\r\n"
	for _, c := range []struct {
		name    string
		request string
		status  int
		code    api.Code
		mention string
	}{
		{"dot-dot path", "GET /v1/streams/../info HTTP/1.1\r\nHost: gw\r\n" + auth + "\r\n", 404, api.CodeNotFound, "no such endpoint"},
		{"double slash", "GET //v1/info HTTP/1.1\r\nHost: gw\r\n" + auth + "\r\n", 404, api.CodeNotFound, "no such endpoint"},
		{"dot segment", "DELETE /v1/./streams/0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b6c HTTP/1.1\r\nHost: gw\r\n" + auth + "\r\n", 404, api.CodeNotFound, "no such endpoint"},
		{"trailing slash", "GET /v1/streams/ HTTP/1.1\r\nHost: gw\r\n" + auth + "\r\n", 404, api.CodeNotFound, "no such endpoint"},
		{"wrong method", "PATCH /v1/streams HTTP/1.1\r\nHost: gw\r\n" + auth + "\r\n", 404, api.CodeNotFound, "no such endpoint"},
		{"oversized headers", "GET /v1/info HTTP/1.1\r\nHost: gw\r\nX-Big: " + strings.Repeat("a", 80<<10) + "\r\n\r\n", 431, api.CodeInvalidArgument, "64 KiB"},
		{"NUL in a header", "GET /v1/info HTTP/1.1\r\nHost: gw\r\nX-Bad: a\x00b\r\n\r\n", 400, api.CodeInvalidArgument, "malformed HTTP request"},
		{"no Host", "GET /v1/info HTTP/1.1\r\n\r\n", 400, api.CodeInvalidArgument, "Host"},
		{"garbage request line", "HELLO\r\n\r\n", 400, api.CodeInvalidArgument, "malformed HTTP request"},
		{"unknown transfer coding", "POST /v1/streams/inbound HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: gzip\r\n\r\n", 400, api.CodeInvalidArgument, "transfer encoding"},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn, err := tls.Dial("tcp", g.addr, &tls.Config{InsecureSkipVerify: true})
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(10 * time.Second))
			go io.WriteString(conn, c.request) // the server may answer before it read everything
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			var eb api.ErrorBody
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" || json.Unmarshal(body, &eb) != nil {
				t.Fatalf("%d with %s body %q; want the JSON error body", resp.StatusCode, ct, body)
			}
			if resp.StatusCode != c.status || eb.Error.Code != c.code || !strings.Contains(eb.Error.Message, c.mention) {
				t.Fatalf("%d %s %q; want %d %s mentioning %q", resp.StatusCode, eb.Error.Code, eb.Error.Message, c.status, c.code, c.mention)
			}
		})
	}
	t.Run("plain HTTP", func(t *testing.T) {
		conn, err := net.Dial("tcp", g.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		var eb api.ErrorBody
		if resp.StatusCode != 400 || json.Unmarshal(body, &eb) != nil || !strings.Contains(eb.Error.Message, "https://") {
			t.Fatalf("plain HTTP got %d %q; want 400 with the JSON body naming https://", resp.StatusCode, body)
		}
	})
	t.Run("still serves", func(t *testing.T) {
		conn, err := tls.Dial("tcp", g.addr, &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(conn, "GET /v1/info HTTP/1.1\r\nHost: gw\r\n"+auth+"\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		var info api.Info
		json.NewDecoder(resp.Body).Decode(&info)
		if resp.StatusCode != 200 || info.Identity != "alice" {
			t.Fatalf("GET /v1/info: %d %+v", resp.StatusCode, info)
		}
	})
}
