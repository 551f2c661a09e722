// Package naive is the naive baseline of s2bench compare --baseline:
// what a facility gets from the simplest proxy it could write itself,
// measured in the same run as the gateways. Two processes, like the
// gateway pair: "in" accepts the producer's TCP connections and carries
// each over the WAN leg, "out" takes each off the WAN leg and connects
// to the consumer. Per connection, io.Copy in each direction with a
// half-close at the end:
//
//   - tcp: TCP both ways; Go's io.Copy between TCP sockets splices.
//   - tls: a crypto/tls 1.3 connection per application connection
//     (server certificate pinned by its SHA-256), io.Copy's 32 KiB buffer.
//   - quic: one quic-go connection between the two, a stream per
//     application connection, quic-go's default settings but the windows
//     s2cs uses (otherwise the naive leg is window-bound, not CPU-bound).
//
// No allow-list, no stream secret, no release: it is a baseline, not a
// gateway, and listens on loopback only. Serve is one side (s2bench
// naiveproxy); StartPair runs both as processes of their own.
package naive

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/quic-go/quic-go"

	"scistream/internal/api"
	"scistream/internal/bench"
	"scistream/internal/certs"
	"scistream/internal/exp/procs"
)

// The sides of the pair (Config.Role).
const (
	In  = "in"  // the producer side: accepts TCP, dials the WAN leg
	Out = "out" // the consumer side: accepts the WAN leg, dials TCP
)

// Config is one side of the pair, as s2bench naiveproxy's flags give it
// (checked there: Serve trusts its form).
type Config struct {
	Role   string // In or Out
	WAN    string // the WAN leg: api.WANTCP, api.WANTLS or api.WANQUIC
	Listen string // loopback HOST:PORT to listen on (port 0: any)
	To     string // HOST:PORT each connection is carried to
	// CertFile and KeyFile are the out side's certificate and key (PEM),
	// over tls and quic; empty over tcp.
	CertFile, KeyFile string
	// Pin is the SHA-256 (hex) of the out side's certificate the in side
	// accepts, over tls and quic; empty over tcp.
	Pin string
}

// Serve runs one side until ctx is done: it prints "naiveproxy:
// listening on ADDR" to stdout once it listens, and what fails on a
// connection to stderr. It returns nil once stopped; the connections
// still open end with the process, as a baseline's may.
func Serve(ctx context.Context, cfg Config, stdout, stderr io.Writer) error {
	secure := cfg.WAN == api.WANTLS || cfg.WAN == api.WANQUIC
	p := &naiveProxy{wan: cfg.WAN, to: cfg.To, stderr: stderr}
	if secure {
		if cfg.Role == Out {
			c, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
			if err != nil {
				return fmt.Errorf("load --cert/--key: %w", err)
			}
			p.tlsConf = &tls.Config{Certificates: []tls.Certificate{c}, MinVersion: tls.VersionTLS13, NextProtos: []string{"s2bench-naive"}}
		} else {
			want := strings.ToLower(cfg.Pin)
			p.tlsConf = &tls.Config{
				MinVersion: tls.VersionTLS13, NextProtos: []string{"s2bench-naive"},
				// The out side's certificate is self-signed: it is
				// checked by its fingerprint instead of a CA.
				InsecureSkipVerify: true,
				VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
					if len(raw) == 0 {
						return errors.New("no certificate")
					}
					if h := sha256.Sum256(raw[0]); hex.EncodeToString(h[:]) != want {
						return errors.New("certificate does not match --pin")
					}
					return nil
				},
			}
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if cfg.Role == In {
		return p.serveIn(ctx, cfg.Listen, stdout)
	}
	return p.serveOut(ctx, cfg.Listen, stdout)
}

type naiveProxy struct {
	wan     string
	to      string
	tlsConf *tls.Config
	stderr  io.Writer
}

func naiveQUICConfig() *quic.Config {
	return &quic.Config{MaxStreamReceiveWindow: 32 << 20, MaxConnectionReceiveWindow: 64 << 20,
		MaxIdleTimeout: 30 * time.Second, KeepAlivePeriod: 5 * time.Second, MaxIncomingStreams: 1 << 16}
}

// serveIn accepts the producers' connections and carries each over the
// WAN leg.
func (p *naiveProxy) serveIn(ctx context.Context, listen string, stdout io.Writer) error {
	var qc *quic.Conn
	if p.wan == api.WANQUIC {
		var err error
		if qc, err = quic.DialAddr(ctx, p.to, p.tlsConf, naiveQUICConfig()); err != nil {
			return fmt.Errorf("dial quic %s: %w", p.to, err)
		}
		defer qc.CloseWithError(0, "")
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	return p.acceptLoop(ctx, ln, stdout, func(c net.Conn) {
		var w io.ReadWriteCloser
		var err error
		switch p.wan {
		case api.WANQUIC:
			w, err = qc.OpenStreamSync(ctx)
		case api.WANTLS:
			d := tls.Dialer{Config: p.tlsConf}
			var nc net.Conn
			if nc, err = d.DialContext(ctx, "tcp", p.to); err == nil {
				w = nc
			}
		default:
			w, err = net.Dial("tcp", p.to)
		}
		if err != nil {
			fmt.Fprintf(p.stderr, "naiveproxy: %s leg to %s: %v\n", p.wan, p.to, err)
			c.Close()
			return
		}
		pipeBoth(c, w)
	})
}

// serveOut takes connections off the WAN leg and connects each to the
// consumer.
func (p *naiveProxy) serveOut(ctx context.Context, listen string, stdout io.Writer) error {
	toConsumer := func(w io.ReadWriteCloser) {
		c, err := net.Dial("tcp", p.to)
		if err != nil {
			fmt.Fprintf(p.stderr, "naiveproxy: connect %s: %v\n", p.to, err)
			w.Close()
			return
		}
		pipeBoth(c, w)
	}
	switch p.wan {
	case api.WANQUIC:
		ln, err := quic.ListenAddr(listen, p.tlsConf, naiveQUICConfig())
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "naiveproxy: listening on %s\n", ln.Addr())
		stop := context.AfterFunc(ctx, func() { ln.Close() })
		defer stop()
		for {
			qc, err := ln.Accept(ctx)
			if err != nil {
				return nil // stopped; the process ends with its connections
			}
			go func() {
				for {
					s, err := qc.AcceptStream(ctx)
					if err != nil {
						return
					}
					go toConsumer(s)
				}
			}()
		}
	case api.WANTLS:
		ln, err := tls.Listen("tcp", listen, p.tlsConf)
		if err != nil {
			return err
		}
		return p.acceptLoop(ctx, ln, stdout, func(c net.Conn) { toConsumer(c) })
	default:
		ln, err := net.Listen("tcp", listen)
		if err != nil {
			return err
		}
		return p.acceptLoop(ctx, ln, stdout, func(c net.Conn) { toConsumer(c) })
	}
}

func (p *naiveProxy) acceptLoop(ctx context.Context, ln net.Listener, stdout io.Writer, handle func(net.Conn)) error {
	fmt.Fprintf(stdout, "naiveproxy: listening on %s\n", ln.Addr())
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil // stopped; the process ends with its connections
			}
			return err
		}
		go handle(c)
	}
}

// pipeBoth copies both ways between a TCP connection and a WAN one,
// passing each direction's end on as a half-close, then closes both.
func pipeBoth(c net.Conn, w io.ReadWriteCloser) {
	done := make(chan struct{})
	go func() {
		io.Copy(w, c)
		closeWrite(w)
		close(done)
	}()
	io.Copy(c, w)
	closeWrite(c)
	<-done
	c.Close()
	w.Close()
}

func closeWrite(x any) {
	switch c := x.(type) {
	case interface{ CloseWrite() error }:
		c.CloseWrite()
	case *quic.Stream:
		c.Close() // the send direction only
	}
}

// PairConfig describes the pair to start.
type PairConfig struct {
	// Command runs one side of the pair with Config's fields as flags
	// after it (--role, --wan, --listen, --to, --cert, --key, --pin), as
	// s2bench naiveproxy takes them: Serve, printing its listening line.
	// Required.
	Command []string
	// WAN is the leg between the two (Config.WAN).
	WAN string
	// Consumer is the HOST:PORT the out side connects each connection to.
	Consumer string
}

// Pair is the two naive proxy processes of compare --baseline.
type Pair struct {
	target string // the in side's listener: where producers connect
	cmds   []*exec.Cmd
	dir    string
}

// readyLine is the line Serve prints once it listens.
const readyLine = `^naiveproxy: listening on (\S+)$`

// StartPair starts the out side (towards the consumer) and then the in
// side, each as a process of its own (cfg.Command), and waits until both
// listen. On error it has stopped what it started. The caller must call
// Close.
func StartPair(ctx context.Context, cfg PairConfig) (_ *Pair, err error) {
	if len(cfg.Command) == 0 {
		return nil, errors.New("naive pair: no command to run its sides")
	}
	wan, consumer := cfg.WAN, cfg.Consumer
	np := &Pair{}
	defer func() {
		if err != nil {
			np.Close()
		}
	}()
	var outArgs, inArgs []string
	if wan != api.WANTCP {
		if np.dir, err = os.MkdirTemp("", "s2bench-naive-"); err != nil {
			return nil, err
		}
		certPEM, keyPEM, err := certs.SelfSigned([]string{"127.0.0.1"}, 24*time.Hour)
		if err != nil {
			return nil, err
		}
		cf, kf := filepath.Join(np.dir, "cert.pem"), filepath.Join(np.dir, "key.pem")
		if err := os.WriteFile(cf, certPEM, 0o600); err != nil {
			return nil, err
		}
		if err := os.WriteFile(kf, keyPEM, 0o600); err != nil {
			return nil, err
		}
		c, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, err
		}
		outArgs = []string{"--cert", cf, "--key", kf}
		inArgs = []string{"--pin", certs.Fingerprint(c.Certificate[0])}
	}
	outAddr, err := np.start(ctx, cfg.Command, append([]string{"--role", "out", "--wan", wan, "--listen", "127.0.0.1:0", "--to", consumer}, outArgs...))
	if err != nil {
		return nil, fmt.Errorf("naive baseline, out side: %w", err)
	}
	if np.target, err = np.start(ctx, cfg.Command, append([]string{"--role", "in", "--wan", wan, "--listen", "127.0.0.1:0", "--to", outAddr}, inArgs...)); err != nil {
		return nil, fmt.Errorf("naive baseline, in side: %w", err)
	}
	return np, nil
}

// start runs one side and returns the address it listens on.
func (np *Pair) start(ctx context.Context, command, args []string) (string, error) {
	ready := regexp.MustCompile(readyLine)
	cmd := exec.Command(command[0], append(slices.Clone(command[1:]), args...)...)
	// Its own process group (a Ctrl-C reaches only s2bench, which stops
	// it), and SIGTERM if s2bench dies first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	var errBuf strings.Builder
	cmd.Stderr = procs.LimitWriter(&errBuf, 4096)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	if err := cmd.Start(); err != nil {
		return "", err
	}
	np.cmds = append(np.cmds, cmd)
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := ready.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
		close(addr)
	}()
	t := time.NewTimer(15 * time.Second)
	defer t.Stop()
	select {
	case a, ok := <-addr:
		if !ok {
			cmd.Wait()
			return "", fmt.Errorf("exited before listening: %s", strings.TrimSpace(errBuf.String()))
		}
		return a, nil
	case <-t.C:
		return "", errors.New("not listening after 15 s")
	case <-ctx.Done():
		return "", context.Cause(ctx)
	}
}

// Target is the in side's listener, where producers connect.
func (np *Pair) Target() string { return np.target }

// PIDs returns the proxies' process IDs.
func (np *Pair) PIDs() []int {
	var p []int
	for _, c := range np.cmds {
		p = append(p, c.Process.Pid)
	}
	return p
}

// CPU returns the CPU time both proxies have used so far.
func (np *Pair) CPU() (time.Duration, error) {
	var total time.Duration
	for _, pid := range np.PIDs() {
		d, err := bench.ProcessCPU(pid)
		if err != nil {
			return 0, err
		}
		total += d
	}
	return total, nil
}

// Close stops both proxies (SIGTERM, then SIGKILL after 5 s) and removes
// their certificate. Idempotent.
func (np *Pair) Close() {
	for _, c := range np.cmds {
		c.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() {
			c.Wait()
			close(done)
		}()
		t := time.NewTimer(5 * time.Second)
		select {
		case <-done:
		case <-t.C:
			c.Process.Kill()
			<-done
		}
		t.Stop()
	}
	np.cmds = nil
	if np.dir != "" {
		os.RemoveAll(np.dir)
		np.dir = ""
	}
}
