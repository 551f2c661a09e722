package httpapi

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"scistream/internal/api"
)

type sample struct {
	Name string `json:"name"`
	N    int    `json:"n"`
}

// TestDecodeBody: what a careless or hostile caller sends is refused as
// invalid_argument with the problem named; one object is accepted.
func TestDecodeBody(t *testing.T) {
	for _, c := range []struct {
		body, want string
	}{
		{`{"name":"a","n":1}`, ""},
		{``, "empty body"},
		{`{"name":"a","extra":1}`, `unknown field "extra"`},
		{`{"name":"a"} {"name":"b"}`, "trailing data"},
		{`{"n":"x"}`, `field "n" must be int`},
		{`{"name":`, "malformed JSON body"},
		{`{"name":"` + strings.Repeat("a", api.MaxBodyBytes) + `"}`, "larger than"},
	} {
		var v sample
		err := DecodeBody([]byte(c.body), &v)
		if c.want == "" {
			if err != nil || v.Name != "a" || v.N != 1 {
				t.Errorf("%.40q: %+v, %v", c.body, v, err)
			}
			continue
		}
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Code != api.CodeInvalidArgument || !strings.Contains(ae.Message, c.want) {
			t.Errorf("%.40q: %v; want invalid_argument naming %q", c.body, err, c.want)
		}
	}
}

// TestDecodeContentType: a body that says it is not JSON is refused.
func TestDecodeContentType(t *testing.T) {
	r := httptest.NewRequest("POST", "/v1/x", strings.NewReader(`{"name":"a","n":1}`))
	r.Header.Set("Content-Type", "text/plain")
	var v sample
	if err := Decode(r, &v); err == nil || !strings.Contains(err.Error(), "send application/json") {
		t.Fatalf("text/plain: %v", err)
	}
	r = httptest.NewRequest("POST", "/v1/x", strings.NewReader(`{"name":"a","n":1}`))
	r.Header.Set("Content-Type", "application/json; charset=utf-8")
	if err := Decode(r, &v); err != nil || v.Name != "a" {
		t.Fatalf("application/json: %+v, %v", v, err)
	}
}

func TestCleanPath(t *testing.T) {
	for p, want := range map[string]string{
		"/v1/streams":      "/v1/streams",
		"/v1/streams/":     "/v1/streams/",
		"//v1/streams":     "/v1/streams",
		"/v1/./streams":    "/v1/streams",
		"/v1/x/../streams": "/v1/streams",
		"/":                "/",
	} {
		if got := CleanPath(p); got != want {
			t.Errorf("CleanPath(%q) = %q, want %q", p, got, want)
		}
	}
}

// FuzzDecodeBody: no body makes DecodeBody panic, and every refusal is
// an invalid_argument *api.Error.
func FuzzDecodeBody(f *testing.F) {
	for _, s := range []string{`{"name":"a","n":1}`, ``, `{"n":1e400}`, `[1]`, `{"name":"\ud800"}`, `{} x`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var v sample
		err := DecodeBody(body, &v)
		var ae *api.Error
		if err != nil && (!errors.As(err, &ae) || ae.Code != api.CodeInvalidArgument) {
			t.Fatalf("%q: %v, not an invalid_argument api.Error", body, err)
		}
	})
}
