package cfgfile

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"scistream/internal/cliflag"
)

// list is a repeated flag: each Set appends.
type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

// bare is a flag.Value without Get: taken as a string.
type bare struct{ v string }

func (b *bare) String() string { return b.v }
func (b *bare) Set(v string) error {
	if strings.ContainsRune(v, ' ') {
		return errors.New("no spaces")
	}
	b.v = v
	return nil
}

// testSet is a flag set with one flag of every kind, an alias, an action
// and a secret.
func testSet() *flag.FlagSet {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.String("listener_ip", "", "IP address advertised to peers")
	fs.String("port_range", "5100-5199", "data ports")
	fs.Int("port", 5000, "control port")
	fs.Uint64("max_bytes", 0, "a count")
	fs.Float64("ratio", 0.5, "a fraction")
	fs.Bool("insecure_no_auth", false, "no authentication")
	fs.Duration("pending_timeout", 5*time.Minute, "how long to wait")
	fs.Var(new(list), "allow", "repeated")
	fs.Var(&bare{v: "x"}, "custom", "a Value without Get")
	fs.String("client_secret", "", "an inline secret: no key")
	fs.String("client_secret_file", "", "a file holding the secret: a key")
	fs.String("tokens", "", "token file")
	fs.String("config", "", "the file")
	fs.Bool("version", false, "print the version")
	fs.Var(fs.Lookup("port_range").Value, "port-range", "alias of --port_range")
	return fs
}

func schema(fs *flag.FlagSet) Schema {
	return Schema{FlagSet: fs, Actions: []string{"config", "version"}}
}

// flagValues is every flag's value by name.
func flagValues(fs *flag.FlagSet) map[string]string {
	m := map[string]string{}
	fs.VisitAll(func(f *flag.Flag) { m[f.Name] = f.Value.String() })
	return m
}

func TestApply(t *testing.T) {
	fs := testSet()
	file := `# a gateway
listener_ip: 10.0.0.3
port_range: "6000-6010"
port: 0x1F90
max_bytes: 12
ratio: 1
insecure_no_auth: true
pending_timeout: 90s
allow: [10.0.0.0/8, 192.168.1.0/24]
custom: y
client_secret_file: /etc/s/secret
tokens: /etc/scistream/tokens   # a path, not a secret
`
	if _, err := schema(fs).Apply("gw.yaml", []byte(file), nil); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"listener_ip": "10.0.0.3", "port_range": "6000-6010", "port": "8080", "max_bytes": "12",
		"ratio": "1", "insecure_no_auth": "true", "pending_timeout": "1m30s",
		"allow": "10.0.0.0/8,192.168.1.0/24", "custom": "y", "client_secret_file": "/etc/s/secret",
		"tokens": "/etc/scistream/tokens", "port-range": "6000-6010",
	}
	got := flagValues(fs)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	// A single value for a repeated flag is one item; 0 is a duration.
	fs = testSet()
	if _, err := schema(fs).Apply("gw.yaml", []byte("allow: 10.0.0.0/8\npending_timeout: 0\n"), nil); err != nil {
		t.Fatal(err)
	}
	if got := flagValues(fs); got["allow"] != "10.0.0.0/8" || got["pending_timeout"] != "0s" {
		t.Errorf("allow %q, pending_timeout %q", got["allow"], got["pending_timeout"])
	}
}

func TestApplyEmpty(t *testing.T) {
	for _, file := range []string{"", "# only a comment\n", "---\n", "{}\n"} {
		fs := testSet()
		before := flagValues(fs)
		if _, err := schema(fs).Apply("gw.yaml", []byte(file), nil); err != nil {
			t.Errorf("%q: %v", file, err)
		}
		if fmt.Sprint(flagValues(fs)) != fmt.Sprint(before) {
			t.Errorf("%q changed values", file)
		}
	}
}

// TestApplyKeep: a flag given on the command line overrides the file,
// and its value in the file is still checked.
func TestApplyKeep(t *testing.T) {
	fs := testSet()
	if err := fs.Parse([]string{"--port", "7000", "--allow", "127.0.0.1/32"}); err != nil {
		t.Fatal(err)
	}
	keep := map[string]bool{"port": true, "allow": true}
	set, err := schema(fs).Apply("gw.yaml", []byte("port: 6000\nallow: [10.0.0.0/8]\nlistener_ip: 10.0.0.3\n"), keep)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(set) != "[listener_ip]" {
		t.Errorf("Apply says it set %v; want [listener_ip]", set)
	}
	if got := flagValues(fs); got["port"] != "7000" || got["allow"] != "127.0.0.1/32" || got["listener_ip"] != "10.0.0.3" {
		t.Errorf("port %q allow %q listener_ip %q; want the command line's port and allow, the file's listener_ip", got["port"], got["allow"], got["listener_ip"])
	}
	_, err = schema(fs).Apply("gw.yaml", []byte("port: many\n"), keep)
	if err == nil || !strings.Contains(err.Error(), "gw.yaml:1: port:") {
		t.Errorf("an overridden key of the wrong kind: %v", err)
	}
}

// TestApplyErrors: what a careless operator (or a broken template)
// writes. Each error names the file, the line and the key, and the fix.
func TestApplyErrors(t *testing.T) {
	for _, c := range []struct{ file, want string }{
		{"listener_ip: 10.0.0.3\nlisener_ip: 10.0.0.4\n", "gw.yaml:2: lisener_ip: unknown key; did you mean listener_ip?"},
		{"port-range: 1-2\n", "gw.yaml:1: port-range: unknown key; keys are spelled in snake_case: port_range"},
		{"frobnicate: 1\n", "gw.yaml:1: frobnicate: unknown key (t --help lists every flag"},
		{"config: other.yaml\n", "gw.yaml:1: config: not a setting but an action of the command line (--config)"},
		{"version: true\n", "gw.yaml:1: version: not a setting"},
		{"client_secret: hunter2\n", "gw.yaml:1: client_secret: a secret never stands in the configuration file"},
		{"port: 1\nport: 2\n", "gw.yaml:2: port: given twice (first on line 1)"},
		{"\n\nport: abc\n", `gw.yaml:3: port: "abc": want a whole number`},
		{"port: 1.5\n", `gw.yaml:1: port: "1.5": want a whole number`},
		{"port: 99999999999999999999\n", `gw.yaml:1: port: "99999999999999999999": want a whole number`},
		{"max_bytes: -1\n", `gw.yaml:1: max_bytes: invalid value "-1"`},
		{"insecure_no_auth: yes\n", `gw.yaml:1: insecure_no_auth: "yes": want true or false`},
		{"insecure_no_auth: \"true\"\n", `want true or false`},
		{"insecure_no_auth: 1\n", `want true or false`},
		{"pending_timeout: 300\n", `gw.yaml:1: pending_timeout: "300": want a duration with its unit`},
		{"pending_timeout: soon\n", `gw.yaml:1: pending_timeout: invalid value "soon"`},
		{"ratio: lots\n", `want a number`},
		{"listener_ip: true\n", `gw.yaml:1: listener_ip: true: want a string; quote it ("true")`},
		{"listener_ip:\n", "gw.yaml:1: listener_ip: no value: give one, or remove the key"},
		{"listener_ip: [a, b]\n", "gw.yaml:1: listener_ip: a list, but this setting takes one value"},
		{"listener_ip: {a: b}\n", "listener_ip: a mapping, but this setting takes a single value"},
		{"listener_ip: !!binary aGk=\n", "want a string"},
		{"allow: [a, [b]]\n", "allow: line 1: a list item must be a single value"},
		{"allow: [a, ~]\n", "allow: line 1: no value"},
		{"custom: a b\n", `gw.yaml:1: custom: invalid value "a b": no spaces`},
		{"custom: &a x\n", "gw.yaml:1: custom: anchors and aliases"},
		{"custom: x\nport: &a 1\nlistener_ip: *a\n", "gw.yaml:2: port: anchors and aliases"},
		{"base: &b {port: 1}\n<<: *b\n", "gw.yaml:1: base: unknown key"},
		{"<<: {port: 1}\n", "gw.yaml:1: a key must be a plain name"},
		{"? [a]\n: 1\n", "gw.yaml:1: a key must be a plain name"},
		{"- port: 1\n", "gw.yaml:1: the file must be a mapping of keys to values (key: value per line), not a list"},
		{"just text\n", "the file must be a mapping"},
		{"port: 1\n---\nport: 2\n", "gw.yaml:2: a second YAML document"},
		{"port: [1\n", "gw.yaml: not YAML:"},
		{"\tport: 1\n", "gw.yaml: not YAML:"},
		{strings.Repeat("#", MaxBytes+1), "larger than 1048576 bytes"},
	} {
		fs := testSet()
		_, err := schema(fs).Apply("gw.yaml", []byte(c.file), nil)
		var ce *Error
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%.60q: error %v; want an *Error containing %q", c.file, err, c.want)
		}
	}
}

func TestSecret(t *testing.T) {
	for name, want := range map[string]bool{
		"client_secret": true, "oidc-client-secret": true, "admin_password": true, "api_token": true,
		"token": true, "key_passphrase": true, "aws_credentials": true,
		"tokens": false, "client_secret_file": false, "token_ttl": false, "server_key": false,
		"token_file": false, "secret_dir": false, "listener_ip": false, "": false,
	} {
		if Secret(name) != want {
			t.Errorf("Secret(%q) = %v, want %v", name, !want, want)
		}
	}
}

// TestWriteRoundTrip: what Write prints, Apply reads back to the same
// values, and no secret is printed.
func TestWriteRoundTrip(t *testing.T) {
	fs := testSet()
	args := []string{"--listener_ip", "10.0.0.3", "--port_range", "true", "--port", "0", "--max_bytes", "18446744073709551615",
		"--ratio", "0.25", "--insecure_no_auth", "--pending_timeout", "1h2m3.5s",
		"--allow", "10.0.0.0/8", "--allow", "a: b # c", "--allow", "", "--custom", "'quoted'",
		"--client_secret", "hunter2", "--tokens", "/etc/tok ens", "--version", "--config", "x.yaml"}
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := schema(fs).Write(&out, "s2cs configuration\nsecond line"); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	t.Logf("written:\n%s", text)
	if strings.Contains(text, "hunter2") {
		t.Fatal("Write printed a secret's value")
	}
	for _, want := range []string{"# s2cs configuration\n# second line\n", "# not written, as secrets never are: --client_secret", "# IP address advertised to peers\nlistener_ip: 10.0.0.3\n"} {
		if !strings.Contains(text, want) {
			t.Errorf("written file lacks %q", want)
		}
	}
	for _, absent := range []string{"version:", "config:", "port-range", "client_secret:"} {
		if strings.Contains(text, absent) {
			t.Errorf("written file has %q", absent)
		}
	}
	back := testSet()
	if _, err := schema(back).Apply("printed.yaml", out.Bytes(), nil); err != nil {
		t.Fatal(err)
	}
	want, got := flagValues(fs), flagValues(back)
	for _, skip := range []string{"client_secret", "version", "config"} {
		delete(want, skip)
		delete(got, skip)
	}
	if fmt.Sprint(want) != fmt.Sprint(got) {
		t.Errorf("round trip changed values:\n before %v\n after  %v", want, got)
	}
}

// testGroups group testSet's flags as a command would, leaving some in
// no group and naming an action, a secret and an alias, which have no
// key.
func testGroups() []cliflag.Group {
	return []cliflag.Group{
		{Title: "The gateway", Flags: []string{"port", "listener_ip", "port_range", "port-range"}},
		{Title: "Access", Flags: []string{"tokens", "client_secret", "client_secret_file", "insecure_no_auth"}},
		{Title: "The command", Flags: []string{"config", "version"}},
		{Title: "Limits", Flags: []string{"pending_timeout", "max_bytes"}},
	}
}

// TestWriteGroups: with Groups, Write writes the keys group by group,
// each group under its title and in its order, the keys of no group
// last under cliflag.OtherTitle, and no title of a group without keys;
// the file reads back to the same values.
func TestWriteGroups(t *testing.T) {
	fs := testSet()
	if err := fs.Parse([]string{"--listener_ip", "10.0.0.3", "--port", "7000", "--allow", "10.0.0.0/8", "--pending_timeout", "90s", "--client_secret", "hunter2"}); err != nil {
		t.Fatal(err)
	}
	s := schema(fs)
	s.Groups = testGroups()
	var out bytes.Buffer
	if err := s.Write(&out, "header"); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	t.Logf("written:\n%s", text)
	// Each key, in order, with the title it stands under: a comment
	// line with a blank line below it.
	var got []string
	title := ""
	lines := strings.Split(text, "\n")
	for i, line := range lines {
		switch k, _, ok := strings.Cut(line, ":"); {
		case strings.HasPrefix(line, "# ") && i+1 < len(lines) && lines[i+1] == "":
			title = strings.TrimPrefix(line, "# ")
		case ok && !strings.HasPrefix(line, "#"):
			got = append(got, title+"/"+k)
		}
	}
	want := []string{
		"The gateway/port", "The gateway/listener_ip", "The gateway/port_range",
		"Access/tokens", "Access/client_secret_file", "Access/insecure_no_auth",
		"Limits/pending_timeout", "Limits/max_bytes",
		cliflag.OtherTitle + "/allow", cliflag.OtherTitle + "/custom", cliflag.OtherTitle + "/ratio",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("keys by title:\n got  %v\n want %v", got, want)
	}
	for _, absent := range []string{"The command", "hunter2", "version:", "config:", "client_secret:", "port-range"} {
		if strings.Contains(text, absent) {
			t.Errorf("written file has %q", absent)
		}
	}
	if !strings.Contains(text, "# header\n\n# The gateway\n\n# control port\nport: 7000\n") {
		t.Errorf("the first group does not follow the header, a blank line apart, its title a blank line above the first key's usage")
	}
	if !strings.Contains(text, "port_range: 5100-5199\n\n# Access\n\n# token file\ntokens: \"\"\n") {
		t.Errorf("a group does not stand a blank line apart from the one before")
	}
	back := testSet()
	if _, err := schema(back).Apply("printed.yaml", out.Bytes(), nil); err != nil {
		t.Fatal(err)
	}
	wantV, gotV := flagValues(fs), flagValues(back)
	delete(wantV, "client_secret")
	delete(gotV, "client_secret")
	if fmt.Sprint(wantV) != fmt.Sprint(gotV) {
		t.Errorf("round trip changed values:\n before %v\n after  %v", wantV, gotV)
	}
}

func TestNearest(t *testing.T) {
	keys := []string{"listener_ip", "port", "port_range", "pending_timeout", "tokens"}
	for in, want := range map[string]string{
		"listner_ip": "listener_ip", "prot": "port", "port_rnage": "port_range", "token": "tokens",
		"pendingtimeout": "pending_timeout", "zzz": "", "completely_different_name": "",
		strings.Repeat("a", 100): "",
	} {
		if got := cliflag.Nearest(in, keys); got != want {
			t.Errorf("cliflag.Nearest(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzApply feeds Apply garbage: it must not panic, and whatever it
// accepts, Write must print so that Apply reads back the same values.
func FuzzApply(f *testing.F) {
	f.Add([]byte("listener_ip: 10.0.0.3\nport: 5000\nallow: [a, b]\n"))
	f.Add([]byte("insecure_no_auth: true\npending_timeout: 5m\nratio: 1e3\ncustom: z\n"))
	f.Add([]byte("port: *a\n"))
	f.Add([]byte("? [a]\n: 1\n"))
	f.Add([]byte("a: &x [1, *x]\n"))
	f.Add([]byte("listener_ip: \"\\u0000\\n\"\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		fs := testSet()
		if _, err := schema(fs).Apply("f.yaml", data, nil); err != nil {
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("error %v is not an *Error", err)
			}
			return
		}
		grouped := schema(fs)
		grouped.Groups = testGroups()
		for _, s := range []Schema{schema(fs), grouped} {
			var out bytes.Buffer
			if err := s.Write(&out, "fuzz"); err != nil {
				t.Fatal(err)
			}
			back := testSet()
			if _, err := schema(back).Apply("printed.yaml", out.Bytes(), nil); err != nil {
				t.Fatalf("Write's output refused: %v\n%s", err, out.String())
			}
			if a, b := fmt.Sprint(flagValues(fs)), fmt.Sprint(flagValues(back)); a != b {
				t.Fatalf("round trip changed values:\n %s\n %s\n%s", a, b, out.String())
			}
		}
	})
}
