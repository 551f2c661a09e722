package observe

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"net/http"
)

// The status page, GET /status on the control port: one HTML document
// with its script and style inline (statuspage/, embedded), no external
// asset. How it authenticates: a browser cannot put a bearer token on a
// navigation, so the page itself is served to anyone and holds no data;
// its script asks the gateway's own API, GET /v1/status, with the token
// the operator types into it, kept in the tab's sessionStorage (gone when
// the tab closes; never in a URL, so never in a log, a history or a
// Referer; never in a cookie, so no other site can make the browser send
// it). The answers go to this origin only: the gateway sends no CORS
// header, so another site's script cannot read them. Against script
// injection (which could read the token), the page writes what the API
// says with textContent only, and its Content-Security-Policy admits its
// own inline script and style by their SHA-256 and nothing else, connects
// to this origin only, and forbids framing.

//go:embed statuspage/status.html statuspage/status.js statuspage/status.css
var statusFiles embed.FS

// statusPage is the assembled page and its Content-Security-Policy.
type statusPage struct {
	html []byte
	csp  string
}

func newStatusPage() statusPage {
	read := func(name string) []byte {
		b, err := statusFiles.ReadFile("statuspage/" + name)
		if err != nil {
			panic("status page: " + err.Error()) // embedded: cannot happen
		}
		return b
	}
	script, style := read("status.js"), read("status.css")
	html := bytes.Replace(read("status.html"), []byte("{{STYLE}}"), style, 1)
	html = bytes.Replace(html, []byte("{{SCRIPT}}"), script, 1)
	hash := func(b []byte) string {
		sum := sha256.Sum256(b)
		return "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
	}
	return statusPage{
		html: html,
		csp: "default-src 'none'; script-src " + hash(script) + "; style-src " + hash(style) +
			"; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
	}
}

// ServeStatusPage serves the status page (no authentication: it holds
// no data; see above).
func (o *Observer) ServeStatusPage(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", o.page.csp)
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	w.Write(o.page.html)
}
