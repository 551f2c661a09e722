package api_test

// These tests keep openapi.yaml honest: the routes it documents are the
// routes internal/gateway/routes.go registers, its schemas have exactly the
// JSON fields of the wire types in api.go, and its error codes and HTTP
// statuses are those of api.Code.
//
// The module has no YAML library, so the document is read with yamlParse
// below, a strict parser for the subset of YAML that openapi.yaml uses:
// block mappings and sequences, plain and quoted scalars, flow sequences
// and mappings on one line, and literal (|) or folded (>) block scalars.
// It fails loudly on anything else, so keep openapi.yaml within that subset.

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"scistream/internal/api"
	"scistream/internal/relay"
)

// ---------------------------------------------------------------- tests

type route struct {
	method, path string
	authed       bool
}

func (r route) String() string { return r.method + " " + r.path }

// routeRE matches the registrations in routes(): mux.Handle("GET /v1/info",
// s.authed(...)) (or s.authedAs, s.require, s.operatorView: authenticated
// with a role) or mux.HandleFunc("GET /healthz", ...). The catch-all "/"
// has no method and is not matched.
var routeRE = regexp.MustCompile(`mux\.Handle(?:Func)?\(\s*"([A-Z]+) +(/[^"]*)"\s*,\s*(s\.(?:authed|authedAs|require|operatorView)\()?`)

func gatewayRoutes(t *testing.T) []route {
	t.Helper()
	src, err := os.ReadFile("../gateway/routes.go")
	if err != nil {
		t.Fatalf("read the routes' source: %v", err)
	}
	var rs []route
	for _, m := range routeRE.FindAllStringSubmatch(string(src), -1) {
		rs = append(rs, route{method: m[1], path: m[2], authed: m[3] != ""})
	}
	if len(rs) == 0 {
		t.Fatalf("found no mux.Handle/mux.HandleFunc(\"METHOD /path\", ...) registrations in internal/gateway/routes.go; update routeRE in this test")
	}
	return rs
}

var httpMethods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

func loadDoc(t *testing.T) map[string]any {
	t.Helper()
	v, err := yamlParse(api.OpenAPI)
	if err != nil {
		t.Fatalf("openapi.yaml: %v", err)
	}
	doc, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("openapi.yaml: top level is %T, want a mapping", v)
	}
	return doc
}

func TestOpenAPIDocument(t *testing.T) {
	doc := loadDoc(t)
	if got := doc["openapi"]; got != "3.0.3" {
		t.Errorf("openapi: %v, want 3.0.3", got)
	}
	for _, k := range []string{"title", "version", "description"} {
		if s, _ := dig(doc, "info", k).(string); strings.TrimSpace(s) == "" {
			t.Errorf("info.%s is missing or empty", k)
		}
	}
	servers, _ := doc["servers"].([]any)
	if len(servers) == 0 {
		t.Errorf("servers: none listed")
	}
	for i, s := range servers {
		if u, _ := dig(s, "url").(string); !strings.HasPrefix(u, "https://") {
			t.Errorf("servers[%d].url %q: the control API is served over TLS only, want https://", i, u)
		}
	}
	// The workflow and the state machine are explained in info.description.
	desc, _ := dig(doc, "info", "description").(string)
	for _, want := range []string{"/v1/streams/inbound", "/v1/streams/outbound", "/v1/streams/{uid}/attach", "DELETE /v1/streams/{uid}",
		"wan_cert", "secret", "peer_listeners", "peer_cert",
		"requested -> listening -> wired -> connected -> released | expired | failed"} {
		if !strings.Contains(desc, want) {
			t.Errorf("info.description does not mention %q", want)
		}
	}
	// Every $ref resolves.
	walk(doc, "", func(path string, v any) {
		m, ok := v.(map[string]any)
		if !ok {
			return
		}
		ref, ok := m["$ref"]
		if !ok {
			return
		}
		s, _ := ref.(string)
		if _, err := resolveRef(doc, s); err != nil {
			t.Errorf("%s: $ref %v: %v", path, ref, err)
		}
	})
}

func TestOpenAPIRoutes(t *testing.T) {
	doc := loadDoc(t)
	paths, _ := doc["paths"].(map[string]any)
	if paths == nil {
		t.Fatal("openapi.yaml has no paths")
	}
	routes := gatewayRoutes(t)
	registered := map[string]bool{}
	for _, r := range routes {
		registered[r.String()] = true
		item, _ := paths[r.path].(map[string]any)
		if item == nil {
			t.Errorf("route %s (registered in internal/gateway/routes.go routes()) is missing from openapi.yaml: no path %q", r, r.path)
			continue
		}
		op, _ := item[strings.ToLower(r.method)].(map[string]any)
		if op == nil {
			t.Errorf("route %s (registered in internal/gateway/routes.go routes()) is missing from openapi.yaml: path %q has no %q operation", r, r.path, strings.ToLower(r.method))
			continue
		}
		checkOperation(t, doc, r, item, op)
	}
	for _, p := range sortedKeys(paths) {
		item, _ := paths[p].(map[string]any)
		for _, m := range httpMethods {
			if _, ok := item[m]; ok && !registered[strings.ToUpper(m)+" "+p] {
				t.Errorf("openapi.yaml documents %s %s, which internal/gateway/routes.go routes() does not register", strings.ToUpper(m), p)
			}
		}
	}
	// Bearer authentication is the global default.
	if typ, scheme := dig(doc, "components", "securitySchemes", "bearerAuth", "type"), dig(doc, "components", "securitySchemes", "bearerAuth", "scheme"); typ != "http" || scheme != "bearer" {
		t.Errorf("components.securitySchemes.bearerAuth: type %v scheme %v, want http bearer", typ, scheme)
	}
	global, _ := doc["security"].([]any)
	if len(global) != 1 || dig(global[0], "bearerAuth") == nil {
		t.Errorf("top-level security: %v, want [{bearerAuth: []}]", doc["security"])
	}
}

// checkOperation checks one documented route: its authentication, its path
// parameters and that it has a success response.
func checkOperation(t *testing.T, doc map[string]any, r route, item, op map[string]any) {
	t.Helper()
	sec, hasSec := op["security"]
	list, _ := sec.([]any)
	open := hasSec && len(list) == 0
	responses, _ := op["responses"].(map[string]any)
	switch {
	case r.authed && open:
		t.Errorf("route %s requires a bearer token (s.authed in routes.go), but openapi.yaml sets security: [] on it", r)
	case r.authed && hasSec:
		t.Errorf("route %s: drop its security override; the global bearerAuth applies", r)
	case !r.authed && !open:
		t.Errorf("route %s needs no authentication in routes.go; give it security: [] in openapi.yaml", r)
	}
	if r.authed {
		// Every authenticated route can answer 401, 403 to a caller
		// without the role it needs, and 503 while the gateway shuts
		// down or a token's identity provider cannot be asked.
		for _, st := range []string{"401", "403", "503"} {
			if responses[st] == nil {
				t.Errorf("route %s: no %s response documented", r, st)
			}
		}
	}
	ok2xx := false
	for st := range responses {
		if strings.HasPrefix(st, "2") {
			ok2xx = true
		}
	}
	if !ok2xx {
		t.Errorf("route %s: no 2xx response documented", r)
	}
	// Path parameters.
	params := map[string]bool{}
	for _, src := range []any{item["parameters"], op["parameters"]} {
		ps, _ := src.([]any)
		for _, p := range ps {
			p = deref(doc, p)
			if dig(p, "in") == "path" && dig(p, "required") == true {
				name, _ := dig(p, "name").(string)
				params[name] = true
			}
		}
	}
	for _, m := range regexp.MustCompile(`\{([^}]+)\}`).FindAllStringSubmatch(r.path, -1) {
		if !params[m[1]] {
			t.Errorf("route %s: path parameter %q is not documented (in: path, required: true)", r, m[1])
		}
	}
}

// wireTypes pairs each wire type with its schema in components.schemas.
var wireTypes = []struct {
	schema  string
	v       any
	request bool
}{
	{"InboundRequest", api.InboundRequest{}, true},
	{"OutboundRequest", api.OutboundRequest{}, true},
	{"AttachRequest", api.AttachRequest{}, true},
	{"UpdateRequest", api.UpdateRequest{}, true},
	{"Stream", api.Stream{}, false},
	{"Stats", api.Stats{}, false},
	{"StreamList", api.StreamList{}, false},
	{"Info", api.Info{}, false},
	{"Rates", api.Rates{}, false},
	{"DirRate", api.DirRate{}, false},
	{"RateRun", api.RateRun{}, false},
	{"RateStat", api.RateStat{}, false},
	{"RateHistory", api.RateHistory{}, false},
	{"GatewayStatus", api.GatewayStatus{}, false},
	{"GatewayHealth", api.GatewayHealth{}, false},
	{"ErrorBody", api.ErrorBody{}, false},
	{"Error", api.Error{}, false},
}

type jsonField struct {
	goName    string
	omitempty bool
	typ       reflect.Type
}

func jsonFields(t reflect.Type) map[string]jsonField {
	out := map[string]jsonField{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" {
			name = f.Name
		}
		out[name] = jsonField{goName: f.Name, omitempty: slices.Contains(strings.Split(opts, ","), "omitempty") || slices.Contains(strings.Split(opts, ","), "omitzero"), typ: f.Type}
	}
	return out
}

func TestOpenAPISchemasMatchWireTypes(t *testing.T) {
	doc := loadDoc(t)
	for _, w := range wireTypes {
		typ := reflect.TypeOf(w.v)
		schema, _ := dig(doc, "components", "schemas", w.schema).(map[string]any)
		if schema == nil {
			t.Errorf("components.schemas.%s (api.%s) is missing from openapi.yaml", w.schema, typ.Name())
			continue
		}
		if schema["type"] != "object" {
			t.Errorf("schema %s: type %v, want object", w.schema, schema["type"])
		}
		props, _ := schema["properties"].(map[string]any)
		fields := jsonFields(typ)
		for _, name := range sortedKeys(fields) {
			f := fields[name]
			p, ok := props[name]
			if !ok {
				t.Errorf("schema %s lacks property %q (field api.%s.%s)", w.schema, name, typ.Name(), f.goName)
				continue
			}
			if want, got := goSchemaType(f.typ), schemaType(doc, p); want != got {
				t.Errorf("schema %s property %q: type %q, but api.%s.%s is %s (want %q)", w.schema, name, got, typ.Name(), f.goName, f.typ, want)
			}
		}
		for _, name := range sortedKeys(props) {
			if _, ok := fields[name]; !ok {
				t.Errorf("schema %s has property %q, but api.%s has no field with json name %q", w.schema, name, typ.Name(), name)
			}
		}
		// required lists exactly the fields without omitempty: the server
		// always sends those, and refuses requests that lack them.
		req := map[string]bool{}
		rl, _ := schema["required"].([]any)
		for _, r := range rl {
			s, _ := r.(string)
			req[s] = true
		}
		for _, name := range sortedKeys(fields) {
			if !fields[name].omitempty && !req[name] {
				t.Errorf("schema %s: property %q is not in required, but api.%s.%s has no omitempty", w.schema, name, typ.Name(), fields[name].goName)
			}
		}
		for _, name := range sortedKeys(req) {
			if f, ok := fields[name]; ok && f.omitempty {
				t.Errorf("schema %s: property %q is required, but api.%s.%s is omitempty (optional)", w.schema, name, typ.Name(), f.goName)
			} else if !ok {
				t.Errorf("schema %s: required lists %q, which is not a property of api.%s", w.schema, name, typ.Name())
			}
		}
		// The server decodes requests with DisallowUnknownFields.
		if w.request && schema["additionalProperties"] != false {
			t.Errorf("schema %s: want additionalProperties: false (the server refuses unknown fields)", w.schema)
		}
	}

	// Limits from api.go.
	limits := []struct {
		path []string
		want int
	}{
		{[]string{"InboundRequest", "properties", "num_conn", "minimum"}, 1},
		{[]string{"InboundRequest", "properties", "num_conn", "maximum"}, api.MaxChannels},
		{[]string{"InboundRequest", "properties", "receiver_ports", "minItems"}, 1},
		{[]string{"InboundRequest", "properties", "receiver_ports", "maxItems"}, api.MaxReceiverPorts},
		{[]string{"OutboundRequest", "properties", "num_conn", "minimum"}, 1},
		{[]string{"OutboundRequest", "properties", "num_conn", "maximum"}, api.MaxChannels},
		{[]string{"OutboundRequest", "properties", "peer_listeners", "minItems"}, 1},
		{[]string{"OutboundRequest", "properties", "peer_listeners", "maxItems"}, api.MaxReceiverPorts},
		{[]string{"OutboundRequest", "properties", "allow", "maxItems"}, api.MaxAllow},
		{[]string{"InboundRequest", "properties", "resume_window_s", "maximum"}, api.MaxResumeWindowS},
		{[]string{"OutboundRequest", "properties", "resume_window_s", "maximum"}, api.MaxResumeWindowS},
		{[]string{"Info", "properties", "resume_window_max_s", "maximum"}, api.MaxResumeWindowS},
	}
	for _, l := range limits {
		got := dig(doc, append([]string{"components", "schemas"}, l.path...)...)
		if got != int64(l.want) {
			t.Errorf("components.schemas.%s: %v, want %d (api.go)", strings.Join(l.path, "."), got, l.want)
		}
	}
	uid, _ := dig(doc, "components", "schemas", "UID", "pattern").(string)
	if re, err := regexp.Compile(uid); err != nil || !re.MatchString("0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b6c") || re.MatchString("0F8E3C5A-4B1D-4C2E-9A7F-1D2E3F4A5B6C") {
		t.Errorf("components.schemas.UID.pattern %q: want a lower-case UUID pattern", uid)
	}
}

// goSchemaType is the OpenAPI type of a Go field's JSON encoding.
func goSchemaType(t reflect.Type) string {
	if t == reflect.TypeOf(time.Time{}) {
		return "string"
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Bool:
		return "boolean"
	case reflect.Slice, reflect.Array:
		return "array"
	case reflect.Pointer:
		return goSchemaType(t.Elem())
	}
	return "object"
}

// schemaType is a schema's type, following $ref and a one-element allOf.
func schemaType(doc map[string]any, s any) string {
	for range 10 {
		s = deref(doc, s)
		if all, ok := dig(s, "allOf").([]any); ok && len(all) == 1 {
			s = all[0]
			continue
		}
		break
	}
	typ, _ := dig(s, "type").(string)
	return typ
}

func TestOpenAPIErrorCodes(t *testing.T) {
	doc := loadDoc(t)
	codes := constsOfType(t, "Code")
	if len(codes) == 0 {
		t.Fatal("found no api.Code constants in api.go")
	}
	// api.Codes lists them all (the gateway counts its error answers by
	// it, in the metrics and the status).
	listed := map[string]bool{}
	for _, c := range api.Codes() {
		listed[string(c)] = true
	}
	for c, name := range codes {
		if !listed[c] {
			t.Errorf("api.Codes() lacks %s (%q): add it", name, c)
		}
	}
	if len(listed) != len(codes) || len(api.Codes()) != len(codes) {
		t.Errorf("api.Codes() lists %d codes, %d distinct; api.go declares %d", len(api.Codes()), len(listed), len(codes))
	}
	checkEnum(t, doc, "Code", codes)
	checkEnum(t, doc, "State", constsOfType(t, "State"))
	checkEnum(t, doc, "Role", constsOfType(t, "Role"))
	checkEnum(t, doc, "WAN", map[string]string{api.WANTLS: "WANTLS", api.WANTCP: "WANTCP", api.WANQUIC: "WANQUIC"})
	engines := map[string]string{}
	for _, e := range relay.Names() {
		engines[e] = "relay.Names()"
	}
	checkEnum(t, doc, "Engine", engines)

	// The Error schema's code is the Code enum.
	if schemaRef(dig(doc, "components", "schemas", "Error", "properties", "code")) != "#/components/schemas/Code" {
		t.Errorf("components.schemas.Error.properties.code: want $ref '#/components/schemas/Code'")
	}

	// The Code description's table gives each code's HTTP status.
	desc, _ := dig(doc, "components", "schemas", "Code", "description").(string)
	for _, c := range sortedKeys(codes) {
		st := api.Code(c).HTTPStatus()
		if !regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(c) + `\s+` + strconv.Itoa(st) + `\b`).MatchString(desc) {
			t.Errorf("components.schemas.Code.description: no line %q giving its HTTP status %d", c, st)
		}
	}

	// One reusable response per code, marked with x-error-code.
	byName := map[string]api.Code{}
	byCode := map[api.Code]string{}
	responses, _ := dig(doc, "components", "responses").(map[string]any)
	for _, name := range sortedKeys(responses) {
		r := responses[name]
		c, _ := dig(r, "x-error-code").(string)
		if c == "" {
			continue
		}
		if _, ok := codes[c]; !ok {
			t.Errorf("components.responses.%s: x-error-code %q is no api.Code constant", name, c)
		}
		if prev, dup := byCode[api.Code(c)]; dup {
			t.Errorf("components.responses.%s and %s both have x-error-code %q", prev, name, c)
		}
		byName[name], byCode[api.Code(c)] = api.Code(c), name
		if schemaRef(dig(r, "content", "application/json", "schema")) != "#/components/schemas/ErrorBody" {
			t.Errorf("components.responses.%s: want content application/json with schema $ref '#/components/schemas/ErrorBody'", name)
		}
	}
	for _, c := range sortedKeys(codes) {
		if _, ok := byCode[api.Code(c)]; !ok {
			t.Errorf("error code %q (api.%s): no components.responses entry has x-error-code %q", c, codes[c], c)
		}
	}

	// Every error response of every operation is one of those, under the
	// HTTP status the server sends its code with.
	paths, _ := doc["paths"].(map[string]any)
	for _, p := range sortedKeys(paths) {
		item, _ := paths[p].(map[string]any)
		for _, m := range httpMethods {
			op, ok := item[m].(map[string]any)
			if !ok {
				continue
			}
			open := false
			if l, ok := op["security"].([]any); ok && len(l) == 0 {
				open = true
			}
			rs, _ := op["responses"].(map[string]any)
			for _, st := range sortedKeys(rs) {
				ref := schemaRef(rs[st])
				name, isErr := strings.CutPrefix(ref, "#/components/responses/")
				code, known := byName[name]
				where := fmt.Sprintf("%s %s response %s", strings.ToUpper(m), p, st)
				switch {
				case isErr && known:
					if want := strconv.Itoa(code.HTTPStatus()); st != want {
						t.Errorf("%s refers to %s (code %s), which the server sends with HTTP %s", where, name, code, want)
					}
				case st >= "400" && !open:
					t.Errorf("%s: want a $ref to a components.responses entry with an x-error-code (an ErrorBody)", where)
				}
			}
		}
	}
}

// checkEnum checks that components.schemas.<schema>.enum lists exactly the
// keys of want (values name their origin, for messages).
func checkEnum(t *testing.T, doc map[string]any, schema string, want map[string]string) {
	t.Helper()
	enum, _ := dig(doc, "components", "schemas", schema, "enum").([]any)
	got := map[string]bool{}
	for _, e := range enum {
		s := fmt.Sprint(e)
		got[s] = true
		if _, ok := want[s]; !ok {
			t.Errorf("components.schemas.%s.enum lists %q, which is not in api.go", schema, s)
		}
	}
	for _, v := range sortedKeys(want) {
		if !got[v] {
			t.Errorf("%q (%s) is missing from components.schemas.%s.enum", v, want[v], schema)
		}
	}
}

// constsOfType returns value -> name of the constants of type typ declared
// in api.go.
func constsOfType(t *testing.T, typ string) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "api.go", nil, 0)
	if err != nil {
		t.Fatalf("parse api.go: %v", err)
	}
	out := map[string]string{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != typ {
				continue
			}
			for i, n := range vs.Names {
				if i >= len(vs.Values) {
					continue
				}
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					t.Fatalf("api.go: constant %s is not a string literal", n.Name)
				}
				v, _ := strconv.Unquote(lit.Value)
				out[v] = n.Name
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("api.go declares no constants of type %s", typ)
	}
	return out
}

// ---------------------------------------------------------------- helpers

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// dig follows mapping keys from v; nil if any is missing.
func dig(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func schemaRef(v any) string {
	s, _ := dig(v, "$ref").(string)
	return s
}

// deref follows $ref chains.
func deref(doc map[string]any, v any) any {
	for range 10 {
		ref := schemaRef(v)
		if ref == "" {
			return v
		}
		r, err := resolveRef(doc, ref)
		if err != nil {
			return nil
		}
		v = r
	}
	return v
}

func resolveRef(doc map[string]any, ref string) (any, error) {
	rest, ok := strings.CutPrefix(ref, "#/")
	if !ok {
		return nil, fmt.Errorf("only local references (#/...) are used here")
	}
	var v any = doc
	for _, k := range strings.Split(rest, "/") {
		k = strings.ReplaceAll(strings.ReplaceAll(k, "~1", "/"), "~0", "~")
		m, ok := v.(map[string]any)
		if !ok || m[k] == nil {
			return nil, fmt.Errorf("%q does not exist", k)
		}
		v = m[k]
	}
	return v, nil
}

func walk(v any, path string, f func(string, any)) {
	f(path, v)
	switch x := v.(type) {
	case map[string]any:
		for _, k := range sortedKeys(x) {
			walk(x[k], path+"."+k, f)
		}
	case []any:
		for i, e := range x {
			walk(e, fmt.Sprintf("%s[%d]", path, i), f)
		}
	}
}

// ---------------------------------------------------------------- YAML subset

type yamlLine struct {
	num    int    // 1-based line number
	indent int    // leading spaces
	text   string // without indentation and trailing blanks
	raw    string
	blank  bool // empty or whitespace only
	note   bool // a comment line
}

type yamlParser struct {
	lines []yamlLine
	i     int
}

type yamlError struct{ err error }

// yamlParse parses the YAML subset described at the top of this file into
// map[string]any, []any, string, int64, bool and nil values.
func yamlParse(src []byte) (v any, err error) {
	p := &yamlParser{}
	for n, raw := range strings.Split(strings.ReplaceAll(string(src), "\r\n", "\n"), "\n") {
		trimmed := strings.TrimLeft(raw, " ")
		l := yamlLine{num: n + 1, indent: len(raw) - len(trimmed), text: strings.TrimRight(trimmed, " \t"), raw: raw}
		l.blank = l.text == ""
		l.note = strings.HasPrefix(l.text, "#")
		if strings.HasPrefix(trimmed, "\t") {
			return nil, fmt.Errorf("line %d: tab in indentation", l.num)
		}
		p.lines = append(p.lines, l)
	}
	defer func() {
		if r := recover(); r != nil {
			ye, ok := r.(yamlError)
			if !ok {
				panic(r)
			}
			v, err = nil, ye.err
		}
	}()
	v = p.node(0)
	if p.skip(); p.i < len(p.lines) {
		p.fail("unexpected content")
	}
	return v, nil
}

func (p *yamlParser) fail(format string, args ...any) {
	n := len(p.lines)
	if p.i < len(p.lines) {
		n = p.lines[p.i].num
	}
	panic(yamlError{fmt.Errorf("line %d: %s (the test's YAML reader supports a subset of YAML; see openapi_test.go)", n, fmt.Sprintf(format, args...))})
}

func (p *yamlParser) skip() {
	for p.i < len(p.lines) && (p.lines[p.i].blank || p.lines[p.i].note) {
		p.i++
	}
}

func isSeqItem(s string) bool { return s == "-" || strings.HasPrefix(s, "- ") }

func (p *yamlParser) node(minIndent int) any {
	p.skip()
	if p.i >= len(p.lines) || p.lines[p.i].indent < minIndent {
		return nil
	}
	l := p.lines[p.i]
	if isSeqItem(l.text) {
		return p.seq(l.indent)
	}
	if _, _, ok := splitKey(l.text); !ok {
		// A scalar on a line of its own; nothing more may follow at this
		// depth.
		v := scalar(p, l.text)
		p.i++
		if p.skip(); p.i < len(p.lines) && p.lines[p.i].indent >= minIndent {
			p.fail("multi-line plain scalars are not supported; use a | or > block")
		}
		return v
	}
	return p.mapping(l.indent)
}

func (p *yamlParser) mapping(indent int) map[string]any {
	m := map[string]any{}
	for {
		p.skip()
		if p.i >= len(p.lines) {
			return m
		}
		l := p.lines[p.i]
		if l.indent < indent || (l.indent == indent && isSeqItem(l.text)) {
			return m
		}
		if l.indent > indent {
			p.fail("unexpected indentation (a multi-line plain scalar?)")
		}
		key, rest, ok := splitKey(l.text)
		if !ok {
			p.fail("want \"key: value\", got %q", l.text)
		}
		if _, dup := m[key]; dup {
			p.fail("duplicate key %q", key)
		}
		p.i++
		switch {
		case rest == "":
			p.skip()
			if p.i < len(p.lines) && p.lines[p.i].indent == indent && isSeqItem(p.lines[p.i].text) {
				m[key] = p.seq(indent)
			} else {
				m[key] = p.node(indent + 1)
			}
		case rest[0] == '|' || rest[0] == '>':
			m[key] = p.block(indent, rest)
		default:
			m[key] = scalar(p, rest)
		}
	}
}

func (p *yamlParser) seq(indent int) []any {
	s := []any{}
	for {
		p.skip()
		if p.i >= len(p.lines) {
			return s
		}
		l := p.lines[p.i]
		if l.indent < indent || !isSeqItem(l.text) {
			if l.indent > indent {
				p.fail("unexpected indentation in a sequence")
			}
			return s
		}
		if l.indent > indent {
			p.fail("unexpected indentation in a sequence")
		}
		content := strings.TrimLeft(l.text[1:], " ")
		switch _, _, isKey := splitKey(content); {
		case content == "":
			p.i++
			s = append(s, p.node(indent+1))
		case isKey:
			// "- key: value": a mapping whose keys sit where key starts.
			p.lines[p.i] = yamlLine{num: l.num, indent: indent + len(l.text) - len(content), text: content, raw: l.raw}
			s = append(s, p.mapping(indent+len(l.text)-len(content)))
		default:
			p.i++
			s = append(s, scalar(p, content))
		}
	}
}

// block reads a block scalar whose key sits at indent; head is "|", "|-",
// ">", ">-" and so on.
func (p *yamlParser) block(indent int, head string) string {
	style, chomp := head[0], strings.TrimSpace(head[1:])
	if chomp != "" && chomp != "-" && chomp != "+" {
		p.i--
		p.fail("unsupported block scalar header %q", head)
	}
	var lines []string
	content := -1
	for p.i < len(p.lines) {
		l := p.lines[p.i]
		if l.blank {
			lines = append(lines, "")
			p.i++
			continue
		}
		if l.indent <= indent {
			break
		}
		if content < 0 {
			content = l.indent
		}
		if l.indent < content {
			p.fail("block scalar line less indented than its first line")
		}
		lines = append(lines, strings.TrimRight(l.raw[content:], " \t"))
		p.i++
	}
	// Trailing blank lines belong to no one; step back over them so the
	// caller sees them as separators.
	for len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
		p.i--
	}
	var out string
	if style == '|' {
		out = strings.Join(lines, "\n")
	} else {
		var b strings.Builder
		for i, l := range lines {
			switch {
			case i == 0:
			case l == "" || strings.HasPrefix(l, " ") || strings.HasPrefix(lines[i-1], " "):
				b.WriteString("\n")
			case lines[i-1] != "":
				b.WriteString(" ")
			}
			b.WriteString(l)
		}
		out = b.String()
	}
	if chomp != "-" && out != "" {
		out += "\n"
	}
	return out
}

// splitKey splits "key: value" (value may be empty). ok is false if s is
// not a mapping entry.
func splitKey(s string) (key, rest string, ok bool) {
	if s == "" || s[0] == '[' || s[0] == '{' || s[0] == '-' && isSeqItem(s) {
		return "", "", false
	}
	if s[0] == '\'' || s[0] == '"' {
		end := quoteEnd(s)
		if end < 0 || end+1 >= len(s) || s[end+1] != ':' || (end+2 < len(s) && s[end+2] != ' ') {
			return "", "", false
		}
		k, err := unquote(s[:end+1])
		if err != nil {
			return "", "", false
		}
		return k, strings.TrimSpace(s[end+2:]), true
	}
	if i := strings.Index(s, ": "); i > 0 {
		return s[:i], strings.TrimSpace(s[i+2:]), true
	}
	if strings.HasSuffix(s, ":") {
		return s[:len(s)-1], "", true
	}
	return "", "", false
}

// quoteEnd returns the index of the quote that closes the scalar s starts
// with, or -1.
func quoteEnd(s string) int {
	q := s[0]
	for i := 1; i < len(s); i++ {
		switch {
		case q == '"' && s[i] == '\\':
			i++
		case s[i] == q && q == '\'' && i+1 < len(s) && s[i+1] == '\'':
			i++
		case s[i] == q:
			return i
		}
	}
	return -1
}

func unquote(s string) (string, error) {
	if s[0] == '\'' {
		return strings.ReplaceAll(s[1:len(s)-1], "''", "'"), nil
	}
	return strconv.Unquote(s)
}

var yamlInt = regexp.MustCompile(`^[-+]?[0-9]+$`)

func scalar(p *yamlParser, s string) any {
	switch s[0] {
	case '\'', '"':
		if quoteEnd(s) != len(s)-1 {
			p.fail("bad quoted scalar %s", s)
		}
		v, err := unquote(s)
		if err != nil {
			p.fail("bad quoted scalar %s: %v", s, err)
		}
		return v
	case '[', '{':
		close := map[byte]byte{'[': ']', '{': '}'}[s[0]]
		if s[len(s)-1] != close {
			p.fail("flow collection %s must end on its line", s)
		}
		items := splitFlow(p, s[1:len(s)-1])
		if s[0] == '[' {
			out := []any{}
			for _, it := range items {
				out = append(out, scalar(p, it))
			}
			return out
		}
		out := map[string]any{}
		for _, it := range items {
			k, v, ok := splitKey(it)
			if !ok || v == "" {
				p.fail("bad flow mapping entry %q", it)
			}
			out[k] = scalar(p, v)
		}
		return out
	case '&', '*', '!', '|', '>', '%', '@', '`':
		p.fail("unsupported scalar %q", s)
	}
	if strings.Contains(s, " #") {
		p.fail("inline comments are not supported: %q", s)
	}
	switch s {
	case "true":
		return true
	case "false":
		return false
	case "null", "~":
		return nil
	}
	if yamlInt.MatchString(s) {
		n, err := strconv.ParseInt(s, 10, 64)
		if err == nil {
			return n
		}
	}
	return s
}

// splitFlow splits the inside of a one-line flow collection at top-level
// commas.
func splitFlow(p *yamlParser, s string) []string {
	var items []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\'', '"':
			end := quoteEnd(s[i:])
			if end < 0 {
				p.fail("unterminated quote in %q", s)
			}
			i += end
		case '[', '{':
			depth++
		case ']', '}':
			depth--
		case ',':
			if depth == 0 {
				items = append(items, strings.TrimSpace(s[start:i]))
				start = i + 1
			}
		}
	}
	if last := strings.TrimSpace(s[start:]); last != "" {
		items = append(items, last)
	} else if len(items) > 0 {
		p.fail("trailing comma in %q", s)
	}
	for _, it := range items {
		if it == "" {
			p.fail("empty item in %q", s)
		}
	}
	return items
}
