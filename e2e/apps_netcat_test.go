package e2e

import (
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"scistream/internal/localgw"
)

// TestNetcatBothEnds is seed 001 sec. 3.5's smoke test with netcat on
// both ends: `nc -l` as the consumer, `echo 123 | nc -N PROXY_P` as the
// producer (TestSeedWorkflow does the same against a Go listener).
func TestNetcatBothEnds(t *testing.T) {
	nc := needCommand(t, "nc", "netcat-openbsd")
	p := newPair(t, pairOpts{})
	ip := localgw.RandomLoopback()
	port := freePort(t, ip)
	cons := startProc(t, "nc -l", nil, nc, "-l", ip, strconv.Itoa(port))
	waitListening(t, ip, port, 10*time.Second, cons)
	so := p.wire("alice", ip, strconv.Itoa(port), 1)
	host, pport, _ := net.SplitHostPort(so.Listeners[0])
	if out, err := exec.Command("sh", "-c", "echo 123 | "+nc+" -N "+host+" "+pport).CombinedOutput(); err != nil {
		t.Fatalf("echo 123 | nc -N %s: %v: %s", so.Listeners[0], err, out)
	}
	select {
	case <-cons.done:
	case <-time.After(10 * time.Second):
		t.Fatal("nc -l did not see the end of the connection within 10 s")
	}
	cons.mu.Lock()
	defer cons.mu.Unlock()
	if len(cons.raw) != 1 || string(cons.raw[0]) != "123" {
		t.Fatalf("nc -l printed %q, want the one line \"123\"", cons.raw)
	}
}
