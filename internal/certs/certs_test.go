package certs_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"scistream/internal/certs"
)

func selfSigned(t *testing.T, hosts ...string) (certPEM, keyPEM []byte) {
	t.Helper()
	c, k, err := certs.SelfSigned(hosts, time.Hour)
	if err != nil {
		t.Fatalf("SelfSigned: %v", err)
	}
	return c, k
}

func TestSelfSigned(t *testing.T) {
	certPEM, keyPEM := selfSigned(t, "127.0.0.1", "::1", "gw.example.org", "")
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatalf("X509KeyPair: %v", err)
	}
	if _, ok := pair.PrivateKey.(*ecdsa.PrivateKey); !ok {
		t.Fatalf("key is %T, want ECDSA", pair.PrivateKey)
	}
	leaf, err := certs.ParsePEM(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(leaf.DNSNames, []string{"gw.example.org"}) {
		t.Errorf("DNSNames %v (empty host must be skipped)", leaf.DNSNames)
	}
	if len(leaf.IPAddresses) != 2 || !leaf.IPAddresses[0].Equal(net.ParseIP("127.0.0.1")) || !leaf.IPAddresses[1].Equal(net.ParseIP("::1")) {
		t.Errorf("IPAddresses %v", leaf.IPAddresses)
	}
	now := time.Now()
	if !leaf.NotBefore.Before(now) || !leaf.NotAfter.After(now.Add(59*time.Minute)) || leaf.NotAfter.After(now.Add(61*time.Minute)) {
		t.Errorf("validity %v .. %v", leaf.NotBefore, leaf.NotAfter)
	}
	if !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageServerAuth) || !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageClientAuth) {
		t.Errorf("ExtKeyUsage %v: WAN legs need both server and client auth", leaf.ExtKeyUsage)
	}
	// Self-signed: verifies against itself for its names.
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	for _, name := range []string{"127.0.0.1", "gw.example.org"} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: name}); err != nil {
			t.Errorf("Verify(%s): %v", name, err)
		}
	}
	// Fresh keys and serials every time.
	c2, k2 := selfSigned(t, "127.0.0.1")
	if bytes.Equal(c2, certPEM) || bytes.Equal(k2, keyPEM) {
		t.Fatal("SelfSigned repeated itself")
	}
	leaf2, _ := certs.ParsePEM(c2)
	if leaf2.SerialNumber.Cmp(leaf.SerialNumber) == 0 {
		t.Fatal("same serial number twice")
	}
}

func TestLoadOrGenerate(t *testing.T) {
	dir := t.TempDir()
	id, certFile, generated, err := certs.LoadOrGenerate(dir, []string{"127.0.0.1"})
	if err != nil {
		t.Fatalf("first call: %v", err)
	}
	if !generated {
		t.Fatal("first call did not generate")
	}
	if certFile != filepath.Join(dir, "s2cs.crt") {
		t.Fatalf("certFile %q", certFile)
	}
	keyFile := filepath.Join(dir, "s2cs.key")
	st, err := os.Stat(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, want 0600", st.Mode().Perm())
	}
	if st, err := os.Stat(certFile); err != nil || st.Mode().Perm()&0o077 == 0o077 {
		t.Fatalf("cert file: %v %v", st, err)
	}

	// The identity is self-consistent.
	if id.Leaf == nil || id.TLS.Leaf != id.Leaf || !bytes.Equal(id.TLS.Certificate[0], id.Leaf.Raw) {
		t.Fatal("Identity fields disagree")
	}
	if id.SHA256 != certs.Fingerprint(id.Leaf.Raw) {
		t.Fatal("SHA256 is not the leaf fingerprint")
	}
	onDisk, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(id.PEM, onDisk) {
		t.Fatal("PEM differs from the certificate file")
	}

	// Second call loads the same identity.
	id2, certFile2, generated2, err := certs.LoadOrGenerate(dir, []string{"other.example"})
	if err != nil {
		t.Fatalf("second call: %v", err)
	}
	if generated2 || certFile2 != certFile {
		t.Fatalf("second call generated=%v file=%q", generated2, certFile2)
	}
	if id2.SHA256 != id.SHA256 || !bytes.Equal(id2.PEM, id.PEM) {
		t.Fatal("second call returned a different certificate")
	}
	if st2, _ := os.Stat(keyFile); !st2.ModTime().Equal(st.ModTime()) {
		t.Fatal("second call rewrote the key")
	}
}

// A key left behind with loose permissions (no certificate next to it) must
// not receive a new private key readable by others.
func TestLoadOrGenerateTightensExistingKey(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "s2cs.key")
	if err := os.WriteFile(keyFile, []byte("stale"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(keyFile, 0o644); err != nil { // regardless of umask
		t.Fatal(err)
	}
	if _, _, generated, err := certs.LoadOrGenerate(dir, []string{"127.0.0.1"}); err != nil || !generated {
		t.Fatalf("LoadOrGenerate: generated=%v err=%v", generated, err)
	}
	st, err := os.Stat(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("new private key written with mode %v, want 0600", st.Mode().Perm())
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"s2cs.crt", "s2cs.key"}) {
		t.Fatalf("directory holds %v, want only s2cs.crt and s2cs.key", names)
	}
}

func TestLoadOrGenerateErrors(t *testing.T) {
	t.Run("cert without key", func(t *testing.T) {
		dir := t.TempDir()
		certPEM, _ := selfSigned(t)
		os.WriteFile(filepath.Join(dir, "s2cs.crt"), certPEM, 0o644)
		if _, _, _, err := certs.LoadOrGenerate(dir, nil); err == nil {
			t.Fatal("loaded a certificate without its key")
		}
	})
	t.Run("mismatched key", func(t *testing.T) {
		dir := t.TempDir()
		certPEM, _ := selfSigned(t)
		_, otherKey := selfSigned(t)
		os.WriteFile(filepath.Join(dir, "s2cs.crt"), certPEM, 0o644)
		os.WriteFile(filepath.Join(dir, "s2cs.key"), otherKey, 0o600)
		if _, _, _, err := certs.LoadOrGenerate(dir, nil); err == nil {
			t.Fatal("loaded a certificate with another key")
		}
	})
	t.Run("missing dir", func(t *testing.T) {
		if _, _, _, err := certs.LoadOrGenerate(filepath.Join(t.TempDir(), "nope"), nil); err == nil {
			t.Fatal("generated into a missing directory")
		}
	})
	t.Run("Load names the files", func(t *testing.T) {
		_, err := certs.Load("/nonexistent/a.crt", "/nonexistent/a.key")
		if err == nil || !strings.Contains(err.Error(), "/nonexistent/a.crt") || !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("Load error %v", err)
		}
	})
}

func TestFingerprint(t *testing.T) {
	certPEM, _ := selfSigned(t)
	leaf, err := certs.ParsePEM(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	fp := certs.Fingerprint(leaf.Raw)
	if fp != certs.Fingerprint(leaf.Raw) {
		t.Fatal("not stable")
	}
	sum := sha256.Sum256(leaf.Raw)
	if fp != hex.EncodeToString(sum[:]) || len(fp) != 64 || strings.ToLower(fp) != fp {
		t.Fatalf("Fingerprint %q is not lower-case hex SHA-256 of DER", fp)
	}
	// Stable across a PEM round trip.
	again, _ := certs.ParsePEM(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf.Raw}))
	if certs.Fingerprint(again.Raw) != fp {
		t.Fatal("fingerprint changed across PEM round trip")
	}
	// Known vector: SHA-256 of the empty input.
	if got := certs.Fingerprint(nil); got != "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" {
		t.Fatalf("Fingerprint(nil) = %s", got)
	}
}

func TestParsePEM(t *testing.T) {
	certPEM, keyPEM := selfSigned(t)
	other, _ := selfSigned(t)
	cases := []struct {
		name string
		in   []byte
		ok   bool
	}{
		{"one cert", certPEM, true},
		{"trailing whitespace", append(bytes.Clone(certPEM), " \r\n\t\n"...), true},
		{"leading text", append([]byte("subject=CN=s2cs\n"), certPEM...), true}, // pem.Decode skips it
		{"two certs", append(bytes.Clone(certPEM), other...), false},
		{"two certs, blank line between", append(append(bytes.Clone(certPEM), '\n', '\n'), other...), false},
		{"cert and key", append(bytes.Clone(certPEM), keyPEM...), false},
		{"trailing garbage", append(bytes.Clone(certPEM), "junk"...), false},
		{"key only", keyPEM, false},
		{"garbage", []byte("not a certificate at all"), false},
		{"empty", nil, false},
		{"DER not PEM", mustDER(t, certPEM), false},
		{"certificate block with junk body", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("junk")}), false},
		{"wrong block type", pem.EncodeToMemory(&pem.Block{Type: "X509 CRL", Bytes: mustDER(t, certPEM)}), false},
		{"truncated", certPEM[:len(certPEM)/2], false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			leaf, err := certs.ParsePEM(c.in)
			if c.ok != (err == nil) {
				t.Fatalf("ParsePEM: %v, want ok=%v", err, c.ok)
			}
			if c.ok && !bytes.Equal(leaf.Raw, mustDER(t, certPEM)) {
				t.Fatal("parsed a different certificate")
			}
		})
	}
}

func mustDER(t *testing.T, certPEM []byte) []byte {
	t.Helper()
	b, _ := pem.Decode(certPEM)
	if b == nil {
		t.Fatal("bad PEM")
	}
	return b.Bytes
}

func TestVerifyPin(t *testing.T) {
	certPEM, _ := selfSigned(t)
	otherPEM, _ := selfSigned(t)
	der, other := mustDER(t, certPEM), mustDER(t, otherPEM)
	fp := certs.Fingerprint(der)

	cases := []struct {
		name string
		pin  string
		raw  [][]byte
		ok   bool
	}{
		{"right cert", fp, [][]byte{der}, true},
		{"right cert, upper-case pin", strings.ToUpper(fp), [][]byte{der}, true},
		{"right leaf with a chain", fp, [][]byte{der, other}, true},
		{"other cert", fp, [][]byte{other}, false},
		{"pinned cert only as intermediate", fp, [][]byte{other, der}, false},
		{"no cert", fp, nil, false},
		{"empty pin", "", [][]byte{der}, false},
		{"malformed pin", "zz" + fp[2:], [][]byte{der}, false},
		{"truncated pin", fp[:62], [][]byte{der}, false},
		{"pin with colons", colonHex(fp), [][]byte{der}, false},
		{"hash of empty input vs empty cert", certs.Fingerprint(nil), [][]byte{{}}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := certs.VerifyPin(c.pin)(c.raw, nil)
			if c.ok != (err == nil) {
				t.Fatalf("VerifyPin = %v, want ok=%v", err, c.ok)
			}
			if !c.ok && len(c.raw) > 0 && !errors.Is(err, certs.ErrPinMismatch) {
				t.Fatalf("error %v, want ErrPinMismatch", err)
			}
		})
	}
}

func colonHex(s string) string {
	var parts []string
	for i := 0; i < len(s); i += 2 {
		parts = append(parts, s[i:i+2])
	}
	return strings.Join(parts, ":")
}

// VerifyPin works as a real tls.Config callback: a TLS handshake succeeds
// against the pinned certificate and fails against another.
func TestVerifyPinHandshake(t *testing.T) {
	certPEM, keyPEM := selfSigned(t, "127.0.0.1")
	otherPEM, otherKey := selfSigned(t, "127.0.0.1")
	good, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	bad, err := tls.X509KeyPair(otherPEM, otherKey)
	if err != nil {
		t.Fatal(err)
	}
	pin := certs.Fingerprint(good.Certificate[0])
	for _, c := range []struct {
		name   string
		server tls.Certificate
		ok     bool
	}{{"pinned", good, true}, {"other", bad, false}} {
		t.Run(c.name, func(t *testing.T) {
			ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{c.server}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() })
			go func() {
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				conn.SetDeadline(time.Now().Add(5 * time.Second))
				conn.(*tls.Conn).Handshake()
				conn.Close()
			}()
			d := &net.Dialer{Timeout: 5 * time.Second}
			conn, err := tls.DialWithDialer(d, "tcp", ln.Addr().String(), &tls.Config{
				InsecureSkipVerify:    true,
				VerifyPeerCertificate: certs.VerifyPin(pin),
			})
			if conn != nil {
				t.Cleanup(func() { conn.Close() })
			}
			if c.ok != (err == nil) {
				t.Fatalf("handshake: %v, want ok=%v", err, c.ok)
			}
			if !c.ok && !errors.Is(err, certs.ErrPinMismatch) {
				t.Fatalf("handshake error %v, want ErrPinMismatch", err)
			}
		})
	}
}

// Load refuses a private key any user may read or write, naming the fix;
// one its group may read (a Kubernetes Secret mounted with mode 0440 for
// the pod's fsGroup) loads.
func TestLoadRefusesOpenKey(t *testing.T) {
	dir := t.TempDir()
	if _, _, _, err := certs.LoadOrGenerate(dir, []string{"127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "s2cs.crt"), filepath.Join(dir, "s2cs.key")
	for _, c := range []struct {
		mode os.FileMode
		ok   bool
	}{{0o600, true}, {0o400, true}, {0o640, true}, {0o440, true}, {0o644, false}, {0o602, false}, {0o666, false}, {0o660, false}} {
		if err := os.Chmod(keyFile, c.mode); err != nil {
			t.Fatal(err)
		}
		_, err := certs.Load(certFile, keyFile)
		switch {
		case c.ok && err != nil:
			t.Errorf("key mode %04o: %v", c.mode, err)
		case !c.ok && (err == nil || !strings.Contains(err.Error(), "chmod 600 "+keyFile)):
			t.Errorf("key mode %04o: %v; want a refusal naming chmod 600", c.mode, err)
		}
	}
}

// TestKeyDirectory: a private key named with --server_key is a file the
// gateway trusts: in a directory others may write, or owned by another
// user, it is refused, naming the fix (issue 35: secret files get the
// owner and directory checks too). The key LoadOrGenerate keeps in a
// state directory is checked for its mode only: a state directory
// writable by its group, as Kubernetes makes a volume for the pod's
// fsGroup and the image for group 0, still starts the gateway.
func TestKeyDirectory(t *testing.T) {
	state := t.TempDir()
	if _, _, _, err := certs.LoadOrGenerate(state, []string{"127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(state, "s2cs.crt"), filepath.Join(state, "s2cs.key")
	if _, err := certs.Load(certFile, keyFile); err != nil {
		t.Fatalf("a 0600 key in a 0700 directory: %v", err)
	}
	if err := os.Chmod(state, 0o2770); err != nil {
		t.Fatal(err)
	}
	if _, err := certs.Load(certFile, keyFile); err == nil || !strings.Contains(err.Error(), "directory "+state+" can be written by other users") || !strings.Contains(err.Error(), "chmod go-w "+state) {
		t.Errorf("--server_key in a group-writable directory: %v; want refused, naming the directory and its chmod", err)
	}
	if _, _, generated, err := certs.LoadOrGenerate(state, []string{"127.0.0.1"}); err != nil || generated {
		t.Errorf("the kept key in a group-writable state directory: generated %v, %v; want loaded", generated, err)
	}
	os.Chmod(state, 0o700)
	if os.Geteuid() == 0 {
		if err := os.Chown(keyFile, 65534, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := certs.Load(certFile, keyFile); err == nil || !strings.Contains(err.Error(), "is owned by uid 65534") {
			t.Errorf("a key of another user's: %v; want refused", err)
		}
	}
}
