package naive

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"scistream/internal/api"
	"scistream/internal/certs"
)

// readyWriter is Serve's stdout: it hands over the address of the first
// listening line.
type readyWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	ready chan string
}

func (w *readyWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(b)
	if a, ok := strings.CutPrefix(strings.TrimSpace(w.buf.String()), "naiveproxy: listening on "); ok {
		select {
		case w.ready <- a:
		default:
		}
	}
	return len(b), nil
}

// serve runs one side in this process until the test ends and returns
// the address it listens on.
func serve(t *testing.T, cfg Config) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &readyWriter{ready: make(chan string, 1)}
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, cfg, w, io.Discard) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%s side: Serve returned %v once stopped", cfg.Role, err)
		}
	})
	select {
	case a := <-w.ready:
		return a
	case err := <-done:
		done <- err
		t.Fatalf("%s side ended before listening: %v", cfg.Role, err)
	case <-time.After(10 * time.Second):
		t.Fatalf("%s side not listening after 10 s", cfg.Role)
	}
	return ""
}

// sink is the consumer: it reads each connection to its end and reports
// what it got.
func sink(t *testing.T) (*net.TCPListener, chan [32]byte) {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan [32]byte, 4)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				h := sha256.New()
				io.Copy(h, c)
				var sum [32]byte
				copy(sum[:], h.Sum(nil))
				got <- sum
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	return ln, got
}

// TestServePair: the two sides, in this process, carry a connection's
// bytes whole from the producer to the consumer over each WAN leg, and
// pass its end on.
func TestServePair(t *testing.T) {
	dir := t.TempDir()
	certPEM, keyPEM, err := certs.SelfSigned([]string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	pin := certs.Fingerprint(c.Certificate[0])
	for _, wan := range []string{api.WANTCP, api.WANTLS, api.WANQUIC} {
		t.Run(wan, func(t *testing.T) {
			ln, got := sink(t)
			out := Config{Role: Out, WAN: wan, Listen: "127.0.0.1:0", To: ln.Addr().String()}
			in := Config{Role: In, WAN: wan, Listen: "127.0.0.1:0"}
			if wan != api.WANTCP {
				out.CertFile, out.KeyFile, in.Pin = certFile, keyFile, pin
			}
			in.To = serve(t, out)
			target := serve(t, in)
			msg := make([]byte, 1<<20)
			for i := range msg {
				msg[i] = byte(i * 7)
			}
			conn, err := net.Dial("tcp", target)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := conn.Write(msg); err != nil {
				t.Fatal(err)
			}
			conn.(*net.TCPConn).CloseWrite()
			select {
			case sum := <-got:
				if sum != sha256.Sum256(msg) {
					t.Error("the consumer got other bytes than the producer sent")
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the consumer did not see the connection end within 30 s")
			}
		})
	}
}

// TestServeWrongPin: an in side whose pin is not the out side's
// certificate's carries nothing: the producer's connection, through to
// an echoing consumer, gets no byte back before it is closed (ended or
// reset).
func TestServeWrongPin(t *testing.T) {
	dir := t.TempDir()
	certPEM, keyPEM, err := certs.SelfSigned([]string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	echo, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := echo.AcceptTCP()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				io.Copy(c, c)
				c.CloseWrite()
			})
		}
	})
	t.Cleanup(func() {
		echo.Close()
		wg.Wait()
	})
	outAddr := serve(t, Config{Role: Out, WAN: api.WANTLS, Listen: "127.0.0.1:0", To: echo.Addr().String(), CertFile: certFile, KeyFile: keyFile})
	target := serve(t, Config{Role: In, WAN: api.WANTLS, Listen: "127.0.0.1:0", To: outAddr, Pin: strings.Repeat("ab", 32)})
	conn, err := net.Dial("tcp", target)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	conn.Write([]byte("through the wrong certificate"))
	conn.(*net.TCPConn).CloseWrite()
	// Closed with the producer's bytes unread: an end or a reset, not
	// the deadline.
	if n, err := io.Copy(io.Discard, conn); n != 0 || os.IsTimeout(err) {
		t.Errorf("the producer read %d bytes back, %v; want its connection closed with nothing", n, err)
	}
}
