package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"scistream/internal/auth"
	"scistream/internal/waitfor"
)

// openPTY opens a pseudo-terminal: its master (what a terminal
// emulator holds) and its slave (what a program's stdin is).
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	fd := int(m.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		m.Close()
		t.Fatalf("unlock the pseudo-terminal: %v", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		m.Close()
		t.Fatalf("pseudo-terminal number: %v", err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		m.Close()
		t.Skipf("open the pseudo-terminal's slave: %v", err)
	}
	return m, s
}

// terminal is what a terminal shows of a program: all it read from
// the master.
type terminal struct {
	mu   sync.Mutex
	seen bytes.Buffer
}

func (tm *terminal) String() string {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	return tm.seen.String()
}

// typeToken runs s2uc hash-token --identity alice with stdin and stderr
// on a pseudo-terminal, as a user at a terminal does, types each of
// lines once its prompt is shown (prompts[i] before lines[i]), and
// returns stdout, what the terminal showed and the exit status.
// A line "\x03" is Ctrl-C, an interrupt: the terminal is the program's
// controlling terminal, as a shell's is. Once it ended, the terminal's
// echo must be on again, as the program found it.
func typeToken(t *testing.T, prompts []string, lines ...string) (string, string, int) {
	t.Helper()
	master, slave := openPTY(t)
	defer master.Close()
	cmd := exec.Command(s2ucBin, "hash-token", "--identity", "alice")
	var stdout bytes.Buffer
	cmd.Stdin, cmd.Stderr, cmd.Stdout = slave, slave, &stdout
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	tm := &terminal{}
	read := make(chan struct{})
	go func() { // until the program exits: the master then reads EIO
		defer close(read)
		buf := make([]byte, 1024)
		for {
			n, err := master.Read(buf)
			tm.mu.Lock()
			tm.seen.Write(buf[:n])
			tm.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	for i, l := range lines {
		if !waitfor.Cond(20*time.Second, func() bool { return strings.Contains(tm.String(), prompts[i]) }) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("no prompt %q on the terminal; it shows %q", prompts[i], tm.String())
		}
		if l != "\x03" {
			l += "\n"
		}
		if _, err := master.Write([]byte(l)); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("hash-token did not end; the terminal shows %q", tm.String())
	}
	<-read
	if tio, err := unix.IoctlGetTermios(int(master.Fd()), unix.TCGETS); err != nil || tio.Lflag&unix.ECHO == 0 {
		t.Errorf("the terminal's echo is left off (%v)", err)
	}
	var ee *exec.ExitError
	code := 0
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return stdout.String(), tm.String(), code
}

// TestHashTokenTerminal: on a terminal hash-token asks for the token on
// stderr, reads it without showing it, and asks again to confirm it;
// two that differ are refused. On a pipe it reads the token as it
// comes, asking nothing. Ctrl-C at the prompt ends it with the
// terminal's echo on again.
func TestHashTokenTerminal(t *testing.T) {
	isolate(t)
	const tok = "s3cret-t0ken-typed-here"
	prompts := []string{"token for alice (not shown): ", "the same token again: "}
	stdout, shown, code := typeToken(t, prompts, tok, tok)
	if code != 0 || stdout != auth.HashToken(tok)+" alice\n" {
		t.Errorf("hash-token on a terminal: exit %d, stdout %q; the terminal shows %q", code, stdout, shown)
	}
	if strings.Contains(shown, tok) || !strings.Contains(shown, prompts[0]) || !strings.Contains(shown, prompts[1]) {
		t.Errorf("the terminal shows %q: want both prompts and never the token", shown)
	}

	stdout, shown, code = typeToken(t, prompts, tok, tok+"x")
	if code != exitUsage || stdout != "" || !strings.Contains(shown, "s2uc: the two tokens typed differ: run s2uc hash-token again") || strings.Contains(shown, tok) {
		t.Errorf("two tokens that differ: exit %d, stdout %q; the terminal shows %q", code, stdout, shown)
	}

	stdout, shown, code = typeToken(t, prompts, "\x03")
	if code != exitFailed || stdout != "" || !strings.Contains(shown, "s2uc: interrupted: no token read") {
		t.Errorf("Ctrl-C at the prompt: exit %d, stdout %q; the terminal shows %q", code, stdout, shown)
	}

	cmd := exec.Command(s2ucBin, "hash-token", "--identity", "alice")
	cmd.Stdin = strings.NewReader(tok + "\n")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil || out.String() != auth.HashToken(tok)+" alice\n" || errOut.Len() != 0 {
		t.Errorf("hash-token < pipe: %v, stdout %q, stderr %q", err, out.String(), errOut.String())
	}
}
