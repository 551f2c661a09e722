package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"scistream/internal/api"
	"scistream/internal/client"
)

const uid1 = "0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b6c"

// recorder is a fake gateway's log of the request URIs it received, as
// sent (escaped).
type recorder struct {
	mu   sync.Mutex
	uris []string
}

func (r *recorder) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.uris = append(r.uris, req.Method+" "+req.RequestURI)
		r.mu.Unlock()
		h.ServeHTTP(w, req)
	})
}

func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	u := r.uris
	r.uris = nil
	return u
}

// TestPathSegments: a UID is one path segment of the request whatever
// it holds: a "/", "?" or "#" in it does not make the request go to
// another path (attach of "x/attach"; "a/../../info", which the
// ServeMux behind would clean and redirect to /v1/info). "", "." and
// "..", which cannot be one segment, send nothing.
func TestPathSegments(t *testing.T) {
	id := newIdentity(t)
	rec := &recorder{}
	mux := http.NewServeMux() // redirects a path that cleans to another
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNotFound)
		json.NewEncoder(w).Encode(api.ErrorBody{Error: api.Error{Code: api.CodeNotFound, Message: "no such stream"}})
	})
	srv := tlsServer(t, id, rec.wrap(mux))
	c := newClient(t, client.Config{Addr: srv.Listener.Addr().String(), ServerCert: id.file, Timeout: 5 * time.Second})
	ctx := context.Background()
	rate := int64(1)
	calls := []struct {
		method, suffix, query string
		call                  func(uid string) error
	}{
		{"GET", "", "", func(uid string) error { _, err := c.Get(ctx, uid); return err }},
		{"GET", "", "?owner=bob%2F..", func(uid string) error { _, err := c.GetOf(ctx, "bob/..", uid); return err }},
		{"DELETE", "", "", func(uid string) error { _, err := c.Release(ctx, uid); return err }},
		{"DELETE", "", "?owner=bob", func(uid string) error { _, err := c.ReleaseOf(ctx, "bob", uid); return err }},
		{"PATCH", "", "", func(uid string) error { _, err := c.Update(ctx, uid, &api.UpdateRequest{Rate: &rate}); return err }},
		{"POST", "/attach", "", func(uid string) error { _, err := c.Attach(ctx, uid, &api.AttachRequest{}); return err }},
	}
	for _, uid := range []string{"a/b", "a?b=c", "a#b", "x/attach", "a/../../info", "../info", "%2e%2e", "a b", uid1} {
		for _, call := range calls {
			err := call.call(uid)
			var ae *api.Error
			if !errors.As(err, &ae) || ae.Code != api.CodeNotFound {
				t.Errorf("%s of uid %q: %v, want the server's not_found", call.method, uid, err)
			}
			want := call.method + " /v1/streams/" + url.PathEscape(uid) + call.suffix + call.query
			if got := rec.take(); len(got) != 1 || got[0] != want {
				t.Errorf("%s of uid %q sent %q, want only %q", call.method, uid, got, want)
			}
		}
	}
	for _, uid := range []string{"", ".", ".."} {
		for _, call := range calls {
			err := call.call(uid)
			if err == nil || !strings.Contains(err.Error(), "is not a stream UID") {
				t.Errorf("%s of uid %q: %v, want it refused", call.method, uid, err)
			}
			if got := rec.take(); len(got) != 0 {
				t.Errorf("%s of uid %q sent %q, want nothing", call.method, uid, got)
			}
		}
	}
}

// TestAnswerOfAnotherStream: an answer about another stream than the
// one asked about, or with a UID that is not one, is refused
// (ErrBadAnswer, naming the gateway), for each kind of request; and a
// created side whose answer is refused is released again.
func TestAnswerOfAnotherStream(t *testing.T) {
	id := newIdentity(t)
	const other = "11111111-2222-4333-8444-555555555555"
	const created = "22222222-3333-4444-8555-666666666666" // by the outbound request
	var mu sync.Mutex
	answerUID := other
	var released []string
	mux := http.NewServeMux()
	answer := func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if r.Method == "DELETE" && r.PathValue("uid") == created {
			released = append(released, created)
			json.NewEncoder(w).Encode(api.Stream{UID: created})
			return
		}
		json.NewEncoder(w).Encode(api.Stream{UID: answerUID})
	}
	mux.HandleFunc("GET /v1/streams/{uid}", answer)
	mux.HandleFunc("PATCH /v1/streams/{uid}", answer)
	mux.HandleFunc("DELETE /v1/streams/{uid}", answer)
	mux.HandleFunc("POST /v1/streams/{uid}/attach", answer)
	mux.HandleFunc("GET /v1/streams", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		json.NewEncoder(w).Encode(api.StreamList{Streams: []api.Stream{{UID: uid1}, {UID: answerUID}}})
	})
	mux.HandleFunc("POST /v1/streams/outbound", func(w http.ResponseWriter, r *http.Request) {
		// The right stream, but listeners no gateway has.
		json.NewEncoder(w).Encode(api.Stream{UID: created, WAN: api.WANTCP, Listeners: []string{"127.0.0.1:0"}})
	})
	srv := tlsServer(t, id, mux)
	addr := srv.Listener.Addr().String()
	c := newClient(t, client.Config{Addr: addr, ServerCert: id.file, Timeout: 5 * time.Second})
	ctx := context.Background()
	rate := int64(1)
	calls := map[string]func() error{
		"Get":     func() error { _, err := c.Get(ctx, uid1); return err },
		"GetOf":   func() error { _, err := c.GetOf(ctx, "bob", uid1); return err },
		"Update":  func() error { _, err := c.Update(ctx, uid1, &api.UpdateRequest{Rate: &rate}); return err },
		"Release": func() error { _, err := c.Release(ctx, uid1); return err },
		"Attach":  func() error { _, err := c.Attach(ctx, uid1, &api.AttachRequest{}); return err },
		"List":    func() error { _, err := c.List(ctx, true); return err },
	}
	for _, lie := range []string{other, "../../x", ""} {
		mu.Lock()
		answerUID = lie
		mu.Unlock()
		for name, call := range calls {
			err := call()
			if name == "List" && lie == other {
				if err != nil {
					t.Errorf("List of two streams: %v", err)
				}
				continue
			}
			if !errors.Is(err, client.ErrBadAnswer) {
				t.Errorf("%s answered about stream %q: %v, want ErrBadAnswer", name, lie, err)
				continue
			}
			checkLibraryMessage(t, err, addr)
		}
	}
	mu.Lock()
	released = nil
	mu.Unlock()
	_, err := c.Outbound(ctx, &api.OutboundRequest{UID: created, WAN: api.WANTCP})
	if !errors.Is(err, client.ErrBadAnswer) || !strings.Contains(err.Error(), `listener "127.0.0.1:0" is not host:port`) {
		t.Fatalf("Outbound answered a listener on port 0: %v, want ErrBadAnswer naming it", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(released) != 1 {
		t.Errorf("the refused outbound side was released %d times, want once", len(released))
	}
}

// TestSessionsNameNoOtherFile: the local records take no UID that is
// not one as a file name: a record of "../../pwned" is not written, and
// a file there is not read as one.
func TestSessionsNameNoOtherFile(t *testing.T) {
	root := t.TempDir()
	ss := client.Sessions{Dir: filepath.Join(root, "a", "home", "streams")}
	if err := os.MkdirAll(filepath.Join(root, "a"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "a", "pwned.json"), []byte(`{"uid":"x","secret":"s"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, uid := range []string{"../../pwned", "../pwned", "/tmp/pwned", "", strings.ToUpper(uid1)} {
		if err := ss.Save(&client.Session{UID: uid}); err == nil || !strings.Contains(err.Error(), "not a stream UID") {
			t.Errorf("Save of uid %q: %v, want it refused", uid, err)
		}
		if s, err := ss.Load(uid); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("Load of uid %q: %+v, %v; want os.ErrNotExist", uid, s, err)
		}
		if err := ss.Remove(uid); err != nil {
			t.Errorf("Remove of uid %q: %v", uid, err)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "a", "pwned.json")); err != nil {
		t.Errorf("the file outside the records: %v", err)
	}
	if err := ss.Save(&client.Session{UID: uid1}); err != nil {
		t.Fatal(err)
	}
	if s, err := ss.Load(uid1); err != nil || s.UID != uid1 {
		t.Fatalf("Load of a saved record: %+v, %v", s, err)
	}
}

// TestNoRedirect: a gateway that answers a redirect does not get the
// request, and its token, sent to the path (or host) it names: the
// control API never redirects, so the redirect is an error.
func TestNoRedirect(t *testing.T) {
	id := newIdentity(t)
	rec := &recorder{}
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/info", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/v1/elsewhere", http.StatusTemporaryRedirect)
	})
	mux.HandleFunc("/v1/streams/{uid}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/v1/streams/"+uid1+"/attach", http.StatusPermanentRedirect)
	})
	srv := tlsServer(t, id, rec.wrap(mux))
	addr := srv.Listener.Addr().String()
	c := newClient(t, client.Config{Addr: addr, ServerCert: id.file, Token: "secret-token", Timeout: 5 * time.Second})
	if _, err := c.Info(context.Background()); err == nil || !strings.Contains(err.Error(), "HTTP 307") {
		t.Errorf("Info redirected: %v, want the redirect as an error", err)
	}
	if _, err := c.Release(context.Background(), uid1); err == nil || !strings.Contains(err.Error(), "HTTP 308") {
		t.Errorf("Release redirected: %v, want the redirect as an error", err)
	}
	if got, want := rec.take(), []string{"GET /v1/info", "DELETE /v1/streams/" + uid1}; !slices.Equal(got, want) {
		t.Errorf("sent %q, want only %q", got, want)
	}
}
