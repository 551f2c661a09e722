package main

import (
	"crypto/tls"
	"encoding/json"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"scistream/internal/certs"
	"scistream/internal/client"
)

// These tests are issue 35's finding 9: s2uc trusted stream records,
// pin files and its configuration file that other users could write.
// Each file that names a gateway s2uc sends the user's token to, or
// the certificate that proves it, must be the user's (or root's) and in
// directories nobody else may write (internal/trustfile).

// countingListener counts the connections it accepted.
type countingListener struct {
	net.Listener
	n atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// rogue is the attacker's gateway: a TLS listener with a certificate of
// its own, counting every connection and keeping every Authorization
// header it is sent.
type rogue struct {
	addr, certFile string
	ln             *countingListener
	mu             sync.Mutex
	auth           []string
}

func (r *rogue) tokens() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.auth...)
}

// startRogue starts the attacker's gateway; its certificate file lies
// in dir.
func startRogue(t *testing.T, dir string) *rogue {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	id, certFile, _, err := certs.LoadOrGenerate(dir, []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	r := &rogue{certFile: certFile}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.auth = append(r.auth, req.Header.Get("Authorization"))
		r.mu.Unlock()
		http.Error(w, `{"code":"not_found","message":"no"}`, http.StatusNotFound)
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.ln = &countingListener{Listener: ln}
	srv.Listener = r.ln
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{id.TLS}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	r.addr = ln.Addr().String()
	return r
}

// TestRecordsOthersCanWrite: the attack of finding 9. s2uc requested a
// stream from the user's real gateway and kept its record; another
// user who could write the record, its directory or s2uc's home
// rewrote it to name their gateway, pinned with their certificate.
// s2uc status UID refuses the record, saying which file and the command
// that fixes it, and the attacker's gateway gets not one connection,
// let alone the bearer token. The same rewritten record, kept as the
// user's own file, is followed (the token reaches that gateway): it is
// the files' modes and owners that stop it.
func TestRecordsOthersCanWrite(t *testing.T) {
	isolate(t)
	g := startGateway(t)
	home := filepath.Join(t.TempDir(), "home")
	app, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	env := []string{"SCISTREAM_HOME=" + home, "SCISTREAM_TOKEN=" + g.token}
	stdout, stderr, code := s2ucProc(t, env, "inbound-request", "--s2cs", g.Addr, "--server_cert", g.CertFile,
		"--remote_ip", "127.0.0.1", "--receiver_ports", strconv.Itoa(app.Addr().(*net.TCPAddr).Port), "--output", "json")
	var created struct{ UID string }
	if code != 0 || json.Unmarshal([]byte(stdout), &created) != nil {
		t.Fatalf("inbound-request: exit %d, %s%s", code, stdout, stderr)
	}
	uid := created.UID
	streams := filepath.Join(home, "streams")
	record := filepath.Join(streams, uid+".json")
	if _, stderr, code := s2ucProc(t, env, "status", uid); code != 0 {
		t.Fatalf("status of the user's own record: exit %d, %s", code, stderr)
	}

	// The attacker's gateway and its certificate, in a directory of
	// the attacker's.
	attacker := filepath.Join(t.TempDir(), "mallory")
	if err := os.Mkdir(attacker, 0o755); err != nil {
		t.Fatal(err)
	}
	evil := startRogue(t, attacker)
	// The record rewritten: its inbound side the attacker's.
	rewrite := func(certFile string) {
		t.Helper()
		b, err := os.ReadFile(record)
		if err != nil {
			t.Fatal(err)
		}
		var sess client.Session
		if err := json.Unmarshal(b, &sess); err != nil {
			t.Fatal(err)
		}
		sess.Inbound.S2CS, sess.Inbound.ServerCert = evil.addr, certFile
		b, _ = json.Marshal(&sess)
		if err := os.WriteFile(record, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	rewrite(evil.certFile)
	root := os.Geteuid() == 0
	if root {
		// Its certificate is the attacker's file.
		os.Chown(evil.certFile, 65534, 65534)
		os.Chown(attacker, 65534, 65534)
	}

	for _, c := range []struct {
		name   string
		root   bool // needs chown
		set    func()
		undo   func()
		want   []string
		status int
	}{
		{"record writable by all", false,
			func() { os.Chmod(record, 0o666) }, func() { os.Chmod(record, 0o600) },
			[]string{"stream record " + record + " can be written by other users (mode 0666): chmod go-w " + record}, exitFailed},
		{"records directory writable by all", false,
			func() { os.Chmod(streams, 0o777) }, func() { os.Chmod(streams, 0o700) },
			[]string{"stream record " + record + ": directory " + streams + " can be written by other users (mode 0777)", "chmod go-w " + streams}, exitFailed},
		{"home writable by its group", false,
			func() { os.Chmod(home, 0o770) }, func() { os.Chmod(home, 0o700) },
			[]string{"directory " + home + " can be written by other users (mode 0770)", "chmod go-w " + home}, exitFailed},
		{"record owned by another user", true,
			func() { os.Chown(record, 65534, 65534) }, func() { os.Chown(record, 0, 0) },
			[]string{"stream record " + record + " is owned by uid 65534", "chown root " + record}, exitFailed},
		// The record left the user's: the pin it names is the attacker's
		// file, which the attacker can change at will.
		{"the record's pin another user's", true,
			func() {}, func() {},
			[]string{"server certificate " + evil.certFile + " is owned by uid 65534", "chown root " + evil.certFile}, exitUsage},
	} {
		if c.root && !root {
			t.Logf("%s: skipped, not root (needs chown)", c.name)
			continue
		}
		c.set()
		_, stderr, code := s2ucProc(t, env, "status", uid)
		c.undo()
		checkExit(t, []string{"status", uid, "(" + c.name + ")"}, "", stderr, code, c.status, c.want[0])
		for _, w := range c.want[1:] {
			if !strings.Contains(stderr, w) {
				t.Errorf("%s: %q lacks %q", c.name, stderr, w)
			}
		}
		if n := evil.ln.n.Load(); n != 0 || len(evil.tokens()) != 0 {
			t.Fatalf("%s: the attacker's gateway got %d connections, tokens %q", c.name, n, evil.tokens())
		}
	}

	// The control: the same rewritten record and pin as files of the
	// user's own are followed, and the token goes where they say. (So
	// the refusals above are what kept it from the attacker.)
	if root {
		os.Chown(evil.certFile, 0, 0)
		os.Chown(attacker, 0, 0)
	}
	_, stderr, _ = s2ucProc(t, env, "status", uid)
	if got := evil.tokens(); len(got) == 0 || got[0] != "Bearer "+g.token {
		t.Fatalf("the control: the gateway the user's own record names got %q, want the bearer token (stderr %q)", got, stderr)
	}
}

// TestPinAndConfigOthersCanWrite: a --server_cert file others can write
// (or in a directory they can), a --token_file in a directory they can
// write, and a configuration file owned by another user (mode 0644) or
// in a directory others can write, are refused, naming the fix, before
// any connection to the gateway; the same files kept right are used. So
// is a records directory others can write, before inbound-request
// creates a stream whose record would go there.
func TestPinAndConfigOthersCanWrite(t *testing.T) {
	isolate(t)
	dir := t.TempDir()
	gw := startRogue(t, filepath.Join(dir, "gw")) // a gateway that answers 404: only its connections count here
	pin := filepath.Join(dir, "pins", "gw.crt")
	os.MkdirAll(filepath.Dir(pin), 0o755)
	b, err := os.ReadFile(gw.certFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pin, b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SCISTREAM_TOKEN", "alice-token")
	connections := func() int64 { return gw.ln.n.Load() }

	// The pin file.
	for _, c := range []struct {
		name      string
		set, undo func()
		want      string
	}{
		{"pin writable by its group", func() { os.Chmod(pin, 0o664) }, func() { os.Chmod(pin, 0o644) },
			"--server_cert " + pin + ": server certificate " + pin + " can be written by other users (mode 0664): chmod go-w " + pin},
		{"pin in a directory all can write", func() { os.Chmod(filepath.Dir(pin), 0o777) }, func() { os.Chmod(filepath.Dir(pin), 0o755) },
			"directory " + filepath.Dir(pin) + " can be written by other users (mode 0777), who could put another file in place of what is in it: chmod go-w " + filepath.Dir(pin)},
	} {
		c.set()
		args := []string{"list", "--s2cs", gw.addr, "--server_cert", pin}
		_, stderr, code := s2ucProc(t, nil, args...)
		c.undo()
		checkExit(t, args, "", stderr, code, exitUsage, c.want)
		if n := connections(); n != 0 {
			t.Fatalf("%s: the gateway got %d connections", c.name, n)
		}
	}
	if os.Geteuid() == 0 {
		os.Chown(pin, 65534, 65534)
		args := []string{"list", "--s2cs", gw.addr, "--server_cert", pin}
		_, stderr, code := s2ucProc(t, nil, args...)
		checkExit(t, args, "", stderr, code, exitUsage, "server certificate "+pin+" is owned by uid 65534")
		os.Chown(pin, 0, 0)
	}

	// A --token_file in a directory others can write: they could put
	// their token in its place, and s2uc would act as them.
	tokDir := filepath.Join(dir, "tok")
	os.Mkdir(tokDir, 0o700)
	tok := filepath.Join(tokDir, "token")
	os.WriteFile(tok, []byte("alice-token\n"), 0o600)
	os.Chmod(tokDir, 0o777)
	args := []string{"list", "--s2cs", gw.addr, "--server_cert", pin, "--token_file", tok}
	_, stderr, code := s2ucProc(t, nil, args...)
	checkExit(t, args, "", stderr, code, exitUsage, "--token_file "+tok+": directory "+tokDir+" can be written by other users (mode 0777)")
	if n := connections(); n != 0 {
		t.Fatalf("a token file in a directory all can write: the gateway got %d connections", n)
	}

	// The configuration file: it names the gateway and its pin.
	home := filepath.Join(dir, "home")
	os.Mkdir(home, 0o700)
	config := filepath.Join(home, "config.yaml")
	if err := os.WriteFile(config, []byte("s2cs: "+gw.addr+"\nserver_cert: "+pin+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SCISTREAM_CONFIG", config)
	if os.Geteuid() == 0 {
		os.Chown(config, 65534, 65534)
		_, stderr, code := s2ucProc(t, nil, "list")
		checkExit(t, []string{"list"}, "", stderr, code, exitUsage, "configuration file "+config+" is owned by uid 65534")
		if !strings.Contains(stderr, "chown root "+config) {
			t.Errorf("the refusal does not say the chown: %q", stderr)
		}
		os.Chown(config, 0, 0)
	} else {
		t.Log("not root: the configuration file of another user's is skipped (needs chown)")
	}
	os.Chmod(home, 0o777)
	_, stderr, code = s2ucProc(t, nil, "list")
	os.Chmod(home, 0o700)
	checkExit(t, []string{"list"}, "", stderr, code, exitUsage, "configuration file "+config+": directory "+home+" can be written by other users (mode 0777)")
	if n := connections(); n != 0 {
		t.Fatalf("the gateway got %d connections from refused configurations", n)
	}

	// A records directory others can write: inbound-request stops before
	// the gateway hears of it.
	t.Setenv("SCISTREAM_HOME", home)
	os.MkdirAll(filepath.Join(home, "streams"), 0o700)
	os.Chmod(filepath.Join(home, "streams"), 0o777)
	args = []string{"inbound-request", "--remote_ip", "127.0.0.1", "--receiver_ports", "80"}
	_, stderr, code = s2ucProc(t, nil, args...)
	checkExit(t, args, "", stderr, code, exitFailed, "records directory "+filepath.Join(home, "streams")+" can be written by other users (mode 0777)")
	if n := connections(); n != 0 {
		t.Fatalf("inbound-request into a records directory all can write reached the gateway (%d connections)", n)
	}
	os.Chmod(filepath.Join(home, "streams"), 0o700)

	// Kept right, the configuration and its pin are used: the gateway is
	// reached, the token sent.
	if _, stderr, _ := s2ucProc(t, nil, "list"); len(gw.tokens()) == 0 || gw.tokens()[0] != "Bearer alice-token" {
		t.Errorf("the files kept right: the gateway got %q (stderr %q), want the token", gw.tokens(), stderr)
	}
}
