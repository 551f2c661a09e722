// Package legpool holds the pooled WAN legs of a gateway's outbound
// streams (seed 002): the legs themselves (Pooled: TLS legs that carry
// sessions one after another, pooled.go) and the Manager that keeps them
// warm, hands them out and tears them down. A stream whose
// outbound request asks for wan_pool N keeps N idle legs per channel
// dialed ahead of need, so an application connection starts without a
// TCP and TLS handshake; a leg whose session ended cleanly at both ends
// goes back to idle for the next one. The gateway caps the pooled legs
// to each peer gateway (Config.MaxPerPeer): when a stream needs a new
// leg at the cap, an idle one (of any stream to that peer) is torn down,
// in order ('Q' then close_notify: an idle leg carries no byte), chosen
// by the gateway's policy:
//
//   - lru: the least recently used idle leg;
//   - lrum (LRU-M, seed 002): flows are queued by how often their legs
//     were torn down before, and the victim is the least recently used
//     leg of the least-torn-down queue, so a flow whose legs keep being
//     torn down (and so re-dialed) is spared.
//
// A flow is one channel of one stream (an Owner): its legs all lead to
// the same application port. When no idle leg is left to tear down, the
// application connection that needed one is refused (the stream counts
// it as dial_failed). Warm legs are dialed only below the cap: warming
// never tears down another stream's leg.
package legpool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"scistream/internal/wan"
)

// Config tunes the pooled WAN legs. Zero fields are the defaults given.
type Config struct {
	// MaxPerPeer caps the pooled legs, idle and busy, this gateway holds
	// to one peer gateway (one host, whatever its ports). If zero, 64.
	MaxPerPeer int
	// Policy picks the idle leg torn down at the cap: PolicyLRU or
	// PolicyLRUM. If empty, PolicyLRUM.
	Policy string
	// MaxWarm caps a stream's wan_pool (idle legs kept warm per
	// channel). If zero, 16.
	MaxWarm int
	// IdleTimeout is how long a leg beyond a channel's wan_pool may stay
	// idle before it is torn down (counted in legs_torn_down): a burst
	// of connections dials more legs than the pool keeps, and a leg
	// holds memory and a socket at both gateways (seed 002). The
	// newest idle legs are kept, the pool's N of them for good. If zero,
	// DefaultIdleTimeout.
	IdleTimeout time.Duration
}

// DefaultIdleTimeout is Config.IdleTimeout's default.
const DefaultIdleTimeout = 30 * time.Second

// Pool policies (Config.Policy).
const (
	PolicyLRU  = "lru"
	PolicyLRUM = "lrum"
)

// WithDefaults returns c with its zero fields defaulted.
func (c Config) WithDefaults() Config {
	if c.MaxPerPeer == 0 {
		c.MaxPerPeer = 64
	}
	if c.Policy == "" {
		c.Policy = PolicyLRUM
	}
	if c.MaxWarm == 0 {
		c.MaxWarm = 16
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	return c
}

// A FieldError names the Config field that Validate refused; Problem
// completes a sentence that starts with the field's name.
type FieldError struct{ Field, Problem string }

func (e *FieldError) Error() string { return e.Field + " " + e.Problem }

// Validate reports the settings a gateway refuses, as a *FieldError.
func (c Config) Validate() error {
	switch {
	case c.MaxPerPeer < 0:
		return &FieldError{"MaxPerPeer", fmt.Sprintf("%d is negative: give the most pooled WAN legs to one peer gateway, e.g. 64", c.MaxPerPeer)}
	case c.MaxWarm < 0:
		return &FieldError{"MaxWarm", fmt.Sprintf("%d is negative: give the most warm legs a stream may keep per channel, e.g. 16", c.MaxWarm)}
	case c.IdleTimeout < 0:
		return &FieldError{"IdleTimeout", fmt.Sprintf("%s is negative: give how long a leg beyond a stream's pool may stay idle, e.g. 30s", c.IdleTimeout)}
	case c.Policy != "" && c.Policy != PolicyLRU && c.Policy != PolicyLRUM:
		return &FieldError{"Policy", fmt.Sprintf("%.20q unknown: use %q or %q", c.Policy, PolicyLRU, PolicyLRUM)}
	}
	return nil
}

// An Owner is a stream whose channels pool legs.
type Owner interface {
	// Context ends when the stream stops.
	Context() context.Context
	// Serves reports whether this gateway serves channel ch of the
	// stream now (a node of a facility serves some of them).
	Serves(ch int) bool
	// DialLeg dials a pooled leg to target, as the stream dials (its
	// bound on handshakes, its redial of legs the peer reset).
	DialLeg(ctx context.Context, target string, leg *wan.Leg) (*Pooled, error)
	// Counted adds to the stream's counters of legs dialed and torn
	// down.
	Counted(created, tornDown int64)
}

// flow is one channel of one stream, the unit LRU-M queues by.
type flow struct {
	o  Owner
	ch int
}

// Leg is one pooled leg on the outbound side, taken by Acquire and given
// back by Release.
type Leg struct {
	p    *Pooled
	flow flow
	peer string
	used uint64    // the manager's tick when it last went idle (LRU order)
	idle time.Time // when it last went idle
}

// Open starts a session on the leg (Pooled.Open).
func (pl *Leg) Open() (*Session, error) { return pl.p.Open() }

// Manager holds every pooled leg of the gateway's outbound streams.
type Manager struct {
	cfg Config
	log *slog.Logger

	mu        sync.Mutex // guards the following fields
	tick      uint64
	open      map[string]int           // by peer: legs open (idle, busy, being dialed)
	idle      map[string]map[*Leg]bool // by peer: idle legs
	byFlow    map[flow][]*Leg          // idle legs of each flow, most recently used last
	teardowns map[flow]int             // legs of each flow torn down at the cap
	waiters   map[Owner]chan struct{}  // warmers to wake when a flow's idle leg was taken
}

// New returns the Manager of a gateway; log is where it says what its
// warmers do (nil: discarded).
func New(cfg Config, log *slog.Logger) *Manager {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Manager{
		cfg:       cfg.WithDefaults(),
		log:       log,
		open:      map[string]int{},
		idle:      map[string]map[*Leg]bool{},
		byFlow:    map[flow][]*Leg{},
		teardowns: map[flow]int{},
		waiters:   map[Owner]chan struct{}{},
	}
}

// ErrPoolFull: every pooled leg to the peer is busy at the cap.
var ErrPoolFull = errors.New("every pooled WAN leg to the peer gateway is busy")

// Acquire returns an idle leg of channel ch of o (dropping those its
// peer ended), or dials a new one to target (tearing down an idle leg of
// the peer by the policy if the peer is at the cap). fresh says it was
// dialed now. The caller must give the leg back with Release.
func (m *Manager) Acquire(ctx context.Context, o Owner, ch int, target string, leg *wan.Leg) (pl *Leg, fresh bool, err error) {
	f := flow{o, ch}
	peer := wan.PeerOf(target)
	var stale []*Leg
	defer func() {
		for _, pl := range stale {
			pl.p.Abort()
		}
	}()
	m.mu.Lock()
	for len(m.byFlow[f]) > 0 {
		legs := m.byFlow[f]
		pl = legs[len(legs)-1]
		m.unidleLocked(pl)
		if pl.p.Stale() {
			// The peer ended it while it waited (a restart, say), or
			// never took it: a leg dialed before the inbound side had
			// the pin looks up to the dialer, whose TLS 1.3 handshake
			// ends before the peer checks its certificate. Drop it
			// and take the next; it was never of use, so the warmer
			// is not told.
			m.open[pl.peer]--
			stale = append(stale, pl)
			continue
		}
		m.wakeLocked(f.o)
		m.mu.Unlock()
		return pl, false, nil
	}
	var victim *Leg
	if m.open[peer] >= m.cfg.MaxPerPeer {
		victim = m.victimLocked(peer)
		if victim == nil {
			m.mu.Unlock()
			return nil, false, fmt.Errorf("%w: %d legs, the gateway's cap (s2cs --pool_max_per_peer)", ErrPoolFull, m.cfg.MaxPerPeer)
		}
		m.unidleLocked(victim)
		m.teardowns[victim.flow]++
		m.open[peer]-- // the victim's slot passes to the new leg
	}
	m.open[peer]++
	m.mu.Unlock()
	if victim != nil {
		victim.flow.o.Counted(0, 1)
		victim.p.Quit()
	}
	pl, err = m.dial(ctx, f, target, leg)
	if err != nil {
		return nil, false, err
	}
	return pl, true, nil
}

// dial opens a pooled leg of flow f to target; its slot in the peer's
// count is taken already, and given back if the dial fails.
func (m *Manager) dial(ctx context.Context, f flow, target string, leg *wan.Leg) (*Leg, error) {
	peer := wan.PeerOf(target)
	p, err := f.o.DialLeg(ctx, target, leg)
	if err != nil {
		m.mu.Lock()
		m.open[peer]--
		m.mu.Unlock()
		return nil, err
	}
	f.o.Counted(1, 0)
	return &Leg{p: p, flow: f, peer: peer}, nil
}

// Release gives back a leg Acquire returned: idle again if its session
// was clean and its stream still runs, else it is gone.
func (m *Manager) Release(pl *Leg, clean bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if clean && pl.p.Idle() && pl.flow.o.Context().Err() == nil {
		m.idleLocked(pl)
		m.wakeLocked(pl.flow.o) // it may hold more than its pool now: the warmer trims
		return
	}
	m.open[pl.peer]--
	pl.p.Abort()
}

func (m *Manager) idleLocked(pl *Leg) {
	m.tick++
	pl.used = m.tick
	pl.idle = time.Now()
	if m.idle[pl.peer] == nil {
		m.idle[pl.peer] = map[*Leg]bool{}
	}
	m.idle[pl.peer][pl] = true
	m.byFlow[pl.flow] = append(m.byFlow[pl.flow], pl)
}

func (m *Manager) unidleLocked(pl *Leg) {
	delete(m.idle[pl.peer], pl)
	legs := m.byFlow[pl.flow]
	for i, l := range legs {
		if l == pl {
			m.byFlow[pl.flow] = append(legs[:i:i], legs[i+1:]...)
			break
		}
	}
	if len(m.byFlow[pl.flow]) == 0 {
		delete(m.byFlow, pl.flow)
	}
}

// victimLocked picks the idle leg of peer to tear down, by the policy;
// nil if none is idle.
func (m *Manager) victimLocked(peer string) *Leg {
	var best *Leg
	for pl := range m.idle[peer] {
		if best == nil || m.beforeLocked(pl, best) {
			best = pl
		}
	}
	return best
}

// beforeLocked reports whether a goes before b as a victim.
func (m *Manager) beforeLocked(a, b *Leg) bool {
	if m.cfg.Policy == PolicyLRUM {
		ta, tb := m.teardowns[a.flow], m.teardowns[b.flow]
		if ta != tb {
			return ta < tb
		}
	}
	return a.used < b.used
}

// warm dials idle legs for the flow until it has want of them, without
// tearing down anything (below the cap only). It returns the number it
// still lacks and the last dial error.
func (m *Manager) warm(ctx context.Context, f flow, target string, leg *wan.Leg, want int) (int, error) {
	peer := wan.PeerOf(target)
	for {
		m.mu.Lock()
		// An idle leg its peer ended (refused before the attach, or a
		// peer that restarted) is of no use, and must not count as
		// warm: else the pool stays short of sound legs until a
		// connection takes it and dials anew after all.
		var stale []*Leg
		for _, pl := range m.byFlow[f] {
			if pl.p.Stale() {
				stale = append(stale, pl)
			}
		}
		for _, pl := range stale {
			m.unidleLocked(pl)
			m.open[pl.peer]--
		}
		have := len(m.byFlow[f])
		if len(stale) > 0 {
			m.mu.Unlock()
			for _, pl := range stale {
				pl.p.Abort()
			}
			m.mu.Lock()
			have = len(m.byFlow[f])
		}
		if have >= want || m.open[peer] >= m.cfg.MaxPerPeer || ctx.Err() != nil {
			m.mu.Unlock()
			return max(0, want-have), nil
		}
		m.open[peer]++
		m.mu.Unlock()
		pl, err := m.dial(ctx, f, target, leg)
		if err != nil {
			return want - have, err
		}
		served := f.o.Serves(f.ch) // not moved to another node meanwhile
		m.mu.Lock()
		if ctx.Err() != nil || !served {
			m.open[peer]--
			m.mu.Unlock()
			pl.p.Quit()
			return 0, nil
		}
		m.idleLocked(pl)
		m.mu.Unlock()
	}
}

// trim tears down, in order, the idle legs of flow f beyond the want
// newest that have been idle for the manager's IdleTimeout at now, and
// returns how many it tore down and when the next of those beyond want
// is due (zero if none is left).
func (m *Manager) trim(f flow, want int, now time.Time) (int, time.Time) {
	m.mu.Lock()
	legs := m.byFlow[f] // most recently idle last
	var gone []*Leg
	var next time.Time
	for _, pl := range legs[:max(0, len(legs)-want)] {
		if due := pl.idle.Add(m.cfg.IdleTimeout); due.After(now) {
			if next.IsZero() || due.Before(next) {
				next = due
			}
			continue
		}
		gone = append(gone, pl)
	}
	for _, pl := range gone {
		m.unidleLocked(pl)
		m.open[pl.peer]--
	}
	m.mu.Unlock()
	for _, pl := range gone {
		pl.p.Quit()
	}
	f.o.Counted(0, int64(len(gone)))
	return len(gone), next
}

// IdleOf returns how many idle legs o holds, over its channels.
func (m *Manager) IdleOf(o Owner) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for f, legs := range m.byFlow {
		if f.o == o {
			n += len(legs)
		}
	}
	return n
}

// wakeLocked tells o's warmer that one of its idle legs was taken.
func (m *Manager) wakeLocked(o Owner) {
	if c := m.waiters[o]; c != nil {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

// Drop ends every idle leg of o in order and forgets o; its busy legs
// end with their sessions (the stream aborts them) and come back through
// Release.
func (m *Manager) Drop(o Owner) {
	m.dropFlows(o, func(flow) bool { return true })
	m.mu.Lock()
	delete(m.waiters, o)
	m.mu.Unlock()
}

// DropChannel ends the idle legs of channel ch of o, which this node of
// a facility no longer serves (the node that does warms its own).
func (m *Manager) DropChannel(o Owner, ch int) {
	m.dropFlows(o, func(f flow) bool { return f.ch == ch })
}

// ChannelOpened wakes o's warmer: a channel it now serves needs legs.
func (m *Manager) ChannelOpened(o Owner) {
	m.mu.Lock()
	m.wakeLocked(o)
	m.mu.Unlock()
}

// dropFlows ends in order the idle legs of o's flows that match, and
// forgets their teardown counts.
func (m *Manager) dropFlows(o Owner, match func(flow) bool) {
	m.mu.Lock()
	var legs []*Leg
	for f, fl := range m.byFlow {
		if f.o == o && match(f) {
			legs = append(legs, fl...)
		}
	}
	for _, pl := range legs {
		m.unidleLocked(pl)
		m.open[pl.peer]--
	}
	for f := range m.teardowns {
		if f.o == o && match(f) {
			delete(m.teardowns, f)
		}
	}
	m.mu.Unlock()
	for _, pl := range legs {
		pl.p.Quit()
	}
}

// A Channel is one channel of an Owner, as its warmer sees it.
type Channel struct {
	Ch     int
	Served bool   // this gateway serves it now (a node of a facility serves some)
	Target string // the peer's listener its legs lead to
	Leg    *wan.Leg
}

// Warm keeps o's channels at want idle legs each until o's context
// ends, dialing again with backoff (1 s to 30 s) while the peer refuses
// (as it does until the inbound side is attached), and trims the idle
// legs beyond want that stayed idle for the IdleTimeout. channels gives
// o's channels at each round; log says what the warmer did. It returns
// once o's context ended; Drop forgets o.
func (m *Manager) Warm(o Owner, want int, channels func() []Channel, log *slog.Logger) {
	ctx := o.Context()
	wake := make(chan struct{}, 1)
	m.mu.Lock()
	m.waiters[o] = wake
	m.mu.Unlock()
	defer func() {
		// Drop may have run before this goroutine registered: the
		// entry must not outlive the stream either way.
		m.mu.Lock()
		if m.waiters[o] == wake {
			delete(m.waiters, o)
		}
		m.mu.Unlock()
	}()
	backoff := time.Duration(0)
	for {
		var lastErr error
		short := 0
		chans := channels()
		for _, c := range chans {
			if !c.Served {
				continue // another node of the facility serves it, and warms its legs
			}
			n, err := m.warm(ctx, flow{o, c.Ch}, c.Target, c.Leg, want)
			short += n
			if err != nil {
				lastErr = err
			}
		}
		var wait <-chan time.Time
		if lastErr != nil {
			backoff = min(max(2*backoff, time.Second), 30*time.Second)
			log.Debug("warm WAN legs", "short", short, "err", lastErr, "retry_in", backoff)
			wait = time.After(backoff)
		} else {
			backoff = 0
		}
		now := time.Now()
		var trimAt time.Time
		for _, c := range chans {
			n, next := m.trim(flow{o, c.Ch}, want, now)
			if n > 0 {
				log.Debug("idle WAN legs beyond the pool torn down", "channel", c.Ch, "legs", n, "idle_for", m.cfg.IdleTimeout)
			}
			if !next.IsZero() && (trimAt.IsZero() || next.Before(trimAt)) {
				trimAt = next
			}
		}
		var trimC <-chan time.Time
		var trimT *time.Timer
		if !trimAt.IsZero() {
			trimT = time.NewTimer(time.Until(trimAt))
			trimC = trimT.C
		}
		select {
		case <-ctx.Done():
		case <-wake:
		case <-wait:
		case <-trimC:
		}
		if trimT != nil {
			trimT.Stop()
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// Counts returns the pooled legs idle now and open in all (idle,
// busy and being dialed).
func (m *Manager) Counts() (idle, open int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, n := range m.open {
		open += n
	}
	for _, legs := range m.idle {
		idle += len(legs)
	}
	return idle, open
}

// Stats is what a Manager holds, for status and tests.
type Stats struct {
	// Open and Idle count the legs to one peer: open in all (idle,
	// busy, being dialed) and idle; Sound the idle ones neither ended
	// by the peer nor carrying a session.
	Open, Idle, Sound int
	// Stale counts the idle legs, to any peer, that the peer ended.
	Stale int
	// Flows, Warmers and Teardowns count the streams' flows with idle
	// legs, the warmers waiting to refill, and the flows with legs torn
	// down at the cap: what the manager remembers of streams.
	Flows, Warmers, Teardowns int
}

// Stats reports what the manager holds, counting the legs to the peer
// gateway of target (a "host:port" the streams dial) in Open, Idle and
// Sound.
func (m *Manager) Stats(target string) Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	peer := wan.PeerOf(target)
	st := Stats{Open: m.open[peer], Idle: len(m.idle[peer]), Flows: len(m.byFlow), Warmers: len(m.waiters), Teardowns: len(m.teardowns)}
	for pl := range m.idle[peer] {
		if !pl.p.Stale() && pl.p.Idle() {
			st.Sound++
		}
	}
	for _, legs := range m.byFlow {
		for _, pl := range legs {
			if pl.p.Stale() {
				st.Stale++
			}
		}
	}
	return st
}
