package strangers

import (
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"scistream/internal/wan"
)

// TestFloodOver: the end of a flood (many in their handshake at once, or
// many refused) is reported once, when the handshakes are back to a few,
// so the gateway gives the memory back; ordinary traffic never is.
func TestFloodOver(t *testing.T) {
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	g := New(Limits{}, slog.New(slog.DiscardHandler), now)
	remote := &net.TCPAddr{IP: net.ParseIP("192.0.2.1"), Port: 1}
	for range 100 {
		g.Refuse(ReasonCap, remote)
	}
	if g.Summarize(now) {
		t.Fatal("100 refusals reported as a flood")
	}
	for range 1000 {
		g.Refuse(ReasonCap, remote)
	}
	var ls Listener
	var slots []Slot
	for range 20 { // still in the flood: 20 in their handshake
		sl, _ := g.Admit(&ls, remote, true)
		slots = append(slots, sl)
	}
	if g.Summarize(now) {
		t.Fatal("a flood reported over while 20 connections are in their handshake")
	}
	for _, sl := range slots {
		g.Release(sl)
	}
	if !g.Summarize(now) {
		t.Fatal("the end of 1,100 refusals not reported")
	}
	if g.Summarize(now) {
		t.Fatal("the end of one flood reported twice")
	}
}

// TestSharedTrust: on the shared WAN port trust is each stream's, kept
// for a few sources per stream, and ends with the stream.
func TestSharedTrust(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	tr := SharedTrust[string]{}
	a, b := "a", "b"
	x := netip.MustParseAddr("192.0.2.1")
	tr.Add(x, a, now)
	tr.Add(x, b, now)
	if !tr.Has(x, now) {
		t.Fatal("a source two streams trust is not trusted")
	}
	tr.Forget(a)
	if !tr.Has(x, now) {
		t.Fatal("a source trusted by a live stream is not trusted once another ended")
	}
	tr.Forget(b)
	if tr.Has(x, now) {
		t.Fatal("a source is still trusted after every stream that trusted it ended")
	}
	for i := range MaxTrusted + 10 {
		tr.Add(netip.AddrFrom4([4]byte{192, 0, 2, byte(10 + i)}), a, now.Add(time.Duration(i)*time.Second))
	}
	if n, streams := tr.Len(); n != MaxTrusted || streams != 1 {
		t.Fatalf("one stream trusts %d sources (%d streams indexed), want at most %d", n, streams, MaxTrusted)
	}
	if tr.Has(netip.AddrFrom4([4]byte{192, 0, 2, 10}), now.Add(time.Hour/60)) {
		t.Fatal("the source trusted longest ago was kept past the bound")
	}
	if tr.Has(netip.AddrFrom4([4]byte{192, 0, 2, 10 + MaxTrusted + 9}), now.Add(TrustFor+time.Hour)) {
		t.Fatal("trust outlived TrustFor")
	}
	tr.Forget(a)
	if n, streams := tr.Len(); n != 0 || streams != 0 {
		t.Fatalf("Forget left %d sources, %d streams", n, streams)
	}
}

// TestLimits: the defaults, and the limits a gateway refuses.
func TestLimits(t *testing.T) {
	if l := (Limits{}).WithDefaults(); l != (Limits{PerListener: 128, PerSource: 128, Total: 1024, Trusted: 256}) {
		t.Fatalf("defaults %+v", l)
	}
	for _, c := range []struct {
		l     Limits
		field string
	}{{Limits{PerSource: -1}, ""}, {Limits{Trusted: 1024}, "Trusted"}, {Limits{Total: 8, Trusted: 8}, "Trusted"}} {
		var le *LimitsError
		if err := c.l.Validate(); !errors.As(err, &le) || le.Field != c.field {
			t.Errorf("Validate(%+v) = %v, want a LimitsError on %q", c.l, err, c.field)
		}
	}
	if err := (Limits{Total: 8, Trusted: 2}).Validate(); err != nil {
		t.Error(err)
	}
}

// TestPools: strangers and trusted sources draw on pools of their own,
// each bounded; a trusted source past its share is a stranger.
func TestPools(t *testing.T) {
	g := New(Limits{PerListener: 100, PerSource: 3, Total: 8, Trusted: 4}, slog.New(slog.DiscardHandler), time.Now())
	var ls Listener
	from := func(ip string) net.Addr { return &net.TCPAddr{IP: net.ParseIP(ip), Port: 1} }
	admitted := func(ip string, trusted bool, k int) (n int, slots []Slot) {
		for range k {
			if sl, ok := g.Admit(&ls, from(ip), trusted); ok {
				n++
				slots = append(slots, sl)
			}
		}
		return n, slots
	}
	// A trusted source: 3 trusted (its share), then 3 as a stranger.
	if n, _ := admitted("192.0.2.1", true, 10); n != 6 {
		t.Fatalf("a trusted source held %d, want 3 trusted and 3 as a stranger", n)
	}
	// Strangers share the 4 left to them: 1 more.
	if n, _ := admitted("192.0.2.2", false, 10); n != 1 {
		t.Fatalf("a stranger held %d, want the 1 the strangers' pool has left", n)
	}
	// Another trusted source still has the trusted pool's last slot.
	n, slots := admitted("192.0.2.3", true, 10)
	if n != 1 || g.InHandshake() != 8 {
		t.Fatalf("another trusted source held %d (%d in all), want 1 (8)", n, g.InHandshake())
	}
	g.Release(slots[0])
	g.Release(Slot{}) // the zero Slot holds nothing
	if g.InHandshake() != 7 {
		t.Fatalf("%d in their handshake after a release, want 7", g.InHandshake())
	}
}

// TestUnheard: connections whose PROXY header has not come are capped in
// all and at half of that per router.
func TestUnheard(t *testing.T) {
	g := New(Limits{}, slog.New(slog.DiscardHandler), time.Now())
	var u Unheard
	r1, r2 := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	var held []Slot
	for range 10 {
		if sl, ok := u.Take(r1, 10); ok {
			held = append(held, sl)
		}
	}
	if len(held) != 5 {
		t.Fatalf("one router holds %d of 10, want half", len(held))
	}
	for range 10 {
		if sl, ok := u.Take(r2, 10); ok {
			held = append(held, sl)
		}
	}
	if u.N() != 10 {
		t.Fatalf("%d unheard, want 10", u.N())
	}
	if _, ok := u.Take(netip.MustParseAddr("10.0.0.3"), 10); ok {
		t.Fatal("a third router passed the total")
	}
	for _, sl := range held {
		g.Release(sl)
	}
	if u.N() != 0 || g.InHandshake() != 0 {
		t.Fatalf("after release: %d unheard, %d in handshake", u.N(), g.InHandshake())
	}
}

// TestReasonOf: every refusal of an accept has its reason and key.
func TestReasonOf(t *testing.T) {
	for err, want := range map[error]string{
		wan.ErrUnknownName: "unknown_name",
		ErrNoProxyHeader:   "no_proxy_header",
		ErrOverCap:         "handshake_cap",
		wan.ErrBadSecret:   "bad_secret",
		wan.ErrWrongStream: "wrong_stream",
		wan.ErrBadPreface:  "bad_preface",
		errors.New("x509"): "tls",
	} {
		if got := Key(ReasonOf(err)); got != want {
			t.Errorf("Key(ReasonOf(%v)) = %s, want %s", err, got, want)
		}
	}
	seen := map[string]bool{}
	for _, k := range Keys() {
		if seen[k] {
			t.Errorf("key %s twice", k)
		}
		seen[k] = true
	}
	for _, r := range []string{ReasonCap, ReasonAllow, ReasonTLS, ReasonTimeout, ReasonPreface, ReasonWrong, ReasonSecret,
		ReasonClosed, ReasonQUIC, ReasonName, ReasonProxy, ReasonProxyFrom, ReasonOverCap} {
		if k := Key(r); k == "other" || !seen[k] {
			t.Errorf("reason %q has no key of Keys", r)
		}
	}
	if !strings.Contains(ReasonProxyFrom, "--wan_proxy_from") {
		t.Error("the not-a-router reason does not name the flag")
	}
}
