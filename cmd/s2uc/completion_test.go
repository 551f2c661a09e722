package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"scistream/internal/client"
	"scistream/internal/cliflag/cliflagtest"
	"scistream/internal/waitfor"
)

// TestCompletionUIDs: the completion script of the real s2uc completes
// the UID of the commands about one stream (status, release, update,
// watch, outbound-request) from its local records: those not released,
// and not one others could have written; not for a later argument or a
// flag's value. Through COMP_WORDS as bash splits a line, and through an
// interactive bash on a pseudo-terminal, Tab pressed.
func TestCompletionUIDs(t *testing.T) {
	isolate(t)
	home := os.Getenv("SCISTREAM_HOME")
	const (
		live    = "0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b6c"
		live2   = "0f9d1111-4b1d-4c2e-9a7f-1d2e3f4a5b6c"
		gone    = "7aaa2222-4b1d-4c2e-9a7f-1d2e3f4a5b6c"
		foreign = "0f8e4444-4b1d-4c2e-9a7f-1d2e3f4a5b6c" // a record others could have written
	)
	ss := client.Sessions{Dir: filepath.Join(home, "streams")}
	e := &client.Endpoint{S2CS: "127.0.0.1:1", Listeners: []string{"127.0.0.1:5100"}}
	for _, s := range []*client.Session{
		{UID: live, WAN: "tls", Secret: "s", Inbound: e},
		{UID: live2, WAN: "tls", Secret: "s", Inbound: e, Outbound: e},
		{UID: gone, WAN: "tls", Released: &client.Released{At: time.Now(), By: "released by alice"}},
		{UID: foreign, WAN: "tls", Secret: "s", Inbound: e},
	} {
		if err := ss.Save(s); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(ss.Dir, foreign+".json"), 0o666); err != nil {
		t.Fatal(err)
	}
	env := []string{"SCISTREAM_HOME=" + home}
	if out, stderr, code := s2ucProc(t, env, "completion", "uids"); code != 0 || out != live+"\n"+live2+"\n" {
		t.Errorf("completion uids: exit %d, stdout %q, stderr %q; want %s and %s", code, out, stderr, live, live2)
	}

	script, stderr, code := s2ucProc(t, env, "completion", "bash")
	if code != 0 {
		t.Fatalf("completion bash: exit %d, %s", code, stderr)
	}
	// The program completing is the first word, as typed: the binary.
	for _, c := range []struct {
		words []string // after the program's name, as bash splits them
		want  string
	}{
		{[]string{"status", ""}, live + " " + live2},
		{[]string{"status", "0f8"}, live},
		{[]string{"release", "0f9"}, live2},
		{[]string{"release", "--output", "json", "0f"}, live + " " + live2},
		{[]string{"update", "--lease", "2h", "0f9"}, live2},
		{[]string{"watch", "0f8"}, live},
		{[]string{"outbound-request", "--s2cs", "10.0.0.5", ":", "5000", "0f8"}, live},
		{[]string{"outbound_request", "0f8"}, live},
		{[]string{"status", "7a"}, ""},                  // released
		{[]string{"status", live, "0f"}, ""},            // a second argument
		{[]string{"outbound-request", live, "0f"}, ""},  // its listeners
		{[]string{"status", "--server_cert", "0f"}, ""}, // a file
		{[]string{"list", "0f"}, ""},                    // takes no UID
	} {
		words := append([]string{s2ucBin}, c.words...)
		if got := strings.Join(cliflagtest.Complete(t, script, "_s2uc", words...), " "); got != c.want {
			t.Errorf("%q completes to %q, want %q", c.words, got, c.want)
		}
	}

	// An interactive bash, as a user has it: s2uc on the PATH, the
	// script sourced, Tab pressed after a UID's first characters.
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	master, slave := openPTY(t)
	defer master.Close()
	sh := exec.Command(bash, "--norc", "--noprofile", "-i")
	sh.Env = append(os.Environ(), "SCISTREAM_HOME="+home, "PATH="+filepath.Dir(s2ucBin)+":"+os.Getenv("PATH"), "PS1=$ ", "TERM=dumb", "INPUTRC=/dev/null", "HISTFILE=/dev/null")
	sh.Stdin, sh.Stdout, sh.Stderr = slave, slave, slave
	sh.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	var mu sync.Mutex
	var screen bytes.Buffer
	read := make(chan struct{})
	go func() {
		defer close(read)
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			mu.Lock()
			screen.Write(buf[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	shown := func() string { mu.Lock(); defer mu.Unlock(); return screen.String() }
	defer func() {
		sh.Process.Kill() // the shell this test started, by its PID
		sh.Wait()
		master.Close()
		<-read
	}()
	master.Write([]byte("source <(s2uc completion bash) && echo sourced-ok\n"))
	if !waitfor.Cond(20*time.Second, func() bool { return strings.Count(shown(), "sourced-ok") >= 2 }) { // the echo of the line, then its output
		t.Fatalf("bash did not load the script; the terminal shows %q", shown())
	}
	master.Write([]byte("s2uc status --s2cs 127.0.0.1:1 0f8\t"))
	if !waitfor.Cond(20*time.Second, func() bool { return strings.Contains(shown(), "0f8"+live[3:]) }) {
		t.Errorf("Tab after s2uc status --s2cs 127.0.0.1:1 0f8 did not complete %s; the terminal shows %q", live, shown())
	}
}
