package handoff

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// pair returns the two ends of a Unix stream socketpair, as the old
// s2cs makes for its successor.
func pair(t testing.TB) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	var cs [2]*net.UnixConn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "pair")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		cs[i] = c.(*net.UnixConn)
		t.Cleanup(func() { cs[i].Close() })
	}
	return cs[0], cs[1]
}

// openFiles counts this process's open descriptors.
func openFiles(t testing.TB) int {
	t.Helper()
	d, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(d)
}

// TestHandOverSockets: a listener and a live connection pass with their
// records (one of 8 MiB); the receiver accepts on the listener at its
// address, and the connection carries on both ways, as the new process
// takes them over.
func TestHandOverSockets(t *testing.T) {
	a, b := pair(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	app, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	gw, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	lf, _ := ln.(*net.TCPListener).File()
	cf, _ := gw.(*net.TCPConn).File()
	rec := make([]byte, 8<<20)
	rand.Read(rec)
	sent := []Item{
		{Kind: KindListener, Name: ln.Addr().String(), File: lf},
		{Kind: KindConn, Name: "stream-1/0", Record: rec, File: cf},
		{Kind: KindState, Name: "streams", Record: []byte("{}")},
	}
	errc := make(chan error, 1)
	go func() { errc <- Send(a, sent) }()
	got, err := Receive(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	lf.Close()
	cf.Close()
	if len(got) != 3 {
		t.Fatalf("%d items, want 3", len(got))
	}
	for i, it := range got {
		if it.Kind != sent[i].Kind || it.Name != sent[i].Name || !bytes.Equal(it.Record, sent[i].Record) || (it.File == nil) != (sent[i].File == nil) {
			t.Fatalf("item %d: %c %q, %d bytes, file %v", i, it.Kind, it.Name, len(it.Record), it.File != nil)
		}
	}
	// The old process lets go of its sockets: the new one's carry on.
	ln.Close()
	gw.Close()
	nl, err := net.FileListener(got[0].File)
	got[0].File.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()
	nc, err := net.FileConn(got[1].File)
	got[1].File.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	app.Write([]byte("to the new process"))
	buf := make([]byte, 64)
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := nc.Read(buf); err != nil || string(buf[:n]) != "to the new process" {
		t.Fatalf("the handed-over connection read %q, %v", buf[:n], err)
	}
	nc.Write([]byte("back"))
	app.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := app.Read(buf); err != nil || string(buf[:n]) != "back" {
		t.Fatalf("the application read %q, %v", buf[:n], err)
	}
	c2, err := net.Dial("tcp", nl.Addr().String())
	if err != nil {
		t.Fatalf("dial the handed-over listener: %v", err)
	}
	c2.Close()
	nl.(*net.TCPListener).SetDeadline(time.Now().Add(10 * time.Second))
	if ac, err := nl.Accept(); err != nil {
		t.Fatalf("accept on the handed-over listener: %v", err)
	} else {
		ac.Close()
	}
}

// TestReceiveGarbage: what is not a hand-over of this version is refused
// with a reason, and every file that came with it is closed.
func TestReceiveGarbage(t *testing.T) {
	before := openFiles(t)
	for _, c := range []struct {
		name string
		b    []byte
		file bool
		want string
	}{
		{"another version", append([]byte("S2H\x02"), make([]byte, 8)...), false, "version 2"},
		{"not a hand-over", []byte("GET / HTTP/1.1\r\n\r\n"), true, "not a hand-over"},
		{"unknown kind", append([]byte("S2H\x01Z\x00"), make([]byte, 6)...), false, "unknown kind"},
		{"a file it does not say", append([]byte("S2H\x01L\x00"), make([]byte, 6)...), true, "files"},
		{"a record that does not come", []byte("S2H\x01S\x00\x00\x00\x10\x00\x00\x00"), false, "record"},
		{"ends early", []byte("S2H"), false, "header"},
	} {
		a, b := pair(t)
		var oob []byte
		if c.file {
			f, err := os.Open("/dev/null")
			if err != nil {
				t.Fatal(err)
			}
			oob = syscall.UnixRights(int(f.Fd()))
			defer f.Close()
		}
		if _, _, err := a.WriteMsgUnix(c.b, oob, nil); err != nil {
			t.Fatal(err)
		}
		a.CloseWrite()
		items, err := Receive(b)
		if err == nil || !strings.Contains(err.Error(), c.want) || items != nil {
			t.Errorf("%s: %d items, %v; want an error saying %q", c.name, len(items), err, c.want)
		}
		a.Close()
		b.Close()
	}
	if after := openFiles(t); after > before+6 { // the /dev/null of each case, closed by its defer
		t.Fatalf("%d descriptors open after the refusals, %d before", after, before)
	}
}

// TestAnswer: the successor's answer comes back as nil or its reason
// (made printable); silence is ErrNoAnswer.
func TestAnswer(t *testing.T) {
	a, b := pair(t)
	go Answer(b, nil)
	if err := ReadAnswer(a); err != nil {
		t.Fatalf("ok read as %v", err)
	}
	go Answer(b, errors.New("the store \x1b[31mis locked"))
	if err := ReadAnswer(a); err == nil || !strings.Contains(err.Error(), "refused the hand-over: the store ?[31mis locked") {
		t.Fatalf("a refusal read as %v", err)
	}
	b.Close()
	if err := ReadAnswer(a); !errors.Is(err, ErrNoAnswer) {
		t.Fatalf("silence read as %v", err)
	}
}

// FuzzReceive: any bytes on the socket give items or an error, never a
// panic or a hang.
func FuzzReceive(f *testing.F) {
	a, b := pair(f)
	go Send(a, []Item{{Kind: KindState, Name: "s", Record: []byte("r")}})
	var buf bytes.Buffer
	b.SetReadDeadline(time.Now().Add(10 * time.Second))
	io.CopyN(&buf, b, int64(headerLen*2+2))
	f.Add(buf.Bytes())
	f.Fuzz(func(t *testing.T, in []byte) {
		a, b := pair(t)
		go func() {
			a.Write(in)
			a.CloseWrite()
		}()
		b.SetReadDeadline(time.Now().Add(10 * time.Second))
		items, err := Receive(b)
		if err == nil && len(items) > len(in)/headerLen {
			t.Fatalf("%d items from %d bytes", len(items), len(in))
		}
	})
}

// TestSockets: a listener on a fixed port is kept and handed over; the
// successor's Listen on the same address takes it (a connection queued
// meanwhile is accepted there), one on port 0 is neither kept nor
// taken, and what nothing took is closed.
func TestSockets(t *testing.T) {
	var old Sockets
	probe, err := net.Listen("tcp", "127.0.0.1:0") // a free port, to ask for again
	if err != nil {
		t.Fatal(err)
	}
	addr := probe.Addr().String()
	probe.Close()
	ln, err := old.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	any, err := old.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer any.Close()
	pc, err := old.ListenPacket("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	items := old.Items()
	if len(items) != 2 {
		t.Fatalf("%d sockets to hand over, want the 2 on a fixed port: %+v", len(items), items)
	}
	// The old process stops; a connection comes before the new one
	// accepts.
	ln.Close()
	pc.Close()
	queued, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("a connect while the socket was between processes: %v", err)
	}
	defer queued.Close()
	var succ Sockets
	rest, err := succ.Inherit(append(items, Item{Kind: KindConn, Name: "c"}))
	if err != nil || len(rest) != 1 || rest[0].Kind != KindConn {
		t.Fatalf("inherit: %v, rest %+v", err, rest)
	}
	nl, err := succ.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()
	nl.(*net.TCPListener).SetDeadline(time.Now().Add(10 * time.Second))
	c, err := nl.Accept()
	if err != nil {
		t.Fatalf("the queued connection on the listener taken over: %v", err)
	}
	c.Close()
	if unused := succ.CloseUnused(); len(unused) != 1 || !strings.HasPrefix(unused[0], "udp ") {
		t.Fatalf("unused %v, want the udp socket", unused)
	}
	// A listener handed over under a name that is not one.
	f, _ := nl.(*net.TCPListener).File()
	if _, err := succ.Inherit([]Item{{Kind: KindListener, Name: "tcp 127.0.0.1:0", File: f}}); err == nil {
		t.Fatal("a listener on port 0 taken as handed over")
	}
	var none *Sockets
	if l, err := none.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	} else {
		l.Close()
	}
}
