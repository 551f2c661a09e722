package controlport

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"time"
)

// The control port must accept anyone's TCP connection to learn whether
// it carries a token, and a flood of such connections must never take
// the open files a stream's listeners need, nor keep a user out. The
// Gate bounds them, as internal/strangers bounds the WAN ports'
// strangers:
//
//   - every control connection holds a place from its accept to its
//     close, counted in all (Limits.Total, planned in the gateway's open
//     files: fileplan.Input.Control) and per source address
//     (Limits.PerSource); one over a cap is reset at once, before any
//     TLS state exists;
//   - a source a caller authenticated from lately (TrustFor) draws on a
//     part of its own (Limits.Trusted), which strangers cannot take: a
//     flood does not keep a user who called lately out, and a connection
//     that authenticates moves there;
//   - a connection must complete TLS and send a first request within
//     Limits.FirstRequest, and one on which no request authenticated is
//     closed once it sat idle for Limits.StrangerIdle (an unauthenticated
//     HTTP/2 connection no longer sits for the server's idle timeout);
//     an authenticated one keeps the server's idle timeout;
//   - an HTTP/2 connection whose streams are reset much faster than they
//     complete is sent GOAWAY and closed (h2guard.go);
//   - refusals are counted by reason (RefusedKeys, for the metrics) and
//     said in one summary line per interval (Summarize), never one line
//     per connection.
//
// The server's hooks tie a connection to its place: ConnState (idle and
// active), ConnContext (the request's context carries it), and
// Authenticated, which the gateway calls once a request's token was
// accepted.

// Limits bound the control port's connections. Zero fields are the
// defaults given.
type Limits struct {
	// Total caps the control connections open at once, in their
	// handshake or served. If zero, DefaultTotal.
	Total int
	// Trusted is the part of Total kept for sources a caller
	// authenticated from within TrustFor: strangers hold Total-Trusted
	// at most. It must be below Total. If zero, half of Total.
	Trusted int
	// PerSource caps the connections from one source address, in the
	// strangers' part and in the trusted part each. If zero, a quarter
	// of Total.
	PerSource int
	// FirstRequest bounds the time from a connection's accept to its
	// first request's header, the TLS handshake included. If zero, 5 s.
	FirstRequest time.Duration
	// StrangerIdle bounds how long a connection on which no request
	// authenticated may stay open with no request in flight. If zero,
	// 5 s.
	StrangerIdle time.Duration
}

// DefaultTotal is the default cap of control connections at once.
const DefaultTotal = 256

// TrustFor is how long a source stays trusted after a request from it
// authenticated.
const TrustFor = 10 * time.Minute

// maxTrustedSources bounds the sources remembered as trusted; past it the
// one seen longest ago is forgotten.
const maxTrustedSources = 4096

// WithDefaults returns l with its zero fields given their defaults.
func (l Limits) WithDefaults() Limits {
	if l.Total == 0 {
		l.Total = DefaultTotal
	}
	if l.Trusted == 0 {
		l.Trusted = l.Total / 2
	}
	if l.PerSource == 0 {
		l.PerSource = max(1, l.Total/4)
	}
	if l.FirstRequest == 0 {
		l.FirstRequest = 5 * time.Second
	}
	if l.StrangerIdle == 0 {
		l.StrangerIdle = 5 * time.Second
	}
	return l
}

// Validate reports limits a gateway refuses; the error completes a
// sentence that starts with the field's name.
func (l Limits) Validate() error {
	d := l.WithDefaults()
	switch {
	case l.Total < 0 || l.Trusted < 0 || l.PerSource < 0 || l.FirstRequest < 0 || l.StrangerIdle < 0:
		return fmt.Errorf("%+v has a negative limit", l)
	case d.Total < 2:
		return fmt.Errorf("total %d leaves no room: give at least 2 (the default is %d)", l.Total, DefaultTotal)
	case d.Trusted >= d.Total:
		return fmt.Errorf("trusted share %d is not below the total of %d: leave strangers a share (the default is half the total)", d.Trusted, d.Total)
	}
	return nil
}

// Why a control connection was refused or closed: the summary line says
// these, the metrics their Key.
const (
	ReasonPerSource    = "over the cap of control connections from one address"
	ReasonTotal        = "over the cap of control connections"
	ReasonFirstRequest = "no request within the first-request deadline"
	ReasonIdle         = "idle without an authenticated request"
	ReasonResets       = "HTTP/2 streams reset or refused faster than they complete"
)

// RefusedKeys are the short names of the reasons, the metrics' reason
// label, in a fixed order.
func RefusedKeys() []string {
	return []string{"per_source", "total", "first_request", "stranger_idle", "h2_resets"}
}

func refusedKey(reason string) string {
	switch reason {
	case ReasonPerSource:
		return "per_source"
	case ReasonTotal:
		return "total"
	case ReasonFirstRequest:
		return "first_request"
	case ReasonIdle:
		return "stranger_idle"
	}
	return "h2_resets"
}

// SummaryInterval is the least time between two summary lines.
const SummaryInterval = 10 * time.Second

// Gate counts a control port's connections and its refusals. Its methods
// may be called concurrently.
type Gate struct {
	limits Limits
	log    *slog.Logger

	mu        sync.Mutex // guards the following fields
	strangers int        // connections in the strangers' part
	trusted   int        // connections in the trusted part
	bySource  map[netip.Addr]int
	byTrusted map[netip.Addr]int
	seen      map[netip.Addr]time.Time // sources authenticated lately
	refused   map[string]int           // by reason, since the last summary
	sources   map[netip.Addr]int       // refusals by source, since the last summary
	since     time.Time
	ever      map[string]int64 // refusals by key since the start
}

// NewGate returns a Gate of limits l (defaults filled in; Validate them
// first) that logs its summaries to log.
func NewGate(l Limits, log *slog.Logger) *Gate {
	if log == nil {
		log = slog.Default()
	}
	return &Gate{
		limits:    l.WithDefaults(),
		log:       log,
		bySource:  map[netip.Addr]int{},
		byTrusted: map[netip.Addr]int{},
		seen:      map[netip.Addr]time.Time{},
		refused:   map[string]int{},
		sources:   map[netip.Addr]int{},
		since:     time.Now(),
		ever:      map[string]int64{},
	}
}

// Limits returns the gate's limits, defaults filled in.
func (g *Gate) Limits() Limits { return g.limits }

// slot is one connection's place at the gate, from admit to release.
type slot struct {
	g   *Gate
	raw net.Conn // the TCP connection, closed by the deadlines
	src netip.Addr

	mu       sync.Mutex // guards the following fields
	trusted  bool       // holds a place in the trusted part
	authed   bool       // a request on it authenticated
	released bool
	timer    *time.Timer // the first-request or idle deadline, while one runs
}

// admit gives raw a place, or counts why not and reports nil: the caller
// then resets raw. A connection from a trusted source takes a place of
// the trusted part while that part and the source's share of it have
// room, and is a stranger past that.
func (g *Gate) admit(raw net.Conn) *slot {
	src := sourceOf(raw.RemoteAddr())
	now := time.Now()
	g.mu.Lock()
	l := g.limits
	at, known := g.seen[src]
	if known && now.Sub(at) > TrustFor {
		delete(g.seen, src)
		known = false
	}
	s := &slot{g: g, raw: raw, src: src}
	switch {
	case known && g.trusted < l.Trusted && g.byTrusted[src] < l.PerSource:
		g.trusted++
		g.byTrusted[src]++
		s.trusted = true
	case g.bySource[src] >= l.PerSource:
		g.refuseLocked(ReasonPerSource, src)
		g.mu.Unlock()
		return nil
	case g.strangers >= l.Total-l.Trusted:
		g.refuseLocked(ReasonTotal, src)
		g.mu.Unlock()
		return nil
	default:
		g.strangers++
		g.bySource[src]++
	}
	g.mu.Unlock()
	s.arm(l.FirstRequest, ReasonFirstRequest)
	return s
}

// refuseLocked counts a refusal of reason from src. g.mu must be held.
func (g *Gate) refuseLocked(reason string, src netip.Addr) {
	g.refused[reason]++
	g.sources[src]++
	g.ever[refusedKey(reason)]++
}

// refuse counts a refusal (or a close by a deadline) of reason from src.
func (g *Gate) refuse(reason string, src netip.Addr) {
	g.mu.Lock()
	g.refuseLocked(reason, src)
	g.mu.Unlock()
}

// arm closes the slot's connection after d unless a request on it
// authenticates or becomes active first (why says why, for the count).
func (s *slot) arm(d time.Duration, why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.authed || s.released {
		return
	}
	if s.timer != nil {
		s.timer.Stop()
	}
	s.timer = time.AfterFunc(d, func() {
		s.mu.Lock()
		fire := !s.authed && !s.released
		s.mu.Unlock()
		if fire {
			s.g.refuse(why, s.src)
			abort(s.raw)
		}
	})
}

// disarm stops the slot's deadline.
func (s *slot) disarm() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
}

// authenticate notes that a request on the slot's connection
// authenticated: no deadline but the server's own holds it from now on,
// its source is trusted for TrustFor, and it moves to the trusted part
// if that has room.
func (s *slot) authenticate() {
	s.mu.Lock()
	if s.authed || s.released {
		s.mu.Unlock()
		return
	}
	s.authed = true
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	g := s.g
	g.mu.Lock()
	g.trustLocked(s.src, time.Now())
	l := g.limits
	if !s.trusted && g.trusted < l.Trusted && g.byTrusted[s.src] < l.PerSource {
		g.strangers--
		decr(g.bySource, s.src)
		g.trusted++
		g.byTrusted[s.src]++
		s.trusted = true
	}
	g.mu.Unlock()
	s.mu.Unlock()
}

// trustLocked notes that src authenticated at now, forgetting the source
// seen longest ago past maxTrustedSources. g.mu must be held.
func (g *Gate) trustLocked(src netip.Addr, now time.Time) {
	if _, ok := g.seen[src]; !ok && len(g.seen) >= maxTrustedSources {
		var oldest netip.Addr
		for a, at := range g.seen {
			if !oldest.IsValid() || at.Before(g.seen[oldest]) {
				oldest = a
			}
		}
		delete(g.seen, oldest)
	}
	g.seen[src] = now
}

// release gives the slot's place back; later calls do nothing.
func (s *slot) release() {
	s.mu.Lock()
	if s.released {
		s.mu.Unlock()
		return
	}
	s.released = true
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	trusted := s.trusted
	s.mu.Unlock()
	g := s.g
	g.mu.Lock()
	defer g.mu.Unlock()
	if trusted {
		g.trusted--
		decr(g.byTrusted, s.src)
	} else {
		g.strangers--
		decr(g.bySource, s.src)
	}
}

func decr(m map[netip.Addr]int, a netip.Addr) {
	if m[a]--; m[a] <= 0 {
		delete(m, a)
	}
}

// slotted is a connection of the control port that holds a place.
type slotted interface{ controlSlot() *slot }

// ConnState is the http.Server hook of the control port's servers: a
// connection whose request became active has met its deadline; one that
// went idle with no request authenticated on it gets StrangerIdle.
// Connections of other listeners are left alone.
func (g *Gate) ConnState(c net.Conn, st http.ConnState) {
	sc, ok := c.(slotted)
	if !ok {
		return
	}
	s := sc.controlSlot()
	switch st {
	case http.StateActive:
		s.disarm()
	case http.StateIdle:
		s.arm(g.limits.StrangerIdle, ReasonIdle)
	case http.StateClosed, http.StateHijacked:
		s.disarm()
	}
}

type slotKey struct{}

// ConnContext is the http.Server hook of the control port's servers: a
// request's context carries its connection's place, for Authenticated.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	if sc, ok := c.(slotted); ok {
		return context.WithValue(ctx, slotKey{}, sc.controlSlot())
	}
	return ctx
}

// Authenticated notes that the request of ctx (a context of a request
// on the control port, or one derived from it: a gRPC call's) carried a
// token the gateway accepted. Other contexts are left alone.
func Authenticated(ctx context.Context) {
	if s, ok := ctx.Value(slotKey{}).(*slot); ok {
		s.authenticate()
	}
}

// Conns returns the connections open now, in the trusted part and the
// strangers'.
func (g *Gate) Conns() (trusted, strangers int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.trusted, g.strangers
}

// RefusedSince returns the refusals since the start, by RefusedKeys,
// every key present.
func (g *Gate) RefusedSince() map[string]int64 {
	out := map[string]int64{}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, k := range RefusedKeys() {
		out[k] = g.ever[k]
	}
	return out
}

// Summarize logs, once SummaryInterval has passed since the last summary,
// one line with the refusals counted meanwhile, if any.
func (g *Gate) Summarize(now time.Time) {
	g.mu.Lock()
	if now.Sub(g.since) < SummaryInterval {
		g.mu.Unlock()
		return
	}
	refused, sources, since := g.refused, g.sources, g.since
	g.refused, g.sources, g.since = map[string]int{}, map[netip.Addr]int{}, now
	trusted, strangers := g.trusted, g.strangers
	g.mu.Unlock()
	if len(refused) == 0 {
		return
	}
	var n int
	var reasons []string
	for r, c := range refused {
		n += c
		reasons = append(reasons, fmt.Sprintf("%d %s", c, r))
	}
	sort.Strings(reasons)
	g.log.Warn(fmt.Sprintf("control port: refused or closed %d connections in the last %s", n, now.Sub(since).Round(time.Second)),
		"reasons", strings.Join(reasons, "; "), "top_sources", topSources(sources, 3),
		"open_trusted", trusted, "open_strangers", strangers)
}

// topSources lists the k sources of m with the most refusals.
func topSources(m map[netip.Addr]int, k int) string {
	type sc struct {
		a netip.Addr
		n int
	}
	var all []sc
	for a, n := range m {
		all = append(all, sc{a, n})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].n > all[j].n || all[i].n == all[j].n && all[i].a.Less(all[j].a) })
	var parts []string
	for _, x := range all[:min(k, len(all))] {
		parts = append(parts, fmt.Sprintf("%s (%d)", x.a, x.n))
	}
	return strings.Join(parts, ", ")
}

// sourceOf returns the address of a TCP endpoint, unmapped; the zero
// Addr for any other (all such share one count).
func sourceOf(a net.Addr) netip.Addr {
	if ta, ok := a.(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(ta.IP); ok {
			return ip.Unmap()
		}
	}
	return netip.Addr{}
}

// abort resets c: a refused or timed-out control connection gets an RST
// at once and leaves no TIME_WAIT behind.
func abort(c net.Conn) {
	if t, ok := c.(*net.TCPConn); ok {
		t.SetLinger(0)
	}
	c.Close()
}
