package auth_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"scistream/internal/auth"
	"scistream/internal/waitfor"
)

// fakeClock is a settable clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// gateVerifier accepts tokens starting with "good"; a token starting
// with "hold" waits until its context ends or release is closed, then
// is refused.
type gateVerifier struct {
	countingVerifier
	release chan struct{}
	known   sync.Map // token -> whether its check came from a known source
}

func (v *gateVerifier) VerifyToken(ctx context.Context, tok string) (*auth.Principal, error) {
	v.known.Store(tok, auth.KnownSource(ctx))
	if strings.HasPrefix(tok, "hold") {
		select {
		case <-v.release:
		case <-ctx.Done():
		}
	}
	return v.countingVerifier.VerifyToken(ctx, tok)
}

func request(remote, tok string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = remote
	r.Header.Set("Authorization", "Bearer "+tok)
	return r
}

// TestBudget: a stranger address gets Burst checks of garbage, then one
// per Refill, and is refused before the provider is asked; an accepted
// token costs nothing and makes the address known, whose checks are
// then not budgeted and carry KnownSource, until KnownFor passes.
func TestBudget(t *testing.T) {
	clk := &fakeClock{t: time.Now()}
	v := &gateVerifier{countingVerifier: countingVerifier{name: "opaque"}}
	ch := &auth.Chain{Opaque: v, Budget: auth.NewBudget(auth.BudgetConfig{Burst: 3, Refill: 10 * time.Second, KnownFor: time.Minute, Now: clk.Now})}
	const mallory = "192.0.2.7:40000"
	for i := range 3 {
		if _, err := ch.AuthenticatePrincipal(request(mallory, fmt.Sprintf("bad-%d", i))); !errors.Is(err, auth.ErrTokenSignature) {
			t.Fatalf("garbage %d within the burst: %v", i, err)
		}
	}
	_, err := ch.AuthenticatePrincipal(request(mallory, "bad-3"))
	if !errors.Is(err, auth.ErrUnavailable) || !strings.Contains(err.Error(), "192.0.2.7") || !strings.Contains(err.Error(), "retry in 10s") {
		t.Fatalf("garbage over the budget: %v", err)
	}
	if v.calls.Load() != 3 {
		t.Fatalf("the provider was asked %d times, want 3: a check over budget must not reach it", v.calls.Load())
	}
	// Another port of the same address is the same source; another
	// address is not.
	if _, err := ch.AuthenticatePrincipal(request("192.0.2.7:40001", "bad-4")); !errors.Is(err, auth.ErrUnavailable) {
		t.Fatalf("same address, other port: %v", err)
	}
	if _, err := ch.AuthenticatePrincipal(request("192.0.2.8:40000", "bad-5")); !errors.Is(err, auth.ErrTokenSignature) {
		t.Fatalf("another address: %v", err)
	}
	// One more check per Refill.
	clk.Add(10 * time.Second)
	if _, err := ch.AuthenticatePrincipal(request(mallory, "bad-6")); !errors.Is(err, auth.ErrTokenSignature) {
		t.Fatalf("after Refill: %v", err)
	}
	if _, err := ch.AuthenticatePrincipal(request(mallory, "bad-7")); !errors.Is(err, auth.ErrUnavailable) {
		t.Fatalf("second check after one Refill: %v", err)
	}

	// A user's valid token makes its address known: its checks, good or
	// bad, are then not budgeted.
	const alice = "198.51.100.1:5000"
	if _, err := ch.AuthenticatePrincipal(request(alice, "good-1")); err != nil {
		t.Fatal(err)
	}
	if known, _ := v.known.Load("good-1"); known != false {
		t.Fatal("a stranger's first check carried KnownSource")
	}
	for i := range 10 {
		if _, err := ch.AuthenticatePrincipal(request(alice, fmt.Sprintf("expired-%d", i))); !errors.Is(err, auth.ErrTokenSignature) {
			t.Fatalf("known address, refused token %d: %v", i, err)
		}
	}
	if known, _ := v.known.Load("expired-9"); known != true {
		t.Fatal("a known address's check did not carry KnownSource")
	}
	// KnownFor after its last accepted token, the address is a stranger
	// again.
	clk.Add(time.Minute)
	for i := range 3 {
		ch.AuthenticatePrincipal(request(alice, fmt.Sprintf("bad-again-%d", i)))
	}
	if _, err := ch.AuthenticatePrincipal(request(alice, "bad-again-3")); !errors.Is(err, auth.ErrUnavailable) {
		t.Fatalf("after KnownFor: %v", err)
	}
	// An accepted token is given back: a stranger whose tokens are good
	// is never refused.
	const bob = "198.51.100.2:5000"
	for i := range 10 {
		if _, err := ch.AuthenticatePrincipal(request(bob, fmt.Sprintf("good-bob-%d", i))); err != nil {
			t.Fatalf("good token %d: %v", i, err)
		}
		clk.Add(time.Hour) // a stranger again each time
	}
	// A static token makes its address known too.
	static := &auth.Chain{Static: mustParse(t, hAlice+" alice\n"), Opaque: v,
		Budget: auth.NewBudget(auth.BudgetConfig{Burst: 1, Now: clk.Now})}
	if _, err := static.AuthenticatePrincipal(request(mallory, "alice-token")); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := static.AuthenticatePrincipal(request(mallory, fmt.Sprintf("bad-static-%d", i))); !errors.Is(err, auth.ErrTokenSignature) {
			t.Fatalf("after a static token, garbage %d: %v", i, err)
		}
	}
}

// TestBudgetPending: a stranger address has at most MaxPending checks
// waiting for the provider; a known one is not limited so.
func TestBudgetPending(t *testing.T) {
	v := &gateVerifier{countingVerifier: countingVerifier{name: "opaque"}, release: make(chan struct{})}
	ch := &auth.Chain{Opaque: v, Budget: auth.NewBudget(auth.BudgetConfig{MaxPending: 2})}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(v.release)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ch.AuthenticatePrincipal(request("192.0.2.7:1", fmt.Sprintf("hold-%d", i)))
		}()
	}
	waitfor.Must(t, 10*time.Second, "both checks to reach the verifier", func() bool {
		_, ok0 := v.known.Load("hold-0")
		_, ok1 := v.known.Load("hold-1")
		return ok0 && ok1
	})
	_, err := ch.AuthenticatePrincipal(request("192.0.2.7:2", "bad"))
	if !errors.Is(err, auth.ErrUnavailable) || !strings.Contains(err.Error(), "2 token checks from 192.0.2.7 are already waiting") {
		t.Fatalf("third check at once: %v", err)
	}
	if _, err := ch.AuthenticatePrincipal(request("192.0.2.8:1", "bad")); !errors.Is(err, auth.ErrTokenSignature) {
		t.Fatalf("another address meanwhile: %v", err)
	}
}

// TestBudgetBounded: addresses without end never grow the budget past
// MaxSources strangers and MaxSources known ones; when every stranger
// remembered still has checks to pay for, a new one is refused, and
// known addresses are never pushed out by strangers.
func TestBudgetBounded(t *testing.T) {
	clk := &fakeClock{t: time.Now()}
	b := auth.NewBudget(auth.BudgetConfig{MaxSources: 16, Now: clk.Now})
	ch := &auth.Chain{Opaque: &countingVerifier{name: "opaque"}, Budget: b}
	if _, err := ch.AuthenticatePrincipal(request("198.51.100.1:1", "good")); err != nil {
		t.Fatal(err)
	}
	refused := 0
	for i := range 1000 {
		_, err := ch.AuthenticatePrincipal(request(fmt.Sprintf("10.%d.%d.1:1", i/256, i%256), "bad"))
		if errors.Is(err, auth.ErrUnavailable) {
			refused++
			if !strings.Contains(err.Error(), "more than 16 addresses") {
				t.Fatalf("refusal: %v", err)
			}
		}
		if s, k := b.Sources(); s > 16 || k > 16 {
			t.Fatalf("%d strangers and %d known addresses remembered, more than 16", s, k)
		}
	}
	if refused != 1000-16 {
		t.Errorf("%d new strangers refused, want %d", refused, 1000-16)
	}
	// The known address is still known.
	for i := range 20 {
		if _, err := ch.AuthenticatePrincipal(request("198.51.100.1:1", fmt.Sprintf("bad-%d", i))); !errors.Is(err, auth.ErrTokenSignature) {
			t.Fatalf("known address after the flood: %v", err)
		}
	}
	// Once their budgets are whole again, strangers are forgotten to make
	// room.
	clk.Add(time.Hour)
	if _, err := ch.AuthenticatePrincipal(request("10.99.0.1:1", "bad")); !errors.Is(err, auth.ErrTokenSignature) {
		t.Fatalf("a new stranger after the budgets refilled: %v", err)
	}
	// Known addresses without end: the oldest go.
	for i := range 100 {
		if _, err := ch.AuthenticatePrincipal(request(fmt.Sprintf("172.16.%d.1:1", i), "good")); err != nil {
			t.Fatal(err)
		}
		clk.Add(time.Second)
		if _, k := b.Sources(); k > 16 {
			t.Fatalf("%d known addresses remembered, more than 16", k)
		}
	}
}

// TestSourceOf: an IPv4 address is its own source, an IPv6 one its
// /64; a mapped IPv4 address is the IPv4 one.
func TestSourceOf(t *testing.T) {
	for remote, want := range map[string]string{
		"192.0.2.7:443":                   "192.0.2.7/32",
		"[::ffff:192.0.2.7]:443":          "192.0.2.7/32",
		"[2001:db8:1:2:3:4:5:6]:443":      "2001:db8:1:2::/64",
		"[2001:db8:1:2:ffff::1]:1":        "2001:db8:1:2::/64",
		"[fe80::1%eth0]:1":                "fe80::/64",
		"192.0.2.7":                       "192.0.2.7/32",
		"@":                               "invalid Prefix",
		"":                                "invalid Prefix",
		"[2001:db8:1:3::1]:1":             "2001:db8:1:3::/64",
		"example.org:443":                 "invalid Prefix",
		"[::1]:1":                         "::/64",
		"127.0.0.1:1":                     "127.0.0.1/32",
		"[2001:db8::1]:99999999999999999": "2001:db8::/64",
	} {
		if got := auth.SourceOf(remote).String(); got != want {
			t.Errorf("SourceOf(%q) = %s, want %s", remote, got, want)
		}
	}
}

func FuzzSourceOf(f *testing.F) {
	f.Add("192.0.2.7:443")
	f.Add("[2001:db8::1%25eth0]:1")
	f.Add("[::ffff:1.2.3.4]:0")
	f.Fuzz(func(t *testing.T, remote string) {
		p := auth.SourceOf(remote)
		if p.IsValid() && (p.Bits() != 32 && p.Bits() != 64 || p.Masked() != p || p.Addr().Zone() != "" || p.Addr().Is4In6()) {
			t.Fatalf("SourceOf(%q) = %s", remote, p)
		}
	})
}
