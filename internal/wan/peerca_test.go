package wan_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"testing"
	"time"

	"scistream/internal/api"
	"scistream/internal/wan"
	"scistream/internal/wan/wantest"
)

// caIssuer is a CA that issues gateway certificates.
type caIssuer struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newIssuer(t *testing.T, name string) *caIssuer {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(c)
	return &caIssuer{c, key, pool}
}

// leaf issues a gateway certificate (TLS client and server).
func (ca *caIssuer) leaf(t *testing.T, name string) *tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestPeerCALeg: a leg of a 1.2 stream is accepted from a gateway whose
// certificate the peer CA issued, for the stream's UID and owner only.
func TestPeerCALeg(t *testing.T) {
	const uid = "0f8e3c5a-4b1d-1c2e-9a7f-1d2e3f4a5b6c"
	facility, stranger := newIssuer(t, "facility"), newIssuer(t, "stranger")
	prod, cons, rogue := facility.leaf(t, "prod"), facility.leaf(t, "cons"), stranger.leaf(t, "rogue")
	leg := func(cert *tls.Certificate, owner string) *wan.Leg {
		return &wan.Leg{Transport: api.WANTLS, UID: uid, Channel: 0, Secret: wan.CASecret(owner, uid),
			Cert: cert, PeerSHA256: pin(""), PeerCA: facility.pool}
	}
	for _, tc := range []struct {
		name                 string
		dialer, acceptor     *wan.Leg
		wantAccept, wantDial error // nil: the leg carries bytes
	}{
		{"peer under the CA, same owner", leg(cons, "alice"), leg(prod, "alice"), nil, nil},
		// The dialing gateway speaks for another user: the binding of
		// the preface fails, whatever the CA says of the gateway.
		{"another owner", leg(cons, "bob"), leg(prod, "alice"), wan.ErrBadSecret, nil},
		{"dialer not under the CA", leg(rogue, "alice"), leg(prod, "alice"), wan.ErrPeerCA, errors.New("any")},
		{"acceptor not under the CA", leg(cons, "alice"), leg(rogue, "alice"), errors.New("any"), wan.ErrPeerCA},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, ch := listen(t, tc.acceptor)
			c, derr := dial(t, addr, tc.dialer)
			r := waitAccept(t, ch)
			switch {
			case tc.wantAccept == nil && (r.err != nil || derr != nil):
				t.Fatalf("accept: %v, dial: %v; want a leg", r.err, derr)
			case tc.wantAccept == nil:
				c.Write([]byte("ping"))
				if b, err := wantest.ReadFull(t, r.conn, 4); err != nil || string(b) != "ping" {
					t.Fatalf("read %q, %v", b, err)
				}
				return
			case r.err == nil:
				t.Fatal("the acceptor took the leg")
			case tc.wantAccept != nil && !errors.Is(r.err, tc.wantAccept) && tc.wantAccept.Error() != "any":
				t.Errorf("accept: %v, want %v", r.err, tc.wantAccept)
			}
			if tc.wantDial != nil && tc.wantDial.Error() != "any" && !errors.Is(derr, tc.wantDial) {
				t.Errorf("dial: %v, want %v", derr, tc.wantDial)
			}
		})
	}
	// Without a CA bundle the leg falls back to its (empty) pin: refused.
	noCA := leg(cons, "alice")
	acc := leg(prod, "alice")
	acc.PeerCA = nil
	addr, ch := listen(t, acc)
	dial(t, addr, noCA)
	if r := waitAccept(t, ch); r.err == nil {
		t.Error("a leg without PeerCA and with nothing pinned was accepted")
	}
}

// TestCASecret: both gateways derive the same secret from owner and UID,
// and no other owner or UID gives it (a NUL separates them).
func TestCASecret(t *testing.T) {
	a := wan.CASecret("alice", "u1")
	if len(a) != wan.SecretLen || string(a) != string(wan.CASecret("alice", "u1")) {
		t.Fatalf("CASecret: %d bytes, or not a function of its arguments", len(a))
	}
	for _, o := range [][2]string{{"bob", "u1"}, {"alice", "u2"}, {"alic", "eu1"}, {"alice\x00", "u1"}} {
		if string(wan.CASecret(o[0], o[1])) == string(a) {
			t.Errorf("CASecret(%q, %q) equals alice's", o[0], o[1])
		}
	}
}
