package wan

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"time"

	"scistream/internal/api"
)

// A shared WAN port carries the legs of many streams on one TCP listener
// (and one UDP socket for QUIC), so that a facility whose firewall admits
// one port (443), or a TLS-passthrough router that routes by server name
// in front of it, can serve every stream. The dialer names its stream in
// the TLS server name (Leg.ServerName, in the clear in its ClientHello);
// the acceptor picks that stream's leg by the name (a Router), and from
// then on everything is as on a stream's own port: the pinned
// certificates both ways, then the preface with the stream secret, which
// names one of the stream's channels. A name the acceptor does not serve
// gets the same answer as a certificate that is not pinned (the handshake
// fails with a bad_certificate alert), so a caller learns nothing of which
// streams exist.

// A Router returns the leg of the stream that a connection to a shared
// WAN port names by its TLS server name (already lower-case), or nil for
// a name the port does not serve. The leg's Channels admits its channels.
type Router func(serverName string) *Leg

// Routed is a leg accepted on a shared WAN port.
type Routed struct {
	Conn    net.Conn // carries application bytes only
	Leg     *Leg     // the leg the Router chose
	Channel int      // the channel its preface named (WatchChannel for the watch leg)
	Pooled  bool     // a pooled leg of Channel (internal/legpool)
}

// Watch reports whether the leg is its stream's watch leg.
func (r *Routed) Watch() bool { return r.Channel == WatchChannel }

// AcceptRouted completes the acceptor's side of a TLS WAN leg on raw, a
// connection to a shared WAN port: route picks the stream's leg by the
// server name the dialer sent, then the handshake pins that stream's
// peer and the preface must prove its secret for one of its channels or
// its watch leg. A name route does not serve fails as a certificate that
// is not pinned does, and the error wraps ErrUnknownName. On error raw is
// closed.
func AcceptRouted(ctx context.Context, raw net.Conn, cert *tls.Certificate, route Router) (*Routed, error) {
	setNoDelay(raw)
	raw.SetDeadline(time.Now().Add(HandshakeTimeout))
	refuse := refusingLeg(cert)
	chosen := refuse
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{*cert},
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			if l := route.Leg(hello.ServerName, api.WANTLS); l != nil {
				chosen = l
			}
			return chosen.tlsConfig(), nil
		},
	}
	ec := newLegConn(raw)
	tc := tls.Server(ec, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		raw.Close()
		if chosen == refuse {
			return nil, fmt.Errorf("tls handshake: %w", ErrUnknownName)
		}
		return nil, fmt.Errorf("tls handshake: %w", err)
	}
	binding, err := ExportBinding(tc.ConnectionState())
	if err != nil {
		raw.Close()
		return nil, err
	}
	conn := newConn(tc, ec, binding)
	p, err := ReadPreface(conn)
	if err != nil {
		raw.Close()
		return nil, err
	}
	if err := chosen.admit(p, binding, true, true); err != nil {
		raw.Close()
		return nil, err
	}
	raw.SetDeadline(time.Time{})
	return routed(conn, chosen, p), nil
}

// Leg returns the leg route gives the server name name (in any case),
// or nil if the name is not a valid server name, route has none for it,
// or the leg is not a shared port's (Channels > 0) usable (Validate) leg
// of transport. Use it rather than calling route: it never returns a leg
// of another transport or one that cannot be checked.
func (route Router) Leg(name, transport string) *Leg {
	name = strings.ToLower(name)
	if !ValidServerName(name) {
		return nil
	}
	l := route(name)
	if l == nil || l.Transport != transport || l.Channels == 0 || l.Validate() != nil {
		return nil
	}
	return l
}

// refusingLeg is the leg of a name nobody serves: its handshake runs as
// any other's and refuses every peer certificate.
func refusingLeg(cert *tls.Certificate) *Leg {
	return &Leg{
		Transport:  api.WANTLS,
		Cert:       cert,
		PeerSHA256: func() string { return "" },
	}
}

// ValidServerName reports whether name is a DNS host name as a shared
// WAN port's streams are named: 1 to 253 bytes of dot-separated labels
// of 1 to 63 lower-case letters, digits and inner hyphens.
func ValidServerName(name string) bool {
	if len(name) == 0 || len(name) > 253 {
		return false
	}
	for _, label := range strings.Split(name, ".") {
		if len(label) == 0 || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}
