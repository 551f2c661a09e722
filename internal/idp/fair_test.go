package idp

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"scistream/internal/auth"
	"scistream/internal/waitfor"
)

// slowProvider is an introspection endpoint that answers the tokens it
// issued at once, and holds every other one (garbage) until released or
// its client gives up, then calls it inactive: a provider that is slow
// to refuse, as a loaded one is.
type slowProvider struct {
	srv     *httptest.Server
	release chan struct{}

	mu     sync.Mutex // guards the following fields
	valid  map[string]string
	held   int
	asked  int
	serial int
}

func startSlowProvider(t *testing.T) *slowProvider {
	t.Helper()
	p := &slowProvider{release: make(chan struct{}), valid: map[string]string{}}
	p.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok := r.PostFormValue("token")
		p.mu.Lock()
		p.asked++
		user, ok := p.valid[tok]
		if !ok {
			p.held++
		}
		p.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if ok {
			json.NewEncoder(w).Encode(map[string]any{"active": true, "username": user, "exp": time.Now().Add(time.Hour).Unix()})
			return
		}
		defer func() {
			p.mu.Lock()
			p.held--
			p.mu.Unlock()
		}()
		select {
		case <-p.release:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, `{"active":false}`)
	}))
	t.Cleanup(func() {
		p.Release()
		p.srv.Close()
	})
	return p
}

// issue returns a new valid token of user.
func (p *slowProvider) issue(user string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.serial++
	tok := fmt.Sprintf("valid-%s-%d", user, p.serial)
	p.valid[tok] = user
	return tok
}

func (p *slowProvider) Release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.release:
	default:
		close(p.release)
	}
}

func (p *slowProvider) counts() (held, asked int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held, p.asked
}

// fairGateway serves, on loopback HTTPS, what a gateway's control API
// does with a bearer token: ch.AuthenticatePrincipal, answering 200 and
// the identity, 401 for a refused token, 503 when it could not be
// checked.
type fairGateway struct {
	srv *httptest.Server
}

func startFairGateway(t *testing.T, ch *auth.Chain) *fairGateway {
	t.Helper()
	g := &fairGateway{srv: httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := ch.AuthenticatePrincipal(r)
		switch {
		case errors.Is(err, auth.ErrUnavailable):
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		case err != nil:
			http.Error(w, err.Error(), http.StatusUnauthorized)
		default:
			io.WriteString(w, p.Identity)
		}
	}))}
	t.Cleanup(g.srv.Close)
	return g
}

// from returns a client of g whose connections come from ip, an
// address of 127.0.0.0/8 (Linux routes all of it to lo).
func (g *fairGateway) from(t *testing.T, ip string) *http.Client {
	tr := g.srv.Client().Transport.(*http.Transport).Clone()
	tr.DialContext = (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}).DialContext
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: time.Minute}
}

// get sends tok and returns the status and body.
func get(c *http.Client, url, tok string) (int, string, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// garbage is a flood of distinct garbage tokens.
type garbage struct {
	wg       sync.WaitGroup
	answered atomic.Int64
	codes    chan int
	once     sync.Once
}

// flood sends garbage tokens from each of ips, n from each at once.
func flood(t *testing.T, g *fairGateway, ips []string, n int) *garbage {
	t.Helper()
	f := &garbage{codes: make(chan int, len(ips)*n)}
	for _, ip := range ips {
		c := g.from(t, ip)
		for i := range n {
			f.wg.Add(1)
			go func() {
				defer f.wg.Done()
				code, _, err := get(c, g.srv.URL, fmt.Sprintf("garbage-%s-%d", ip, i))
				if err != nil {
					t.Errorf("garbage from %s: %v", ip, err)
				}
				f.codes <- code
				f.answered.Add(1)
			}()
		}
	}
	t.Cleanup(func() { f.wait() }) // after the provider is released (cleanups run last first)
	return f
}

// wait waits for every answer and counts the 401s and 503s; once.
func (f *garbage) wait() (refused, unavailable int) {
	f.once.Do(func() { f.wg.Wait(); close(f.codes) })
	for code := range f.codes {
		switch code {
		case http.StatusUnauthorized:
			refused++
		case http.StatusServiceUnavailable:
			unavailable++
		}
	}
	return refused, unavailable
}

func fairSetup(t *testing.T) (*slowProvider, *Introspector, *fairGateway) {
	p := startSlowProvider(t)
	in, err := NewIntrospector(IntrospectConfig{
		URL: p.srv.URL + "/introspect", ClientID: "gw", Secret: "s", Client: p.srv.Client(),
		Claims: ClaimMap{Alias: "idp", Identity: "username"},
	})
	if err != nil {
		t.Fatal(err)
	}
	g := startFairGateway(t, &auth.Chain{Opaque: in}) // the default budget
	return p, in, g
}

// TestIntrospectFairOneSource: one address sending many distinct
// garbage tokens to a provider that is slow to refuse them cannot hold
// every introspection request: a valid token from another address is
// accepted while the garbage still waits. (Before: the garbage took all
// 8 requests in flight and the valid token waited 5 s for one, then
// was answered "8 token checks already in flight", 503.)
func TestIntrospectFairOneSource(t *testing.T) {
	p, _, g := fairSetup(t)
	const n = 16
	f := flood(t, g, []string{"127.0.0.2"}, n)
	// Each garbage check is held by the provider or answered; or (as
	// before the fix) the garbage fills every request in flight.
	waitfor.Must(t, 20*time.Second, "the garbage to be held or answered", func() bool {
		held, _ := p.counts()
		return held == DefaultMaxInFlight || held+int(f.answered.Load()) == n
	})
	code, body, err := get(g.from(t, "127.0.0.3"), g.srv.URL, p.issue("alice"))
	if err != nil || code != http.StatusOK || body != "idp:alice" {
		t.Fatalf("valid token from another address during the flood: %d %q, %v", code, body, err)
	}
	held, asked := p.counts()
	if held != asked-1 || held > auth.DefaultBudgetPending {
		t.Errorf("the provider holds %d garbage checks of %d asked; want at most %d from the one address", held, asked-1, auth.DefaultBudgetPending)
	}
	p.Release()
	if refused, unavailable := f.wait(); refused != held || unavailable != n-held {
		t.Errorf("garbage answered %d refused, %d unavailable; want %d and %d", refused, unavailable, held, n-held)
	}
}

// TestIntrospectFairReserved: garbage from many addresses can take the
// requests in flight that strangers may use, never the ones kept for
// addresses that authenticated lately: a user who authenticated from an
// address before the flood gets a new token checked during it.
func TestIntrospectFairReserved(t *testing.T) {
	p, in, g := fairSetup(t)
	const user = "127.0.0.3"
	alice := g.from(t, user)
	if code, body, err := get(alice, g.srv.URL, p.issue("alice")); err != nil || code != http.StatusOK {
		t.Fatalf("before the flood: %d %q, %v", code, body, err)
	}
	var ips []string
	for i := range 20 {
		ips = append(ips, fmt.Sprintf("127.0.0.%d", 10+i))
	}
	f := flood(t, g, ips, auth.DefaultBudgetPending)
	open := DefaultMaxInFlight - in.cfg.ReservedInFlight
	waitfor.Must(t, 20*time.Second, "the garbage to hold the strangers' requests", func() bool {
		held, _ := p.counts()
		return held >= open
	})
	// A new token of the user, not in the cache: it needs a request.
	code, body, err := get(alice, g.srv.URL, p.issue("alice"))
	if err != nil || code != http.StatusOK || body != "idp:alice" {
		t.Fatalf("new token of a known address during the flood: %d %q, %v", code, body, err)
	}
	if held, _ := p.counts(); held != open {
		t.Errorf("the provider holds %d garbage checks; want %d, the requests strangers may use", held, open)
	}
	p.Release()
	if refused, unavailable := f.wait(); refused+unavailable != len(ips)*auth.DefaultBudgetPending {
		t.Errorf("garbage answered %d refused, %d unavailable; want %d in all", refused, unavailable, len(ips)*auth.DefaultBudgetPending)
	}
}
