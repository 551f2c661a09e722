package main

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"scistream/internal/api"
	"scistream/internal/auth"
	"scistream/internal/localgw"
	"scistream/internal/waitfor"
)

// TestReloadOnSIGHUP runs the real s2cs binary and changes its tokens and
// roles files under it, as an operator does: a reader added to the roles
// file and a token added to the tokens file work after SIGHUP, without
// a restart and without touching a stream that runs; a roles file that
// does not load is refused whole, the old roles staying in force; and a
// plain user sees its own streams in GET /v1/status, with no roles file
// at all, while the metrics stay the readers'.
func TestReloadOnSIGHUP(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "s2cs")
	if out, err := exec.Command("go", "build", "-o", bin, "scistream/cmd/s2cs").CombinedOutput(); err != nil {
		t.Fatalf("go build s2cs: %v\n%s", err, out)
	}
	tokens := filepath.Join(dir, "tokens")
	writeSecret := func(path, text string) {
		t.Helper()
		if err := os.WriteFile(path+".new", []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".new", path); err != nil { // as an editor saves it
			t.Fatal(err)
		}
	}
	line := func(tok, id string) string { return auth.HashToken(tok) + " " + id + "\n" }
	writeSecret(tokens, line("alice-token", "alice")+line("mon-token", "mon")+line("carol-token", "carol"))
	roles := filepath.Join(dir, "roles")
	writeSecret(roles, "user any\n")

	cmd := exec.Command(bin, "--listener_ip", localgw.RandomLoopback(), "--port", "0", "--port_range", "5100-5103",
		"--state_dir", filepath.Join(dir, "state"), "--tokens", tokens, "--roles", roles,
		"--allow_targets", "127.0.0.0/8", "--log_format", "json")
	// It dies with the test binary, also when a timeout kills that.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}()
	addrc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			// Under --log_format json stdout's lines are JSON records
			// whose message is the text line's, without "s2cs: ".
			var rec struct{ Msg string }
			if json.Unmarshal(sc.Bytes(), &rec) == nil {
				if a, ok := strings.CutPrefix(rec.Msg, "control API on https://"); ok {
					a, _, _ = strings.Cut(a, " ")
					addrc <- a
					break
				}
			}
		}
		io.Copy(io.Discard, stdout)
	}()
	var addr string
	select {
	case addr = <-addrc:
	case <-time.After(30 * time.Second):
		t.Fatalf("s2cs never said where it serves; stderr:\n%s", logs)
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	defer hc.CloseIdleConnections()
	call := func(method, path, token, body string) (int, []byte) {
		t.Helper()
		req, err := http.NewRequest(method, "https://"+addr+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	waitfor.Must(t, 15*time.Second, "the gateway ready", func() bool {
		code, _ := call("GET", "/v1/info", "alice-token", "")
		return code == http.StatusOK
	})
	status := func(token string) api.GatewayStatus {
		t.Helper()
		code, b := call("GET", "/v1/status", token, "")
		var st api.GatewayStatus
		if code != http.StatusOK || json.Unmarshal(b, &st) != nil {
			t.Fatalf("GET /v1/status as %s: %d %s", token, code, b)
		}
		return st
	}
	hup := func(want string) {
		t.Helper()
		n := strings.Count(logs.String(), want)
		if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		waitfor.Must(t, 15*time.Second, "the log to say "+want, func() bool { return strings.Count(logs.String(), want) > n })
	}

	// alice's stream, running through everything below.
	app, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	port := app.Addr().(*net.TCPAddr).Port
	code, b := call("POST", "/v1/streams/inbound", "alice-token", fmt.Sprintf(`{"remote_ip":"127.0.0.1","receiver_ports":[%d],"num_conn":1}`, port))
	var created api.Stream
	if code != http.StatusCreated || json.Unmarshal(b, &created) != nil {
		t.Fatalf("create: %d %s", code, b)
	}
	// No reader yet: a plain user sees its own streams, the metrics
	// nobody.
	if st := status("alice-token"); st.Scope != api.ScopeOwn || len(st.Streams) != 1 || st.Streams[0].UID != created.UID {
		t.Fatalf("alice's status: scope %q, %d streams; want her own one", st.Scope, len(st.Streams))
	}
	if st := status("carol-token"); st.Scope != api.ScopeOwn || len(st.Streams) != 0 {
		t.Fatalf("carol's status: scope %q, %d streams; want none of alice's", st.Scope, len(st.Streams))
	}
	if code, _ := call("GET", "/metrics", "mon-token", ""); code != http.StatusForbidden {
		t.Fatalf("metrics for mon before the reload: %d, want 403", code)
	}

	// A reader and a new token, on SIGHUP.
	writeSecret(roles, "user any\nreader identity mon\n")
	writeSecret(tokens, line("alice-token", "alice")+line("mon-token", "mon")+line("carol-token", "carol")+line("bob-token", "bob"))
	hup(`"msg":"reloaded:`)
	if code, _ := call("GET", "/metrics", "mon-token", ""); code != http.StatusOK {
		t.Fatalf("metrics for mon after the reload: %d, want 200", code)
	}
	if st := status("mon-token"); st.Scope != api.ScopeAll || len(st.Streams) != 1 {
		t.Fatalf("mon's status after the reload: scope %q, %d streams; want all, alice's one", st.Scope, len(st.Streams))
	}
	if code, b := call("GET", "/v1/streams", "bob-token", ""); code != http.StatusOK {
		t.Fatalf("bob's new token after the reload: %d %s", code, b)
	}
	var after api.Stream
	if code, b := call("GET", "/v1/streams/"+created.UID, "alice-token", ""); code != http.StatusOK || json.Unmarshal(b, &after) != nil || after.State != api.StateListening || !after.Created.Equal(created.Created) {
		t.Fatalf("alice's stream after the reload: %d %s", code, b)
	}

	// A roles file that does not load: refused whole, the old in force.
	writeSecret(roles, "user any\nreader identty mon\n")
	hup(`"msg":"reload refused`)
	if code, _ := call("GET", "/metrics", "mon-token", ""); code != http.StatusOK {
		t.Fatalf("metrics for mon after a refused reload: %d, want 200 (the old roles)", code)
	}
	if code, _ := call("GET", "/v1/streams", "bob-token", ""); code != http.StatusOK {
		t.Fatalf("bob after a refused reload: %d, want 200 (the old tokens)", code)
	}
	if !strings.Contains(logs.String(), "--roles") {
		t.Errorf("the refusal does not name the file's flag:\n%s", logs)
	}
}

// TestReloadRefusesFilesOthersCanWrite (issue 35, finding 3): a local
// user who could write the tokens or roles file appended a token line
// and "operator identity mallory", and the next SIGHUP put them in force.
// Now a reload finds the file (or its directory) writable by others,
// refuses it, keeps the old tokens and roles, and logs which file and
// the command that fixes it. Once the operator runs that command, the
// next SIGHUP takes the file as it is: it was the mode that was refused.
func TestReloadRefusesFilesOthersCanWrite(t *testing.T) {
	bin := buildS2CS(t)
	dir := t.TempDir()
	etc := filepath.Join(dir, "etc")
	if err := os.Mkdir(etc, 0o755); err != nil {
		t.Fatal(err)
	}
	tokens, roles := filepath.Join(etc, "tokens"), filepath.Join(etc, "roles")
	line := func(tok, id string) string { return auth.HashToken(tok) + " " + id + "\n" }
	if err := os.WriteFile(tokens, []byte(line("alice-token", "alice")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(roles, []byte("user any\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd, logs, addr := startBinary(t, bin, "--listener_ip", localgw.RandomLoopback(), "--port", "0", "--port_range", "5100-5103",
		"--state_dir", filepath.Join(dir, "state"), "--tokens", tokens, "--roles", roles, "--log_format", "json")
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	defer hc.CloseIdleConnections()
	code := func(path, token string) int {
		t.Helper()
		req, err := http.NewRequest("GET", "https://"+addr+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	waitfor.Must(t, 15*time.Second, "the gateway ready", func() bool { return code("/v1/info", "alice-token") == http.StatusOK })
	hup := func(msg string, want ...string) {
		t.Helper()
		n := strings.Count(logs.String(), `"msg":"`+msg)
		if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		waitfor.Must(t, 15*time.Second, "the log to say "+msg, func() bool { return strings.Count(logs.String(), `"msg":"`+msg) > n })
		if len(want) > 0 && !logHas(logs.String(), msg, want...) {
			t.Errorf("no %q record whose err holds %q:\n%s", msg, want, logs)
		}
	}
	appendTo := func(path, text string) {
		t.Helper()
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteString(text); err != nil {
			t.Fatal(err)
		}
	}
	// mallory is no one here, and no operator.
	if c := code("/v1/streams", "mallory-token"); c != http.StatusUnauthorized {
		t.Fatalf("mallory before: %d, want 401", c)
	}

	// The tokens file made writable by all, and mallory's line in it.
	os.Chmod(tokens, 0o666)
	appendTo(tokens, line("mallory-token", "mallory"))
	hup("reload refused", "--tokens: tokens file "+tokens+" can be written by other users (mode 0666): chmod go-w "+tokens)
	if c := code("/v1/streams", "mallory-token"); c != http.StatusUnauthorized {
		t.Errorf("mallory's token after a refused reload: %d, want 401", c)
	}
	if c := code("/v1/streams", "alice-token"); c != http.StatusOK {
		t.Errorf("alice's token after a refused reload: %d, want 200 (the old tokens)", c)
	}
	// Fixed as the log says: the file is taken as it is.
	os.Chmod(tokens, 0o644)
	hup("reloaded:")
	if c := code("/v1/streams", "mallory-token"); c != http.StatusOK {
		t.Fatalf("the tokens file with its mode fixed: mallory's line %d, want 200 (the refusal was the mode's)", c)
	}

	// The roles file writable by its group, "operator identity mallory"
	// in it: mallory lists no other owner's streams.
	os.Chmod(roles, 0o664)
	appendTo(roles, "operator identity mallory\n")
	hup("reload refused", "--roles: roles file "+roles+" can be written by other users (mode 0664): chmod go-w "+roles)
	if c := code("/v1/streams?all_owners=true", "mallory-token"); c != http.StatusForbidden {
		t.Errorf("mallory lists every owner's streams after a refused reload: %d, want 403", c)
	}
	os.Chmod(roles, 0o644)

	// The directory of both made writable by all: either file could be
	// replaced.
	os.Chmod(etc, 0o777)
	hup("reload refused", "directory "+etc+" can be written by other users (mode 0777)", "chmod go-w "+etc)
	if c := code("/v1/streams?all_owners=true", "mallory-token"); c != http.StatusForbidden {
		t.Errorf("mallory an operator after a refused reload: %d, want 403", c)
	}
	os.Chmod(etc, 0o755)

	// The tokens file given to another user.
	if os.Geteuid() == 0 {
		os.Chown(tokens, 65534, 65534)
		hup("reload refused", "tokens file "+tokens+" is owned by uid 65534", "chown root "+tokens)
		os.Chown(tokens, 0, 0)
	}
	// All fixed: in force, mallory's operator line with it.
	hup("reloaded:")
	if c := code("/v1/streams?all_owners=true", "mallory-token"); c != http.StatusOK {
		t.Errorf("the files fixed, mallory as operator: %d, want 200", c)
	}
	if c := code("/v1/streams", "alice-token"); c != http.StatusOK {
		t.Errorf("alice at the end: %d", c)
	}
}
