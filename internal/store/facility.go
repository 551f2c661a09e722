package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A facility of several gateway nodes shares one etcd store. Besides the
// stream records (streams/), each node keeps under the facility's prefix:
//
//	nodes/<name>                  the node (NodeInfo), under the node's lease
//	ports/<port>                  the stream and channel that hold a port, facility-wide
//	chans/<owner>/<uid>/<channel> the node that serves a channel, under its lease
//
// A node that dies stops renewing its lease: etcd deletes its nodes/ and
// chans/ keys when the lease runs out, and the other nodes, watching the
// prefix, claim the channels it served (a transaction that creates the
// chans/ key only if it is absent, so one node wins). Ports are reserved
// for the whole facility, so the node that takes a channel over listens
// on the same port number on its own address.

// NodeInfo is one gateway node of a facility, as the others see it.
type NodeInfo struct {
	// Name is unique in the facility (s2cs --node).
	Name string `json:"name"`
	// Host is the address its data listeners are reached at (the
	// gateway's listener IP).
	Host string `json:"host"`
	// CertSHA256 is its WAN certificate's fingerprint: every node of a
	// facility presents the same one, since a peer pins one per stream.
	CertSHA256 string `json:"cert_sha256"`
	// SharedWAN says its shared WAN port's settings (s2cs --wan_port,
	// --wan_domain, --wan_advertise, --wan_proxy_protocol), empty without
	// one: every node of a facility has the same, since every node serves
	// each stream on the shared port.
	SharedWAN string `json:"shared_wan,omitempty"`
	// Started is when it joined.
	Started time.Time `json:"started"`
}

// ErrExists is returned by Member.Create for a key that holds a live
// stream.
var ErrExists = errors.New("stream exists")

// PortsTakenError is returned by Member.Create when another stream of
// the facility holds some of the ports.
type PortsTakenError struct{ Ports []int }

func (e *PortsTakenError) Error() string {
	return fmt.Sprintf("ports %v are held by other streams of the facility", e.Ports)
}

// Stored is a record as the facility's view holds it, with the etcd
// revision that last changed it.
type Stored struct {
	Rec *Record
	Rev int64
}

// Member is one node's membership of its facility: its lease (kept alive
// until Leave or Close), and a view of the facility's records, channel
// owners, nodes and ports that a watch keeps current. Its methods are
// safe for concurrent use.
type Member struct {
	e    *Etcd
	self NodeInfo
	ttl  time.Duration

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	changed chan struct{} // one token: the view changed, or the lease was renewed anew

	mu      sync.Mutex    // guards the following fields
	updated chan struct{} // closed (and replaced) when the view changes: Updated
	lease   clientv3.LeaseID
	epoch   int   // incremented by each new lease
	rev     int64 // the view's revision
	streams map[Key]Stored
	chans   map[chanKey]string // channel -> node name
	nodes   map[string]NodeInfo
	ports   map[int]string // port -> "owner/uid/channel", escaped
}

type chanKey struct {
	Key
	ch int
}

// Join registers self in the facility under a lease of ttl (at least 2
// s), loads the facility's view and keeps both current until Leave or
// Close. It refuses a node whose certificate differs from the live
// nodes' (a peer pins one certificate per stream, whichever node serves
// its channels), or whose shared WAN port does.
func (e *Etcd) Join(self NodeInfo, ttl time.Duration) (*Member, error) {
	if err := ValidFacility(self.Name); err != nil {
		return nil, fmt.Errorf("node name %w", err)
	}
	if ttl < 2*time.Second {
		return nil, fmt.Errorf("node lease %s: at least 2s", ttl)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Member{e: e, self: self, ttl: ttl, ctx: ctx, cancel: cancel, changed: make(chan struct{}, 1), updated: make(chan struct{})}
	if err := m.load(); err != nil {
		cancel()
		return nil, err
	}
	m.mu.Lock()
	for _, n := range m.nodes {
		if n.Name != self.Name && n.CertSHA256 != self.CertSHA256 {
			m.mu.Unlock()
			cancel()
			return nil, fmt.Errorf("node %s of facility %s presents WAN certificate sha256 %s, this node %s: every node of a facility must use the same --server_crt and --server_key, since a peer pins one certificate per stream",
				n.Name, e.Facility(), n.CertSHA256, self.CertSHA256)
		}
		if n.Name != self.Name && n.SharedWAN != self.SharedWAN {
			m.mu.Unlock()
			cancel()
			return nil, fmt.Errorf("node %s of facility %s has the shared WAN port %s, this node %s: every node of a facility must give the same --wan_port, --wan_domain, --wan_advertise and --wan_proxy_protocol, since every node serves each stream on the shared port",
				n.Name, e.Facility(), sharedWANText(n.SharedWAN), sharedWANText(self.SharedWAN))
		}
	}
	m.mu.Unlock()
	if err := m.register(); err != nil {
		cancel()
		return nil, err
	}
	m.wg.Add(2)
	go m.keepAlive()
	go m.watch()
	return m, nil
}

// Facility returns the facility's name.
func (e *Etcd) Facility() string {
	return strings.TrimSuffix(strings.TrimPrefix(e.prefix, "/scistream/"), "/")
}

// Self returns this node.
func (m *Member) Self() NodeInfo { return m.self }

// Changed is signalled after the view changed or the node's lease was
// granted anew (its claims must then be renewed).
func (m *Member) Changed() <-chan struct{} { return m.changed }

func (m *Member) notify() {
	select {
	case m.changed <- struct{}{}:
	default:
	}
	m.mu.Lock()
	close(m.updated)
	m.updated = make(chan struct{})
	m.mu.Unlock()
}

// Updated returns a channel that is closed at the view's next change:
// for a caller waiting on the view (any number of them), where Changed
// serves one.
func (m *Member) Updated() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.updated
}

// Epoch counts the node's leases: it changes each time the lease had
// to be granted anew, and the node's claims must then move onto it.
func (m *Member) Epoch() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.epoch
}

func (e *Etcd) nodeKey(name string) string {
	return e.prefix + "nodes/" + name
}
func (e *Etcd) portKey(p int) string { return e.prefix + "ports/" + strconv.Itoa(p) }
func (e *Etcd) chanPrefix(k Key) string {
	return e.prefix + "chans/" + url.PathEscape(k.Owner) + "/" + url.PathEscape(k.UID) + "/"
}
func (e *Etcd) chanKey(k Key, ch int) string { return e.chanPrefix(k) + strconv.Itoa(ch) }
func portHolder(k Key, ch int) string {
	return url.PathEscape(k.Owner) + "/" + url.PathEscape(k.UID) + "/" + strconv.Itoa(ch)
}

// load reads the whole facility prefix into the view, at one revision.
func (m *Member) load() error {
	ctx, cancel := m.e.ctx()
	defer cancel()
	resp, err := m.e.cli.Get(ctx, m.e.prefix, clientv3.WithPrefix())
	if err != nil {
		return m.e.fail("read the facility", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.streams = map[Key]Stored{}
	m.chans = map[chanKey]string{}
	m.nodes = map[string]NodeInfo{}
	m.ports = map[int]string{}
	for _, kv := range resp.Kvs {
		m.applyLocked(mvccpb.PUT, kv)
	}
	m.rev = resp.Header.Revision
	return nil
}

// applyLocked applies one change of key kv to the view. m.mu must be
// held.
func (m *Member) applyLocked(typ mvccpb.Event_EventType, kv *mvccpb.KeyValue) {
	rest, ok := strings.CutPrefix(string(kv.Key), m.e.prefix)
	if !ok {
		return
	}
	kind, rest, _ := strings.Cut(rest, "/")
	del := typ == mvccpb.DELETE
	switch kind {
	case "streams":
		k, ok := parseKey(rest)
		if !ok {
			return
		}
		if del {
			delete(m.streams, k)
			return
		}
		r, err := decode(kv.Key, kv.Value)
		if err != nil {
			return
		}
		m.streams[k] = Stored{Rec: r, Rev: kv.ModRevision}
	case "chans":
		i := strings.LastIndexByte(rest, '/')
		if i < 0 {
			return
		}
		k, ok := parseKey(rest[:i])
		ch, err := strconv.Atoi(rest[i+1:])
		if !ok || err != nil {
			return
		}
		if del {
			delete(m.chans, chanKey{k, ch})
		} else {
			m.chans[chanKey{k, ch}] = string(kv.Value)
		}
	case "nodes":
		if del {
			delete(m.nodes, rest)
			return
		}
		var n NodeInfo
		if json.Unmarshal(kv.Value, &n) == nil {
			m.nodes[rest] = n
		}
	case "ports":
		p, err := strconv.Atoi(rest)
		if err != nil {
			return
		}
		if del {
			delete(m.ports, p)
		} else {
			m.ports[p] = string(kv.Value)
		}
	}
}

// parseKey reads "<owner>/<uid>", both path-escaped.
func parseKey(s string) (Key, bool) {
	o, u, ok := strings.Cut(s, "/")
	if !ok {
		return Key{}, false
	}
	owner, err1 := url.PathUnescape(o)
	uid, err2 := url.PathUnescape(u)
	return Key{Owner: owner, UID: uid}, ok && err1 == nil && err2 == nil
}

// register grants a lease and puts the node's key under it.
func (m *Member) register() error {
	ctx, cancel := m.e.ctx()
	defer cancel()
	lr, err := m.e.cli.Grant(ctx, int64((m.ttl+time.Second-1)/time.Second))
	if err != nil {
		return m.e.fail("grant the node's lease", err)
	}
	self := m.self
	v, _ := json.Marshal(self)
	if _, err := m.e.cli.Put(ctx, m.e.nodeKey(self.Name), string(v), clientv3.WithLease(lr.ID)); err != nil {
		return m.e.fail("register the node", err)
	}
	m.mu.Lock()
	m.lease = lr.ID
	m.epoch++
	m.mu.Unlock()
	m.notify()
	return nil
}

// keepAlive renews the lease until the member closes; a lease etcd lost
// (it expired while the node could not reach etcd) is granted anew.
func (m *Member) keepAlive() {
	defer m.wg.Done()
	for m.ctx.Err() == nil {
		m.mu.Lock()
		lease := m.lease
		m.mu.Unlock()
		ch, err := m.e.cli.KeepAlive(m.ctx, lease)
		if err == nil {
			for range ch { // until the lease is lost or the member closes
			}
		}
		// The lease expired (or the member closes): register anew,
		// with backoff, until etcd answers.
		for wait := 200 * time.Millisecond; m.ctx.Err() == nil; wait = min(2*wait, 2*time.Second) {
			if m.register() == nil {
				break
			}
			select {
			case <-m.ctx.Done():
			case <-time.After(wait):
			}
		}
	}
}

// watch keeps the view current from its revision on; a watch that
// fails (a compacted revision) reloads the view.
func (m *Member) watch() {
	defer m.wg.Done()
	for m.ctx.Err() == nil {
		m.mu.Lock()
		rev := m.rev
		m.mu.Unlock()
		wch := m.e.cli.Watch(clientv3.WithRequireLeader(m.ctx), m.e.prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
		for resp := range wch {
			if resp.Err() != nil {
				break
			}
			m.mu.Lock()
			for _, ev := range resp.Events {
				m.applyLocked(ev.Type, ev.Kv)
			}
			m.rev = max(m.rev, resp.Header.Revision)
			m.mu.Unlock()
			m.notify()
		}
		if m.ctx.Err() != nil {
			return
		}
		// Broken (no leader, compacted): read everything again once
		// etcd answers, then watch from there.
		for wait := 200 * time.Millisecond; m.ctx.Err() == nil; wait = min(2*wait, 2*time.Second) {
			if m.load() == nil {
				m.notify()
				break
			}
			select {
			case <-m.ctx.Done():
			case <-time.After(wait):
			}
		}
	}
}

// Nodes returns the facility's live nodes, ordered by name.
func (m *Member) Nodes() []NodeInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]NodeInfo, 0, len(m.nodes))
	for _, n := range m.nodes {
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b NodeInfo) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Streams returns every record of the view (each a copy).
func (m *Member) Streams() []Stored {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Stored, 0, len(m.streams))
	for _, s := range m.streams {
		r := *s.Rec
		out = append(out, Stored{Rec: &r, Rev: s.Rev})
	}
	return out
}

// Stream returns the view's record of k.
func (m *Member) Stream(k Key) (Stored, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.streams[k]
	if ok {
		r := *s.Rec
		s.Rec = &r
	}
	return s, ok
}

// Owners returns the node serving each of n channels of k ("" for one
// no node claims).
func (m *Member) Owners(k Key, n int) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]string, n)
	for i := range out {
		out[i] = m.chans[chanKey{k, i}]
	}
	return out
}

// PortHeld reports whether a stream of the facility holds port p.
func (m *Member) PortHeld(p int) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.ports[p]
	return ok
}

// Create stores the new record r and reserves its ports for the whole
// facility, in one transaction: it fails with ErrExists if a live stream
// holds r's key (an ended one is replaced), with *PortsTakenError if
// other streams hold some of its ports, and with ErrUnavailable if etcd
// does not answer.
func (m *Member) Create(r *Record) error {
	v, err := json.Marshal(r)
	if err != nil {
		return err
	}
	k := r.Key()
	key := m.e.key(k)
	for range 3 {
		ctx, cancel := m.e.ctx()
		resp, err := m.e.cli.Get(ctx, key)
		cancel()
		if err != nil {
			return m.e.fail("read", err)
		}
		cmp := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", 0)}
		if len(resp.Kvs) > 0 {
			old, err := decode(resp.Kvs[0].Key, resp.Kvs[0].Value)
			if err != nil {
				return err
			}
			if !old.State.Terminal() {
				return ErrExists
			}
			cmp = []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", resp.Kvs[0].ModRevision)}
		}
		ops := []clientv3.Op{clientv3.OpPut(key, string(v))}
		for ch, p := range r.Ports {
			pk := m.e.portKey(p)
			cmp = append(cmp, clientv3.Compare(clientv3.CreateRevision(pk), "=", 0))
			ops = append(ops, clientv3.OpPut(pk, portHolder(k, ch)))
		}
		ctx, cancel = m.e.ctx()
		tr, err := m.e.cli.Txn(ctx).If(cmp...).Then(ops...).Commit()
		cancel()
		if err != nil {
			return m.e.fail("create", err)
		}
		if tr.Succeeded {
			return nil
		}
		// Which part failed: the stream (changed since read: read it
		// again), or some ports.
		var taken []int
		for _, p := range r.Ports {
			ctx, cancel := m.e.ctx()
			pr, err := m.e.cli.Get(ctx, m.e.portKey(p), clientv3.WithCountOnly())
			cancel()
			if err != nil {
				return m.e.fail("read", err)
			}
			if pr.Count > 0 {
				taken = append(taken, p)
			}
		}
		if len(taken) > 0 {
			return &PortsTakenError{Ports: taken}
		}
	}
	return ErrExists
}

// Claim makes this node the server of channel ch of k, under its lease,
// if no node serves it; a claim this node made under an earlier lease is
// renewed. It reports whether the node serves the channel now.
func (m *Member) Claim(k Key, ch int) (bool, error) {
	m.mu.Lock()
	lease := m.lease
	m.mu.Unlock()
	key := m.e.chanKey(k, ch)
	name := m.self.Name
	ctx, cancel := m.e.ctx()
	defer cancel()
	tr, err := m.e.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, name, clientv3.WithLease(lease))).
		Else(clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.Value(key), "=", name)},
			[]clientv3.Op{clientv3.OpPut(key, name, clientv3.WithLease(lease))}, nil)).
		Commit()
	if err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			m.notify() // the keep-alive loop grants a new one
		}
		return false, m.e.fail("claim a channel", err)
	}
	if tr.Succeeded {
		return true, nil
	}
	return tr.Responses[0].GetResponseTxn().Succeeded, nil
}

// Unclaim gives up channel ch of k if this node serves it.
func (m *Member) Unclaim(k Key, ch int) error {
	key := m.e.chanKey(k, ch)
	ctx, cancel := m.e.ctx()
	defer cancel()
	_, err := m.e.cli.Txn(ctx).If(clientv3.Compare(clientv3.Value(key), "=", m.self.Name)).Then(clientv3.OpDelete(key)).Commit()
	if err != nil {
		return m.e.fail("give up a channel", err)
	}
	return nil
}

// Leave ends the node's lease at once, so that the other nodes take its
// channels over now rather than when the lease would have run out, and
// stops the member. Idempotent; Close of the store does not leave.
func (m *Member) Leave() {
	m.mu.Lock()
	lease := m.lease
	m.mu.Unlock()
	m.cancel()
	m.wg.Wait()
	ctx, cancel := m.e.ctx()
	defer cancel()
	m.e.cli.Revoke(ctx, lease)
}

// Close stops the member without ending its lease: its channels move to
// other nodes when the lease runs out. Idempotent.
func (m *Member) Close() {
	m.cancel()
	m.wg.Wait()
}

// endOps are the operations that, with a terminal record of r, free what
// the stream held in the facility: its ports and its channel claims.
func (e *Etcd) endOps(r *Record) []clientv3.Op {
	k := r.Key()
	ops := []clientv3.Op{clientv3.OpDelete(e.chanPrefix(k), clientv3.WithPrefix())}
	for ch, p := range r.Ports {
		pk := e.portKey(p)
		// Only if this stream holds it: a port freed and taken again
		// by another stream stays that stream's.
		ops = append(ops, clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.Value(pk), "=", portHolder(k, ch))}, []clientv3.Op{clientv3.OpDelete(pk)}, nil))
	}
	return ops
}

func sharedWANText(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
