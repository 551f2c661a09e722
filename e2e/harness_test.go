package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"scistream/internal/localgw"
	"scistream/internal/waitfor"
)

// bins holds the binaries built once by TestMain.
var bins struct{ dir, s2cs, s2uc string }

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "scistream-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bins.dir = dir
	bins.s2cs = filepath.Join(dir, "s2cs")
	bins.s2uc = filepath.Join(dir, "s2uc")
	cmd := exec.Command("go", "build", "-o", dir+"/", "scistream/cmd/s2cs", "scistream/cmd/s2uc")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build binaries:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// pair is a producer gateway and a consumer gateway with tokens for a few
// identities.
type pair struct {
	t          *testing.T
	dir        string
	prod, cons *localgw.Gateway
	tokens     map[string]string // identity -> token
	tokensFile string
	home       string // SCISTREAM_HOME for s2uc
}

type pairOpts struct {
	portRange string
	args      []string // extra s2cs flags for both
	prodArgs  []string // and for the producer's gateway only
	consArgs  []string // and for the consumer's gateway only
	consState string   // the consumer gateway's --state_dir, if not under the test's directory
	prefix    []string // a command that execs s2cs, for both (localgw.Options.Prefix)
}

func newPair(t *testing.T, o pairOpts) *pair {
	t.Helper()
	dir := t.TempDir()
	p := &pair{t: t, dir: dir, tokens: map[string]string{}, home: filepath.Join(dir, "home")}
	for _, id := range []string{"alice", "bob"} {
		p.tokens[id] = localgw.NewToken()
	}
	for i := 0; i < 20; i++ {
		p.tokens[fmt.Sprintf("user%02d", i)] = localgw.NewToken()
	}
	p.tokensFile = filepath.Join(dir, "tokens")
	if err := localgw.WriteTokens(p.tokensFile, p.tokens); err != nil {
		t.Fatal(err)
	}
	po := o
	po.args = append(slices.Clone(o.args), o.prodArgs...)
	p.prod = p.start("prod", localgw.RandomLoopback(), po)
	consName := "cons"
	if o.consState != "" {
		consName = o.consState
	}
	co := o
	co.args = append(slices.Clone(o.args), o.consArgs...)
	p.cons = p.start(consName, localgw.RandomLoopback(), co)
	return p
}

func (p *pair) start(name, ip string, o pairOpts) *localgw.Gateway {
	p.t.Helper()
	stateDir := name
	if !filepath.IsAbs(name) {
		stateDir = filepath.Join(p.dir, name)
	}
	g, err := localgw.Start(context.Background(), localgw.Options{
		S2CS:       bins.s2cs,
		ListenerIP: ip,
		PortRange:  o.portRange,
		StateDir:   stateDir,
		TokensFile: p.tokensFile,
		Args:       o.args,
		Prefix:     o.prefix,
	})
	if err != nil {
		p.t.Fatalf("start %s gateway: %v", filepath.Base(name), err)
	}
	p.t.Cleanup(func() {
		g.Stop()
		if p.t.Failed() {
			p.t.Logf("%s gateway log:\n%s", filepath.Base(name), g.Log())
		}
	})
	return g
}

// restart kills g (SIGKILL unless graceful) and starts it again on the
// same address and state directory.
func (p *pair) restart(g **localgw.Gateway, graceful bool) {
	p.t.Helper()
	old := *g
	if graceful {
		if err := old.Stop(); err != nil {
			p.t.Fatalf("graceful stop: %v", err)
		}
	} else {
		old.Kill()
	}
	*g = p.start(old.Opts.StateDir, old.Opts.ListenerIP, pairOpts{portRange: old.Opts.PortRange, args: old.Opts.Args, prefix: old.Opts.Prefix})
}

// on returns p as seen by test t (a subtest of the one that made p), so
// that its helpers fail t rather than the parent: a pair shared by the
// subtests of one configuration.
func (p *pair) on(t *testing.T) *pair {
	q := *p
	q.t = t
	return &q
}

// s2uc runs the client binary as identity id and returns stdout, stderr
// and the exit code.
func (p *pair) s2uc(id string, args ...string) (string, string, int) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bins.s2uc, args...)
	cmd.Env = append(os.Environ(), "SCISTREAM_HOME="+p.home+"/"+id)
	cmd.Env = append(cmd.Env, "SCISTREAM_TOKEN="+p.tokens[id])
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		p.t.Fatalf("run s2uc: %v", err)
	}
	return out.String(), errb.String(), code
}

// mustS2UC runs s2uc and fails the test unless it exits 0.
func (p *pair) mustS2UC(id string, args ...string) string {
	p.t.Helper()
	out, errs, code := p.s2uc(id, args...)
	if code != 0 {
		p.t.Fatalf("s2uc %s: exit %d: %s", strings.Join(args, " "), code, errs)
	}
	return out
}

type streamOut struct {
	UID       string   `json:"uid"`
	Listeners []string `json:"listeners"`
	// The engines each side runs.
	Inbound  struct{ Engine string } `json:"inbound"`
	Outbound struct{ Engine string } `json:"outbound"`
}

// wire opens a stream for id from the producer gateway to app (host,
// ports) with the one-shot s2uc stream command; extra flags are appended.
func (p *pair) wire(id, appHost string, ports string, numConn int, extra ...string) streamOut {
	p.t.Helper()
	args := []string{"stream",
		"--inbound_s2cs", p.cons.Addr, "--inbound_server_cert", p.cons.CertFile,
		"--outbound_s2cs", p.prod.Addr, "--outbound_server_cert", p.prod.CertFile,
		"--remote_ip", appHost, "--receiver_ports", ports, "--num_conn", fmt.Sprint(numConn),
		"--allow", "127.0.0.0/8", "--output", "json"}
	out := p.mustS2UC(id, append(args, extra...)...)
	var so streamOut
	if err := json.Unmarshal([]byte(out), &so); err != nil {
		p.t.Fatalf("s2uc stream output is not JSON: %v\n%s", err, out)
	}
	if so.UID == "" || len(so.Listeners) != numConn {
		p.t.Fatalf("s2uc stream output lacks uid or %d listeners: %s", numConn, out)
	}
	return so
}

// sink is a listening application: it accepts connections and reports,
// per connection, the SHA-256 and length of everything it read. If reply
// is set, it writes reply after reading EOF. resetNext makes it die
// abruptly on a connection instead.
type sink struct {
	ln       net.Listener
	got      chan sinkResult
	reply    []byte
	accepted atomic.Int64 // connections accepted so far

	mu     sync.Mutex // guards resets
	resets []int64    // armed by resetNext, in accept order
}

type sinkResult struct {
	n    int64
	sum  [32]byte
	data []byte // first 4 KiB
	err  error
}

// errSinkReset is the result of a connection the sink reset on purpose
// (resetNext).
var errSinkReset = errors.New("the sink reset this connection, as armed by resetNext")

func newSink(t *testing.T, ip string, reply []byte) *sink {
	t.Helper()
	return newSinkAt(t, net.JoinHostPort(ip, "0"), reply)
}

// newSinkAt is newSink listening on addr ("host:port").
func newSinkAt(t *testing.T, addr string, reply []byte) *sink {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	s := &sink{ln: ln, got: make(chan sinkResult, 256), reply: reply}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			// Take the connection's fate before counting it, so a test
			// that waits on accepted and then arms a reset arms it for
			// the next connection, never for this one.
			resetAfter := s.takeReset()
			s.accepted.Add(1)
			go s.serve(c.(*net.TCPConn), resetAfter)
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return s
}

// resetNext arms the sink: the next connection it accepts reads n bytes,
// then is reset (SetLinger(0) and Close: an RST, as when an application
// dies), and its result's err is errSinkReset.
func (s *sink) resetNext(n int64) {
	s.mu.Lock()
	s.resets = append(s.resets, n)
	s.mu.Unlock()
}

func (s *sink) takeReset() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.resets) == 0 {
		return -1
	}
	n := s.resets[0]
	s.resets = s.resets[1:]
	return n
}

func (s *sink) serve(c *net.TCPConn, resetAfter int64) {
	defer c.Close()
	h := sha256.New()
	head := &limitedBuf{max: 4096}
	var r sinkResult
	if resetAfter >= 0 {
		r.n, r.err = io.CopyN(io.MultiWriter(h, head), c, resetAfter)
		if r.err == nil {
			c.SetLinger(0)
			r.err = errSinkReset
		}
	} else {
		r.n, r.err = io.Copy(io.MultiWriter(h, head), c)
		if r.err == nil && s.reply != nil {
			_, r.err = c.Write(s.reply)
		}
	}
	r.data = head.b
	copy(r.sum[:], h.Sum(nil))
	s.got <- r
}

func (s *sink) port() string {
	_, p, _ := net.SplitHostPort(s.ln.Addr().String())
	return p
}

func (s *sink) host() string {
	h, _, _ := net.SplitHostPort(s.ln.Addr().String())
	return h
}

// next waits for the next finished connection.
func (s *sink) next(t *testing.T, within time.Duration) sinkResult {
	t.Helper()
	select {
	case r := <-s.got:
		return r
	case <-time.After(within):
		t.Fatalf("consumer received no complete connection within %s", within)
	}
	return sinkResult{}
}

type limitedBuf struct {
	b   []byte
	max int
}

func (l *limitedBuf) Write(p []byte) (int, error) {
	if room := l.max - len(l.b); room > 0 {
		l.b = append(l.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

// dialFrom connects to addr from a given local IP.
func dialFrom(localIP, addr string) (*net.TCPConn, error) {
	d := net.Dialer{Timeout: 30 * time.Second}
	if localIP != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(localIP)}
	}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	return c.(*net.TCPConn), nil
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	waitfor.Must(t, within, what, cond)
}

// fdCount counts a process's open file descriptors.
func fdCount(pid int) int {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return -1
	}
	return len(ents)
}

// sendRandom writes n pseudo-random bytes (seeded) to w, returning their
// SHA-256; it fails t if a write fails, so call it from t's goroutine
// only (writeRandom elsewhere).
func sendRandom(t *testing.T, w io.Writer, n int64, seed uint64) [32]byte {
	t.Helper()
	h := sha256.New()
	if err := writeRandom(io.MultiWriter(h, w), n, seed); err != nil {
		t.Fatalf("send: %v", err)
	}
	var s [32]byte
	copy(s[:], h.Sum(nil))
	return s
}

// writeRandom writes n pseudo-random bytes (seeded) to w: one random block
// of at most 4 MiB, written with a different rotation each time, so no
// two blocks are alike and generation stays cheap.
func writeRandom(w io.Writer, n int64, seed uint64) error {
	rng := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)})
	block := make([]byte, min(n, 4<<20))
	rng.Read(block)
	var buf []byte
	for i := int64(0); n > 0; i++ {
		k := int(uint64(i)*7919) % len(block)
		out := block
		if k != 0 {
			if buf == nil {
				buf = make([]byte, len(block))
			}
			copy(buf, block[k:])
			copy(buf[len(block)-k:], block[:k])
			out = buf
		}
		m := min(n, int64(len(out)))
		if _, err := w.Write(out[:m]); err != nil {
			return err
		}
		n -= m
	}
	return nil
}

// udpFree reports whether the UDP port of addr can be bound.
func udpFree(addr string) bool {
	c, err := net.ListenPacket("udp", addr)
	if err != nil {
		return false
	}
	c.Close()
	return true
}
