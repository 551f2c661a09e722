package wanport

import (
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"scistream/internal/ports"
	"scistream/internal/wan"
)

// Config is a gateway's shared WAN port, as the operator gives it (s2cs
// --wan_port and its companions). The zero value is no shared port:
// every stream listens on ports of its own.
type Config struct {
	// Port, if not zero, is the shared WAN port: one TCP listener and
	// one UDP socket on the gateway's bind address that carry the
	// inbound WAN legs of every tls and quic stream that does not ask
	// for ports of its own, told apart by the TLS server name
	// (wan/shared.go), so that a firewall that admits one port, or a
	// TLS-passthrough router that routes by server name (SNI), can stand
	// in front. It must lie outside the gateway's data-port range.
	Port int
	// Domain is the DNS domain under which the port's streams are named:
	// a stream's server name is a random label under it (NewServerName),
	// and an SNI router routes the domain's names to this gateway. If
	// empty, DefaultDomain.
	Domain string
	// Advertise is the "host:port" peers dial to reach the port (the SNI
	// router's address, say). If empty, the gateway's listener address
	// and Port.
	Advertise string
	// ProxyProtocol says the port sits behind a router that starts every
	// connection with a PROXY protocol v2 header (HAProxy's
	// send-proxy-v2): the gateway reads it and caps, trusts and logs the
	// source it names, and refuses a connection without one. Only for a
	// port that nothing but the router can reach: anyone else could name
	// any source. If false, a connection's own address is its source.
	ProxyProtocol bool
	// ProxyFrom lists the routers' addresses: with ProxyProtocol, a
	// connection to the port from any other address is reset before a
	// byte of it is read, so that no one who reaches the port past the
	// router names a source of their choosing. Required with
	// ProxyProtocol, refused without it.
	ProxyFrom []netip.Prefix
}

// DefaultDomain is the domain of the shared WAN port's server names
// when Config.Domain is empty; ".invalid" (RFC 6761) is never a real
// domain, so such names resolve nowhere and mean nothing outside.
const DefaultDomain = "scistream.invalid"

// LabelLen is the length of a stream's label under the domain: 16
// random bytes in unpadded base32.
const LabelLen = 26

// MaxDomain is the longest Domain: it leaves room under the 253 bytes
// of a DNS name for a stream's label and its dot.
const MaxDomain = 253 - LabelLen - 1

// NewServerName returns a fresh server name for a stream on the shared
// WAN port: a random label under domain. It is unique on the gateway
// (128 random bits) and says nothing of the stream's owner or UID.
func NewServerName(domain string) string {
	b := make([]byte, 16)
	rand.Read(b)
	label := strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b))
	return label + "." + domain
}

// A FieldError names the Config field that Validate refused; Problem
// completes a sentence that starts with the field's name.
type FieldError struct {
	Field, Problem string
	Err            error
}

func (e *FieldError) Error() string { return e.Field + " " + e.Problem }
func (e *FieldError) Unwrap() error { return e.Err }

func fieldError(field, format string, args ...any) error {
	return &FieldError{Field: field, Problem: fmt.Sprintf(format, args...)}
}

// Validate reports the first setting of c a gateway whose data ports
// are dataPorts would refuse, as a *FieldError.
func (c Config) Validate(dataPorts ports.Range) error {
	switch {
	case c.Port < 0 || c.Port > 65535:
		return fieldError("Port", "%d is not a port: give 1-65535 (443 behind an SNI router), or 0 for none", c.Port)
	case c.Port != 0 && c.Port >= dataPorts.Lo && c.Port <= dataPorts.Hi:
		return fieldError("Port", "%d lies inside the port range %s: give a port outside it", c.Port, dataPorts)
	case c.Domain != "" && (!wan.ValidServerName(c.Domain) || len(c.Domain) > MaxDomain):
		return fieldError("Domain", "%.80q is not a lower-case DNS domain of at most %d bytes, e.g. wan.gw1.example.org", c.Domain, MaxDomain)
	case c.ProxyProtocol && len(c.ProxyFrom) == 0:
		return fieldError("ProxyFrom", "is required with the PROXY protocol: list the addresses of the routers that send it (e.g. 10.1.0.10/32), so that no one else names a source of their choosing")
	case !c.ProxyProtocol && len(c.ProxyFrom) > 0:
		return fieldError("ProxyFrom", "applies to the PROXY protocol only: turn it on too, or leave the routers' addresses out")
	case (c.Domain != "" || c.Advertise != "" || c.ProxyProtocol) && c.Port == 0:
		return fieldError("Port", "is needed by the shared port's domain, advertised address and PROXY protocol: give the port too")
	case c.Advertise != "":
		if err := checkAdvertise(c.Advertise); err != nil {
			return &FieldError{Field: "Advertise", Err: err,
				Problem: fmt.Sprintf("%.80q is not host:port (%v), e.g. wan.gw1.example.org:443", c.Advertise, err)}
		}
	}
	return nil
}

// checkAdvertise checks an advertised "host:port".
func checkAdvertise(hp string) error {
	host, port, err := net.SplitHostPort(hp)
	if err != nil {
		return err
	}
	if host == "" {
		return errors.New("no host")
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("port %q out of range", port)
	}
	return nil
}

// WithDefaults returns c with its defaults filled in for a gateway
// whose listener address is listenerIP. c without a port stays zero.
func (c Config) WithDefaults(listenerIP string) Config {
	if c.Port == 0 {
		return c
	}
	if c.Domain == "" {
		c.Domain = DefaultDomain
	}
	if c.Advertise == "" {
		c.Advertise = net.JoinHostPort(listenerIP, strconv.Itoa(c.Port))
	}
	return c
}

// Shared says c as given (before WithDefaults, which fills in each
// node's own address), which every node of a facility must have alike
// (store.NodeInfo.SharedWAN); "" without a port.
func (c Config) Shared() string {
	if c.Port == 0 {
		return ""
	}
	adv, domain := c.Advertise, c.Domain
	if adv == "" {
		adv = "each node's own address"
	}
	if domain == "" {
		domain = DefaultDomain
	}
	return fmt.Sprintf("port %d, domain %s, advertised as %s, PROXY protocol %t", c.Port, domain, adv, c.ProxyProtocol)
}

// routers returns the routers that may send the port the PROXY
// protocol header, or nil if it is not behind one.
func (c Config) routers() []netip.Prefix {
	if !c.ProxyProtocol {
		return nil
	}
	return c.ProxyFrom
}
