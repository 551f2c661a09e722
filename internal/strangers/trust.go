package strangers

import (
	"net"
	"net/netip"
	"sync"
	"time"
)

// TrustFor is how long a source stays trusted after its last
// authenticated connection.
const TrustFor = 10 * time.Minute

// MaxTrusted bounds the sources one stream trusts at once: a peer has
// one or a few addresses; past the bound the one seen longest ago goes.
const MaxTrusted = 16

// Trust remembers the sources a stream's peer authenticated from lately.
// It belongs to the stream, and ends with it. Its zero value trusts no
// one; its methods may be called concurrently.
type Trust struct {
	mu   sync.Mutex // guards seen
	seen map[netip.Addr]time.Time
}

// Add notes that remote authenticated at now.
func (t *Trust) Add(remote net.Addr, now time.Time) {
	src := SourceOf(remote)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.seen == nil {
		t.seen = map[netip.Addr]time.Time{}
	}
	t.seen[src] = now
	var oldest netip.Addr
	for a, at := range t.seen {
		if now.Sub(at) > TrustFor {
			delete(t.seen, a)
		} else if !oldest.IsValid() || at.Before(t.seen[oldest]) {
			oldest = a
		}
	}
	if len(t.seen) > MaxTrusted {
		delete(t.seen, oldest)
	}
}

// Has reports whether remote authenticated within TrustFor of now.
func (t *Trust) Has(remote net.Addr, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	at, ok := t.seen[SourceOf(remote)]
	return ok && now.Sub(at) <= TrustFor
}

// SharedTrust is the trust of the streams on one shared listener, each
// stream (a K) trusting the sources its peer authenticated from lately
// as Trust does, indexed by source so that an accept, which does not
// know its stream yet, asks one map. A source is trusted while a live
// stream trusts it: Forget drops a stream's trust when it ends. Its zero
// value is ready; its methods may be called concurrently.
type SharedTrust[K comparable] struct {
	mu    sync.Mutex // guards the following fields
	by    map[netip.Addr]map[K]time.Time
	count map[K]int // sources each stream trusts (at most MaxTrusted)
}

// Add notes that a leg of stream k authenticated from src at now.
func (t *SharedTrust[K]) Add(src netip.Addr, k K, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.by == nil {
		t.by, t.count = map[netip.Addr]map[K]time.Time{}, map[K]int{}
	}
	m := t.by[src]
	if _, ok := m[k]; !ok && t.count[k] >= MaxTrusted {
		t.dropOldest(k)
	}
	if m == nil {
		m = map[K]time.Time{}
		t.by[src] = m
	}
	if _, ok := m[k]; !ok {
		t.count[k]++
	}
	m[k] = now
}

// dropOldest drops the source k trusted longest ago. t.mu is held.
func (t *SharedTrust[K]) dropOldest(k K) {
	var oldest netip.Addr
	var at time.Time
	for src, m := range t.by {
		if a, ok := m[k]; ok && (!oldest.IsValid() || a.Before(at)) {
			oldest, at = src, a
		}
	}
	if oldest.IsValid() {
		t.drop(oldest, k)
	}
}

// drop forgets that k trusts src. t.mu is held.
func (t *SharedTrust[K]) drop(src netip.Addr, k K) {
	delete(t.by[src], k)
	if len(t.by[src]) == 0 {
		delete(t.by, src)
	}
	if t.count[k]--; t.count[k] <= 0 {
		delete(t.count, k)
	}
}

// Has reports whether a stream trusts src at now, forgetting the trust
// of src that ran out.
func (t *SharedTrust[K]) Has(src netip.Addr, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	found := false
	for k, at := range t.by[src] {
		if now.Sub(at) > TrustFor {
			t.drop(src, k)
		} else {
			found = true
		}
	}
	return found
}

// Trusts reports whether stream k trusts any source now (for tests and
// status).
func (t *SharedTrust[K]) Trusts(k K) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.count[k] > 0
}

// Len returns how many sources and streams the index holds.
func (t *SharedTrust[K]) Len() (sources, streams int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.by), len(t.count)
}

// Forget drops every trust k gave: the stream ended.
func (t *SharedTrust[K]) Forget(k K) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.count[k] == 0 {
		return
	}
	for src, m := range t.by {
		if _, ok := m[k]; ok {
			t.drop(src, k)
		}
	}
}
