package client

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"scistream/internal/api"
	"scistream/internal/certs"
)

// A gateway is trusted with a stream, not with the client's machine or
// with the other gateway: a compromised or fake one (pinned by mistake)
// may answer anything. So the client checks what an answer carries
// before it acts on it: a UID before it names a URL or a local record
// (api.ValidUID), and what it relays to the other gateway or keeps
// (listeners, nodes, server name, certificate, secret) for its form and
// size. The other gateway checks them again; these checks only keep the
// client from being the one that forwards or stores garbage. Text the
// client does not act on (reasons, names, error messages) is left as it
// came: the caller that prints it makes it printable.

// ErrBadAnswer: a gateway answered what no SciStream gateway would (a
// stream UID that is not one, a listener that is not host:port...). The
// client acted on none of it.
var ErrBadAnswer = errors.New("answer refused")

// secretLen is the length of a stream secret, wan.SecretLen (a test
// checks they agree; the data plane's package is not linked in here).
const secretLen = 32

// maxCertPEM bounds a WAN certificate an answer carries: a leaf
// certificate is one or two kilobytes.
const maxCertPEM = 64 << 10

// badAnswer is a refused answer of the gateway of c: what of it is wrong.
func (c *Client) badAnswer(format string, args ...any) error {
	return fmt.Errorf("s2cs %s: %w: %s", c.addr, ErrBadAnswer, fmt.Sprintf(format, args...))
}

// streamPath is the URL path of stream uid followed by suffix ("" or
// "/attach"). Whatever uid holds, it stays one path segment: it is
// escaped, so that a "/", "?" or "#" in it does not lead elsewhere;
// "", "." and "..", which no escaping keeps a segment of their own (a
// server resolves them), are refused before any request.
func streamPath(uid, suffix string) (string, error) {
	if uid == "" || uid == "." || uid == ".." {
		return "", fmt.Errorf("uid %q is not a stream UID (a lower-case UUID)", uid)
	}
	return "/v1/streams/" + url.PathEscape(uid) + suffix, nil
}

// checkView checks a view of stream uid ("": any stream) that the
// gateway answered: its UID is a UID, and the one asked for.
func (c *Client) checkView(s *api.Stream, uid string) error {
	switch {
	case !api.ValidUID(s.UID):
		return c.badAnswer("uid %.80q is not a stream UID (a lower-case UUID of 36 characters)", s.UID)
	case uid != "" && s.UID != uid:
		return c.badAnswer("asked about stream %.80q, answered about %s", uid, s.UID)
	}
	return nil
}

// checkCreated checks the answer to a create request that asked for
// uid ("": the gateway's choice) over transport wanT ("": the gateway's
// default): what Wire and s2uc relay to the other gateway and keep in
// the local record. An inbound answer carries a secret.
func (c *Client) checkCreated(s *api.Stream, uid, wanT string, inbound bool) error {
	if err := c.checkView(s, uid); err != nil {
		return err
	}
	switch {
	case s.WAN != api.WANTLS && s.WAN != api.WANQUIC && s.WAN != api.WANTCP:
		return c.badAnswer("wan %.20q is no WAN transport", s.WAN)
	case wanT != "" && s.WAN != wanT:
		// A fake inbound gateway could otherwise turn a stream to
		// plaintext legs behind the user's back.
		return c.badAnswer("asked for wan %q, answered wan %q", wanT, s.WAN)
	case len(s.Listeners) == 0 || len(s.Listeners) > api.MaxChannels:
		return c.badAnswer("%d listeners, want 1 to %d", len(s.Listeners), api.MaxChannels)
	case len(s.Nodes) > api.MaxPeerNodes:
		return c.badAnswer("%d nodes, want at most %d", len(s.Nodes), api.MaxPeerNodes)
	case s.WANServerName != "" && !validHost(s.WANServerName):
		return c.badAnswer("wan_server_name %.80q is not a DNS name", s.WANServerName)
	}
	for _, l := range s.Listeners {
		if !validHostPort(l) {
			return c.badAnswer("listener %.80q is not host:port", l)
		}
	}
	for _, h := range s.Nodes {
		if !validHost(h) {
			return c.badAnswer("node %.80q is not a host name or IP address", h)
		}
	}
	if api.WANPinned(s.WAN) {
		if len(s.WANCert) > maxCertPEM {
			return c.badAnswer("wan_cert of %d bytes, want at most %d", len(s.WANCert), maxCertPEM)
		}
		if _, err := certs.ParsePEM([]byte(s.WANCert)); err != nil {
			return c.badAnswer("wan_cert: %v", err)
		}
	}
	if inbound {
		if b, err := base64.StdEncoding.DecodeString(s.Secret); err != nil || len(b) != secretLen {
			return c.badAnswer("secret is not the base64 of %d bytes", secretLen)
		}
	}
	return nil
}

// undo releases stream uid, created by a request whose answer err
// refused, if uid names one, and returns err with what the release
// said if it failed.
func (c *Client) undo(ctx context.Context, uid string, err error) error {
	if !api.ValidUID(uid) {
		return err // nothing the client may name
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, rerr := c.Release(rctx, uid); rerr != nil {
		err = errors.Join(err, fmt.Errorf("release %s on %s again: %w", uid, c.addr, rerr))
	}
	return err
}

// validHostPort reports whether hp is "host:port" with a host validHost
// accepts and a port 1-65535 in decimal.
func validHostPort(hp string) bool {
	h, p, err := net.SplitHostPort(hp)
	if err != nil || !validHost(h) {
		return false
	}
	n, err := strconv.Atoi(p)
	return err == nil && strconv.Itoa(n) == p && n >= 1 && n <= 65535
}

// validHost reports whether h is an IP address or a host name: labels
// of 1 to 63 letters, digits, '-' or '_', 253 characters at most.
func validHost(h string) bool {
	if net.ParseIP(h) != nil {
		return true
	}
	if h == "" || len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c == '-' || c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
				return false
			}
		}
	}
	return true
}
