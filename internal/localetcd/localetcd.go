// Package localetcd runs a real etcd server as a process on loopback,
// as localgw runs s2cs: Start launches the etcd binary of Debian's
// etcd-server package (scripts/setup.sh installs it) as a one-member
// cluster on a random loopback address, on ports it picks, with its data
// in a directory the caller gives, and returns once etcd answers /health.
// Stop kills it by its PID (an outage, as a crash or a reboot makes one)
// and Restart brings it back on the same address with the same data.
// The etcd process dies with the process that started it.
//
// It serves s2bench (which measures gateways on etcd) and, through
// etcdtest, the tests; nothing here needs a testing.TB.
//
// Options.TLS serves clients over TLS and requires a client certificate;
// Options.Auth turns on etcd's authentication with a user that may read
// and write the keys under /scistream/ only.
package localetcd

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"scistream/internal/certs"
	"scistream/internal/localgw"
)

// Prefix is the key prefix the user of Options.Auth may read and write.
const Prefix = "/scistream/"

// ReadyTimeout bounds the wait for a started etcd to answer /health.
const ReadyTimeout = 30 * time.Second

// Options choose how the server is set up.
type Options struct {
	// Dir, an existing directory, holds etcd's data, and its
	// certificates and password file with TLS and Auth. Required; the
	// caller removes it.
	Dir string
	// TLS serves the client port over TLS with a self-signed certificate
	// and requires clients to present the one in Etcd.CertFile.
	TLS bool
	// Auth enables etcd's authentication: Etcd.User with Etcd.Password
	// may read and write every key under Prefix, nothing else.
	Auth bool
}

// Etcd is a running etcd server.
type Etcd struct {
	// Endpoint is the client address, host:port.
	Endpoint string
	// CAFile, CertFile and KeyFile are set with Options.TLS: the
	// certificate that verifies the server, and a client certificate and
	// key the server accepts.
	CAFile, CertFile, KeyFile string
	// User and Password are set with Options.Auth; PasswordFile holds the
	// password (mode 0600, no newline).
	User, Password, PasswordFile string

	bin  string
	dir  string
	tls  bool
	args []string
	log  logBuffer // every run's output

	mu   sync.Mutex // guards proc
	proc *process   // nil while stopped
}

// process is one run of the etcd binary.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited
}

// Start runs etcd and waits until it serves. If the etcd binary is
// missing, the error says to run scripts/setup.sh. On error nothing is
// left running. The caller must call Stop.
func Start(o Options) (*Etcd, error) {
	if o.Dir == "" {
		return nil, errors.New("localetcd: Options.Dir is required")
	}
	bin, err := exec.LookPath("etcd")
	if err != nil {
		return nil, fmt.Errorf("no etcd binary on PATH (%v): run scripts/setup.sh, which installs Debian's etcd-server", err)
	}
	e := &Etcd{bin: bin, dir: o.Dir, tls: o.TLS}
	// Another program may take a port between our probe and etcd's
	// bind: etcd then exits at once, and we try again elsewhere.
	for attempt := 1; ; attempt++ {
		host := localgw.RandomLoopback()
		client, peer, err := freePorts(host)
		if err != nil {
			return nil, err
		}
		e.Endpoint = net.JoinHostPort(host, strconv.Itoa(client))
		if o.TLS {
			if err := e.writeCerts(host); err != nil {
				return nil, err
			}
		}
		e.args = e.command(host, peer)
		err = e.start()
		if err == nil {
			break
		}
		if !errors.Is(err, errInUse) || attempt == 5 {
			return nil, err
		}
	}
	if o.Auth {
		if err := e.enableAuth(); err != nil {
			e.Stop()
			return nil, err
		}
	}
	return e, nil
}

// URL is the client URL: http:// or, with Options.TLS, https:// and
// the Endpoint.
func (e *Etcd) URL() string {
	if e.tls {
		return "https://" + e.Endpoint
	}
	return "http://" + e.Endpoint
}

// command is etcd's command line: a one-member cluster with its client
// port at e.Endpoint, its peer port on host, its data under e.dir.
func (e *Etcd) command(host string, peer int) []string {
	peerURL := "http://" + net.JoinHostPort(host, strconv.Itoa(peer))
	args := []string{
		"--name", "localetcd",
		"--data-dir", filepath.Join(e.dir, "data"),
		"--listen-client-urls", e.URL(), "--advertise-client-urls", e.URL(),
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "localetcd=" + peerURL, "--initial-cluster-state", "new",
		// A lone member elects itself after one election timeout:
		// a shorter one makes it ready sooner.
		"--heartbeat-interval", "50", "--election-timeout", "500",
		"--logger", "zap", "--log-outputs", "stderr", "--log-level", "warn",
	}
	if e.tls {
		args = append(args, "--cert-file", filepath.Join(e.dir, "server.pem"), "--key-file", filepath.Join(e.dir, "server.key"),
			"--trusted-ca-file", filepath.Join(e.dir, "trusted.pem"), "--client-cert-auth")
	}
	return args
}

// writeCerts makes the server's certificate for host (self-signed: it is
// also the CA file clients verify the server with), a self-signed client
// certificate, and the file of both that the server trusts.
func (e *Etcd) writeCerts(host string) error {
	srvCert, srvKey, err := certs.SelfSigned([]string{host}, 24*time.Hour)
	if err != nil {
		return err
	}
	cliCert, cliKey, err := certs.SelfSigned(nil, 24*time.Hour)
	if err != nil {
		return err
	}
	e.CAFile = filepath.Join(e.dir, "server.pem")
	e.CertFile = filepath.Join(e.dir, "client.pem")
	e.KeyFile = filepath.Join(e.dir, "client.key")
	for name, b := range map[string][]byte{
		e.CAFile: srvCert, filepath.Join(e.dir, "server.key"): srvKey,
		e.CertFile: cliCert, e.KeyFile: cliKey,
		filepath.Join(e.dir, "trusted.pem"): append(append([]byte{}, srvCert...), cliCert...),
	} {
		if err := os.WriteFile(name, b, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// ClientTLS is the TLS configuration of a client of a server started
// with Options.TLS (its CA and client certificate), nil otherwise.
func (e *Etcd) ClientTLS() (*tls.Config, error) {
	if !e.tls {
		return nil, nil
	}
	ca, err := os.ReadFile(e.CAFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	pair, err := tls.LoadX509KeyPair(e.CertFile, e.KeyFile)
	if err != nil {
		return nil, err
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, nil
}

// errInUse says etcd could not bind a port we picked for it.
var errInUse = errors.New("a port was taken")

// start runs the etcd binary with e.args and waits until it serves.
func (e *Etcd) start() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.proc != nil {
		return errors.New("etcd is already running")
	}
	cmd := exec.Command(e.bin, e.args...)
	cmd.Stdout, cmd.Stderr = &e.log, &e.log
	// Its own process group, and killed with its parent if that dies
	// first: no etcd outlives the program that started it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", e.bin, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		cmd.Wait()
		close(p.done)
	}()
	if err := e.waitHealthy(p); err != nil {
		p.kill()
		if strings.Contains(e.log.String(), "address already in use") {
			return fmt.Errorf("%w: %v", errInUse, err)
		}
		return err
	}
	e.proc = p
	return nil
}

// waitHealthy polls etcd's /health until it says true, the process
// exits or ReadyTimeout passes.
func (e *Etcd) waitHealthy(p *process) error {
	tc, err := e.ClientTLS()
	if err != nil {
		return err
	}
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
	defer hc.CloseIdleConnections()
	healthy := func() bool {
		resp, err := hc.Get(e.URL() + "/health")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var h struct{ Health string }
		json.NewDecoder(resp.Body).Decode(&h)
		return resp.StatusCode == http.StatusOK && h.Health == "true"
	}
	deadline := time.NewTimer(ReadyTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !healthy() {
		select {
		case <-tick.C:
		case <-p.done:
			return fmt.Errorf("etcd exited before it served (%v): %s", p.cmd.ProcessState, lastLines(e.log.String(), 3))
		case <-deadline.C:
			return fmt.Errorf("etcd at %s not healthy within %s: %s", e.URL(), ReadyTimeout, lastLines(e.log.String(), 3))
		}
	}
	return nil
}

// kill ends the process with SIGKILL, by its PID, and waits for it.
func (p *process) kill() {
	syscall.Kill(p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// Stop kills etcd with SIGKILL (no orderly shutdown, as a crash) and
// waits for it to exit. Stopping a stopped server does nothing.
func (e *Etcd) Stop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.proc != nil {
		e.proc.kill()
		e.proc = nil
	}
}

// Restart starts a stopped etcd again on the same address with the same
// data, and waits until it serves.
func (e *Etcd) Restart() error {
	if err := e.start(); err != nil {
		return fmt.Errorf("restart: %w", err)
	}
	return nil
}

// PID is the process ID of the running etcd, 0 while it is stopped.
func (e *Etcd) PID() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.proc == nil {
		return 0
	}
	return e.proc.cmd.Process.Pid
}

// Log returns what etcd wrote so far, over all its runs (the first MiB).
func (e *Etcd) Log() string { return e.log.String() }

// enableAuth adds the root user etcd requires, and User, allowed to read
// and write under Prefix, then turns authentication on.
func (e *Etcd) enableAuth() error {
	e.User, e.Password = "scistream", randomHex()
	e.PasswordFile = filepath.Join(e.dir, "etcd-password")
	if err := os.WriteFile(e.PasswordFile, []byte(e.Password), 0o600); err != nil {
		return err
	}
	tc, err := e.ClientTLS()
	if err != nil {
		return err
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{e.URL()}, TLS: tc, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const role = "scistream-rw"
	steps := []struct {
		what string
		do   func() error
	}{
		{"add root", func() error { _, err := cli.UserAdd(ctx, "root", randomHex()); return err }},
		{"grant root", func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err }},
		{"add role", func() error { _, err := cli.RoleAdd(ctx, role); return err }},
		{"grant the role " + Prefix, func() error {
			_, err := cli.RoleGrantPermission(ctx, role, Prefix, clientv3.GetPrefixRangeEnd(Prefix), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		}},
		{"add " + e.User, func() error { _, err := cli.UserAdd(ctx, e.User, e.Password); return err }},
		{"grant " + e.User, func() error { _, err := cli.UserGrantRole(ctx, e.User, role); return err }},
		{"enable auth", func() error { _, err := cli.AuthEnable(ctx); return err }},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			return fmt.Errorf("%s: %w", s.what, err)
		}
	}
	return nil
}

// freePorts returns two distinct ports free on host now.
func freePorts(host string) (int, int, error) {
	var ports [2]int
	for i := range ports {
		ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return 0, 0, err
		}
		defer ln.Close() // both open at once: two different ports
		ports[i] = ln.Addr().(*net.TCPAddr).Port
	}
	return ports[0], ports[1], nil
}

func randomHex() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// logBuffer keeps the first MiB of what etcd writes.
type logBuffer struct {
	mu sync.Mutex // guards b
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() < 1<<20 {
		l.b.Write(p)
	}
	return len(p), nil
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
