// Package facility is a gateway node's side of a facility of several
// nodes sharing one etcd store (s2cs --node): membership under a lease,
// placement of a stream's channels on the nodes, the reconciler that
// mirrors every stream of the facility into the node's table and serves,
// gives up, takes over or gives back channels, and the steward that runs
// the janitor's work for a stream.
//
// The gateway composes it: what a Node needs of the gateway's table of
// live streams comes in as the Table interface; the gateway keeps the
// state changes of a stream (build, launch, end) and asks the Node where
// and when.
package facility

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"time"

	"scistream/internal/api"
	"scistream/internal/egress"
	"scistream/internal/pace"
	"scistream/internal/ports"
	"scistream/internal/store"
	"scistream/internal/stream"
)

// A facility of several gateway nodes: every node joins
// the facility in the shared etcd store under a lease (store.Member) and
// keeps a mirror of every live stream of the facility in its table, so
// that it answers the control API for any of them. A stream's channels
// are spread over the nodes when it is created (its record's Nodes); a
// node serves a channel once it has claimed it in etcd under its lease
// and bound the channel's port on its own address (ports are reserved
// for the whole facility, so the port is free on every node).
//
// The reconciler runs on every change of the facility's view and every
// 250 ms: it mirrors new records, applies changes other nodes made
// (attach, rate, allow-list, lease), stops what ended, and serves, gives
// up or takes over channels. When a node dies, its lease runs out (half
// of Config.Takeover), etcd deletes its claims, and the first live node
// in an order derived from the stream and channel claims each channel,
// the others stepping in a little later if it does not. Application
// connections that were open on the dead node are reset (their sockets
// close with a reset, and a TLS leg without close_notify aborts its
// relay on the peer gateway); the outbound gateway finds the channel on
// its new node by dialing the channel's port on the peer facility's
// nodes (api.OutboundRequest.PeerNodes).
//
// When etcd cannot be reached, control requests that change state
// answer unavailable and every channel keeps being served; a node whose
// lease ran out meanwhile gets a new one when etcd returns and claims
// its channels again, giving up any that another node took over.

// Timing of channel claims.
const (
	// claimGrace is how long the other nodes leave a channel unclaimed
	// whose placed node is alive (it binds and claims at once, unless
	// it cannot).
	claimGrace = 2 * time.Second
	// claimStep is the pause between the successors of a dead node: the
	// first in a channel's order claims at once, the next after one
	// step, and so on, so that a node that cannot bind the port does
	// not leave the channel unserved.
	claimStep = 500 * time.Millisecond
	// ClaimWait is how long a create waits for the nodes it placed
	// channels on to serve them before it serves them itself.
	ClaimWait = 3 * time.Second
	// reconcileEvery is the reconciler's tick when nothing changes.
	reconcileEvery = 250 * time.Millisecond
)

// Table is the gateway's table of live streams, as a Node uses it.
type Table interface {
	// Lookup returns the table's live stream of k (nil if none), whether
	// k is being created on this node, and whether the gateway is
	// shutting down.
	Lookup(k store.Key) (st *stream.Stream, pending, closed bool)
	// Live returns the table's live streams.
	Live() []*stream.Stream
	// Adopt builds the stream of rec with listeners lns (nil for the
	// channels this node does not serve), puts it in the table and
	// starts it. It returns nil, nil if the gateway is shutting down.
	Adopt(rec *store.Record, lns []*net.TCPListener) (*stream.Stream, error)
	// Drop takes st out of the table if it is still there.
	Drop(st *stream.Stream)
	// Rebalance gives best effort what the reservations leave, after a
	// grant changed.
	Rebalance()
}

// Config configures a Node. Every field must be set but SharedWAN,
// Routed and Info (beyond what Join fills in).
type Config struct {
	// Node is this node's name in the facility.
	Node string
	// Store is the facility's etcd store, Info what the node announces
	// there (its Name, SharedWAN and Started are filled in), and TTL its
	// lease (half the takeover time).
	Store *store.Etcd
	Info  store.NodeInfo
	TTL   time.Duration
	// Now is the gateway's clock, for the time the node joined.
	Now func() time.Time
	// SharedWAN is the shared WAN port's settings as given (before the
	// gateway's defaults), which every node must have alike; Routed says
	// peers reach the port through a router (--wan_advertise), not at
	// each node's own address.
	SharedWAN string
	Routed    bool
	// ListenerIP is the node's own address, for the view of a channel
	// whose node is not known.
	ListenerIP string
	// Alloc binds the data ports of PortRange; the Node makes it skip
	// those other streams of the facility hold.
	Alloc     *ports.Allocator
	PortRange ports.Range
	// Self is the gateway's own endpoints: the Node adds the other
	// nodes' addresses to them.
	Self  *egress.Self
	Log   *slog.Logger
	Table Table
}

// Node is a gateway node's side of its facility. Lifecycle: NewNode;
// Join (once the gateway can serve); Serve runs the reconciler until ctx
// ends; Leave ends the lease once Serve returned.
type Node struct {
	cfg   Config
	log   *slog.Logger
	alloc *ports.Allocator
	table Table
	m     *store.Member
	node  string

	recMu sync.Mutex // one reconcile (or mirror) at a time

	mu        sync.Mutex // guards the following fields
	unclaimed map[chanRef]time.Time
	serving   map[chanRef]time.Time   // channels this node took over, since when
	ended     map[store.Key]time.Time // streams this node ended: the Created of each
	taken     map[int]bool            // ports a create found held by other streams
	epoch     int
}

type chanRef struct {
	k  store.Key
	ch int
}

// NewNode returns the Node of cfg, which has not joined yet.
func NewNode(cfg Config) *Node {
	return &Node{cfg: cfg, log: cfg.Log, alloc: cfg.Alloc, table: cfg.Table, node: cfg.Node,
		unclaimed: map[chanRef]time.Time{}, serving: map[chanRef]time.Time{}, ended: map[store.Key]time.Time{}, taken: map[int]bool{}}
}

// Join joins the facility under the node's lease, brings its streams
// into the table and serves the channels placed on this node. Serve
// then keeps them in line.
func (f *Node) Join() error {
	info := f.cfg.Info
	info.Name, info.SharedWAN, info.Started = f.node, f.cfg.SharedWAN, f.cfg.Now()
	m, err := f.cfg.Store.Join(info, f.cfg.TTL)
	if err != nil {
		return fmt.Errorf("join the facility as node %s: %w", f.node, err)
	}
	f.m = m
	f.alloc.SetSkip(f.held)
	// The other nodes serve the same range and shared port: a stream
	// must not reach their listeners either (internal/egress).
	f.cfg.Self.SetOthers(func() []netip.Addr {
		var out []netip.Addr
		for _, n := range m.Nodes() {
			if a, err := netip.ParseAddr(n.Host); err == nil && n.Name != f.node {
				out = append(out, a.Unmap())
			}
		}
		return out
	})
	f.log.Info("joined the facility", "node", f.node, "nodes", len(m.Nodes()), "takeover", 2*f.cfg.TTL)
	f.reconcile(context.Background())
	return nil
}

// held reports whether another stream of the facility holds port p
// (the allocator's skip).
func (f *Node) held(p int) bool {
	f.mu.Lock()
	taken := f.taken[p]
	f.mu.Unlock()
	return taken || f.m.PortHeld(p)
}

// Leave ends the node's lease at once, so that the other nodes take its
// channels over now. Call it once Serve returned; a Node that never
// joined has nothing to leave.
func (f *Node) Leave() {
	if f.m != nil {
		f.m.Leave()
	}
}

// Close stops the node's membership without ending its lease, for a
// live upgrade: the successor joins under the same name and moves the
// claims onto its own lease at its first reconcile, so the other nodes
// take none of the channels over; what the successor does not claim
// again goes when the old lease runs out. Call it once Serve returned.
func (f *Node) Close() {
	if f.m != nil {
		f.m.Close()
	}
}

// Serve runs the reconciler of a joined Node until ctx ends.
func (f *Node) Serve(ctx context.Context) {
	tick := time.NewTicker(reconcileEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-f.m.Changed():
		case <-tick.C:
		}
		f.reconcile(ctx)
	}
}

// reconcile brings the node's table and channels in line with the
// facility's view.
func (f *Node) reconcile(ctx context.Context) {
	f.recMu.Lock()
	defer f.recMu.Unlock()
	if ctx.Err() != nil {
		return
	}
	now := time.Now()
	epoch := f.m.Epoch()
	f.mu.Lock()
	renew := epoch != f.epoch
	f.epoch = epoch
	f.mu.Unlock()
	nodes := f.m.Nodes()
	seen := map[store.Key]bool{}
	for _, sv := range f.m.Streams() {
		rec := sv.Rec
		k := rec.Key()
		if rec.State.Terminal() {
			if st, _, _ := f.table.Lookup(k); st != nil && st.Record().Created.Equal(rec.Created) {
				f.stopMirror(st, rec)
			}
			continue
		}
		seen[k] = true
		if st := f.mirrorLocked(rec); st != nil && !rec.Shared() {
			// A stream on the shared WAN port has no channels to
			// place: every node serves all of them on its own port.
			f.placeChannels(st, rec, nodes, now, renew)
		}
	}
	for _, st := range f.table.Live() {
		if _, pending, _ := f.table.Lookup(st.Key); seen[st.Key] || pending {
			continue
		}
		// Not in the view: created here a moment ago (the watch has
		// not brought it yet), or deleted. Ask etcd.
		if _, err := f.cfg.Store.Get(st.Key); errors.Is(err, store.ErrNotFound) {
			f.stopMirror(st, nil)
		}
	}
	f.forget(seen)
}

// Mirror returns the table's stream of rec, a live record of the
// facility, bringing it into the table if it is not there: for a
// handler that found rec in the store before the reconciler brought it.
// It returns nil for a stream being created or ended on this node, or if
// the stream cannot be built.
func (f *Node) Mirror(rec *store.Record) *stream.Stream {
	f.recMu.Lock()
	defer f.recMu.Unlock()
	return f.mirrorLocked(rec)
}

// mirrorLocked returns the table's stream of rec, with the changes rec
// brings applied, or builds it without listeners (placeChannels opens
// the channels this node serves). It returns nil for a stream being
// created or ended on this node, or if the stream cannot be built.
// f.recMu must be held.
func (f *Node) mirrorLocked(rec *store.Record) *stream.Stream {
	k := rec.Key()
	st, pending, closed := f.table.Lookup(k)
	if st != nil {
		if st.Record().Created.Equal(rec.Created) {
			f.applyRecord(st, rec)
		}
		return st
	}
	if pending || closed || f.endedHere(k, rec.Created) {
		return nil
	}
	st, err := f.table.Adopt(rec, make([]*net.TCPListener, rec.PortsHeld()))
	if err != nil {
		f.log.Error("cannot mirror a stream of the facility", "uid", rec.UID, "owner", rec.Owner, "err", err)
		return nil
	}
	return st
}

// applyRecord applies to st what another node changed in its record:
// the pin of an attach, the rate, the allow-list, the lease.
func (f *Node) applyRecord(st *stream.Stream, rec *store.Record) {
	st.SaveMu.Lock()
	defer st.SaveMu.Unlock()
	cur := st.Record()
	if rec.Updated.Equal(cur.Updated) && rec.State == cur.State && rec.PeerCertSHA256 == cur.PeerCertSHA256 &&
		rec.Rate == cur.Rate && slices.Equal(rec.Allow, cur.Allow) && rec.Expires.Equal(cur.Expires) {
		return
	}
	if rec.PeerCertSHA256 != cur.PeerCertSHA256 {
		pin := rec.PeerCertSHA256
		st.PeerPin.Store(&pin)
	}
	if !slices.Equal(rec.Allow, cur.Allow) {
		if allow, err := stream.ParseAllow(rec.Allow); err == nil { // the node that stored it checked it
			st.Allow.Store(&allow)
		}
	}
	st.SetRecord(rec)
	if rec.Rate != cur.Rate {
		st.Pace.Set(pace.Rate(rec.Rate))
		f.table.Rebalance()
	}
}

// stopMirror stops this node's part of a stream that ended on another
// node (rec, its final record) or whose record was deleted (rec nil).
func (f *Node) stopMirror(st *stream.Stream, rec *store.Record) {
	f.table.Drop(st)
	st.SayEnded()
	st.Stop()
	f.table.Rebalance()
	if rec != nil {
		st.SetRecord(rec)
	}
	f.log.Info("stream ended on another node of the facility", "uid", st.UID, "owner", st.Key.Owner)
}

// placeChannels serves, keeps, gives up or takes over each channel of
// st as the facility's claims say.
func (f *Node) placeChannels(st *stream.Stream, rec *store.Record, nodes []store.NodeInfo, now time.Time, renew bool) {
	k := rec.Key()
	owners := f.m.Owners(k, rec.NumConn)
	for ch, o := range owners {
		has := st.HasChannel(ch)
		switch o {
		case f.node:
			f.claimed(chanRef{k, ch})
			if renew { // a new lease: move the claim onto it
				if ok, err := f.m.Claim(k, ch); err == nil && !ok {
					st.CloseChannel(ch)
					continue
				}
			}
			if !has {
				f.serveChannel(st, rec, ch, false)
			} else {
				f.giveBack(st, rec, ch, nodes, now)
			}
		case "":
			if has {
				// Our claim is gone: the lease ran out while etcd was
				// away. Claim again; give the channel up if another
				// node took it meanwhile.
				if ok, err := f.m.Claim(k, ch); err == nil && !ok {
					st.CloseChannel(ch)
				}
				continue
			}
			if f.shouldClaim(chanRef{k, ch}, rec, nodes, now) {
				f.serveChannel(st, rec, ch, true)
			}
		default:
			f.claimed(chanRef{k, ch})
			f.mu.Lock()
			delete(f.serving, chanRef{k, ch})
			f.mu.Unlock()
			if has {
				st.CloseChannel(ch)
				f.log.Warn("channel now served by another node of the facility: stopped serving it here", "uid", rec.UID, "channel", ch, "node", o)
			}
		}
	}
}

// serveChannel binds channel ch's port on this node and serves it,
// claiming it first if claim is set (else the node holds the claim and
// gives it up if it cannot bind the port).
func (f *Node) serveChannel(st *stream.Stream, rec *store.Record, ch int, claim bool) {
	k := rec.Key()
	lns, err := f.alloc.ListenPorts([]int{rec.Ports[ch]})
	if err != nil {
		level := slog.LevelWarn
		if errors.Is(err, ports.ErrInUse) {
			// A create on this node holds the port for a moment, until
			// its transaction finds it reserved and lets it go: the
			// next reconcile binds it.
			level = slog.LevelDebug
		}
		f.log.Log(context.Background(), level, "cannot bind the port of a channel: leaving it to another node", "uid", rec.UID, "channel", ch, "port", rec.Ports[ch], "err", err)
		if !claim {
			f.m.Unclaim(k, ch)
		}
		return
	}
	if claim {
		ok, err := f.m.Claim(k, ch)
		if err != nil || !ok {
			f.alloc.Release(lns[0])
			return
		}
	}
	if !st.OpenChannel(ch, lns[0]) {
		f.alloc.Release(lns[0])
		return
	}
	placed := ""
	if ch < len(rec.Nodes) {
		placed = rec.Nodes[ch]
	}
	if placed != f.node {
		f.mu.Lock()
		f.serving[chanRef{k, ch}] = time.Now()
		f.mu.Unlock()
		f.log.Warn("took over a channel of the facility", "uid", rec.UID, "channel", ch, "listener", lns[0].Addr().String(), "placed_on", placed)
	} else {
		f.log.Debug("serving a channel", "uid", rec.UID, "channel", ch, "listener", lns[0].Addr().String())
	}
}

// giveBack hands channel ch, which this node took over, back to the
// node it was placed on once that node is live again, this node has
// served it for claimGrace, and no connection is open on it (a move
// resets a channel's connections): it gives up its claim, and the
// placed node claims the channel at its next reconcile. So a stream's
// channels spread over the nodes again after a node comes back.
func (f *Node) giveBack(st *stream.Stream, rec *store.Record, ch int, nodes []store.NodeInfo, now time.Time) {
	c := chanRef{rec.Key(), ch}
	f.mu.Lock()
	since, took := f.serving[c]
	f.mu.Unlock()
	if !took || ch >= len(rec.Nodes) || now.Sub(since) < claimGrace {
		return
	}
	placed := rec.Nodes[ch]
	if !slices.ContainsFunc(nodes, func(n store.NodeInfo) bool { return n.Name == placed }) || !st.ChannelIdle(ch) {
		return
	}
	if err := f.m.Unclaim(c.k, ch); err != nil {
		return
	}
	st.CloseChannel(ch)
	f.mu.Lock()
	delete(f.serving, c)
	f.mu.Unlock()
	f.log.Info("gave a channel back to the node it was placed on", "uid", rec.UID, "channel", ch, "node", placed)
}

// shouldClaim says whether this node claims the unclaimed channel c of
// rec now: at once if it was placed here; else, when its node is alive,
// after claimGrace, and when it is not, at once for the first node of
// the channel's order of successors and one claimStep later for each
// next one.
func (f *Node) shouldClaim(c chanRef, rec *store.Record, nodes []store.NodeInfo, now time.Time) bool {
	f.mu.Lock()
	first, ok := f.unclaimed[c]
	if !ok {
		first = now
		f.unclaimed[c] = now
	}
	f.mu.Unlock()
	placed := ""
	if c.ch < len(rec.Nodes) {
		placed = rec.Nodes[c.ch]
	}
	if placed == f.node {
		return true
	}
	var wait time.Duration
	var order []string
	for _, n := range nodes {
		if n.Name == placed {
			wait = claimGrace
			continue
		}
		order = append(order, n.Name)
	}
	if len(order) == 0 {
		return false
	}
	start := int(spread(c.k.UID, c.ch) % uint32(len(order)))
	order = append(order[start:], order[:start]...)
	rank := slices.Index(order, f.node)
	if rank < 0 {
		return false // not a live node: the lease is being renewed
	}
	return now.Sub(first) >= wait+time.Duration(rank)*claimStep
}

// claimed notes that channel c has a node.
func (f *Node) claimed(c chanRef) {
	f.mu.Lock()
	delete(f.unclaimed, c)
	f.mu.Unlock()
}

// endedHere reports whether this node ended the incarnation of k
// created at created (NoteEnded).
func (f *Node) endedHere(k store.Key, created time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.ended[k]
	return ok && t.Equal(created)
}

// NoteEnded notes a stream this node is ending (created is its Created
// time), so that it is not mirrored again before the store has its end.
func (f *Node) NoteEnded(k store.Key, created time.Time) {
	f.mu.Lock()
	f.ended[k] = created
	f.mu.Unlock()
}

// forget drops what the node remembers of streams no longer live.
func (f *Node) forget(live map[store.Key]bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for c := range f.unclaimed {
		if !live[c.k] {
			delete(f.unclaimed, c)
		}
	}
	for c := range f.serving {
		if !live[c.k] {
			delete(f.serving, c)
		}
	}
	for k := range f.ended {
		if !live[k] {
			delete(f.ended, k)
		}
	}
}

// spread is a channel's place in the facility: where its order of nodes
// starts.
func spread(uid string, ch int) uint32 {
	h := fnv.New32a()
	h.Write([]byte(uid))
	h.Write([]byte{byte(ch), byte(ch >> 8)})
	return h.Sum32()
}

// placement spreads numConn channels over the live nodes, starting at a
// node derived from the UID, so that one stream's channels, and many
// streams' first channels, land on different nodes.
func (f *Node) placement(uid string, numConn int) []string {
	var names []string
	for _, n := range f.m.Nodes() {
		names = append(names, n.Name)
	}
	if !slices.Contains(names, f.node) {
		names = append(names, f.node) // its lease is being renewed
		slices.Sort(names)
	}
	start := int(spread(uid, 0) % uint32(len(names)))
	out := make([]string, numConn)
	for i := range out {
		out[i] = names[(start+i)%len(names)]
	}
	return out
}

// A StoreError is a create's failure to store the stream's record (Err,
// from internal/store): the gateway answers it as any failing store.
type StoreError struct{ Err error }

func (e *StoreError) Error() string { return "store the stream: " + e.Err.Error() }
func (e *StoreError) Unwrap() error { return e.Err }

// createPortAttempts bounds how often a create binds other ports after
// other nodes' creates took the ones it chose. Every lost attempt means
// another create won, so the bound only needs to exceed the creates a
// facility runs at once: five was met by six concurrent requests on
// three nodes (TestFacility, once in CI).
const createPortAttempts = 16

// Create places a new stream's channels on the nodes: it binds the
// stream's ports here (skipping those other streams of the facility
// hold), stores the record (its Ports and Nodes set) and reserves the
// ports in one etcd transaction, and claims the channels placed on this
// node. It returns the listeners of those channels (nil for the others,
// whose ports it let go); the gateway builds and launches the stream
// with them, then calls AwaitClaims. The caller holds rec's reservation.
// A stream on the shared WAN port (rec.Shared) holds no ports and claims
// no channels: every node serves all of them on its own shared port, so
// Create only stores the record, and the other nodes serve it once their
// reconcile mirrors it, within milliseconds; rec.Nodes[0] names the node
// that stewards it while it lives.
//
// A failure is an *api.Error, or a *StoreError.
func (f *Node) Create(rec *store.Record) ([]*net.TCPListener, error) {
	if rec.Shared() {
		rec.Ports = nil
		rec.Nodes = f.placement(rec.UID, 1)
		if err := f.m.Create(rec); err != nil {
			if errors.Is(err, store.ErrExists) {
				return nil, existsInFacility(rec.UID)
			}
			return nil, &StoreError{err}
		}
		return nil, nil
	}
	var lns []*net.TCPListener
	for attempt := 0; ; attempt++ {
		l, err := f.alloc.Listen(rec.NumConn)
		if err != nil {
			if errors.Is(err, ports.ErrExhausted) {
				return nil, api.Errorf(api.CodeNoResources, "no free ports: %d wanted, range %s is in use across the facility; release streams or widen --port_range", rec.NumConn, f.cfg.PortRange).WithCause(err)
			}
			return nil, api.Errorf(api.CodeInternal, "bind listeners").WithCause(err)
		}
		rec.Ports = rec.Ports[:0]
		for _, ln := range l {
			rec.Ports = append(rec.Ports, ln.Addr().(*net.TCPAddr).Port)
		}
		rec.Nodes = f.placement(rec.UID, rec.NumConn)
		err = f.m.Create(rec)
		if err == nil {
			lns = l
			break
		}
		for _, ln := range l {
			f.alloc.Release(ln)
		}
		var taken *store.PortsTakenError
		switch {
		case errors.As(err, &taken) && attempt < createPortAttempts:
			f.mu.Lock()
			for _, p := range taken.Ports {
				f.taken[p] = true // until the view has them
			}
			f.mu.Unlock()
			continue
		case errors.Is(err, store.ErrExists):
			return nil, existsInFacility(rec.UID)
		case errors.As(err, &taken):
			return nil, api.Errorf(api.CodeUnavailable, "could not reserve ports: other nodes of the facility took them at the same moment; retry").WithCause(err)
		}
		return nil, &StoreError{err}
	}
	f.mu.Lock()
	clear(f.taken)
	f.mu.Unlock()

	k := rec.Key()
	mine := make([]*net.TCPListener, rec.NumConn)
	for ch, ln := range lns {
		if rec.Nodes[ch] == f.node {
			if ok, err := f.m.Claim(k, ch); err == nil && ok {
				mine[ch] = ln
				continue
			}
		}
		f.alloc.Release(ln)
	}
	return mine, nil
}

// existsInFacility is the answer to a create whose UID a live stream of
// the facility holds.
func existsInFacility(uid string) error {
	return api.Errorf(api.CodeConflict, "stream %s already exists in this facility; release it first or use another uid", uid)
}

// AwaitClaims waits, up to ClaimWait, for every channel of st, a stream
// Create placed, to have a node, and serves those still without one
// itself. A stream on the shared WAN port has none to wait for.
func (f *Node) AwaitClaims(st *stream.Stream, rec *store.Record) {
	if rec.Shared() {
		return
	}
	k := rec.Key()
	deadline := time.NewTimer(ClaimWait)
	defer deadline.Stop()
wait:
	for {
		updated := f.m.Updated() // before the check: no change is missed
		if !slices.Contains(f.m.Owners(k, rec.NumConn), "") {
			break
		}
		select {
		case <-st.Done():
			return
		case <-deadline.C:
			break wait
		case <-updated:
		}
	}
	f.recMu.Lock()
	defer f.recMu.Unlock()
	for ch, o := range f.m.Owners(k, rec.NumConn) {
		if o == "" && !st.HasChannel(ch) {
			f.log.Warn("a node of the facility did not serve the channel placed on it in time: serving it here", "uid", rec.UID, "channel", ch, "placed_on", rec.Nodes[ch])
			f.serveChannel(st, rec, ch, true)
		}
	}
}

// Stewards reports whether this node runs the janitor's work for st:
// the node that serves its first channel (or, while none does, the node
// it was placed on), so that one node expires a stream, not all. A stream
// on the shared WAN port, whose channels every node serves, is stewarded
// by the node it was placed on while that node lives, else by the first
// live node of an order derived from its UID.
func (f *Node) Stewards(st *stream.Stream) bool {
	rec := st.Record()
	if rec.Shared() {
		return f.sharedSteward(rec) == f.node
	}
	o := f.m.Owners(rec.Key(), 1)[0]
	if o == "" && len(rec.Nodes) > 0 {
		o = rec.Nodes[0]
	}
	return o == f.node
}

// sharedSteward names the node that stewards rec, a stream on the shared
// WAN port (stewards), or "" while no node is live.
func (f *Node) sharedSteward(rec *store.Record) string {
	var live []string
	for _, n := range f.m.Nodes() {
		live = append(live, n.Name)
	}
	return stewardOf(rec, live)
}

// stewardOf is sharedSteward among the live nodes named live: the node
// rec was placed on while it lives, else the one rec's UID picks from
// the others, the same on every node.
func stewardOf(rec *store.Record, live []string) string {
	if len(rec.Nodes) > 0 && slices.Contains(live, rec.Nodes[0]) {
		return rec.Nodes[0]
	}
	if len(live) == 0 {
		return ""
	}
	live = slices.Sorted(slices.Values(live))
	return live[int(spread(rec.UID, 0)%uint32(len(live)))]
}

// View fills the facility's part of the view of rec, a live stream:
// where each channel is served now, and the hosts of the facility's
// nodes. It does nothing before the node joined.
func (f *Node) View(v *api.Stream, rec *store.Record) {
	if f.m == nil {
		return
	}
	hosts := map[string]string{}
	for _, n := range f.m.Nodes() {
		hosts[n.Name] = n.Host
		if !slices.Contains(v.Nodes, n.Host) {
			v.Nodes = append(v.Nodes, n.Host)
		}
	}
	if rec.Shared() {
		// Every node serves every channel, on the shared WAN port. Behind
		// a router the nodes' own addresses are not for the peer (the
		// router's port is not theirs): it dials the router alone.
		if f.cfg.Routed {
			v.Nodes = nil
		}
		return
	}
	owners := f.m.Owners(rec.Key(), rec.NumConn)
	v.Listeners = nil
	for ch, p := range rec.Ports {
		host := hosts[owners[ch]]
		if host == "" && ch < len(rec.Nodes) {
			host = hosts[rec.Nodes[ch]]
		}
		if host == "" {
			host = f.cfg.ListenerIP
		}
		l := net.JoinHostPort(host, strconv.Itoa(p))
		v.Listeners = append(v.Listeners, l)
		v.Channels = append(v.Channels, api.Channel{Channel: ch, Node: owners[ch], Listener: l})
	}
}

// Info fills the facility's part of /v1/info. It does nothing before the
// node joined.
func (f *Node) Info(in *api.Info) {
	if f.m == nil {
		return
	}
	in.Facility = f.cfg.Store.Facility()
	in.Node = f.node
	for _, n := range f.m.Nodes() {
		in.Nodes = append(in.Nodes, api.NodeInfo{Name: n.Name, Host: n.Host})
	}
}
