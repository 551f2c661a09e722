package store

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"scistream/internal/api"
	"scistream/internal/etcdtest"
	"scistream/internal/waitfor"
)

// members joins n nodes of one facility, each through its own client.
func members(t *testing.T, srv *etcdtest.Etcd, facility string, n int, ttl time.Duration) []*Member {
	t.Helper()
	var out []*Member
	for i := range n {
		e := openEtcd(t, srv, EtcdConfig{Facility: facility})
		m, err := e.Join(NodeInfo{Name: fmt.Sprintf("n%d", i), Host: fmt.Sprintf("127.0.0.%d", i+1), CertSHA256: "same"}, ttl)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(m.Close)
		out = append(out, m)
	}
	for _, m := range out {
		waitfor.Must(t, 5*time.Second, "every member to see every node", func() bool { return len(m.Nodes()) == n })
	}
	return out
}

// TestMemberCreateConcurrent: nodes creating streams at the same moment
// never get one key twice, and never one port twice: each transaction
// wins whole or not at all.
func TestMemberCreateConcurrent(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	ms := members(t, srv, "create", 3, 4*time.Second)
	const rounds = 20
	var mu sync.Mutex
	won := map[string]int{}
	ports := map[int]string{}
	var wg sync.WaitGroup
	for round := range rounds {
		for i, m := range ms {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// The same key from every node; ports that overlap
				// with the next node's.
				r := fullRecord("alice", fmt.Sprintf("u%02d", round))
				r.Ports = []int{7000 + 10*round + i, 7000 + 10*round + i + 1}
				err := m.Create(r)
				var taken *PortsTakenError
				switch {
				case err == nil:
					mu.Lock()
					won[r.UID]++
					for _, p := range r.Ports {
						if other, ok := ports[p]; ok {
							t.Errorf("port %d given to %s and %s", p, other, r.UID)
						}
						ports[p] = r.UID
					}
					mu.Unlock()
				case errors.Is(err, ErrExists), errors.As(err, &taken):
				default:
					t.Errorf("Create: %v", err)
				}
			}()
		}
	}
	wg.Wait()
	for round := range rounds {
		if n := won[fmt.Sprintf("u%02d", round)]; n != 1 {
			t.Errorf("stream u%02d created %d times; want once", round, n)
		}
	}
}

// TestMemberClaims: one node wins a channel; a node that dies without a
// word loses its claims when its lease runs out, and another claims
// them; one that leaves loses them at once; a live record never replaces
// the end of its stream, and an end frees the stream's ports and claims.
func TestMemberClaims(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	const ttl = 2 * time.Second
	ms := members(t, srv, "claims", 3, ttl)
	r := fullRecord("alice", "s1")
	if err := ms[0].Create(r); err != nil {
		t.Fatal(err)
	}
	k := r.Key()
	for ch := range 2 {
		if ok, err := ms[ch].Claim(k, ch); err != nil || !ok {
			t.Fatalf("node %d claims channel %d: %v, %v", ch, ch, ok, err)
		}
		if ok, err := ms[2].Claim(k, ch); err != nil || ok {
			t.Fatalf("node 2 claims channel %d another holds: %v, %v; want false", ch, ok, err)
		}
	}
	waitfor.Must(t, 5*time.Second, "every member to see both claims", func() bool {
		for _, m := range ms {
			if o := m.Owners(k, 2); o[0] != "n0" || o[1] != "n1" {
				return false
			}
		}
		return true
	})

	// n0 dies without a word: its claim goes with its lease.
	died := time.Now()
	ms[0].Close()
	waitfor.Must(t, ttl+5*time.Second, "n0's claim to lapse", func() bool { return ms[2].Owners(k, 1)[0] == "" })
	if took := time.Since(died); took > ttl+2*time.Second {
		t.Errorf("a dead node's claim lapsed %s after its death; its lease is %s", took, ttl)
	}
	if ok, err := ms[2].Claim(k, 0); err != nil || !ok {
		t.Fatalf("node 2 takes over channel 0: %v, %v", ok, err)
	}
	// n1 leaves: its claim goes at once.
	ms[1].Leave()
	waitfor.Must(t, 2*time.Second, "n1's claim to go when it leaves", func() bool { return ms[2].Owners(k, 2)[1] == "" })

	// The end frees ports and claims; the stream cannot come back.
	for _, p := range r.Ports {
		if !ms[2].PortHeld(p) {
			t.Fatalf("port %d of a live stream not held", p)
		}
	}
	e := ms[2].e
	end := *r
	end.State = api.StateReleased
	if err := e.Put(&end); err != nil {
		t.Fatal(err)
	}
	waitfor.Must(t, 2*time.Second, "the end to free ports and claims", func() bool {
		return !ms[2].PortHeld(r.Ports[0]) && !ms[2].PortHeld(r.Ports[1]) && ms[2].Owners(k, 1)[0] == ""
	})
	late := *r
	late.Rate = 5
	if err := e.Put(&late); !errors.Is(err, ErrEnded) {
		t.Fatalf("a live record put over its stream's end: %v; want ErrEnded", err)
	}
	if got, _ := e.Get(k); got.State != api.StateReleased {
		t.Fatalf("after a late live put, the record is %s", got.State)
	}
	// The same UID again, a new stream: created, and its puts land.
	again := fullRecord("alice", "s1")
	again.Created = r.Created.Add(time.Second)
	if err := ms[2].Create(again); err != nil {
		t.Fatalf("a new stream of an ended one's UID: %v", err)
	}
	again.Rate = 7
	if err := e.Put(again); err != nil {
		t.Fatalf("a put of the new stream: %v", err)
	}
}

// TestJoinRefusesAnotherCertificate: a node whose WAN certificate, or
// shared WAN port, differs from the live nodes' cannot join, and says
// why.
func TestJoinRefusesAnotherCertificate(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	members(t, srv, "certs", 1, 4*time.Second)
	e := openEtcd(t, srv, EtcdConfig{Facility: "certs"})
	_, err := e.Join(NodeInfo{Name: "odd", CertSHA256: "other"}, 4*time.Second)
	if err == nil || !strings.Contains(err.Error(), "same --server_crt") {
		t.Fatalf("Join with another certificate: %v", err)
	}
	_, err = e.Join(NodeInfo{Name: "odd", CertSHA256: "same", SharedWAN: "port 443"}, 4*time.Second)
	if err == nil || !strings.Contains(err.Error(), "has the shared WAN port none, this node port 443") || !strings.Contains(err.Error(), "same --wan_port") {
		t.Fatalf("Join with a shared WAN port the others lack: %v", err)
	}
	for _, bad := range []struct {
		name string
		ttl  time.Duration
	}{{"", 4 * time.Second}, {"a/b", 4 * time.Second}, {"ok", time.Second}} {
		if _, err := e.Join(NodeInfo{Name: bad.name, CertSHA256: "same"}, bad.ttl); err == nil {
			t.Errorf("Join(%q, %s) succeeded", bad.name, bad.ttl)
		}
	}
}
