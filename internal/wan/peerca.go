package wan

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"fmt"
)

// A leg verified by the peer's CA (Leg.PeerCA) instead of a pin: the leg
// of a stream created by a SciStream 1.2 client, which carries neither
// pins nor a stream secret. The two gateways authenticate each other by
// configuration: mutual TLS 1.3, each side's certificate chained to the
// other's CA bundle (s2cs --peer_ca). The preface is unchanged; its MAC is
// keyed with CASecret(owner, uid), which anyone can compute: it proves no
// secret, but it binds the leg, over this TLS session's exported keying
// material, to the stream's UID and its owner's identity as the dialing
// gateway authenticated that user. An acceptor whose stream has another
// owner refuses the preface (ErrBadSecret). What this trusts: every
// gateway whose certificate the bundle vouches for, for the streams of
// the identities it claims (docs/migrating-from-1.2.md).

// caSecretLabel keys CASecret, so its values are no other HMAC's.
const caSecretLabel = "scistream wan peer-ca v1"

// CASecret is the stream secret of a leg verified by the peer's CA: a
// function of the stream's owner and UID only, the same on both gateways.
func CASecret(owner, uid string) []byte {
	m := hmac.New(sha256.New, []byte(caSecretLabel))
	m.Write([]byte(owner))
	m.Write([]byte{0})
	m.Write([]byte(uid))
	return m.Sum(nil)
}

// ErrPeerCA: the peer's certificate does not chain to the peer CA bundle.
var ErrPeerCA = errors.New("peer certificate not issued under --peer_ca")

// verifyCA checks the certificate chain a peer sent against l.PeerCA. No
// host name is checked: a leg is bound to its stream by the preface, not
// by the address it was dialed at. Any extended key usage is accepted, as
// a gateway's one certificate serves as TLS client and server.
func (l *Leg) verifyCA(raw [][]byte, _ [][]*x509.Certificate) error {
	if len(raw) == 0 {
		return fmt.Errorf("%w: no certificate", ErrPeerCA)
	}
	certs := make([]*x509.Certificate, 0, len(raw))
	for _, r := range raw {
		c, err := x509.ParseCertificate(r)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrPeerCA, err)
		}
		certs = append(certs, c)
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	_, err := certs[0].Verify(x509.VerifyOptions{
		Roots:         l.PeerCA,
		Intermediates: inter,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
	})
	if err != nil {
		return fmt.Errorf("%w: %v", ErrPeerCA, err)
	}
	return nil
}
