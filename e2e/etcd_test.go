package e2e

import (
	"context"
	"crypto/sha256"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"scistream/internal/etcdtest"
)

// TestEtcdStore: both gateways keep their stream records in one etcd,
// each under its own facility's prefix. While etcd is down, a request
// that needs the store answers "unavailable" within seconds, while the
// running stream carries data on the connection it had and on a new
// one, and a release still ends a stream; once etcd is back, requests
// work again without a restart and the release is stored; and a gateway
// killed with SIGKILL restores its live stream from etcd (its state
// directory holds no database), not the released one.
func TestEtcdStore(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	p := newPair(t, pairOpts{
		args:     []string{"--store", "etcd://" + srv.Endpoint},
		prodArgs: []string{"--store_facility", "prod-site"},
		consArgs: []string{"--store_facility", "cons-site"},
	})
	app := newSink(t, "127.0.0.1", nil)
	so := p.wire("alice", app.host(), app.port(), 1)
	ended := p.wire("alice", app.host(), app.port(), 1) // released during the outage
	send := func(msg string) {
		t.Helper()
		c, err := dialFrom("", so.Listeners[0])
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte(msg))
		c.Close()
		if r := app.next(t, 30*time.Second); string(r.data) != msg {
			t.Fatalf("consumer got %q, %v; want %q", r.data, r.err, msg)
		}
	}
	inbound := func() (string, string, int) {
		return p.s2uc("alice", "inbound-request", "--s2cs", p.cons.Addr, "--server_cert", p.cons.CertFile,
			"--remote_ip", "127.0.0.1", "--receiver_ports", app.port(), "--num_conn", "1")
	}
	send("before the outage")
	held, err := dialFrom("", so.Listeners[0])
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	held.SetDeadline(time.Now().Add(time.Minute))
	sum := sha256.New()
	if err := writeRandom(io.MultiWriter(held, sum), 256<<10, 1); err != nil {
		t.Fatal(err)
	}

	srv.Stop()
	start := time.Now()
	_, errs, code := inbound()
	if code == 0 || !strings.Contains(errs, "unavailable") {
		t.Errorf("inbound-request with etcd down: exit %d, %q; want it refused as unavailable", code, errs)
	}
	took := time.Since(start)
	if took > 15*time.Second {
		t.Errorf("inbound-request with etcd down took %s to be refused", took)
	}
	t.Logf("with etcd down, inbound-request was refused in %s: %s", took.Round(time.Millisecond), strings.TrimSpace(errs))
	// A live stream is in the gateway's memory: its status needs no store.
	if out := p.mustS2UC("alice", "status", so.UID, "--s2cs", p.cons.Addr, "--server_cert", p.cons.CertFile); !strings.Contains(out, "connected") {
		t.Errorf("status of the live stream with etcd down:\n%s", out)
	}
	if err := writeRandom(io.MultiWriter(held, sum), 256<<10, 2); err != nil {
		t.Fatalf("the connection held through the outage: %v", err)
	}
	held.CloseWrite()
	if r := app.next(t, 30*time.Second); r.err != nil || r.n != 512<<10 || r.sum != [32]byte(sum.Sum(nil)) {
		t.Fatalf("the connection held through the outage: consumer got %d bytes, %v, checksum match %v", r.n, r.err, r.sum == [32]byte(sum.Sum(nil)))
	}
	send("during the outage")
	// A release ends the stream at once; its end is stored later.
	p.mustS2UC("alice", "release", ended.UID, "--s2cs", p.cons.Addr, "--server_cert", p.cons.CertFile)

	srv.Restart()
	c, err := p.cons.Client(p.tokens["alice"])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	eventually(t, 30*time.Second, "the consumer's gateway to read its store again", func() bool {
		_, err := c.List(context.Background(), true)
		return err == nil
	})
	eventually(t, 30*time.Second, "the consumer's gateway to store the end of the stream released during the outage", func() bool {
		return strings.Contains(p.cons.Log(), "stored the end of a stream after all")
	})
	if _, errs, code := inbound(); code != 0 {
		t.Fatalf("inbound-request after etcd's return: exit %d: %s", code, errs)
	}

	if _, err := os.Stat(filepath.Join(p.cons.Opts.StateDir, "state.db")); !os.IsNotExist(err) {
		t.Fatalf("the consumer's gateway made an embedded database beside etcd (stat: %v)", err)
	}
	p.restart(&p.cons, false)
	send("after the restart")
	out := p.mustS2UC("alice", "status", so.UID, "--s2cs", p.cons.Addr, "--server_cert", p.cons.CertFile)
	if !strings.Contains(out, "inbound connected") {
		t.Fatalf("the stream restored from etcd:\n%s", out)
	}
	// The stream released during the outage stays released.
	out = p.mustS2UC("alice", "status", ended.UID, "--s2cs", p.cons.Addr, "--server_cert", p.cons.CertFile)
	if !strings.Contains(out, "released") {
		t.Fatalf("the stream released during the outage, after the restart:\n%s", out)
	}
}

// TestStopWithStoreDown: a gateway stopped while its store is down tries
// to keep what its streams carried once, not once per stream (each try
// waits out the store's timeout, and a stop must stay within its unit's
// TimeoutStopSec), and says so; it still stops cleanly.
func TestStopWithStoreDown(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	p := newPair(t, pairOpts{
		args:     []string{"--store", "etcd://" + srv.Endpoint},
		prodArgs: []string{"--store_facility", "prod-site"},
		consArgs: []string{"--store_facility", "cons-site"},
	})
	app := newSink(t, "127.0.0.1", nil)
	for range 4 {
		p.wire("alice", app.host(), app.port(), 1)
	}
	srv.Stop()
	if err := p.prod.Stop(); err != nil {
		t.Fatalf("graceful stop with the store down: %v", err)
	}
	log := p.prod.Log()
	if n := strings.Count(log, "could not store what a stream carried"); n != 1 {
		t.Errorf("%d tries to keep a stream's counters with the store down, want 1:\n%s", n, log)
	}
	if !strings.Contains(log, "stopped storing what streams carried") {
		t.Errorf("the gateway did not say it stopped keeping counters:\n%s", log)
	}
}
