// Package certs loads and generates the gateway's X.509 identity and
// implements certificate pinning by SHA-256 fingerprint.
//
// A gateway uses one key pair for its control API and its WAN legs. Peers
// never rely on a CA for WAN legs: each stream pins the other gateway's
// exact certificate, relayed by s2uc over the authenticated control channel.
package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"scistream/internal/secretfile"
)

// Identity is a loaded certificate and key.
type Identity struct {
	TLS  tls.Certificate
	Leaf *x509.Certificate
	// PEM is the leaf certificate in PEM form (what peers pin).
	PEM []byte
	// SHA256 is the hex SHA-256 of the leaf's DER.
	SHA256 string
}

// Load reads a PEM certificate (chain) and key.
func Load(certFile, keyFile string) (*Identity, error) {
	c, err := LoadKeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("load key pair %s, %s: %w", certFile, keyFile, err)
	}
	return fromTLS(c)
}

// LoadKeyPair is tls.LoadX509KeyPair that reads the private key under
// the rule of every secret file (secretfile.Open): refused if any user
// of the machine may read or write it, if another user owns it, or if a
// directory on the way to it may be written by others.
func LoadKeyPair(certFile, keyFile string) (tls.Certificate, error) {
	f, err := secretfile.Open("private key", keyFile)
	if err != nil {
		return tls.Certificate{}, err
	}
	return keyPair(certFile, keyFile, f)
}

// keyPair reads the certificate at certFile and the key f, opened from
// keyFile and checked, and closes f.
func keyPair(certFile, keyFile string, f *os.File) (tls.Certificate, error) {
	keyPEM, err := io.ReadAll(io.LimitReader(f, maxPEM+1))
	f.Close()
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("%s: %w", keyFile, err)
	}
	if len(keyPEM) > maxPEM {
		return tls.Certificate{}, fmt.Errorf("%s is larger than %d bytes: is it the private key?", keyFile, maxPEM)
	}
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.X509KeyPair(certPEM, keyPEM)
}

// maxPEM bounds a private key file.
const maxPEM = 1 << 20

// CheckPrivate refuses a private key file others may read or write, or
// its group may write, naming the fix: the rule of every secret file
// (internal/secretfile), with its owner and directories.
func CheckPrivate(path string) error {
	return secretfile.Check("private key", path)
}

// loadKept loads the pair LoadOrGenerate keeps in a state directory: the
// key's mode is checked (secretfile.CheckMode) on what was opened, not
// the directories on the way to it. The state directory is the
// program's own working directory (its database lives there too), which
// Kubernetes makes writable for the pod's fsGroup and the image for
// group 0: the key there is as safe as the directory, which is the
// deployment's to keep.
func loadKept(certFile, keyFile string) (*Identity, error) {
	f, err := os.Open(keyFile)
	if err != nil {
		return nil, fmt.Errorf("load key pair %s, %s: %w", certFile, keyFile, err)
	}
	fi, err := f.Stat()
	if err == nil {
		err = secretfile.CheckMode("private key", keyFile, fi)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("load key pair %s, %s: %w", certFile, keyFile, err)
	}
	c, err := keyPair(certFile, keyFile, f)
	if err != nil {
		return nil, fmt.Errorf("load key pair %s, %s: %w", certFile, keyFile, err)
	}
	return fromTLS(c)
}

func fromTLS(c tls.Certificate) (*Identity, error) {
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("parse certificate: %w", err)
	}
	c.Leaf = leaf
	return &Identity{
		TLS:    c,
		Leaf:   leaf,
		PEM:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf.Raw}),
		SHA256: Fingerprint(leaf.Raw),
	}, nil
}

// LoadOrGenerate returns the identity stored as s2cs.crt / s2cs.key in dir,
// creating a self-signed ECDSA P-256 certificate valid for hosts (IP
// addresses or DNS names) if none exists yet. generated reports whether a
// new one was written.
func LoadOrGenerate(dir string, hosts []string) (id *Identity, certFile string, generated bool, err error) {
	certFile = filepath.Join(dir, "s2cs.crt")
	keyFile := filepath.Join(dir, "s2cs.key")
	if _, err := os.Stat(certFile); err == nil {
		id, err := loadKept(certFile, keyFile)
		return id, certFile, false, err
	}
	certPEM, keyPEM, err := SelfSigned(hosts, 825*24*time.Hour)
	if err != nil {
		return nil, "", false, err
	}
	if err := writePrivate(keyFile, keyPEM); err != nil {
		return nil, "", false, err
	}
	if err := os.WriteFile(certFile, certPEM, 0o644); err != nil {
		return nil, "", false, err
	}
	id, err = loadKept(certFile, keyFile)
	return id, certFile, true, err
}

// writePrivate writes b to name readable by the owner only. os.WriteFile
// would keep the mode of a file already at name (say a stale 0644 key), so
// write a new 0600 file and rename it into place.
func writePrivate(name string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(name), ".s2cs.key-*") // mode 0600
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // no-op once renamed
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), name)
}

// SelfSigned creates a self-signed certificate and key for hosts.
func SelfSigned(hosts []string, validity time.Duration) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{Organization: []string{"SciStream gateway"}, CommonName: "s2cs"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), nil
}

// Fingerprint returns the lower-case hex SHA-256 of a DER certificate.
func Fingerprint(der []byte) string {
	h := sha256.Sum256(der)
	return hex.EncodeToString(h[:])
}

// ParsePEM parses exactly one PEM certificate.
func ParsePEM(b []byte) (*x509.Certificate, error) {
	block, rest := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("not a PEM certificate")
	}
	if len(bytesTrim(rest)) != 0 {
		return nil, errors.New("more than one PEM block; give the leaf certificate only")
	}
	return x509.ParseCertificate(block.Bytes)
}

func bytesTrim(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\n' || b[0] == '\r' || b[0] == '\t') {
		b = b[1:]
	}
	return b
}

// ErrPinMismatch is returned when a peer presents a certificate other than
// the pinned one.
var ErrPinMismatch = errors.New("peer certificate does not match the pinned certificate")

// VerifyPin returns a tls.Config VerifyPeerCertificate callback that accepts
// only a leaf whose SHA-256 is fingerprint (hex).
func VerifyPin(fingerprint string) func([][]byte, [][]*x509.Certificate) error {
	want, _ := hex.DecodeString(fingerprint)
	return func(raw [][]byte, _ [][]*x509.Certificate) error {
		if len(raw) == 0 {
			return errors.New("peer presented no certificate")
		}
		got := sha256.Sum256(raw[0])
		if len(want) != len(got) || subtle.ConstantTimeCompare(got[:], want) != 1 {
			return ErrPinMismatch
		}
		return nil
	}
}
