package idp

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"scistream/internal/oidctest"
	"scistream/internal/waitfor"
)

// hangingJWKS serves an issuer's JWKS once, then holds every request
// until it is released or its client gives up.
type hangingJWKS struct {
	srv     *httptest.Server
	release chan struct{}

	mu       sync.Mutex // guards the following fields
	requests int
	held     int // requests held now
}

func startHangingJWKS(t *testing.T, is *oidctest.Issuer) *hangingJWKS {
	t.Helper()
	set, err := is.JWKS()
	if err != nil {
		t.Fatal(err)
	}
	h := &hangingJWKS{release: make(chan struct{})}
	h.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.requests++
		first := h.requests == 1
		if !first {
			h.held++
		}
		h.mu.Unlock()
		if !first {
			defer func() {
				h.mu.Lock()
				h.held--
				h.mu.Unlock()
			}()
			select {
			case <-h.release:
			case <-r.Context().Done():
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(set)
	}))
	t.Cleanup(func() {
		h.Release()
		h.srv.Close()
	})
	return h
}

// Release lets held requests answer; it may be called more than once.
func (h *hangingJWKS) Release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	select {
	case <-h.release:
	default:
		close(h.release)
	}
}

func (h *hangingJWKS) counts() (requests, held int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.requests, h.held
}

// TestRemoteKeysStaleWhileRefresh: once the keys are older than MaxAge
// and the key endpoint hangs, checks of a valid token (its kid held)
// answer at once from the old keys while one background fetch waits for
// the provider; Close cancels that fetch and waits for its goroutine.
// (Before: every check waited for the provider, up to RequestTimeout,
// each in turn.)
func TestRemoteKeysStaleWhileRefresh(t *testing.T) {
	is := oidctest.Start(t, oidctest.Options{Alg: "ES256"})
	jwks := startHangingJWKS(t, is)
	clk := newClock()
	keys, err := NewRemoteKeys(RemoteConfig{JWKSURL: jwks.srv.URL + "/jwks", Client: jwks.srv.Client(), Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { keys.Close() })
	v, err := NewJWT(JWTConfig{Issuer: is.URL, Audience: is.Audience, Keys: keys, Now: clk.Now, Claims: ClaimMap{Alias: "idp.test"}})
	if err != nil {
		t.Fatal(err)
	}
	// Valid for a day: the clock moves on by hours.
	tok := is.Mint(oidctest.Claims{Subject: "alice", Expiry: time.Now().Add(24 * time.Hour)})
	if _, err := v.VerifyToken(context.Background(), tok); err != nil || keys.Fetches() != 1 {
		t.Fatalf("first check: %v, %d fetches", err, keys.Fetches())
	}
	clk.Add(2 * time.Hour)

	// Checks at once, then one by one, after the refresh reached the
	// provider and hangs there.
	check := func() <-chan error {
		errs := make(chan error, 16)
		var wg sync.WaitGroup
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := v.VerifyToken(context.Background(), tok)
				errs <- err
			}()
		}
		go func() { wg.Wait(); close(errs) }()
		return errs
	}
	for err := range check() {
		if err != nil {
			t.Fatalf("check with stale keys: %v", err)
		}
	}
	waitfor.Must(t, 10*time.Second, "the refresh to reach the key endpoint", func() bool { _, held := jwks.counts(); return held == 1 })
	for range 8 {
		clk.Add(time.Minute) // past MinInterval each time: still one refresh
		if _, err := v.VerifyToken(context.Background(), tok); err != nil {
			t.Fatalf("check while the refresh hangs: %v", err)
		}
	}
	// The checks answered while the refresh was still held: they did not
	// wait for it.
	if requests, held := jwks.counts(); requests != 2 || held != 1 || keys.Fetches() != 2 {
		t.Fatalf("after the checks: %d requests, %d held, %d fetches; want 2, 1 held, 2", requests, held, keys.Fetches())
	}
	// Close ends the refresh's request and waits for its goroutine (the
	// package's leak check would see it).
	closed := make(chan struct{})
	go func() { keys.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(RequestTimeout / 2):
		t.Fatal("Close did not return while the refresh hangs")
	}
	waitfor.Must(t, 10*time.Second, "the held request to end", func() bool { _, held := jwks.counts(); return held == 0 })
	clk.Add(time.Hour)
	if _, err := v.VerifyToken(context.Background(), tok); err != nil || keys.Fetches() != 2 {
		t.Fatalf("after Close: %v, %d fetches; want the old keys, no fetch", err, keys.Fetches())
	}
}

// TestRemoteKeysRefreshed: the background refresh's keys replace the
// old ones: a key the issuer added is then known without a check of
// its kid having to fetch.
func TestRemoteKeysRefreshed(t *testing.T) {
	is := oidctest.Start(t, oidctest.Options{Alg: "ES256"})
	clk := newClock()
	v, keys := remoteVerifier(t, is, clk)
	tok := is.Mint(oidctest.Claims{Subject: "alice", Expiry: time.Now().Add(24 * time.Hour)})
	if _, err := v.VerifyToken(context.Background(), tok); err != nil {
		t.Fatal(err)
	}
	if err := is.Rotate(); err != nil {
		t.Fatal(err)
	}
	clk.Add(2 * time.Hour)
	if _, err := v.VerifyToken(context.Background(), tok); err != nil {
		t.Fatal(err)
	}
	waitfor.Must(t, 10*time.Second, "the refresh to bring the new key", func() bool {
		k, _ := keys.held("") // every key
		return len(k) == 2
	})
	fetches := keys.Fetches()
	if _, err := v.VerifyToken(context.Background(), is.Mint(oidctest.Claims{Subject: "alice", Expiry: time.Now().Add(24 * time.Hour)})); err != nil || keys.Fetches() != fetches {
		t.Fatalf("token of the new key: %v, %d fetches (was %d)", err, keys.Fetches(), fetches)
	}
}
