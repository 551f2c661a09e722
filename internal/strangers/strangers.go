// Package strangers caps and counts the WAN connections that have not
// proven who they are. A WAN listener must accept anyone's TCP
// connection to learn whether it is the pinned peer, and a flood of such
// connections must cost the gateway next to nothing and never disturb a
// running stream:
//
//   - connections still in their handshake are capped per listener, per
//     source address and in all (Limits); one over a cap is reset at
//     once, before any TLS state exists (the caller does that when Admit
//     says no);
//   - a source a stream's peer authenticated from lately (Trust,
//     SharedTrust) draws on a pool of its own (Limits.Trusted, also per
//     source), which strangers cannot take: a flood does not keep the
//     peer's next connection out. The pool is bounded, so a trusted
//     address (a user's own gateway, whose legs authenticate because the
//     user holds the stream's secret) cannot hold more than its share
//     either. Trust belongs to the stream whose leg authenticated, and
//     ends with it;
//   - behind a router that sends the PROXY protocol, a connection counts
//     among the Unheard (in all, and per router) until its header names
//     its source;
//   - each refusal is counted by reason (the Reason* constants, their
//     short Keys for metrics), and the log gets one summary line per
//     interval with the counts (Gate.Summarize), never a line per
//     connection.
//
// Who resets a refused connection, and what a connection costs while it
// waits, is the caller's (the gateway's WAN listeners).
package strangers

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"scistream/internal/wan"
)

// Limits bound the connections that have not yet authenticated. Zero
// fields are the defaults given.
type Limits struct {
	// PerListener caps the connections in their handshake on one WAN
	// listener. If zero, 128: above the 64 application connections a
	// peer may open at once on one channel in the tests, with room.
	PerListener int
	// PerSource caps the connections in their handshake from one source
	// address, across every listener. If zero, 128.
	PerSource int
	// Total caps the connections in their handshake on the whole
	// gateway. If zero, 1024.
	Total int
	// Trusted is the part of Total kept for sources a stream's peer
	// authenticated from lately: strangers may hold Total-Trusted at
	// most, trusted sources Trusted at most (PerSource from each); a
	// trusted source past its share is counted as a stranger. It must be
	// below Total. If zero, a quarter of Total.
	Trusted int
}

// WithDefaults returns l with its zero fields given their defaults.
func (l Limits) WithDefaults() Limits {
	if l.PerListener == 0 {
		l.PerListener = 128
	}
	if l.PerSource == 0 {
		l.PerSource = 128
	}
	if l.Total == 0 {
		l.Total = 1024
	}
	if l.Trusted == 0 {
		l.Trusted = l.Total / 4
	}
	return l
}

// A LimitsError is a Limits that Validate refused; Field names the field
// ("" for the whole), Problem completes a sentence that starts with it.
type LimitsError struct{ Field, Problem string }

func (e *LimitsError) Error() string { return strings.TrimSpace(e.Field + " " + e.Problem) }

// Validate reports limits a gateway refuses, as a *LimitsError.
func (l Limits) Validate() error {
	switch {
	case l.PerListener < 0 || l.PerSource < 0 || l.Total < 0 || l.Trusted < 0:
		return &LimitsError{Problem: fmt.Sprintf("%+v has a negative limit", l)}
	case l.Trusted != 0 && l.Trusted >= l.WithDefaults().Total:
		return &LimitsError{Field: "Trusted", Problem: fmt.Sprintf("%d is not below the total of %d: leave strangers a share (the default is a quarter of the total)", l.Trusted, l.WithDefaults().Total)}
	}
	return nil
}

// Why a connection was refused: the Gate's counts and the summary line
// say these.
const (
	ReasonCap       = "over the cap of connections in their handshake"
	ReasonAllow     = "source not in the allow-list"
	ReasonTLS       = "TLS handshake failed (not the pinned certificate, or not TLS)"
	ReasonTimeout   = "handshake or preface too slow"
	ReasonPreface   = "malformed preface"
	ReasonWrong     = "preface names another stream or channel"
	ReasonSecret    = "preface does not prove the stream secret"
	ReasonClosed    = "closed before its preface"
	ReasonQUIC      = "QUIC peer or stream refused"
	ReasonName      = "server name of no stream on the shared WAN port"
	ReasonProxy     = "no PROXY protocol header from the router"
	ReasonProxyFrom = "PROXY protocol port reached from an address that is not a router's (s2cs --wan_proxy_from)"
	ReasonOverCap   = "over the cap of application connections at once (the stream's max_active_conns or the gateway's)"
)

// SummaryInterval is the least time between two summary lines.
const SummaryInterval = 10 * time.Second

// ErrNoProxyHeader and ErrOverCap are the shared WAN port's refusals
// before a handshake: a connection from a router without a valid PROXY
// header, and one whose named source is over a cap.
var (
	ErrNoProxyHeader = errors.New("no valid PROXY protocol v2 header from the router")
	ErrOverCap       = errors.New("over the cap of connections in their handshake")
)

// Keys are the short names of the reasons, the values of the metrics'
// reason label, in a fixed order; "other" is any other.
func Keys() []string {
	return []string{"handshake_cap", "allow_list", "tls", "timeout", "bad_preface", "wrong_stream",
		"bad_secret", "closed", "quic", "unknown_name", "no_proxy_header", "not_a_router", "over_cap", "other"}
}

// Key is the short name of reason, one of Keys.
func Key(reason string) string {
	switch reason {
	case ReasonCap:
		return "handshake_cap"
	case ReasonAllow:
		return "allow_list"
	case ReasonTLS:
		return "tls"
	case ReasonTimeout:
		return "timeout"
	case ReasonPreface:
		return "bad_preface"
	case ReasonWrong:
		return "wrong_stream"
	case ReasonSecret:
		return "bad_secret"
	case ReasonClosed:
		return "closed"
	case ReasonQUIC:
		return "quic"
	case ReasonName:
		return "unknown_name"
	case ReasonProxy:
		return "no_proxy_header"
	case ReasonProxyFrom:
		return "not_a_router"
	case ReasonOverCap:
		return "over_cap"
	}
	return "other"
}

// ReasonOf says why an accept of a WAN leg (wan.Accept and its kin, or
// the shared port's PROXY header) refused a connection.
func ReasonOf(err error) string {
	switch {
	case errors.Is(err, wan.ErrUnknownName):
		return ReasonName
	case errors.Is(err, ErrNoProxyHeader):
		return ReasonProxy
	case errors.Is(err, ErrOverCap):
		return ReasonCap
	case errors.Is(err, wan.ErrBadSecret):
		return ReasonSecret
	case errors.Is(err, wan.ErrWrongStream):
		return ReasonWrong
	case errors.Is(err, os.ErrDeadlineExceeded):
		return ReasonTimeout
	case errors.Is(err, wan.ErrBadPreface) && closed(err):
		return ReasonClosed
	case errors.Is(err, wan.ErrBadPreface):
		return ReasonPreface
	}
	return ReasonTLS
}

// closed reports an error that means the connection ended.
func closed(err error) bool {
	return errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// Gate counts a gateway's unauthenticated connections and its refusals,
// and says them in one line per interval. Its methods may be called
// concurrently.
type Gate struct {
	limits Limits
	log    *slog.Logger

	mu        sync.Mutex         // guards the following fields
	total     int                // in their handshake, trusted or not
	bySource  map[netip.Addr]int // strangers in their handshake, by source
	trusted   int                // trusted sources' connections in their handshake
	byTrusted map[netip.Addr]int // the same, by source
	peak      int                // most in their handshake at once since the last free
	churn     int                // refusals since the last free
	refused   map[string]int     // by reason, since the last summary
	sources   map[netip.Addr]int // refusals by source, since the last summary
	since     time.Time          // start of the current summary interval
	ever      map[string]int64   // refusals by reason since the start
}

// New returns a Gate of limits l (defaults filled in) that logs its
// summaries to log, its first interval starting at now.
func New(l Limits, log *slog.Logger, now time.Time) *Gate {
	return &Gate{
		limits:    l.WithDefaults(),
		log:       log,
		bySource:  map[netip.Addr]int{},
		byTrusted: map[netip.Addr]int{},
		refused:   map[string]int{},
		sources:   map[netip.Addr]int{},
		since:     now,
		ever:      map[string]int64{},
	}
}

// Limits returns the gate's limits, defaults filled in.
func (g *Gate) Limits() Limits { return g.limits }

// Listener is the count of one listener's strangers in their handshake.
// Its zero value is a stream's own listener.
type Listener struct {
	// Shared marks the shared WAN port's listener, which serves every
	// stream: only the per-source and total caps apply to it.
	Shared bool

	mu sync.Mutex // guards n
	n  int
}

// A Slot is one connection's place among those in their handshake, from
// Admit (or Unheard.Take), for Release. The zero Slot holds nothing.
type Slot struct {
	ls      *Listener // of a stranger's slot
	src     netip.Addr
	trusted bool
	unheard *Unheard // of a connection whose PROXY header has not come
}

// Admit reserves a handshake slot for a connection from remote on the
// listener ls, or reports false if a cap is reached. trusted says
// whether remote is a source a stream's peer authenticated from lately:
// it then takes a slot of the trusted pool while the pool and the
// source's share of it have room, and is a stranger past that. The
// caller must Release the slot once the connection authenticated or
// failed.
func (g *Gate) Admit(ls *Listener, remote net.Addr, trusted bool) (Slot, bool) {
	src := SourceOf(remote)
	ls.mu.Lock()
	defer ls.mu.Unlock()
	g.mu.Lock()
	defer g.mu.Unlock()
	l := g.limits
	if trusted && g.trusted < l.Trusted && g.byTrusted[src] < l.PerSource {
		g.trusted++
		g.byTrusted[src]++
		g.total++
		g.peak = max(g.peak, g.total)
		return Slot{src: src, trusted: true}, true
	}
	if !ls.Shared && ls.n >= l.PerListener || g.total-g.trusted >= l.Total-l.Trusted || g.bySource[src] >= l.PerSource {
		return Slot{}, false
	}
	ls.n++
	g.total++
	g.bySource[src]++
	g.peak = max(g.peak, g.total)
	return Slot{ls: ls, src: src}, true
}

// Release frees the slot Admit (or Unheard.Take) reserved; the zero Slot
// is ignored.
func (g *Gate) Release(sl Slot) {
	switch {
	case sl.unheard != nil:
		sl.unheard.give(sl.src)
		return
	case sl.ls == nil && !sl.trusted:
		return
	case sl.ls != nil:
		sl.ls.mu.Lock()
		sl.ls.n--
		sl.ls.mu.Unlock()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.total--
	counts := g.bySource
	if sl.trusted {
		g.trusted--
		counts = g.byTrusted
	}
	if counts[sl.src]--; counts[sl.src] <= 0 {
		delete(counts, sl.src)
	}
}

// Refuse counts a refused connection from remote (nil if unknown).
func (g *Gate) Refuse(reason string, remote net.Addr) {
	g.mu.Lock()
	g.churn++
	g.refused[reason]++
	g.ever[reason]++
	if remote != nil {
		g.sources[SourceOf(remote)]++
	}
	g.mu.Unlock()
}

// TopRefused lists the k sources refused most in the current summary
// interval, as the next summary line will.
func (g *Gate) TopRefused(k int) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return TopSources(g.sources, k)
}

// InHandshake returns how many connections are in their handshake now.
func (g *Gate) InHandshake() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.total
}

// RefusedSince returns the refusals since the start, by Key, every key
// present.
func (g *Gate) RefusedSince() map[string]int64 {
	out := map[string]int64{}
	for _, k := range Keys() {
		out[k] = 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for r, n := range g.ever {
		out[Key(r)] += n
	}
	return out
}

// Summarize logs, once the interval since the last summary has passed,
// one line with the refusals counted in it, if any. It also reports
// whether a flood of strangers (more than floodPeak in their handshake
// at once, or more than floodChurn refused) has ended, so the caller can
// return the memory it churned through.
func (g *Gate) Summarize(now time.Time) (floodOver bool) {
	const floodPeak, floodChurn, calm = 256, 1000, 16
	g.mu.Lock()
	if g.total < calm && (g.peak > floodPeak || g.churn > floodChurn) {
		floodOver = true
		g.peak, g.churn = g.total, 0
	}
	if now.Sub(g.since) < SummaryInterval {
		g.mu.Unlock()
		return floodOver
	}
	refused, sources, since := g.refused, g.sources, g.since
	g.refused, g.sources, g.since = map[string]int{}, map[netip.Addr]int{}, now
	inHandshake := g.total
	g.mu.Unlock()
	if len(refused) == 0 {
		return floodOver
	}
	var n int
	var reasons []string
	for r, c := range refused {
		n += c
		reasons = append(reasons, fmt.Sprintf("%d %s", c, r))
	}
	sort.Strings(reasons)
	g.log.Warn(fmt.Sprintf("refused %d connections in the last %s", n, now.Sub(since).Round(time.Second)),
		"reasons", strings.Join(reasons, "; "), "top_sources", TopSources(sources, 3), "in_handshake_now", inHandshake)
	return floodOver
}

// TopSources lists the k sources of m with the most refusals.
func TopSources(m map[netip.Addr]int, k int) string {
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

// SourceOf returns the address of a TCP or UDP endpoint, unmapped; the
// zero Addr for any other.
func SourceOf(a net.Addr) netip.Addr {
	if ta, ok := a.(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(ta.IP); ok {
			return ip.Unmap()
		}
	}
	if ua, ok := a.(*net.UDPAddr); ok {
		if ip, ok := netip.AddrFromSlice(ua.IP); ok {
			return ip.Unmap()
		}
	}
	return netip.Addr{}
}

// Unheard counts the connections from the routers whose PROXY header has
// not come yet, in all and by router. Its zero value is ready.
type Unheard struct {
	mu sync.Mutex // guards the following fields
	n  int
	by map[netip.Addr]int
}

// Take counts one more connection from router src, or reports false if
// that would pass total in all or half of it from src (so that one
// router, or one address in the routers' list, cannot keep another out).
// Gate.Release frees the slot.
func (u *Unheard) Take(src netip.Addr, total int) (Slot, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.n >= total || u.by[src] >= max(1, total/2) {
		return Slot{}, false
	}
	if u.by == nil {
		u.by = map[netip.Addr]int{}
	}
	u.n++
	u.by[src]++
	return Slot{src: src, unheard: u}, true
}

// N returns the connections counted now.
func (u *Unheard) N() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.n
}

func (u *Unheard) give(src netip.Addr) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.n--
	if u.by[src]--; u.by[src] <= 0 {
		delete(u.by, src)
	}
}
