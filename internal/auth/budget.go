package auth

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"
)

// A Budget keeps one source address from spending an identity
// provider's attention on tokens nobody vouches for. Chain asks it
// before a token goes to the introspection endpoint (Chain.Opaque),
// after the static tokens and the checks of size and characters:
//
//   - A source is known for KnownFor after a token from it was accepted
//     (a static token, a JWT or an introspected one). A known source's
//     checks are not budgeted, and Chain tells the verifier so
//     (KnownSource): the introspector keeps some of its requests in
//     flight for known sources, so strangers cannot take them all.
//   - Any other source is a stranger: each of its checks is charged to
//     its budget, Burst checks in a row, then one per Refill (a check
//     that succeeds is given back), and at most MaxPending of them wait
//     for the provider at once. A check over budget is refused before
//     any provider is asked, with ErrUnavailable (the token is neither
//     accepted nor refused) and a message that says when to retry.
//
// A source is the caller's IP address (http.Request.RemoteAddr); an
// IPv6 one counts as its /64, which one host usually holds whole. So an
// address shared by several users (a NAT) is one source: one of them
// who authenticated makes it known for all.
//
// Memory is bounded: at most MaxSources strangers and MaxSources known
// sources are remembered. When the strangers fill the table, those whose
// budget is whole again and which wait for nothing are forgotten; if
// none can be, a new stranger is refused until some can. When the known
// sources fill theirs, the expired ones go, then the one known for the
// shortest time ahead.
type Budget struct {
	cfg BudgetConfig

	mu        sync.Mutex // guards the following fields
	strangers map[netip.Prefix]*allowance
	known     map[netip.Prefix]time.Time // until when
}

// allowance is a stranger's budget, a GCRA: next is when its budget is
// whole again, pending its checks in flight.
type allowance struct {
	next    time.Time
	pending int
}

// BudgetConfig configures a Budget. Every zero value is the default
// named.
type BudgetConfig struct {
	// Burst is how many checks a stranger may make in a row. If zero,
	// DefaultBudgetBurst.
	Burst int
	// Refill is how long a stranger waits for each check beyond Burst.
	// If zero, DefaultBudgetRefill.
	Refill time.Duration
	// MaxPending bounds a stranger's checks in flight at once. If zero,
	// DefaultBudgetPending.
	MaxPending int
	// KnownFor is how long a source stays known after a token from it
	// was accepted. If zero, DefaultKnownFor.
	KnownFor time.Duration
	// MaxSources bounds the strangers remembered, and the known sources.
	// If zero, DefaultBudgetSources.
	MaxSources int
	// Now is the clock. If nil, time.Now.
	Now func() time.Time
}

// The defaults of BudgetConfig: a stranger gets 10 checks, then 10 a
// minute, 2 at a time.
const (
	DefaultBudgetBurst   = 10
	DefaultBudgetRefill  = 6 * time.Second
	DefaultBudgetPending = 2
	DefaultKnownFor      = 10 * time.Minute
	DefaultBudgetSources = 4096
)

// NewBudget returns a budget of cfg; negative values are taken as the
// defaults.
func NewBudget(cfg BudgetConfig) *Budget {
	if cfg.Burst <= 0 {
		cfg.Burst = DefaultBudgetBurst
	}
	if cfg.Refill <= 0 {
		cfg.Refill = DefaultBudgetRefill
	}
	if cfg.MaxPending <= 0 {
		cfg.MaxPending = DefaultBudgetPending
	}
	if cfg.KnownFor <= 0 {
		cfg.KnownFor = DefaultKnownFor
	}
	if cfg.MaxSources <= 0 {
		cfg.MaxSources = DefaultBudgetSources
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Budget{cfg: cfg, strangers: map[netip.Prefix]*allowance{}, known: map[netip.Prefix]time.Time{}}
}

// Sources returns how many strangers and known sources b remembers.
func (b *Budget) Sources() (strangers, known int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.strangers), len(b.known)
}

// SourceOf is the source a Budget counts a request from remoteAddr
// ("host:port", as http.Request.RemoteAddr) against: the IPv4 address,
// or the /64 of the IPv6 one. An address that does not parse is the
// invalid prefix, one source for all such callers.
func SourceOf(remoteAddr string) netip.Prefix {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Prefix{}
	}
	a = a.Unmap().WithZone("")
	bits := 32
	if a.Is6() {
		bits = 64
	}
	p, _ := a.Prefix(bits)
	return p
}

// admit decides whether a check from src may go to the provider. It
// returns whether src is known and, when it may go, done, which the
// check calls once with whether the token was accepted.
func (b *Budget) admit(src netip.Prefix) (known bool, done func(accepted bool), err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.cfg.Now()
	if until, ok := b.known[src]; ok {
		if now.Before(until) {
			return true, func(accepted bool) {
				if accepted {
					b.accepted(src)
				}
			}, nil
		}
		delete(b.known, src)
	}
	a := b.strangers[src]
	if a == nil {
		if len(b.strangers) >= b.cfg.MaxSources {
			b.forgetIdle(now)
		}
		if len(b.strangers) >= b.cfg.MaxSources {
			return false, nil, &BudgetError{fmt.Sprintf("token checks from more than %d addresses that did not authenticate lately are under way: retry in a minute",
				b.cfg.MaxSources)}
		}
		a = &allowance{next: now}
		b.strangers[src] = a
	}
	if a.pending >= b.cfg.MaxPending {
		return false, nil, &BudgetError{fmt.Sprintf("%d token checks from %s are already waiting for the identity provider: wait for their answers before sending more",
			a.pending, source(src))}
	}
	next := a.next
	if next.Before(now) {
		next = now
	}
	next = next.Add(b.cfg.Refill)
	if over := next.Sub(now) - time.Duration(b.cfg.Burst)*b.cfg.Refill; over > 0 {
		return false, nil, &BudgetError{fmt.Sprintf("too many token checks from %s that did not authenticate lately: retry in %s with a valid token",
			source(src), (over + time.Second - 1).Truncate(time.Second))}
	}
	a.next = next
	a.pending++
	return false, func(accepted bool) {
		b.mu.Lock()
		defer b.mu.Unlock()
		a.pending--
		if accepted {
			a.next = a.next.Add(-b.cfg.Refill) // an accepted token costs nothing
			b.acceptedLocked(src)
		}
	}, nil
}

// accepted notes that a token from src was accepted.
func (b *Budget) accepted(src netip.Prefix) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.acceptedLocked(src)
}

func (b *Budget) acceptedLocked(src netip.Prefix) {
	now := b.cfg.Now()
	if _, ok := b.known[src]; !ok && len(b.known) >= b.cfg.MaxSources {
		var first netip.Prefix
		var firstUntil time.Time
		for p, until := range b.known {
			if !now.Before(until) {
				delete(b.known, p)
			} else if firstUntil.IsZero() || until.Before(firstUntil) {
				first, firstUntil = p, until
			}
		}
		if len(b.known) >= b.cfg.MaxSources {
			delete(b.known, first)
		}
	}
	b.known[src] = now.Add(b.cfg.KnownFor)
	if a := b.strangers[src]; a != nil && a.pending == 0 {
		delete(b.strangers, src)
	}
}

// forgetIdle drops the strangers whose budget is whole and which wait
// for nothing: remembering them changes nothing. b.mu must be held.
func (b *Budget) forgetIdle(now time.Time) {
	for p, a := range b.strangers {
		if a.pending == 0 && !a.next.After(now) {
			delete(b.strangers, p)
		}
	}
}

// source names src in a message: its address, or its /64.
func source(src netip.Prefix) string {
	switch {
	case !src.IsValid():
		return "an unknown address"
	case src.Addr().Is4():
		return src.Addr().String()
	}
	return src.String()
}

type knownKey struct{}

// WithKnownSource returns ctx saying that the check it carries comes
// from a source a token was accepted from lately (Budget): a verifier
// may let it use what it keeps from strangers.
func WithKnownSource(ctx context.Context) context.Context {
	return context.WithValue(ctx, knownKey{}, true)
}

// KnownSource reports whether ctx says its check comes from a known
// source (WithKnownSource). A check without that word is a stranger's.
func KnownSource(ctx context.Context) bool {
	known, _ := ctx.Value(knownKey{}).(bool)
	return known
}

// A BudgetError is a token check a Budget refused before any provider
// was asked. It is ErrUnavailable (errors.Is), and its Public message is
// the caller's to read: it names only the caller's own address and what
// to do.
type BudgetError struct{ msg string }

func (e *BudgetError) Error() string { return ErrUnavailable.Error() + ": " + e.msg }
func (e *BudgetError) Unwrap() error { return ErrUnavailable }

// Public returns the message for the caller.
func (e *BudgetError) Public() string { return e.msg }
