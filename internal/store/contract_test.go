package store

import (
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"scistream/internal/api"
	"scistream/internal/etcdtest"
	"scistream/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// impl opens a fresh, empty store of one implementation for test t.
type impl struct {
	name string
	open func(t *testing.T) Store
}

// impls returns bolt, and etcd on srv: each store a facility of its own
// on the one server, so the tests share an etcd and no records.
func impls(srv *etcdtest.Etcd) []impl {
	var mu sync.Mutex
	n := 0
	return []impl{
		{"bolt", func(t *testing.T) Store { return openBolt(t) }},
		{"etcd", func(t *testing.T) Store {
			mu.Lock()
			n++
			facility := fmt.Sprintf("contract-%d", n)
			mu.Unlock()
			return openEtcd(t, srv, EtcdConfig{Facility: facility})
		}},
	}
}

func openBolt(tb testing.TB) *Bolt {
	tb.Helper()
	b, err := OpenBolt(filepath.Join(tb.TempDir(), "state.db"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { b.Close() })
	return b
}

// openEtcd opens a store on srv with cfg, its endpoint, TLS and
// credentials filled in from srv, and closes it when tb ends.
func openEtcd(tb testing.TB, srv *etcdtest.Etcd, cfg EtcdConfig) *Etcd {
	tb.Helper()
	cfg.Endpoints = []string{srv.Endpoint}
	if cfg.TLS == nil {
		cfg.TLS = srv.ClientTLS()
	}
	if cfg.Username == "" {
		cfg.Username, cfg.Password = srv.User, srv.Password
	}
	e, err := OpenEtcd(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { e.Close() })
	return e
}

// fullRecord is a record with every field set.
func fullRecord(owner, uid string) *Record {
	now := time.Now().UTC().Round(time.Millisecond)
	wait := 30
	return &Record{UID: uid, Role: api.RoleInbound, State: api.StateListening, Owner: owner, Reason: "for " + owner,
		Created: now, Updated: now.Add(time.Second), Ports: []int{5100, 5101}, Targets: []string{"127.0.0.1:8080", "127.0.0.1:8081"},
		NumConn: 2, WAN: "tls", Engine: "splice", Allow: []string{"10.0.0.0/8"}, AppWaitS: &wait, MaxActiveConns: 7,
		Secret: []byte("0123456789abcdef0123456789abcdef"), PeerCertSHA256: strings.Repeat("ab", 32),
		ServerName: "s1.wan.example", WANPool: 2, PeerServerName: "s2.wan.example",
		Rate: 1e9, RateRequested: 2e9, MinRate: 1e8, LeaseS: 3600, Expires: now.Add(time.Hour)}
}

// contract is what every Store does, whatever keeps the records.
var contract = []struct {
	name string
	run  func(t *testing.T, s Store)
}{
	{"round trip", func(t *testing.T, s Store) {
		r := fullRecord("alice", "0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b6c")
		mustPut(t, s, r)
		if got, err := s.Get(r.Key()); err != nil || !reflect.DeepEqual(got, r) {
			t.Fatalf("Get = %+v, %v; want %+v", got, err, r)
		}
	}},
	{"not found", func(t *testing.T, s Store) {
		mustPut(t, s, fullRecord("alice", "u1"))
		for _, k := range []Key{{"alice", "u2"}, {"bob", "u1"}, {"", ""}, {"alice/u1", ""}} {
			if r, err := s.Get(k); !errors.Is(err, ErrNotFound) {
				t.Errorf("Get(%+v) = %+v, %v; want ErrNotFound", k, r, err)
			}
		}
	}},
	{"overwrite", func(t *testing.T, s Store) {
		r := fullRecord("alice", "u1")
		mustPut(t, s, r)
		r.State, r.Reason, r.Secret = api.StateReleased, "released by alice", nil
		mustPut(t, s, r)
		if got, err := s.Get(r.Key()); err != nil || !reflect.DeepEqual(got, r) {
			t.Fatalf("Get after overwrite = %+v, %v; want %+v", got, err, r)
		}
		mustList(t, s, r.Key())
	}},
	{"delete", func(t *testing.T, s Store) {
		r, other := fullRecord("alice", "u1"), fullRecord("alice", "u2")
		mustPut(t, s, r)
		mustPut(t, s, other)
		for i := range 2 { // the second time, of an absent record
			if err := s.Delete(r.Key()); err != nil {
				t.Fatalf("Delete #%d: %v", i+1, err)
			}
		}
		if _, err := s.Get(r.Key()); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Get after Delete: %v, want ErrNotFound", err)
		}
		mustList(t, s, other.Key())
	}},
	{"list", func(t *testing.T, s Store) {
		mustList(t, s)
		var keys []Key
		for i := range 30 {
			r := fullRecord([]string{"alice", "bob", "carol"}[i%3], fmt.Sprintf("uid-%02d", i))
			mustPut(t, s, r)
			keys = append(keys, r.Key())
		}
		mustList(t, s, keys...)
	}},
	{"owners share UIDs", func(t *testing.T, s Store) {
		const uid = "0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b6c"
		for _, owner := range []string{"alice", "bob"} {
			mustPut(t, s, fullRecord(owner, uid))
		}
		if err := s.Delete(Key{"alice", uid}); err != nil {
			t.Fatal(err)
		}
		if r, err := s.Get(Key{"bob", uid}); err != nil || r.Owner != "bob" {
			t.Fatalf("bob's record after alice's was deleted: %+v, %v", r, err)
		}
	}},
	// Identities come from token files and identity providers: any
	// string. Pairs that a naive "owner/uid" key would merge, or a
	// naive escape would, stay apart. (Not invalid UTF-8: JSON
	// replaces it in the record, in either store.)
	{"odd identities", func(t *testing.T, s Store) {
		keys := []Key{
			{"a/b", "c"}, {"a", "b/c"}, {"a%2Fb", "c"}, {"a", "b%2Fc"},
			{"alice:x", "u"}, {"alice", "x:u"}, {"https://idp.example/u/7", "u"},
			{"..", "u"}, {".", ".."}, {"", ""}, {"", "u"}, {"u", ""}, {"/", "/"}, {"//", ""}, {"", "//"},
			{"a\x00b", "u"}, {"a", "\x00b"}, {"a b", "u\n"}, {"ünï", "cødé"}, {"*", "?"},
		}
		for _, k := range keys {
			r := fullRecord(k.Owner, k.UID)
			r.Reason = fmt.Sprintf("%q|%q", k.Owner, k.UID)
			mustPut(t, s, r)
		}
		for _, k := range keys {
			r, err := s.Get(k)
			if err != nil || r.Reason != fmt.Sprintf("%q|%q", k.Owner, k.UID) {
				t.Errorf("Get(%q) = %+v, %v; want its own record", k, r, err)
			}
		}
		mustList(t, s, keys...)
		if err := s.Delete(Key{"a/b", "c"}); err != nil {
			t.Fatal(err)
		}
		mustList(t, s, keys[1:]...)
	}},
	{"large record", func(t *testing.T, s Store) {
		r := fullRecord("alice", "big")
		for i := range 8000 { // ~190 KiB of JSON
			r.Allow = append(r.Allow, fmt.Sprintf("10.%d.%d.0/24", i/256, i%256))
		}
		for i := range 1000 {
			r.Targets = append(r.Targets, fmt.Sprintf("192.0.2.%d:%d", i%256, 1024+i))
		}
		mustPut(t, s, r)
		if got, err := s.Get(r.Key()); err != nil || !reflect.DeepEqual(got, r) {
			t.Fatalf("Get of a large record: %v, equal %v", err, reflect.DeepEqual(got, r))
		}
		if list, err := s.List(); err != nil || len(list) != 1 || !reflect.DeepEqual(list[0], r) {
			t.Fatalf("List of a large record: %d records, %v", len(list), err)
		}
	}},
	// Many control requests at once: each write lands, and readers
	// beside the writers see whole records only.
	{"concurrent", func(t *testing.T, s Store) {
		const writers, each = 8, 25
		var wg sync.WaitGroup
		errc := make(chan error, writers*each*2)
		for w := range writers {
			wg.Go(func() {
				for i := range each {
					r := fullRecord(fmt.Sprintf("user%d", w), fmt.Sprintf("uid-%03d", i))
					if err := s.Put(r); err != nil {
						errc <- err
					}
					if _, err := s.Get(Key{fmt.Sprintf("user%d", (w+1)%writers), r.UID}); err != nil && !errors.Is(err, ErrNotFound) {
						errc <- err
					}
				}
			})
		}
		wg.Go(func() {
			for range 10 {
				list, err := s.List()
				if err != nil {
					errc <- err
				}
				for _, r := range list {
					if r.Secret == nil || len(r.Ports) != 2 {
						errc <- fmt.Errorf("List gave a partial record: %+v", r)
					}
				}
			}
		})
		wg.Wait()
		close(errc)
		for err := range errc {
			t.Error(err)
		}
		if list, err := s.List(); err != nil || len(list) != writers*each {
			t.Fatalf("List after %d concurrent puts: %d records, %v", writers*each, len(list), err)
		}
	}},
}

// TestContract runs the contract on both implementations.
func TestContract(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	for _, im := range impls(srv) {
		for _, c := range contract {
			t.Run(im.name+"/"+c.name, func(t *testing.T) { c.run(t, im.open(t)) })
		}
	}
}

func mustPut(t *testing.T, s Store, r *Record) {
	t.Helper()
	if err := s.Put(r); err != nil {
		t.Fatalf("Put(%q, %q): %v", r.Owner, r.UID, err)
	}
}

// mustList fails t unless s lists exactly the records of want.
func mustList(t *testing.T, s Store, want ...Key) {
	t.Helper()
	list, err := s.List()
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	var got []Key
	for _, r := range list {
		got = append(got, r.Key())
	}
	cmp := func(a, b Key) int { return strings.Compare(a.Owner+"\x00"+a.UID, b.Owner+"\x00"+b.UID) }
	slices.SortFunc(got, cmp)
	want = slices.Clone(want)
	slices.SortFunc(want, cmp)
	if !slices.Equal(got, want) {
		t.Fatalf("List has %q, want %q", got, want)
	}
}
