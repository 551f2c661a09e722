package store

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"scistream/internal/etcdtest"
)

// The latency a control request pays to its store, bbolt against etcd
// (issue 16): each op is timed, and its median and 99th percentile are
// reported beside the mean (ns/op). etcd runs on loopback with its data
// on the same disk as bbolt's file; both sync every write to disk.
//
//	go test -run '^$' -bench . -benchtime 2000x ./internal/store/

// listSize is how many records Get and List run over: a busy facility.
const listSize = 1000

func BenchmarkPut(b *testing.B) {
	benchStores(b, 0, func(b *testing.B, s Store, i int) {
		if err := s.Put(fullRecord("alice", fmt.Sprintf("put-%08d", i))); err != nil {
			b.Fatal(err)
		}
	})
}

func BenchmarkGet(b *testing.B) {
	benchStores(b, listSize, func(b *testing.B, s Store, i int) {
		if _, err := s.Get(Key{"alice", fmt.Sprintf("rec-%08d", i*7919%listSize)}); err != nil {
			b.Fatal(err)
		}
	})
}

func BenchmarkList(b *testing.B) {
	benchStores(b, listSize, func(b *testing.B, s Store, _ int) {
		if list, err := s.List(); err != nil || len(list) != listSize {
			b.Fatalf("List: %d records, %v", len(list), err)
		}
	})
}

// benchStores runs op on a bolt store and on an etcd one, each holding
// records records first.
func benchStores(b *testing.B, records int, op func(b *testing.B, s Store, i int)) {
	srv := etcdtest.Start(b, etcdtest.Options{})
	for _, c := range []struct {
		name string
		open func(b *testing.B) Store
	}{
		{"bolt", func(b *testing.B) Store { return openBolt(b) }},
		{"etcd", func(b *testing.B) Store { return openEtcd(b, srv, EtcdConfig{Facility: "bench"}) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			s := c.open(b)
			preload(b, s, records)
			b.ReportAllocs()
			var took []time.Duration
			for i := 0; b.Loop(); i++ {
				start := time.Now()
				op(b, s, i)
				took = append(took, time.Since(start))
			}
			slices.Sort(took)
			pct := func(p float64) float64 { return float64(took[int(p*float64(len(took)-1))].Microseconds()) }
			b.ReportMetric(pct(0.50), "p50-µs")
			b.ReportMetric(pct(0.99), "p99-µs")
		})
	}
}

// preload puts n records in s quickly: from 16 goroutines (etcd commits
// concurrent writes with one sync), and bbolt without syncing.
func preload(b *testing.B, s Store, n int) {
	if bs, ok := s.(*Bolt); ok {
		bs.db.NoSync = true
		defer func() { bs.db.NoSync = false; bs.db.Sync() }()
	}
	var wg sync.WaitGroup
	errc := make(chan error, 16)
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < n; i += 16 {
				if err := s.Put(fullRecord("alice", fmt.Sprintf("rec-%08d", i))); err != nil {
					errc <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
}
