package store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"scistream/internal/etcdtest"
	"scistream/internal/localgw"
	"scistream/internal/waitfor"
)

// TestEtcdOutage: with etcd down, every operation fails within its
// timeout (plus a little) with ErrUnavailable; once etcd is back, the
// same store works again, without being reopened, and has kept what was
// written before.
func TestEtcdOutage(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	const timeout = 500 * time.Millisecond
	s := openEtcd(t, srv, EtcdConfig{Facility: "outage", Timeout: timeout})
	before := fullRecord("alice", "before")
	mustPut(t, s, before)

	srv.Stop()
	for _, op := range []struct {
		name string
		do   func() error
	}{
		{"Put", func() error { return s.Put(fullRecord("alice", "during")) }},
		{"Get", func() error { _, err := s.Get(before.Key()); return err }},
		{"List", func() error { _, err := s.List(); return err }},
		{"Delete", func() error { return s.Delete(before.Key()) }},
	} {
		start := time.Now()
		err := op.do()
		took := time.Since(start)
		if !errors.Is(err, ErrUnavailable) {
			t.Errorf("%s with etcd down: %v, want ErrUnavailable", op.name, err)
		}
		if took > timeout+time.Second {
			t.Errorf("%s with etcd down took %s; its timeout is %s", op.name, took, timeout)
		}
		if err != nil && !strings.Contains(err.Error(), srv.Endpoint) {
			t.Errorf("%s: %q does not name the etcd endpoint", op.name, err)
		}
	}

	srv.Restart()
	// The client reconnects with a backoff of 2 s at most.
	waitfor.Must(t, 10*time.Second, "the store to answer after etcd's restart", func() bool {
		_, err := s.Get(before.Key())
		return err == nil
	})
	after := fullRecord("alice", "after")
	mustPut(t, s, after)
	mustList(t, s, before.Key(), after.Key())
}

// TestEtcdOpenUnreachable: opening a store on an address where no etcd
// listens fails fast, with ErrUnavailable and the address in the message.
func TestEtcdOpenUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", net.JoinHostPort(localgw.RandomLoopback(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: connections are refused
	start := time.Now()
	_, err = OpenEtcd(EtcdConfig{Endpoints: []string{addr}, Facility: "x", Timeout: 300 * time.Millisecond})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), addr) {
		t.Fatalf("OpenEtcd(%s) = %v; want ErrUnavailable naming the address", addr, err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("OpenEtcd of an unreachable etcd took %s", took)
	}
}

// TestEtcdTLSAuth: an etcd that requires TLS with a client certificate,
// and a user and password: the right ones work; a wrong password is
// refused (ErrDenied), without the password in the error; plaintext, or
// TLS without the client certificate, never gets an answer
// (ErrUnavailable); a facility outside what the user may touch is
// refused.
func TestEtcdTLSAuth(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{TLS: true, Auth: true})
	s := openEtcd(t, srv, EtcdConfig{Facility: "secure"})
	r := fullRecord("alice", "u1")
	mustPut(t, s, r)
	mustList(t, s, r.Key())

	const timeout = 500 * time.Millisecond
	noCert := srv.ClientTLS()
	noCert.Certificates = nil
	for _, c := range []struct {
		name string
		cfg  EtcdConfig
		want error
	}{
		{"wrong password", EtcdConfig{TLS: srv.ClientTLS(), Username: srv.User, Password: "not-" + srv.Password}, ErrDenied},
		{"unknown user", EtcdConfig{TLS: srv.ClientTLS(), Username: "mallory", Password: srv.Password}, ErrDenied},
		{"plaintext", EtcdConfig{Username: srv.User, Password: srv.Password}, ErrUnavailable},
		{"no client certificate", EtcdConfig{TLS: noCert, Username: srv.User, Password: srv.Password}, ErrUnavailable},
	} {
		c.cfg.Endpoints, c.cfg.Facility, c.cfg.Timeout = []string{srv.Endpoint}, "secure", timeout
		_, err := OpenEtcd(c.cfg)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: OpenEtcd = %v, want %v", c.name, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), srv.Password) {
			t.Errorf("%s: the error shows the password: %v", c.name, err)
		}
	}
	// The user may write under /scistream/ only: a store cannot reach
	// outside it, and a facility is inside it.
	if _, err := s.cli.Put(context.Background(), "/elsewhere", "x"); !denied(err) {
		t.Errorf("a Put outside /scistream/ = %v, want permission denied", err)
	}
}

// TestEtcdKeys: the keys are /scistream/<facility>/streams/<owner>/<uid>
// with owner and UID path-escaped, and two facilities on one etcd see
// only their own records.
func TestEtcdKeys(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	a := openEtcd(t, srv, EtcdConfig{Facility: "site-a"})
	b := openEtcd(t, srv, EtcdConfig{Facility: "site-a.b"})
	ra, rb := fullRecord("cn=alice/o=lab", "u:1"), fullRecord("bob", "u2")
	mustPut(t, a, ra)
	mustPut(t, b, rb)
	resp, err := a.cli.Get(context.Background(), "/scistream/site-a/streams/cn=alice%2Fo=lab/u:1")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("the record is not at its documented key: %v, %d keys", err, len(resp.Kvs))
	}
	mustList(t, a, ra.Key())
	mustList(t, b, rb.Key())
	if _, err := b.Get(ra.Key()); !errors.Is(err, ErrNotFound) {
		t.Fatalf("another facility's Get = %v, want ErrNotFound", err)
	}
}

// TestEtcdListPages: List reads in pages of PageSize and returns every
// record once, whatever the number of pages.
func TestEtcdListPages(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	for _, n := range []int{0, 1, 3, 4, 10} {
		s := openEtcd(t, srv, EtcdConfig{Facility: fmt.Sprintf("pages-%d", n), PageSize: 3})
		var keys []Key
		for i := range n {
			r := fullRecord("alice", fmt.Sprintf("u%02d", i))
			mustPut(t, s, r)
			keys = append(keys, r.Key())
		}
		mustList(t, s, keys...)
	}
}

// TestEtcdGarbageRecord: a value that is not a record (written by
// another program, or damaged) is an error naming its key, for Get and
// List alike; never a record of zeros, nor "not found".
func TestEtcdGarbageRecord(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	s := openEtcd(t, srv, EtcdConfig{Facility: "garbage"})
	k := Key{"alice", "u1"}
	if _, err := s.cli.Put(context.Background(), s.key(k), "{not json"); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Get(k); err == nil || errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), s.key(k)) {
		t.Errorf("Get of garbage = %+v, %v; want an error naming the key", r, err)
	}
	if list, err := s.List(); err == nil || !strings.Contains(err.Error(), s.key(k)) {
		t.Errorf("List over garbage = %d records, %v; want an error naming the key", len(list), err)
	}
}

func TestEtcdConfigRefused(t *testing.T) {
	for _, c := range []struct {
		cfg  EtcdConfig
		want string
	}{
		{EtcdConfig{Facility: "x"}, "no endpoints"},
		{EtcdConfig{Endpoints: []string{"127.0.0.1:1"}}, "facility is empty"},
		{EtcdConfig{Endpoints: []string{"127.0.0.1:1"}, Facility: "a/b"}, `facility "a/b"`},
		{EtcdConfig{Endpoints: []string{"127.0.0.1:1"}, Facility: "x", Username: "u"}, "both a user name and a password"},
		{EtcdConfig{Endpoints: []string{"127.0.0.1:1"}, Facility: "x", Password: "p"}, "both a user name and a password"},
		{EtcdConfig{Endpoints: []string{"127.0.0.1:1"}, Facility: "x", Timeout: -1}, "negative"},
	} {
		if _, err := OpenEtcd(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("OpenEtcd(%+v) = %v, want an error saying %q", c.cfg, err, c.want)
		}
	}
}

func TestValidFacility(t *testing.T) {
	for _, ok := range []string{"ornl", "ORNL-gw.1", "a", "x_y", strings.Repeat("f", 64)} {
		if err := ValidFacility(ok); err != nil {
			t.Errorf("ValidFacility(%q) = %v", ok, err)
		}
	}
	// Each would escape the facility's prefix, or share another's.
	for _, bad := range []string{"", ".", "..", "-x", "_x", "a/b", "a b", "a\x00", "ünï", "a*", strings.Repeat("f", 65), "a\n"} {
		if err := ValidFacility(bad); err == nil {
			t.Errorf("ValidFacility(%q) accepted it", bad)
		}
	}
}

// FuzzEtcdKey: the key of an owner and UID holds exactly one slash after
// the facility's streams/ (so no identity reaches into another's keys or
// out of the facility's), gives both back, and two keys are equal only
// for the same owner and UID.
func FuzzEtcdKey(f *testing.F) {
	f.Add("alice", "u1", "alice", "u2")
	f.Add("a/b", "c", "a", "b/c")
	f.Add("a%2Fb", "c", "a/b", "c")
	f.Add("..", "/", "", "../")
	e := &Etcd{prefix: "/scistream/f/"}
	f.Fuzz(func(t *testing.T, o1, u1, o2, u2 string) {
		k1, k2 := e.key(Key{o1, u1}), e.key(Key{o2, u2})
		rest, ok := strings.CutPrefix(k1, "/scistream/f/streams/")
		if !ok {
			t.Fatalf("key %q is outside the facility's streams/", k1)
		}
		eo, eu, ok := strings.Cut(rest, "/")
		if !ok || strings.Contains(eu, "/") {
			t.Fatalf("key %q does not have exactly one slash after streams/", k1)
		}
		if o, err := url.PathUnescape(eo); err != nil || o != o1 {
			t.Fatalf("owner %q came back as %q, %v", o1, o, err)
		}
		if u, err := url.PathUnescape(eu); err != nil || u != u1 {
			t.Fatalf("UID %q came back as %q, %v", u1, u, err)
		}
		if (k1 == k2) != (o1 == o2 && u1 == u2) {
			t.Fatalf("(%q, %q) and (%q, %q) give keys %q and %q", o1, u1, o2, u2, k1, k2)
		}
	})
}
