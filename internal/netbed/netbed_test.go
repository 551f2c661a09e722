package netbed

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"scistream/internal/bench"
)

// delayLineBinary builds s2bench, whose hidden `testbed delayline`
// subcommand is the delay line: built without the race detector even
// when the test has it, so that it forwards at the rate a real one does.
func delayLineBinary(t testing.TB) []string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "s2bench")
	if out, err := exec.Command("go", "build", "-o", bin, "scistream/cmd/s2bench").CombinedOutput(); err != nil {
		t.Fatalf("go build s2bench: %v\n%s", err, out)
	}
	return []string{bin, "testbed", "delayline"}
}

// serializeTestbeds holds an exclusive lock, across test processes,
// until the test ends: testbed tests in several packages would otherwise
// run at once (go test runs packages in parallel) and load the machine
// enough to push each other's measured RTT and rate off their bounds.
func serializeTestbeds(t testing.TB) {
	t.Helper()
	f, err := os.OpenFile("/run/scistream-testbed-tests.lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() }) // closing releases the lock
}

func randomName(testing.TB) string {
	b := make([]byte, 3)
	rand.Read(b)
	return "ci" + hex.EncodeToString(b)
}

// TestTestbed builds a small testbed (10 ms RTT, 100 Mbit/s), checks the
// RTT and rate it measures, that the two facilities cannot reach each
// other except over the direct path, streams verified data over the
// direct path, and checks that Down leaves nothing behind.
func TestTestbed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := Available(ctx); err != nil {
		t.Skipf("network namespaces cannot be built here: %v", err)
	}
	serializeTestbeds(t)
	dl := delayLineBinary(t)
	root := t.TempDir()
	name := randomName(t)
	p := Preset{Name: "ci", RTT: 10 * time.Millisecond, RateBps: 100_000_000}
	tb, err := Up(ctx, Config{Name: name, Preset: p, DelayLine: dl, StateRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	downed := false
	t.Cleanup(func() {
		if !downed {
			if err := tb.Down(); err != nil {
				t.Errorf("down: %v", err)
			}
		}
	})
	if _, err := Load(root, name); err != nil {
		t.Fatalf("state of a testbed that is up: %v", err)
	}
	if _, err := Up(ctx, Config{Name: name, Preset: p, DelayLine: dl, StateRoot: root}); err == nil || !strings.Contains(err.Error(), "already up") {
		t.Errorf("second Up of the same name: %v; want an already-up error", err)
	}

	// The delay line's input queue is long enough not to drop when the
	// delay line is briefly descheduled (see tunQueueLen).
	for _, r := range []string{WANRouter, DirectRouter} {
		out, err := exec.CommandContext(ctx, "ip", "-n", tb.NS(r), "link", "show", tunDev).CombinedOutput()
		if want := fmt.Sprintf("qlen %d", tunQueueLen); err != nil || !strings.Contains(string(out), want) {
			t.Errorf("%s %s: %v %s; want %s", r, tunDev, err, out, want)
		}
	}

	m, err := tb.MeasureChecked(ctx, 3)
	if m == nil {
		t.Fatal(err)
	}
	t.Logf("measured: %s", m)
	if err != nil {
		t.Fatal(err)
	}
	if m.WANRTT < 8*time.Millisecond {
		t.Errorf("WAN RTT %s: the gateways' link carries almost all of the 10 ms", m.WANRTT)
	}

	// No direct connectivity: facility A reaches neither the consumer's
	// LAN nor its gateway's LAN; the gateways do not forward.
	for _, c := range []struct{ src, dst string }{
		{Producer, tb.ConsumerLAN()}, {Producer, tb.ConsumerGWLAN()}, {ProducerGW, tb.ConsumerLAN()}, {Consumer, tb.ProducerLAN()},
	} {
		err := Do(tb.NS(c.src), func() error {
			d := net.Dialer{Timeout: 2 * time.Second}
			conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(c.dst, "9"))
			if err == nil {
				conn.Close()
			}
			return err
		})
		if err == nil || !errors.Is(err, syscall.ENETUNREACH) {
			t.Errorf("%s -> %s: %v; want network unreachable", c.src, c.dst, err)
		}
	}

	// A verified stream over the direct path, producer in its namespace.
	var ln *net.TCPListener
	if err := Do(tb.NS(Consumer), func() (err error) {
		ln, err = net.ListenTCP("tcp", &net.TCPAddr{IP: net.ParseIP(tb.ConsumerDirect())})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	spec := bench.Spec{Size: 64 << 10, Bytes: 4 << 20, Seed: 7, Run: 1}
	start := time.Now()
	// The producer runs on a goroutine of its own: it dials from the
	// producer's namespace through RunOptions.Dial.
	dial := func(ctx context.Context, addr string) (conn *net.TCPConn, err error) {
		err = Do(tb.NS(Producer), func() error {
			d := net.Dialer{Timeout: 10 * time.Second}
			c, err := d.DialContext(ctx, "tcp", addr)
			if err == nil {
				conn = c.(*net.TCPConn)
			}
			return err
		})
		return conn, err
	}
	res, err := bench.Run(ctx, ln, ln.Addr().String(), bench.Hello{Spec: spec, Group: 1}, bench.RunOptions{Timeout: time.Minute, Idle: 10 * time.Second, Dial: dial})
	if err != nil {
		t.Fatal(err)
	}
	if s := res.Summary; s.Bytes != spec.Bytes || s.Messages != spec.Messages() {
		t.Errorf("verified %d messages, %d bytes; want %d, %d", s.Messages, s.Bytes, spec.Messages(), spec.Bytes)
	}
	if host, _, _ := net.SplitHostPort(res.Pairs[0].Recv.Remote); host != tb.ProducerDirect() {
		t.Errorf("consumer saw %s, want the producer's direct address %s", res.Pairs[0].Recv.Remote, tb.ProducerDirect())
	}
	// 4 MiB at 100 Mbit/s takes at least 0.33 s: the rate limit holds.
	if el := time.Since(start); el < 300*time.Millisecond {
		t.Errorf("4 MiB took %s over a 100 Mbit/s path", el)
	}
	t.Logf("stream: %.1f MB/s", res.Summary.GoodputBps/1e6)

	pids := []int{}
	for _, d := range tb.DelayLines {
		pids = append(pids, d.PID)
	}
	downed = true
	if err := tb.Down(); err != nil {
		t.Fatalf("down: %v", err)
	}
	if left := leftovers(name); len(left) > 0 {
		t.Errorf("left after down: %v", left)
	}
	for _, pid := range pids {
		if !gone(pid) {
			t.Errorf("delay line pid %d still running after down", pid)
		}
	}
	if _, err := os.Stat(filepath.Join(root, name+".json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state file after down: %v", err)
	}
}

func TestParseRate(t *testing.T) {
	for in, want := range map[string]int64{"500mbit": 500e6, "1gbit": 1e9, "100M": 100e6, "2.5G": 2.5e9, "64kbit": 64e3, "1000": 1000} {
		if got, err := ParseRate(in); err != nil || got != want {
			t.Errorf("ParseRate(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "fast", "-5m", "0", "1e30g", "NaN"} {
		if _, err := ParseRate(in); err == nil {
			t.Errorf("ParseRate(%q) accepted", in)
		}
	}
}

func TestChooseCC(t *testing.T) {
	cases := []struct {
		want  string
		avail []string
		got   string
		fails bool
	}{
		{"", []string{"reno", "bbr", "cubic"}, "cubic", false}, // the hosts' default: facility hosts run cubic
		{"", []string{"reno", "bbr"}, "", true},
		{"cubic", []string{"reno", "bbr", "cubic"}, "cubic", false},
		{"bbr", []string{"reno", "cubic"}, "", true},
	}
	for _, c := range cases {
		got, err := chooseCC(c.want, c.avail)
		if (err != nil) != c.fails || got != c.got {
			t.Errorf("chooseCC(%q, %v) = %q, %v", c.want, c.avail, got, err)
		}
	}
}

func TestPresets(t *testing.T) {
	want := map[string]float64{"lan": 0.440, "metro": 5.490, "shortwan": 24.344, "wan": 58.161, "longwan": 143.691}
	for n, rtt := range want {
		p, err := LookupPreset(n)
		if err != nil || ms(p.RTT) != rtt || p.Validate() != nil {
			t.Errorf("preset %s: %+v, %v; want RTT %.3f ms (seed 000 Table I)", n, p, err, rtt)
		}
	}
	if _, err := LookupPreset("moon"); err == nil {
		t.Error("unknown preset accepted")
	}
	if err := ValidateName("ab-c"); err == nil {
		t.Error("name with a dash accepted")
	}
}

func TestBestRate(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var a []arrival
	// 1000 bytes every ms for 500 ms (8 Mbit/s), a 200 ms stall, then
	// 1000 bytes every 2 ms for 400 ms (4 Mbit/s).
	for i := range 500 {
		a = append(a, arrival{t0.Add(time.Duration(i) * time.Millisecond), 1000})
	}
	for i := range 200 {
		a = append(a, arrival{t0.Add(700*time.Millisecond + time.Duration(2*i)*time.Millisecond), 1000})
	}
	got := bestRate(a, 300*time.Millisecond)
	if got < 7.99e6 || got > 8.01e6 {
		t.Errorf("best rate %g bit/s, want 8e6 (the first stretch)", got)
	}
	if got := bestRate(a[:100], 300*time.Millisecond); got != 0 {
		t.Errorf("100 ms of arrivals: rate %g, want 0 (too short)", got)
	}
	if got := bestRate(nil, time.Second); got != 0 {
		t.Errorf("no arrivals: %g", got)
	}
}

// BenchmarkDelayLine measures what TCP gets through the delay line (the
// direct path of a 1 ms testbed whose rate limit, 10 Gbit/s, is out of
// reach) against a bare veth link (producer to its gateway) in the same
// run, and reports both and their ratio.
func BenchmarkDelayLine(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := Available(ctx); err != nil {
		b.Skipf("network namespaces cannot be built here: %v", err)
	}
	serializeTestbeds(b)
	dl := delayLineBinary(b)
	tb, err := Up(ctx, Config{Name: randomName(nil), Preset: Preset{Name: "bench", RTT: time.Millisecond, RateBps: 10_000_000_000}, DelayLine: dl, StateRoot: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := tb.Down(); err != nil {
			b.Error(err)
		}
	}()
	const n = 64 << 20
	var via, veth float64
	for b.Loop() {
		if via, err = bulk(ctx, tb.NS(Producer), tb.NS(Consumer), tb.ConsumerDirect(), n); err != nil {
			b.Fatal(err)
		}
		if veth, err = bulk(ctx, tb.NS(Producer), tb.NS(ProducerGW), tb.ProducerGWLAN(), n); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(via*8/1e9, "Gbit/s_delayline")
	b.ReportMetric(veth*8/1e9, "Gbit/s_veth")
	b.ReportMetric(via/veth, "ratio")
}

// bulk sends n bytes over TCP from namespace src to a listener on ip in
// namespace dst and returns bytes/s, from the first write to the
// receiver's end of stream.
func bulk(ctx context.Context, src, dst, ip string, n int64) (float64, error) {
	var ln *net.TCPListener
	if err := Do(dst, func() (err error) {
		ln, err = net.ListenTCP("tcp", &net.TCPAddr{IP: net.ParseIP(ip)})
		return err
	}); err != nil {
		return 0, err
	}
	defer ln.Close()
	ln.SetDeadline(time.Now().Add(time.Minute))
	got := make(chan int64, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- -1
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(time.Minute))
		m, _ := io.Copy(io.Discard, c)
		got <- m
	}()
	var c net.Conn
	if err := Do(src, func() (err error) {
		c, err = (&net.Dialer{Timeout: 10 * time.Second}).DialContext(ctx, "tcp", ln.Addr().String())
		return err
	}); err != nil {
		return 0, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Minute))
	buf := make([]byte, 1<<20)
	start := time.Now()
	for sent := int64(0); sent < n; sent += int64(len(buf)) {
		if _, err := c.Write(buf); err != nil {
			return 0, err
		}
	}
	c.(*net.TCPConn).CloseWrite()
	if m := <-got; m != n {
		return 0, fmt.Errorf("received %d of %d bytes", m, n)
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// ipv4TCP returns an IPv4 packet of n bytes carrying TCP from sport to
// dport.
func ipv4TCP(n int, sport, dport uint16) []byte {
	b := make([]byte, n)
	b[0], b[9] = 0x45, 6
	copy(b[12:16], []byte{10, 0, 0, 1})
	copy(b[16:20], []byte{10, 0, 0, 2})
	b[20], b[21], b[22], b[23] = byte(sport>>8), byte(sport), byte(dport>>8), byte(dport)
	return b
}

// TestPolicer: each TCP flow gets its burst, then its rate; another
// flow, or the other direction, has a bucket of its own; what is not
// TCP passes.
func TestPolicer(t *testing.T) {
	rate := int64(8_000_000) // 1 MB/s
	p := &policer{rate: float64(rate) / 8, burst: flowBurst(rate), flows: map[flowKey]*bucket{}}
	now := time.Unix(1000, 0)
	a := ipv4TCP(1500, 40000, 5100)
	passed := 0
	for range 1000 {
		if p.admit(a, len(a), now) {
			passed++
		}
	}
	if want := int(flowBurst(rate)) / 1500; passed != want {
		t.Fatalf("a burst of 1000 packets at once: %d passed, want the bucket's %d", passed, want)
	}
	if p.admit(a, len(a), now) {
		t.Fatal("a packet past the burst passed at once")
	}
	if b := ipv4TCP(1500, 40001, 5100); !p.admit(b, len(b), now) {
		t.Fatal("another flow's first packet was dropped")
	}
	if r := ipv4TCP(1500, 5100, 40000); !p.admit(r, len(r), now) {
		t.Fatal("the other direction's first packet was dropped")
	}
	// 30 ms later: 30 KB more tokens than the burst left (below one
	// packet), 20 packets of 1500 bytes.
	left := int(flowBurst(rate)) % 1500
	passed = 0
	for range 1000 {
		if p.admit(a, len(a), now.Add(30*time.Millisecond)) {
			passed++
		}
	}
	if want := (left + 30_000) / 1500; passed != want {
		t.Fatalf("after 30 ms at 1 MB/s: %d packets passed, want %d", passed, want)
	}
	udp := ipv4TCP(1500, 1, 2)
	udp[9] = 17
	if !p.admit(udp, len(udp), now) {
		t.Fatal("a UDP packet was policed")
	}
}

// FuzzTCPFlow: no packet makes the flow parser panic or read past it.
func FuzzTCPFlow(f *testing.F) {
	f.Add(ipv4TCP(40, 1, 2))
	f.Add([]byte{0x60, 0, 0, 0, 0, 0, 6})
	f.Add([]byte{0x4f, 0, 0, 0, 0, 0, 0, 0, 0, 6})
	f.Fuzz(func(t *testing.T, b []byte) {
		tcpFlow(b)
	})
}
