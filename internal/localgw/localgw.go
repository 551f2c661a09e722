// Package localgw starts real s2cs processes on loopback addresses and
// waits until they serve: the harness behind the demo, s2bench compare and
// the end-to-end tests. Every process it starts is stopped by Stop, by its
// PID, and nothing is left behind in the directory it was given.
package localgw

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"scistream/internal/auth"
	"scistream/internal/client"
)

// Options describe one gateway to start.
type Options struct {
	// S2CS is the s2cs binary. If empty, FindBinary("s2cs").
	S2CS string
	// ListenerIP is the loopback address the gateway uses. Required.
	// On a loopback address the gateway's applications and peers are on
	// its own host, which s2cs refuses to dial by default: Start then
	// passes --allow_targets and --allow_peers 127.0.0.0/8, unless Args
	// give either.
	ListenerIP string
	// PortRange is passed as --port_range. If empty, "5100-5199".
	PortRange string
	// StateDir is passed as --state_dir. Required.
	StateDir string
	// TokensFile is passed as --tokens. If empty, --insecure_no_auth.
	TokensFile string
	// Args are extra s2cs flags.
	Args []string
	// Log receives the process's stderr. If nil, it is kept in memory
	// and returned by Gateway.Log.
	Log io.Writer
	// ReadyTimeout bounds the wait for readiness. If zero, 15 seconds.
	ReadyTimeout time.Duration
	// Prefix, if set, is a command that runs s2cs, given as its
	// arguments: e.g. {"ip", "netns", "exec", "NS"} starts the gateway in
	// network namespace NS. It must exec s2cs in place (keep the PID),
	// as ip netns exec does, so that Stop signals s2cs itself.
	Prefix []string
	// Exact makes Args the whole command line: Start adds none of the
	// flags above (ListenerIP, PortRange, StateDir and TokensFile are
	// then not used, nor required), as an operator's own command line
	// (a SciStream 1.2 one) is run.
	Exact bool
	// Dir is the working directory of the process. If empty, this
	// process's.
	Dir string
	// CertFile is the certificate the gateway presents, when neither
	// Args' --server_crt nor a generated certificate says which (a
	// file s2cs reads by default, e.g. a 1.2 command line's
	// ./server.crt). If empty, those say.
	CertFile string
}

// Gateway is a running s2cs process.
type Gateway struct {
	// Addr is the control API's host:port.
	Addr string
	// CertFile is the gateway's certificate (for --server_cert).
	CertFile string
	// MetricsAddr is the host:port of its plain metrics listener, if
	// Args gave --metrics_listen.
	MetricsAddr string
	// Opts are the options it was started with.
	Opts Options

	cmd  *exec.Cmd
	done chan struct{}
	err  error // process exit status, valid after done

	mu  sync.Mutex // guards log
	log strings.Builder

	stopOnce sync.Once
}

// FindBinary returns the path of a SciStream binary: next to the running
// executable, then in ./bin, then on $PATH.
func FindBinary(name string) (string, error) {
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	if p, err := filepath.Abs(filepath.Join("bin", name)); err == nil {
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("cannot find the %s binary next to this program, in ./bin or on PATH; build it with: make build", name)
}

// Start launches s2cs with a free control port and waits until its
// /healthz answers. The caller must call Stop.
func Start(ctx context.Context, o Options) (*Gateway, error) {
	if o.S2CS == "" {
		p, err := FindBinary("s2cs")
		if err != nil {
			return nil, err
		}
		o.S2CS = p
	}
	if !o.Exact && (o.ListenerIP == "" || o.StateDir == "") {
		return nil, errors.New("localgw: ListenerIP and StateDir are required")
	}
	if o.PortRange == "" && !o.Exact {
		o.PortRange = "5100-5199"
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = 15 * time.Second
	}
	var args []string
	if !o.Exact {
		args = []string{"--listener_ip", o.ListenerIP, "--port", "0", "--port_range", o.PortRange, "--state_dir", o.StateDir}
		if o.TokensFile != "" {
			args = append(args, "--tokens", o.TokensFile)
		} else {
			args = append(args, "--insecure_no_auth")
		}
		if ip := net.ParseIP(o.ListenerIP); ip != nil && ip.IsLoopback() && !hasFlag(o.Args, "allow_targets") && !hasFlag(o.Args, "allow_peers") {
			args = append(args, "--allow_targets", "127.0.0.0/8", "--allow_peers", "127.0.0.0/8")
		}
	}
	args = append(args, o.Args...)
	g := &Gateway{Opts: o, done: make(chan struct{})}
	cmd := exec.Command(o.S2CS, args...)
	if len(o.Prefix) > 0 {
		cmd = exec.Command(o.Prefix[0], append(append(o.Prefix[1:len(o.Prefix):len(o.Prefix)], o.S2CS), args...)...)
	}
	cmd.Dir = o.Dir
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if o.Log != nil {
		cmd.Stderr = io.MultiWriter(o.Log, (*logWriter)(g))
	} else {
		cmd.Stderr = (*logWriter)(g)
	}
	// Its own process group, so a Ctrl-C aimed at the parent does not
	// kill the gateway before the parent has released its streams. If
	// the parent dies without stopping it (SIGKILL, a crash), the kernel
	// sends it SIGTERM and it shuts down: no orphaned gateway holds its
	// ports. (The signal follows the death of the thread that started
	// it; the Go runtime keeps its threads for the life of the process
	// unless a goroutine locked to one exits, which this package never
	// does.)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", o.S2CS, err)
	}
	g.cmd = cmd
	addrc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			// Under --log_format json each line is a JSON record whose
			// message is the text line's, without "s2cs: ".
			var rec struct{ Msg string }
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg != "" {
				line = "s2cs: " + rec.Msg
			}
			if strings.Contains(line, "self-signed certificate ") {
				f := strings.Fields(line)
				for i, w := range f {
					if w == "certificate" && i+1 < len(f) {
						g.CertFile = f[i+1]
						break
					}
				}
			}
			if a, ok := strings.CutPrefix(line, "s2cs: metrics on http://"); ok {
				g.MetricsAddr, _, _ = strings.Cut(a, "/")
			}
			if !sent && strings.HasPrefix(line, "s2cs: control API on https://") {
				addrc <- controlAddr(strings.TrimPrefix(line, "s2cs: control API on https://"))
				sent = true
			}
		}
		io.Copy(io.Discard, stdout)
	}()
	go func() {
		g.err = cmd.Wait()
		close(g.done)
	}()
	deadline := time.NewTimer(o.ReadyTimeout)
	defer deadline.Stop()
	select {
	case g.Addr = <-addrc:
	case <-g.done:
		return nil, fmt.Errorf("s2cs exited before serving (%v): %s", g.err, lastLine(g.Log()))
	case <-deadline.C:
		g.Stop()
		return nil, fmt.Errorf("s2cs did not announce its control address within %s: %s", o.ReadyTimeout, lastLine(g.Log()))
	case <-ctx.Done():
		g.Stop()
		return nil, ctx.Err()
	}
	if o.CertFile != "" {
		g.CertFile = o.CertFile
	}
	if g.CertFile == "" {
		// A certificate given with Args: use it as --server_cert.
		for i, a := range o.Args {
			if (a == "--server_crt" || a == "--server-crt") && i+1 < len(o.Args) {
				g.CertFile = o.Args[i+1]
			}
			if f, ok := strings.CutPrefix(a, "--server_crt="); ok {
				g.CertFile = f
			}
		}
	}
	if err := g.waitHealthy(ctx, deadline.C); err != nil {
		g.Stop()
		return nil, err
	}
	return g, nil
}

func (g *Gateway) waitHealthy(ctx context.Context, deadline <-chan time.Time) error {
	c, err := client.New(client.Config{Addr: g.Addr, ServerCert: g.CertFile, Timeout: 2 * time.Second})
	if err != nil {
		return err
	}
	defer c.Close()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		err := c.Do(ctx, http.MethodGet, "/healthz", nil, nil)
		if err == nil {
			return nil
		}
		select {
		case <-tick.C:
		case <-g.done:
			return fmt.Errorf("s2cs exited (%v): %s", g.err, lastLine(g.Log()))
		case <-deadline:
			return fmt.Errorf("s2cs at %s not healthy: %w", g.Addr, err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Client returns a control client for the gateway with token.
func (g *Gateway) Client(token string) (*client.Client, error) {
	return client.New(client.Config{Addr: g.Addr, ServerCert: g.CertFile, Token: token})
}

// PID returns the process ID.
func (g *Gateway) PID() int { return g.cmd.Process.Pid }

// Done is closed when the process has exited.
func (g *Gateway) Done() <-chan struct{} { return g.done }

// Stop asks s2cs to shut down (SIGTERM) and waits up to 10 seconds before
// killing it. It returns the process's exit error, if any. Idempotent.
func (g *Gateway) Stop() error {
	g.stopOnce.Do(func() {
		g.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-g.done:
		case <-time.After(10 * time.Second):
			g.cmd.Process.Kill()
			<-g.done
		}
	})
	<-g.done
	return g.err
}

// Kill ends s2cs with SIGKILL (no graceful shutdown), as a crash would.
func (g *Gateway) Kill() {
	g.stopOnce.Do(func() {
		g.cmd.Process.Kill()
		<-g.done
	})
	<-g.done
}

// Log returns what the process wrote to stderr so far.
func (g *Gateway) Log() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.log.String()
}

type logWriter Gateway

func (w *logWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.log.Len() < 8<<20 {
		w.log.Write(b)
	}
	return len(b), nil
}

// controlAddr is the address to reach the control API at, from the
// rest of s2cs's line "control API on https://ADDR (listener_ip IP,
// ...)": ADDR, or, when it is bound to every address (0.0.0.0:PORT),
// the listener_ip it advertises with the same port.
func controlAddr(rest string) string {
	f := strings.Fields(rest)
	if len(f) == 0 {
		return ""
	}
	host, port, err := net.SplitHostPort(f[0])
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsUnspecified() {
		return f[0]
	}
	if len(f) > 2 && f[1] == "(listener_ip" {
		return net.JoinHostPort(strings.TrimSuffix(f[2], ","), port)
	}
	return f[0]
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndex(s, "\n"); i >= 0 {
		return s[i+1:]
	}
	return s
}

// NewToken returns a random bearer token.
func NewToken() string {
	b := make([]byte, 24)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// WriteTokens writes a token file mapping identities to tokens (hashed).
func WriteTokens(path string, tokens map[string]string) error {
	var sb strings.Builder
	for id, tok := range tokens {
		fmt.Fprintf(&sb, "%s %s\n", auth.HashToken(tok), id)
	}
	return os.WriteFile(path, []byte(sb.String()), 0o600)
}

// RandomLoopback returns a random address in 127.0.0.0/8 (avoiding
// 127.0.0.0/24), so that concurrent runs do not share port ranges.
func RandomLoopback() string {
	n, _ := rand.Int(rand.Reader, big.NewInt(250*250*250))
	v := int(n.Int64())
	return fmt.Sprintf("127.%d.%d.%d", 1+v/(250*250), 1+v/250%250, 1+v%250)
}

// DistinctLoopbacks returns n different random loopback addresses (of
// RandomLoopback's).
func DistinctLoopbacks(n int) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	for try := 0; len(out) < n && try < 100; try++ {
		ip := RandomLoopback()
		if !seen[ip] {
			seen[ip] = true
			out = append(out, ip)
		}
	}
	if len(out) < n {
		return nil, errors.New("could not pick distinct loopback addresses")
	}
	return out, nil
}

// hasFlag reports whether args give the flag name (--name or -name, with
// its value after "=" or as the next argument).
func hasFlag(args []string, name string) bool {
	for _, a := range args {
		a = strings.TrimLeft(a, "-")
		if a == name || strings.HasPrefix(a, name+"=") {
			return true
		}
	}
	return false
}
