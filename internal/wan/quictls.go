package wan

// The TLS side of a QUIC leg (the transport itself: internal/wanquic).
// Which certificates a QUIC leg accepts is decided here, with the TLS
// legs' rules, so that every check of a peer stays in this package.

import (
	"crypto/tls"
	"crypto/x509"
	"errors"

	"scistream/internal/api"
)

// ErrQUICOnTCP is returned by Dial and Accept for a leg whose transport is
// QUIC: such streams listen on UDP (wanquic.Listen) and dial with a
// wanquic.Dialer.
var ErrQUICOnTCP = errors.New("this stream's WAN transport is quic (UDP); TCP connections to its listener are refused")

// ALPN is the application protocol of QUIC WAN connections whose
// streams carry no answer (an older s2cs); ALPNAnswers is preferred.
const ALPN = "scistream-wan/1"

// quicALPN returns the protocols a QUIC leg offers, the preferred first.
func quicALPN() []string { return []string{ALPNFramed, ALPNAnswers, ALPN} }

// QUICTLSConfig returns the TLS configuration of leg l's QUIC connections,
// for either end: the leg's TLS configuration (TLS 1.3, its certificate,
// its server name, the peer accepted only by its pin) with ALPN and
// session resumption off (a resumed session would skip the pin check).
// report is called with the error when the peer's certificate is
// refused; the refusal stands whatever report does. l must be valid
// (Validate).
func (l *Leg) QUICTLSConfig(report func(error)) *tls.Config {
	tc := l.tlsConfig()
	tc.NextProtos = quicALPN()
	tc.SessionTicketsDisabled = true
	tc.VerifyPeerCertificate = func(raw [][]byte, chains [][]*x509.Certificate) error {
		err := l.verifyPin(raw, chains)
		if err != nil {
			report(err)
		}
		return err
	}
	return tc
}

// QUICRoutedTLSConfig returns the TLS configuration of a shared WAN
// port's QUIC listener: each handshake gets the QUICTLSConfig of the leg
// route.Leg gives its server name (quic legs only), so the peer must
// present that stream's pinned certificate. A name route does not serve
// gets a leg that refuses every certificate, as AcceptRouted does: the
// dialer sees the same failed handshake as an unpinned peer, and report
// is called with ErrUnknownName. cert is the gateway's certificate.
func QUICRoutedTLSConfig(cert *tls.Certificate, route Router, report func(error)) *tls.Config {
	refuse := refusingLeg(cert)
	refuse.Transport = api.WANQUIC
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{*cert},
		NextProtos:   quicALPN(),
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			if l := route.Leg(hello.ServerName, api.WANQUIC); l != nil {
				return l.QUICTLSConfig(report), nil
			}
			return refuse.QUICTLSConfig(func(error) {
				report(ErrUnknownName)
			}), nil
		},
	}
}
