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
