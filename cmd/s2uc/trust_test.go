package main

import (
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"io"
	"io/fs"
	"log"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"scistream/internal/api"
	"scistream/internal/certs"
)

// These tests stand s2uc in front of a gateway that lies: a compromised
// or fake one the user pinned with --server_cert. It may keep its
// stream, but not write the user's files, send s2uc's requests
// elsewhere, or drive the user's terminal.

const goodUID = "0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b6c"

// hostileText is what a lying gateway puts in its text: an OSC sequence
// (retitles the window), a CSI one (clears the screen), a C1 CSI, a bidi
// override, DEL, a tab and a newline (a fake column and line).
const hostileText = "x\x1b]0;pwned\x07\x1b[2J\u009b31m\u202egnp.exe\x7f\tcol\nline"

// terminalControls are what must not reach a terminal from a gateway:
// ESC, BEL, DEL, C1 CSI, the bidi override.
var terminalControls = []string{"\x1b", "\x07", "\x7f", "\u009b", "\u202e"}

// fakeGateway serves h over TLS on loopback and returns its address and
// the certificate file that pins it (--server_cert), and its WAN
// certificate in PEM.
func fakeGateway(t *testing.T, h http.Handler) (addr, certFile, pemCert string) {
	t.Helper()
	id, certFile, _, err := certs.LoadOrGenerate(t.TempDir(), []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{id.TLS}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String(), certFile, string(id.PEM)
}

// filesUnder lists the regular files under root, relative to it.
func filesUnder(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(root, p)
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestGatewayAnswersChecked: an inbound gateway that answers a create
// with a UID that is not one ("../../pwned-by-gateway" made s2uc write
// $SCISTREAM_HOME/../pwned-by-gateway.json), or with listeners, a
// transport, a certificate or a secret no gateway sends, is refused: one
// line naming the gateway and what is wrong, no file written anywhere,
// and a stream it can name released again. A good answer is kept in
// $SCISTREAM_HOME/streams/UID.json, and nothing else is written.
func TestGatewayAnswersChecked(t *testing.T) {
	t.Setenv("SCISTREAM_TOKEN", "alice-token")
	secret := base64.StdEncoding.EncodeToString(make([]byte, 32))
	for _, c := range []struct {
		name string
		lie  func(s *api.Stream)
		want string // "": the answer is good
	}{
		{"good", func(*api.Stream) {}, ""},
		{"uid traversal", func(s *api.Stream) { s.UID = "../../pwned-by-gateway" }, `uid "../../pwned-by-gateway" is not a stream UID`},
		{"uid of 36 characters", func(s *api.Stream) { s.UID = "../../0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f" }, "is not a stream UID (a lower-case UUID of 36 characters)"},
		{"uid upper case", func(s *api.Stream) { s.UID = strings.ToUpper(goodUID) }, "is not a stream UID"},
		{"no listener", func(s *api.Stream) { s.Listeners = nil }, "0 listeners, want 1 to 256"},
		{"listener not host:port", func(s *api.Stream) { s.Listeners = []string{"\x1b[2J:5100"} }, `listener "\x1b[2J:5100" is not host:port`},
		{"listener port", func(s *api.Stream) { s.Listeners = []string{"127.0.0.1:70000"} }, "is not host:port"},
		{"downgrade to tcp", func(s *api.Stream) { s.WAN = api.WANTCP }, `asked for wan "tls", answered wan "tcp"`},
		{"node", func(s *api.Stream) { s.Nodes = []string{"a b"} }, `node "a b" is not a host name`},
		{"server name", func(s *api.Stream) { s.WANServerName = "x/y" }, "wan_server_name"},
		{"certificate", func(s *api.Stream) { s.WANCert = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n" }, "wan_cert: "},
		{"certificate size", func(s *api.Stream) { s.WANCert = strings.Repeat("A", 65<<10) }, "wan_cert of 66560 bytes"},
		{"secret", func(s *api.Stream) { s.Secret = "c2hvcnQ=" }, "secret is not the base64 of 32 bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			home := filepath.Join(root, "a", "home")
			t.Setenv("SCISTREAM_HOME", home)
			var mu sync.Mutex
			var released []string
			mux := http.NewServeMux()
			var pemCert string
			mux.HandleFunc("POST /v1/streams/inbound", func(w http.ResponseWriter, r *http.Request) {
				s := api.Stream{UID: goodUID, Role: api.RoleInbound, State: api.StateListening, WAN: api.WANTLS, NumConn: 1,
					Listeners: []string{"127.0.0.1:5100"}, Targets: []string{"127.0.0.1:80"}, WANCert: pemCert, Secret: secret}
				c.lie(&s)
				w.WriteHeader(http.StatusCreated)
				json.NewEncoder(w).Encode(s)
			})
			mux.HandleFunc("DELETE /v1/streams/{uid}", func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				released = append(released, r.PathValue("uid"))
				mu.Unlock()
				json.NewEncoder(w).Encode(api.Stream{UID: r.PathValue("uid"), State: api.StateReleased})
			})
			addr, certFile, pemc := fakeGateway(t, mux)
			pemCert = pemc

			for _, args := range [][]string{
				{"inbound-request", "--s2cs", addr, "--server_cert", certFile, "--remote_ip", "127.0.0.1", "--receiver_ports", "80"},
				// s2uc stream relays the answer to the outbound gateway:
				// a refused one goes no further.
				{"stream", "--inbound_s2cs", addr, "--inbound_server_cert", certFile, "--outbound_s2cs", "127.0.0.1:1", "--outbound_server_cert", certFile,
					"--remote_ip", "127.0.0.1", "--receiver_ports", "80"},
			} {
				mu.Lock()
				released = nil
				mu.Unlock()
				stdout, stderr, code := s2uc(t, args...)
				files := filesUnder(t, root)
				if c.want == "" {
					if args[0] == "inbound-request" && (code != 0 || len(files) != 1 || files[0] != filepath.Join("a", "home", "streams", goodUID+".json")) {
						t.Errorf("%s of a good answer: exit %d, stderr %q, files %q; want the one record", args[0], code, stderr, files)
					}
					continue
				}
				checkExit(t, args, stdout, stderr, code, exitFailed, "s2cs "+addr+": answer refused: ")
				checkExit(t, args, stdout, stderr, code, exitFailed, c.want)
				if !strings.Contains(stderr, "check that --s2cs and --server_cert name a SciStream gateway you trust") {
					t.Errorf("%s: %q does not say what to check", args[0], stderr)
				}
				if len(files) != 0 {
					t.Errorf("%s: a refused answer left files under %s: %q", args[0], root, files)
				}
				mu.Lock()
				got := released
				mu.Unlock()
				if want := api.ValidUID(goodUIDOr(c.lie)); want != (len(got) == 1 && got[0] == goodUID) {
					t.Errorf("%s: released %q after the refusal; want %s released only if the answer named a stream UID", args[0], got, goodUID)
				}
			}
		})
	}
}

// goodUIDOr is the UID a lie leaves in an answer.
func goodUIDOr(lie func(*api.Stream)) string {
	s := api.Stream{UID: goodUID}
	lie(&s)
	return s.UID
}

// hostileStream is a view whose every string, in every field and
// nested field (found by reflection, so a field added later is in it),
// is hostileText, but for a good UID.
func hostileStream() api.Stream {
	var s api.Stream
	fillStrings(reflect.ValueOf(&s).Elem(), hostileText)
	s.UID = goodUID
	s.Expires = time.Now().Add(time.Hour)
	return s
}

// fillStrings sets every exported string reachable from v to text:
// fields, two elements of each slice, a value of each kind of end in
// each map keyed by kind, pointed-to structs (allocated).
func fillStrings(v reflect.Value, text string) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(text)
	case reflect.Pointer:
		if v.Type().Elem().Kind() == reflect.Struct {
			if v.IsNil() {
				v.Set(reflect.New(v.Type().Elem()))
			}
			fillStrings(v.Elem(), text)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fillStrings(v.Field(i), text)
			}
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return
		}
		if v.Len() == 0 {
			v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		}
		for i := range v.Len() {
			fillStrings(v.Index(i), text)
		}
	case reflect.Map:
		if v.Type().Key().Kind() != reflect.String {
			return
		}
		m := reflect.MakeMap(v.Type())
		for _, k := range api.EndKinds() {
			e := reflect.New(v.Type().Elem()).Elem()
			fillStrings(e, text)
			m.SetMapIndex(reflect.ValueOf(k).Convert(v.Type().Key()), e)
		}
		v.Set(m)
	}
}

// checkNoControls fails if out holds a terminal control.
func checkNoControls(t *testing.T, what, out string) {
	t.Helper()
	for _, c := range terminalControls {
		if strings.Contains(out, c) {
			t.Errorf("%s: %q reached the output:\n%q", what, c, out)
		}
	}
}

// TestGatewayTextPrintable: whatever text a gateway puts in a stream
// view, an info or an error (its message and request id), s2uc prints
// it in text with every control escaped (the OSC and CSI sequences
// shown as \x1b..., nothing a terminal acts on), and in JSON escaped by
// JSON, the same text once decoded.
func TestGatewayTextPrintable(t *testing.T) {
	isolate(t)
	t.Setenv("SCISTREAM_TOKEN", "alice-token")
	hostile := hostileStream()
	var info api.Info
	fillStrings(reflect.ValueOf(&info).Elem(), hostileText)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/info", func(w http.ResponseWriter, r *http.Request) { json.NewEncoder(w).Encode(info) })
	mux.HandleFunc("GET /v1/streams", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(api.StreamList{Streams: []api.Stream{hostile}})
	})
	mux.HandleFunc("GET /v1/streams/{uid}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("uid") != goodUID {
			// A refusal the operator must look into, so s2uc prints the
			// request id too.
			// Go's HTTP client refuses a header with a C0 control
			// (malformed MIME header), but not one with a C1 control or
			// a bidi override.
			w.Header().Set(api.RequestIDHeader, "id\u009b2J\u202e")
			w.WriteHeader(http.StatusInternalServerError)
			json.NewEncoder(w).Encode(api.ErrorBody{Error: api.Error{Code: api.CodeInternal, Message: hostileText}})
			return
		}
		json.NewEncoder(w).Encode(hostile)
	})
	addr, certFile, _ := fakeGateway(t, mux)
	gw := []string{"--s2cs", addr, "--server_cert", certFile}
	const otherUID = "11111111-2222-4333-8444-555555555555"

	for _, args := range [][]string{
		{"status", goodUID}, {"list"}, {"list", "--all_owners"}, {"info"}, {"watch", goodUID, "--count", "1"}, {"watch", "--count", "1"},
	} {
		args = append(args, gw...)
		stdout, stderr, code := s2uc(t, args...)
		if code != 0 || stderr != "" || !strings.Contains(stdout, `x\x1b]0;pwned\a\x1b[2J\u009b31m\u202egnp.exe\x7f\tcol\nline`) {
			t.Errorf("s2uc %s: exit %d, stderr %q, stdout:\n%s\nwant the gateway's text escaped", strings.Join(args, " "), code, stderr, stdout)
		}
		checkNoControls(t, "s2uc "+strings.Join(args, " "), stdout)
		if strings.Contains(stdout, "\tcol") || strings.Contains(stdout, "\nline") {
			t.Errorf("s2uc %s: the gateway's tab or newline reached the output:\n%s", strings.Join(args, " "), stdout)
		}

		stdout, _, code = s2uc(t, append(args, "--output", "json")...)
		checkNoControls(t, "s2uc "+strings.Join(args, " ")+" --output json", stdout)
		if code != 0 || !strings.Contains(stdout, `"x\u001b]0;pwned\u0007\u001b[2J\u009b31m\u202egnp.exe\u007f\tcol\nline"`) {
			t.Errorf("s2uc %s --output json: exit %d, stdout:\n%s\nwant the gateway's text escaped by JSON", strings.Join(args, " "), code, stdout)
		}
		dec := json.NewDecoder(strings.NewReader(stdout))
		for {
			var v any
			if err := dec.Decode(&v); err == io.EOF {
				break
			} else if err != nil {
				t.Fatalf("s2uc %s --output json: %v:\n%s", strings.Join(args, " "), err, stdout)
			}
			if b, _ := json.Marshal(v); !strings.Contains(string(b), `"x\u001b]0;pwned\u0007\u001b[2J`+"\u009b31m\u202egnp.exe\x7f"+`\tcol\nline"`) {
				t.Errorf("s2uc %s --output json: the text decodes otherwise than sent: %s", strings.Join(args, " "), b)
			}
		}
	}

	// A refusal: its message and request id (main writes the lines of an
	// error as one, so the newline in it becomes "; ").
	for _, args := range [][]string{{"status", otherUID}, {"watch", otherUID, "--count", "1"}} {
		args = append(args, gw...)
		stdout, stderr, code := s2uc(t, args...)
		checkExit(t, args, stdout, stderr, code, exitFailed, `internal: x\x1b]0;pwned\a\x1b[2J\u009b31m\u202egnp.exe\x7f\tcol; line (request id\u009b2J\u202e in the gateway's log)`)
		checkNoControls(t, "s2uc "+strings.Join(args, " "), stderr)
	}

	// The live view, drawn with its own escapes, and a gateway's error
	// in it.
	w := &watcher{hist: map[string]*sparks{}}
	frame := w.frame(&view{at: time.Now(), gws: []gatewayView{
		{Gateway: addr, Streams: []api.Stream{hostile}},
		{Gateway: "other:5000", Error: hostileText},
	}}, time.Second, "q", 0, 0)
	own := strings.NewReplacer("\x1b[H", "", "\x1b[K", "", "\x1b[J", "").Replace(frame)
	checkNoControls(t, "the live view", own)
	if strings.Contains(frame, "\nline") || strings.Contains(frame, "\tcol") {
		t.Errorf("the live view lets the gateway's text break its lines:\n%s", frame)
	}
}
