// Package controlport is the control port's listener: TLS connections
// for net/http, on which every error answer carries the control API's
// JSON error body, including those net/http gives by itself; and, when
// the port serves a gRPC service beside the API (the SciStream 1.2
// protocol), the split of HTTP/2 connections from HTTP/1.1 ones after
// the TLS handshake (split.go).
package controlport

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"sync/atomic"

	"scistream/internal/api"
)

// The control API's listener. Every error answer of the API carries the
// documented JSON body, including those net/http gives by itself before
// any handler runs: a header block over MaxHeaderBytes (431), a request
// it cannot parse (400: a NUL in a header, a bad Host), a transfer
// coding it does not know (501, answered here as 400). net/http writes
// each of those with one Write of a fixed shape on the connection and then
// closes it; controlConn recognises that shape and writes the same status
// with the JSON body instead.
//
// Its connections are not *tls.Conn, so net/http does not run the TLS
// handshake itself: the first Read does, under the read deadline net/http
// sets for the request header (ReadHeaderTimeout). They speak HTTP/1.1,
// as before: the TLS configuration offers no HTTP/2, unless the control
// port serves a gRPC service too (ListenSplit).

// Listen returns the control API's listener on ln: TLS connections under
// cfg, for net/http's HTTP/1.1, whose canned error answers get the JSON
// body, each holding a place at the gate g (one the gate refuses is reset
// at once). maxHeaderBytes is the server's bound on a request's header
// block, which its 431 answer names. The server that serves it takes
// g.ConnState and ConnContext as its hooks.
func (g *Gate) Listen(ln net.Listener, cfg *tls.Config, maxHeaderBytes int) net.Listener {
	return controlListener{ln, g, cfg, maxHeaderBytes}
}

// controlListener turns the TCP connections of ln into TLS connections
// for the control API.
type controlListener struct {
	net.Listener
	gate           *Gate
	cfg            *tls.Config
	maxHeaderBytes int
}

func (l controlListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		sl := l.gate.admit(c)
		if sl == nil {
			abort(c)
			continue
		}
		return &controlConn{Conn: tls.Server(c, l.cfg), maxHeaderBytes: l.maxHeaderBytes, slot: sl}, nil
	}
}

// controlConn is a control-API connection. It has ConnectionState, so
// net/http still fills Request.TLS.
type controlConn struct {
	*tls.Conn
	maxHeaderBytes int
	plainAnswered  atomic.Bool
	slot           *slot // its place at the gate, given back by Close
}

func (c *controlConn) controlSlot() *slot { return c.slot }

// Close closes the connection and gives its place back.
func (c *controlConn) Close() error {
	c.slot.release()
	return c.Conn.Close()
}

// cannedError matches net/http's own error answers (net/http/server.go,
// conn.serve): status line, two fixed headers, and a plain-text body.
var cannedError = regexp.MustCompile(`\AHTTP/1\.1 ([0-9]{3}) [^\r\n]*\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n([^\r\n]*)\z`)

func (c *controlConn) Write(b []byte) (int, error) {
	if m := cannedError.FindSubmatch(b); m != nil {
		if _, err := c.Conn.Write(shapeCanned(string(m[1]), string(m[2]), c.maxHeaderBytes)); err != nil {
			return 0, err
		}
		return len(b), nil
	}
	return c.Conn.Write(b)
}

// shapeCanned returns the answer with the documented JSON error body for
// net/http's canned answer of status with plain-text body.
func shapeCanned(status, body string, maxHeaderBytes int) []byte {
	code, _ := strconv.Atoi(status)
	var msg string
	switch code {
	case 431:
		msg = fmt.Sprintf("request header fields larger than %d KiB: send smaller headers", maxHeaderBytes>>10)
	case 501:
		code, msg = 400, "unsupported transfer encoding: send the body with Content-Length or chunked"
	default:
		code = 400
		msg = "malformed HTTP request"
		// "400 Bad Request: missing required Host header"
		if _, reason, ok := bytes.Cut([]byte(body), []byte(": ")); ok {
			msg += ": " + string(reason)
		}
	}
	return answer("HTTP/1.1", code, api.Errorf(api.CodeInvalidArgument, "%s", msg))
}

// answer is a whole HTTP response carrying e as the JSON error body,
// after which the connection closes.
func answer(proto string, status int, e *api.Error) []byte {
	body, _ := json.Marshal(api.ErrorBody{Error: *e})
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		proto, status, httpStatusText(status), len(body), body)
	return b.Bytes()
}

func httpStatusText(code int) string {
	switch code {
	case 400:
		return "Bad Request"
	case 431:
		return "Request Header Fields Too Large"
	}
	return "Error"
}

// Read runs the TLS handshake on the first call. A client that speaks
// plain HTTP to the HTTPS port gets a plain-HTTP answer that says so
// (net/http gives one when it runs the handshake itself).
func (c *controlConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	var re tls.RecordHeaderError
	if err != nil && errors.As(err, &re) && re.Conn != nil && looksLikeHTTP(re.RecordHeader[:]) && c.plainAnswered.CompareAndSwap(false, true) {
		re.Conn.Write(answer("HTTP/1.0", 400,
			api.Errorf(api.CodeInvalidArgument, "this is the control API of s2cs over HTTPS: use https://")))
		re.Conn.Close()
	}
	return n, err
}

// looksLikeHTTP reports whether the first bytes of a connection are the
// start of a plain HTTP request.
func looksLikeHTTP(hdr []byte) bool {
	for _, m := range []string{"GET /", "HEAD ", "POST ", "PUT /", "DELET", "OPTIO", "PATCH", "CONNE", "TRACE"} {
		if bytes.HasPrefix(hdr, []byte(m)) {
			return true
		}
	}
	return false
}
