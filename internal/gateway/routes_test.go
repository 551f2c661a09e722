package gateway

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"scistream/internal/api"
	"scistream/internal/auth"
)

// TestRefusalArrives (issue 25, finding 8): a client that sends its
// whole request before it reads the answer, as Python's http.client
// does, reads the refusal of a body too large, of the wrong type or of
// a caller not authenticated, instead of a reset; and the connection
// still serves the next request.
func TestRefusalArrives(t *testing.T) {
	tokens, err := auth.ParseTokens(strings.NewReader(auth.HashToken(aliceToken) + " alice\n"))
	if err != nil {
		t.Fatal(err)
	}
	g := startGW(t, tokens)
	waitReady(t, g)
	big := bytes.Repeat([]byte("x"), 10<<20) // 10 MB, as the review sent
	for _, c := range []struct {
		name, token, ctype string
		status             int
		code               api.Code
		mention            string
	}{
		{"too large", aliceToken, "application/json", 400, api.CodeInvalidArgument, "larger than"},
		{"wrong type", aliceToken, "text/plain", 400, api.CodeInvalidArgument, "content type"},
		{"no token", "", "application/json", 401, api.CodeUnauthenticated, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn, err := tls.Dial("tcp", g.addr, &tls.Config{InsecureSkipVerify: true})
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(60 * time.Second))
			req := "POST /v1/streams/inbound HTTP/1.1\r\nHost: gw\r\nContent-Type: " + c.ctype + "\r\n" +
				fmt.Sprintf("Content-Length: %d\r\n", len(big))
			if c.token != "" {
				req += "Authorization: Bearer " + c.token + "\r\n"
			}
			if _, err := io.WriteString(conn, req+"\r\n"); err != nil {
				t.Fatal(err)
			}
			if _, err := conn.Write(big); err != nil {
				t.Fatalf("sending the body before reading: %v (the gateway cut the connection)", err)
			}
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("reading the answer: %v (lost)", err)
			}
			var eb api.ErrorBody
			err = json.NewDecoder(resp.Body).Decode(&eb)
			resp.Body.Close()
			if err != nil || resp.StatusCode != c.status || eb.Error.Code != c.code || !strings.Contains(eb.Error.Message, c.mention) {
				t.Fatalf("answer %d %+v, %v; want %d %s mentioning %q", resp.StatusCode, eb.Error, err, c.status, c.code, c.mention)
			}
			// The connection is still good.
			if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			resp, err = http.ReadResponse(br, nil)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("the next request on the connection: %v, %v", resp, err)
			}
			resp.Body.Close()
		})
	}
}
