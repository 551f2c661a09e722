package main

import (
	"fmt"
	"net"
	"regexp"
	"strings"
	"testing"
)

// TestWANPortAsControl: a gateway's WAN data port given as --s2cs (the
// port an inbound stream listens on, where the peer gateway's legs
// come) asks for a client certificate and ends the handshake with an
// alert; s2uc says what the port is and which one to give, as a usage
// error, instead of "remote error: tls: certificate required".
func TestWANPortAsControl(t *testing.T) {
	isolate(t)
	g := startGateway(t)
	t.Setenv("SCISTREAM_TOKEN", g.token)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	stdout, stderr, code := s2uc(t, "inbound-request", "--s2cs", g.Addr, "--server_cert", g.CertFile,
		"--remote_ip", "127.0.0.1", "--receiver_ports", fmt.Sprint(ln.Addr().(*net.TCPAddr).Port))
	if code != 0 {
		t.Fatalf("inbound-request: exit %d, %s", code, stderr)
	}
	wan := strings.Fields(regexp.MustCompile(`(?m)^listeners: (.+)$`).FindStringSubmatch(stdout)[1])[0]
	for _, args := range [][]string{{"info"}, {"list"}} {
		args = append(args, "--s2cs", wan, "--server_cert", g.CertFile)
		_, stderr, code := s2uc(t, args...)
		checkExit(t, args, "", stderr, code, exitUsage, wan+" asks for a client certificate: it is a gateway's WAN data port, not its control port (")
		if !strings.Contains(stderr, "(give --s2cs the control port, 5000 by default)") {
			t.Errorf("%v: %q does not say which port to give", args, stderr)
		}
	}
}
