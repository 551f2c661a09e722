package gateway

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
	"time"

	"scistream/internal/wan"
)

// Strangers: connections that have not proven who they are. A WAN
// listener must accept anyone's TCP connection to learn whether it is the
// pinned peer, and a flood of such connections must cost the gateway next
// to nothing and never disturb a running stream:
//
//   - connections still in their handshake are capped per listener, per
//     source address and in all (Limits); one over a cap is reset at
//     once, before any TLS state exists;
//   - a source a stream's peer authenticated from lately (trust) draws
//     on a pool of its own (Limits.Trusted, also per source), which
//     strangers cannot take: a flood does not keep the peer's next
//     connection out. The pool is bounded, so a trusted address (a
//     user's own gateway, whose legs authenticate because the user holds
//     the stream's secret) cannot hold more than its share either. Trust
//     belongs to the stream whose leg authenticated, and ends with it;
////   - a connection costs no read buffer until it has proven the stream
//     secret (wan: a leg gets its large buffer once it carried bulk), and
//     a silent one only a small goroutine until its first byte;
//   - each refusal is counted by reason, and the log gets one summary line
//     per interval with the counts, never a line per connection.

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

func (l Limits) withDefaults() Limits {
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

// validate reports limits New would refuse.
func (l Limits) validate() error {
	switch {
	case l.PerListener < 0 || l.PerSource < 0 || l.Total < 0 || l.Trusted < 0:
		return fieldError("Strangers", "%+v has a negative limit", l)
	case l.Trusted != 0 && l.Trusted >= l.withDefaults().Total:
		return fieldError("Strangers.Trusted", "%d is not below the total of %d: leave strangers a share (the default is a quarter of the total)", l.Trusted, l.withDefaults().Total)
	}
	return nil
}

// Why a connection was refused, the keys of the summary line.
const (
	refusedCap       = "over the cap of connections in their handshake"
	refusedAllow     = "source not in the allow-list"
	refusedTLS       = "TLS handshake failed (not the pinned certificate, or not TLS)"
	refusedTimeout   = "handshake or preface too slow"
	refusedPreface   = "malformed preface"
	refusedWrong     = "preface names another stream or channel"
	refusedSecret    = "preface does not prove the stream secret"
	refusedClosed    = "closed before its preface"
	refusedQUIC      = "QUIC peer or stream refused"
	refusedName      = "server name of no stream on the shared WAN port"
	refusedProxy     = "no PROXY protocol header from the router"
	refusedProxyFrom = "PROXY protocol port reached from an address that is not a router's (s2cs --wan_proxy_from)"
	refusedOverCap   = "over the cap of application connections at once (the stream's max_active_conns or the gateway's)"
	summaryInterval  = 10 * time.Second
)

// strangers counts the gateway's unauthenticated connections and its
// refusals, and says them in one line per interval.
type strangers struct {
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
	ever      map[string]int64   // refusals by reason since the start (metrics.go)
}

func newStrangers(l Limits, log *slog.Logger, now time.Time) *strangers {
	return &strangers{
		limits:    l.withDefaults(),
		log:       log,
		bySource:  map[netip.Addr]int{},
		byTrusted: map[netip.Addr]int{},
		refused:   map[string]int{},
		sources:   map[netip.Addr]int{},
		since:     now,
		ever:      map[string]int64{},
	}
}

// listenerSlots is the count of one listener's connections in their
// handshake.
type listenerSlots struct {
	// shared marks the shared WAN port's listener, which serves every
	// stream: only the per-source and total caps apply to it.
	shared bool

	mu sync.Mutex // guards n
	n  int
}

// A slot is one connection's place among those in their handshake,
// from admit, for release.
type slot struct {
	ls      *listenerSlots // nil for a trusted slot
	src     netip.Addr
	trusted bool
	// unheard: a connection from a router whose PROXY header has not
	// come yet (wanPort.admit), src the router.
	unheard bool
}

// admit reserves a handshake slot for a connection from remote on the
// listener whose slots are ls, or reports false if a cap is reached.
// trusted says whether remote is a source a stream's peer authenticated
// from lately: it then takes a slot of the trusted pool while the pool
// and the source's share of it have room, and is a stranger past that.
// The caller must release the slot once the connection authenticated or
// failed.
func (s *strangers) admit(ls *listenerSlots, remote net.Addr, trusted bool) (slot, bool) {
	src := sourceOf(remote)
	ls.mu.Lock()
	defer ls.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.limits
	if trusted && s.trusted < l.Trusted && s.byTrusted[src] < l.PerSource {
		s.trusted++
		s.byTrusted[src]++
		s.total++
		s.peak = max(s.peak, s.total)
		return slot{src: src, trusted: true}, true
	}
	if !ls.shared && ls.n >= l.PerListener || s.total-s.trusted >= l.Total-l.Trusted || s.bySource[src] >= l.PerSource {
		return slot{}, false
	}
	ls.n++
	s.total++
	s.bySource[src]++
	s.peak = max(s.peak, s.total)
	return slot{ls: ls, src: src}, true
}

// release frees the slot admit reserved.
func (s *strangers) release(sl slot) {
	if sl.ls != nil {
		sl.ls.mu.Lock()
		sl.ls.n--
		sl.ls.mu.Unlock()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total--
	counts := s.bySource
	if sl.trusted {
		s.trusted--
		counts = s.byTrusted
	}
	if counts[sl.src]--; counts[sl.src] <= 0 {
		delete(counts, sl.src)
	}
}

// trust remembers the sources a stream's peer authenticated from lately.
// It belongs to the stream, and ends with it.
type trust struct {
	mu   sync.Mutex // guards seen
	seen map[netip.Addr]time.Time
}

// trustFor is how long a source stays trusted after its last
// authenticated connection.
const trustFor = 10 * time.Minute

// maxTrusted bounds the sources one stream trusts at once: a peer has
// one or a few addresses; past the bound the one seen longest ago goes.
const maxTrusted = 16

// add notes that remote authenticated at now.
func (t *trust) add(remote net.Addr, now time.Time) {
	src := sourceOf(remote)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.seen == nil {
		t.seen = map[netip.Addr]time.Time{}
	}
	t.seen[src] = now
	var oldest netip.Addr
	for a, at := range t.seen {
		if now.Sub(at) > trustFor {
			delete(t.seen, a)
		} else if !oldest.IsValid() || at.Before(t.seen[oldest]) {
			oldest = a
		}
	}
	if len(t.seen) > maxTrusted {
		delete(t.seen, oldest)
	}
}

// has reports whether remote authenticated within trustFor of now.
func (t *trust) has(remote net.Addr, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	at, ok := t.seen[sourceOf(remote)]
	return ok && now.Sub(at) <= trustFor
}

// refuse counts a refused connection from remote (nil if unknown).
func (s *strangers) refuse(reason string, remote net.Addr) {
	s.mu.Lock()
	s.churn++
	s.refused[reason]++
	s.ever[reason]++
	if remote != nil {
		s.sources[sourceOf(remote)]++
	}
	s.mu.Unlock()
}

// summarize logs, once the interval since the last summary has passed,
// one line with the refusals counted in it, if any. It also reports
// whether a flood of strangers (more than floodPeak in their handshake at
// once, or more than floodChurn refused) has ended, so the caller can
// return the memory it churned through.
func (s *strangers) summarize(now time.Time) (floodOver bool) {
	const floodPeak, floodChurn, calm = 256, 1000, 16
	s.mu.Lock()
	if s.total < calm && (s.peak > floodPeak || s.churn > floodChurn) {
		floodOver = true
		s.peak, s.churn = s.total, 0
	}
	if now.Sub(s.since) < summaryInterval {
		s.mu.Unlock()
		return floodOver
	}
	refused, sources, since := s.refused, s.sources, s.since
	s.refused, s.sources, s.since = map[string]int{}, map[netip.Addr]int{}, now
	inHandshake := s.total
	s.mu.Unlock()
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
	s.log.Warn(fmt.Sprintf("refused %d connections in the last %s", n, now.Sub(since).Round(time.Second)),
		"reasons", strings.Join(reasons, "; "), "top_sources", topSources(sources, 3), "in_handshake_now", inHandshake)
	return floodOver
}

// topSources lists the k sources with the most refusals.
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

func sourceOf(a net.Addr) netip.Addr {
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

// refusalReason says why wan.Accept refused a connection.
func refusalReason(err error) string {
	switch {
	case errors.Is(err, wan.ErrUnknownName):
		return refusedName
	case errors.Is(err, errProxyHeader):
		return refusedProxy
	case errors.Is(err, errOverCap):
		return refusedCap
	case errors.Is(err, wan.ErrBadSecret):
		return refusedSecret
	case errors.Is(err, wan.ErrWrongStream):
		return refusedWrong
	case errors.Is(err, os.ErrDeadlineExceeded):
		return refusedTimeout
	case errors.Is(err, wan.ErrBadPreface) && isClosed(err):
		return refusedClosed
	case errors.Is(err, wan.ErrBadPreface):
		return refusedPreface
	}
	return refusedTLS
}

// isClosed reports an error that means the connection ended.
func isClosed(err error) bool {
	return errors.Is(err, net.ErrClosed) || isBroken(err) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}
