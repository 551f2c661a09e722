// Package httpapi holds the control API's HTTP conventions that need
// nothing of the gateway: a request body decoded strictly as exactly
// one JSON object (unknown fields refused, size bounded, every error an
// invalid_argument *api.Error naming the problem), answers written as
// indented JSON, what a handler left of a body drained before the
// answer goes out, and the clean form of a path.
package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"strings"

	"scistream/internal/api"
)

// maxDrain bounds what Drain reads of a request body its handler left.
const maxDrain = 16 << 20

// Drain reads, and throws away, what is left of r's body, up to
// maxDrain, before the answer goes out: a client that sends its whole
// body before it reads the answer (Python's http.client, curl at times)
// then reads the refusal of a body too large (api.MaxBodyBytes), of the
// wrong type, or of a caller not authenticated. Without it the server
// closes the connection with unread data in it, the kernel answers that
// with a reset, and the reset takes the answer with it. A body larger
// still is cut off that way: draining it all would let anyone make the
// gateway read without end. The server's ReadTimeout bounds the time.
func Drain(r *http.Request) {
	io.Copy(io.Discard, io.LimitReader(r.Body, maxDrain))
}

// CleanPath is the path ServeMux would redirect p to: a path with
// "//", "/./" or "/../" in it differs from its CleanPath.
func CleanPath(p string) string {
	np := path.Clean(p)
	if strings.HasSuffix(p, "/") && np != "/" {
		np += "/"
	}
	return np
}

// WriteJSON writes body as indented JSON with status code.
func WriteJSON(w http.ResponseWriter, code int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(body)
}

// Decode reads r's body, at most api.MaxBodyBytes of it, as exactly
// one JSON object into v, refusing unknown fields and a content type
// other than JSON. Every error is an invalid_argument *api.Error whose
// message names the problem.
func Decode(r *http.Request, v any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
		return api.Errorf(api.CodeInvalidArgument, "content type %q: send application/json", ct)
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, api.MaxBodyBytes+1))
	if err != nil {
		return api.Errorf(api.CodeInvalidArgument, "read request body: %v", err)
	}
	return DecodeBody(body, v)
}

// DecodeBody decodes body, which came from an untrusted caller, as
// exactly one JSON object into v, refusing unknown fields. Every error is
// an invalid_argument *api.Error whose message names the problem.
func DecodeBody(body []byte, v any) error {
	if len(body) > api.MaxBodyBytes {
		return api.Errorf(api.CodeInvalidArgument, "request body larger than %d bytes", api.MaxBodyBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return api.Errorf(api.CodeInvalidArgument, "malformed JSON body: %s", jsonMsg(err))
	}
	if dec.More() {
		return api.Errorf(api.CodeInvalidArgument, "malformed JSON body: trailing data after the object")
	}
	return nil
}

func jsonMsg(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("syntax error at byte %d: %v", se.Offset, se)
	case errors.As(err, &te):
		return fmt.Sprintf("field %q must be %s, not %s", te.Field, te.Type, te.Value)
	case errors.Is(err, io.EOF):
		return "empty body; send a JSON object"
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}
