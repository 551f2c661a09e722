package tcpcc_test

import (
	"net"
	"strings"
	"syscall"
	"testing"

	"scistream/internal/tcpcc"
)

// TestResolve: auto picks BBR where it can be set, host sets nothing,
// a name the kernel offers is taken, and a bad or unknown name is
// refused with the fix.
func TestResolve(t *testing.T) {
	if err := tcpcc.Probe("bbr"); err != nil {
		t.Skipf("bbr cannot be set on this machine: %v", err)
	}
	c, err := tcpcc.Resolve(tcpcc.Auto)
	if err != nil || c.Name != "bbr" || c.Effective() != "bbr" {
		t.Fatalf("auto: %+v, %v; want bbr", c, err)
	}
	c, err = tcpcc.Resolve(tcpcc.Host)
	if err != nil || c.Name != "" || c.Effective() != c.HostDefault || c.HostDefault == "" {
		t.Fatalf("host: %+v, %v; want nothing set, the host's default in effect", c, err)
	}
	if c, err = tcpcc.Resolve("reno"); err != nil || c.Name != "reno" {
		t.Fatalf("reno: %+v, %v", c, err)
	}
	for name, mention := range map[string]string{
		"nosuchcc":              "modprobe tcp_nosuchcc",
		"BBR; rm":               "not a name",
		"a-name-far-too-long-x": "1 to 15 characters",
	} {
		if _, err := tcpcc.Resolve(name); err == nil || !strings.Contains(err.Error(), mention) {
			t.Errorf("Resolve(%q): %v; want an error naming %q", name, err, mention)
		}
	}
}

// TestSetBothEnds: a dialer's Control and an accepted connection each
// get the name set; a socket left alone keeps the host's default.
func TestSetBothEnds(t *testing.T) {
	if err := tcpcc.Probe("reno"); err != nil {
		t.Skipf("reno cannot be set on this machine: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			acc <- nil
			return
		}
		acc <- c
	}()
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error { return tcpcc.Set(rc, "reno") }}
	dc, err := d.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	ac := <-acc
	if ac == nil {
		t.Fatal("accept failed")
	}
	defer ac.Close()
	of := func(c net.Conn) string {
		rc, err := c.(*net.TCPConn).SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		name, err := tcpcc.Of(rc)
		if err != nil {
			t.Fatal(err)
		}
		return name
	}
	host, _ := tcpcc.Resolve(tcpcc.Host)
	if got := of(dc); got != "reno" {
		t.Errorf("the dialed socket runs %q, want reno", got)
	}
	if got := of(ac); got != host.HostDefault {
		t.Errorf("the accepted socket, left alone, runs %q; want the host's %q", got, host.HostDefault)
	}
	rc, _ := ac.(*net.TCPConn).SyscallConn()
	if err := tcpcc.Set(rc, "reno"); err != nil || of(ac) != "reno" {
		t.Errorf("set on the accepted socket: %v, runs %q", err, of(ac))
	}
	if err := tcpcc.Set(rc, ""); err != nil || of(ac) != "reno" {
		t.Errorf("Set with no name changed something: %v, %q", err, of(ac))
	}
}
