package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"scistream/internal/cfgfile"
)

// writeFile writes text to name in dir and returns its path.
func writeFile(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// flagSample is a value for flag f other than its default, as a YAML
// value and as command-line arguments. A flag of a type of its own
// (not a flag.Getter of a basic type or a slice) needs an entry in
// samples, as a reminder that its Set must take what the file gives it.
func flagSample(t *testing.T, f *flag.Flag) (yamlValue string, args []string) {
	samples := map[string][2]string{
		// flag name: {YAML value, command-line value}
	}
	if s, ok := samples[f.Name]; ok {
		return s[0], []string{"--" + f.Name + "=" + s[1]}
	}
	g, ok := f.Value.(flag.Getter)
	if !ok {
		t.Fatalf("--%s (%T) is not a flag.Getter: add a sample value for it to flagSample's samples", f.Name, f.Value)
	}
	one := func(v string) (string, []string) { return v, []string{"--" + f.Name + "=" + v} }
	switch v := g.Get().(type) {
	case bool:
		return one(strconv.FormatBool(!v))
	case int, int64, uint, uint64:
		if f.DefValue == "7" {
			return one("8")
		}
		return one("7")
	case float64:
		return one("0.75")
	case time.Duration:
		return one("7s")
	case string:
		return strconv.Quote("sample-" + f.Name), []string{"--" + f.Name, "sample-" + f.Name}
	case []string:
		return "[first, second]", []string{"--" + f.Name, "first", "--" + f.Name, "second"}
	}
	t.Fatalf("--%s holds a %T: add a sample value for it to flagSample's samples", f.Name, g.Get())
	return "", nil
}

// TestConfigEveryFlag walks s2cs's flag set, as others will have added
// to it: every flag but the actions (--config, --print_config,
// --version) is a key of the configuration file, named as the flag, and
// the key sets the flag exactly as the flag itself does. A flag that
// takes a secret inline fails here: secrets are given as files.
func TestConfigEveryFlag(t *testing.T) {
	dir := t.TempDir()
	fs := new(options).flagSet()
	actions := map[string]bool{"config": true, "print_config": true, "version": true}
	keys := 0
	fs.VisitAll(func(f *flag.Flag) {
		if strings.HasPrefix(f.Usage, "alias of --") || actions[f.Name] {
			return
		}
		keys++
		t.Run(f.Name, func(t *testing.T) {
			if cfgfile.Secret(f.Name) {
				t.Fatalf("--%s looks like it takes a secret inline, which a configuration file never holds: take the path of a file holding it (e.g. --%s_file)", f.Name, f.Name)
			}
			yamlValue, args := flagSample(t, f)
			file := writeFile(t, dir, f.Name+".yaml", cfgfile.KeyName(f.Name)+": "+yamlValue+"\n")
			byFile, err := parseFlags([]string{"--config", file}, io.Discard)
			if err != nil {
				t.Fatalf("key %s: %s: %v", cfgfile.KeyName(f.Name), yamlValue, err)
			}
			byFlag, err := parseFlags(args, io.Discard)
			if err != nil {
				t.Fatalf("%v: %v", args, err)
			}
			got, want := byFile.ops.fs.Lookup(f.Name).Value.String(), byFlag.ops.fs.Lookup(f.Name).Value.String()
			if got != want || got == f.DefValue {
				t.Errorf("key %s: %s set --%s to %q; the flag %v sets %q (default %q)", cfgfile.KeyName(f.Name), yamlValue, f.Name, got, args, want, f.DefValue)
			}
			if !byFile.ops.fromFile[f.Name] {
				t.Errorf("--%s is not counted as set by the file", f.Name)
			}
		})
	})
	if keys < 25 {
		t.Fatalf("only %d keys: is the flag set complete?", keys)
	}
}

// TestConfigPrecedence: defaults, then the file, then the command line
// (in either spelling).
func TestConfigPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, dir, "gw.yaml", "listener_ip: 127.0.0.5\nport: 7000\nport_range: 6000-6010\ntype: buffer\n")
	o, err := parseFlags([]string{"--config", file, "--port", "7001", "--type=splice", "--quota-streams", "3"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := o.config()
	if err != nil {
		t.Fatal(err)
	}
	if o.port != 7001 || cfg.Engine != "splice" || cfg.PortRange.String() != "6000-6010" || cfg.ListenerIP != "127.0.0.5" ||
		cfg.Quota.Streams != 3 || cfg.Quota.Ports != 256 {
		t.Errorf("port %d engine %s port_range %s listener_ip %s quota %+v; want the flags' port and type and quota_streams, the file's range and IP, the default quota_ports",
			o.port, cfg.Engine, cfg.PortRange, cfg.ListenerIP, cfg.Quota)
	}
	if !o.ops.fromFile["listener_ip"] || o.ops.fromFile["port"] {
		t.Errorf("fromFile %v: want listener_ip, not port (the command line's)", o.ops.fromFile)
	}
}

// TestPrintConfigRoundTrip: --print_config prints the effective
// configuration (file, flags, defaults), which read back as --config
// gives the same gateway settings and prints the same again; no file's
// contents are printed, only paths.
func TestPrintConfigRoundTrip(t *testing.T) {
	dir := t.TempDir()
	marker := strings.Repeat("5e", 32)
	tokens := writeFile(t, dir, "tokens", marker+" alice\n")
	file := writeFile(t, dir, "gw.yaml", fmt.Sprintf(`# a consumer-side gateway
listener_ip: 127.0.0.5
port_range: 6100-6120
type: buffer
buffer_size: 10MB
quota_streams: 3
app_wait_default: 0s
resume_window: 0s
resume_conn_buffer: 4MiB
wan_port: 8443
wan_domain: wan.gw1.example.org
wan_advertise: gw1.example.org:443
tokens: %s
log_format: json
log_level: warn
`, tokens))
	args := []string{"--config", file, "--port", "7001", "--pending_timeout", "90s", "--insecure-tcp-wan"}
	print := func(args ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		if err := run(context.Background(), append(args, "--print_config"), &stdout, &stderr); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, stderr.String())
		}
		if stderr.Len() > 0 {
			t.Errorf("--print_config wrote to stderr: %s", stderr.String())
		}
		return stdout.String()
	}
	first := print(args...)
	for _, want := range []string{"\nport: 7001\n", "\ntype: buffer\n", "\nbuffer_size: 10MB\n", "\npending_timeout: 1m30s\n",
		"\ninsecure_tcp_wan: true\n", "\napp_wait_default: 0s\n", "\nquota_ports: 256\n",
		"\nresume_window: 0s\n", "\nresume_window_max: 10m0s\n", "\nresume_conn_buffer: 4MiB\n", "\nresume_buffer: 1GiB\n", "\ntokens: " + tokens + "\n", "\nlog_level: warn\n"} {
		if !strings.Contains(first, want) {
			t.Errorf("--print_config lacks %q:\n%s", strings.TrimSpace(want), first)
		}
	}
	if strings.Contains(first, marker) {
		t.Fatal("--print_config printed the contents of the tokens file")
	}
	checkConfigSections(t, first)
	printed := writeFile(t, dir, "printed.yaml", first)
	second := print("--config", printed)
	body := func(s string) string { // without the header, which names the file
		return s[strings.Index(s, "\n\n"):]
	}
	if body(first) != body(second) {
		t.Errorf("printed again differently:\n%s\n---\n%s", first, second)
	}
	configOf := func(args ...string) any {
		t.Helper()
		o, err := parseFlags(args, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := o.config()
		if err != nil {
			t.Fatal(err)
		}
		return []any{cfg, o.port, o.tokensFile, o.logFormat, o.ops.logLevel, o.stateDir}
	}
	if a, b := configOf(args...), configOf("--config", printed); !reflect.DeepEqual(a, b) {
		t.Errorf("the printed file configures another gateway:\n%+v\n%+v", a, b)
	}
	if _, err := os.Stat("s2cs-state"); !os.IsNotExist(err) {
		t.Errorf("--print_config created the default state directory (stat: %v)", err)
	}
}

// checkConfigSections checks that a file --print_config printed holds
// the keys by group, as --help lists the flags: each group with keys
// under a "# Title" comment line of its own (a blank line below it), and
// under it exactly its flags' keys, in its order; no key twice, none
// left out (the actions of the last group have none).
func checkConfigSections(t *testing.T, printed string) {
	t.Helper()
	var got, want []string
	title := ""
	lines := strings.Split(printed, "\n")
	for i, line := range lines {
		switch key, _, ok := strings.Cut(line, ":"); {
		case strings.HasPrefix(line, "# ") && i+1 < len(lines) && lines[i+1] == "":
			title = strings.TrimPrefix(line, "# ")
		case ok && !strings.HasPrefix(line, "#"):
			got = append(got, title+" / "+key)
		}
	}
	actions := configSchema(new(options).flagSet()).Actions
	for _, g := range flagGroups() {
		for _, name := range g.Flags {
			if !slices.Contains(actions, name) {
				want = append(want, g.Title+" / "+cfgfile.KeyName(name))
			}
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("--print_config's keys by section:\n%s\nwant, as the groups of --help:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestConfigErrors: what a careless operator writes or types. Each gets
// exit status 2 and one line naming the file, line and key (or the flag
// and, when its value came from the file, the key), and nothing is
// created on disk.
func TestConfigErrors(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	good := "listener_ip: 127.0.0.5\ninsecure_no_auth: true\nstate_dir: " + state + "\n"
	for _, c := range []struct {
		name, file string
		args       []string
		mention    string
	}{
		{"typo", good + "typ: buffer\n", nil, "gw.yaml:4: typ: unknown key; did you mean type?"},
		{"kebab key", good + "port-range: 6000-6010\n", nil, "gw.yaml:4: port-range: unknown key; keys are spelled in snake_case: port_range"},
		{"wrong kind", good + "port: http\n", nil, `gw.yaml:4: port: "http": want a whole number`},
		{"bool as string", good + "insecure_tcp_wan: \"yes\"\n", nil, `gw.yaml:4: insecure_tcp_wan: "yes": want true or false`},
		{"duplicate", good + "listener_ip: 127.0.0.6\n", nil, "gw.yaml:4: listener_ip: given twice (first on line 1)"},
		{"refused by Validate", good + "type: zerocopy\n", nil, `--type "zerocopy" is not an engine of this build: choose one of splice, buffer, sockmap (key type in `},
		{"refused by config", good + "port: 5150\n", nil, "--port 5150 lies inside --port_range 5100-5199; choose a control port outside the data range (key port in "},
		{"overridden but wrong", good + "port: http\n", []string{"--port", "7000"}, `gw.yaml:4: port: "http": want a whole number`},
		{"flag refused, not the file's", good, []string{"--type", "zerocopy"}, `--type "zerocopy" is not an engine of this build: choose one of splice, buffer, sockmap`},
		{"action in file", good + "version: true\n", nil, "gw.yaml:4: version: not a setting but an action of the command line (--version)"},
		{"config in file", good + "config: other.yaml\n", nil, "gw.yaml:4: config: not a setting"},
		{"inline secret", good + "oidc_client_secret: hunter2\n", nil, "gw.yaml:4: oidc_client_secret: a secret never stands in the configuration file"},
		{"a list", good + "bind: [127.0.0.5]\n", nil, "gw.yaml:4: bind: a list, but this setting takes one value"},
		{"garbage", "\x00\x01\x02 : [", nil, "gw.yaml: not YAML"},
		{"two documents", good + "---\nport: 1\n", nil, "a second YAML document"},
		{"no file", "", []string{"--config", filepath.Join(dir, "absent.yaml")}, "--config: open " + filepath.Join(dir, "absent.yaml") + ": no such file or directory"},
		{"a directory", "", []string{"--config", dir}, "--config: read " + dir + ": is a directory"},
		{"log level", good + "log_level: loud\n", nil, `--log_level "loud": use debug, info, warn or error (key log_level in `},
		{"verbose and warn", good + "log_level: warn\n", []string{"--verbose"}, "--verbose (the debug level) and --log_level warn contradict each other"},
		{"auth both ways", good + "tokens: /etc/scistream/tokens\n", nil, "--insecure_no_auth and --tokens exclude each other (key insecure_no_auth in "},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := c.args
			if c.file != "" {
				args = append([]string{"--config", writeFile(t, dir, "gw.yaml", c.file)}, args...)
			}
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), args, &stdout, &stderr)
			var msg bytes.Buffer
			if code := exitCode(err, &msg); code != 2 {
				t.Fatalf("exit status %d (%v), want 2", code, err)
			}
			line := msg.String()
			if !strings.HasPrefix(line, "s2cs: ") || strings.Count(line, "\n") != 1 || !strings.Contains(line, c.mention) {
				t.Errorf("message %q; want one line \"s2cs: ...\" mentioning %q", line, c.mention)
			}
			if strings.Contains(line, "hunter2") {
				t.Errorf("the error repeats a secret's value: %q", line)
			}
			if _, err := os.Stat(state); !os.IsNotExist(err) {
				t.Errorf("a refused configuration created the state directory (stat: %v)", err)
			}
		})
	}
}

// TestLogLevel: --log_level sets the least level logged.
func TestLogLevel(t *testing.T) {
	for _, c := range []struct {
		args       []string
		debug, inf bool
	}{
		{nil, false, true},
		{[]string{"--log_level", "warn"}, false, false},
		{[]string{"--log_level", "DEBUG"}, true, true},
		{[]string{"--verbose"}, true, true},
		{[]string{"--verbose", "--log_level", "debug"}, true, true},
	} {
		o, err := parseFlags(c.args, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		log, err := o.logger(&out)
		if err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		log.Debug("d-line")
		log.Info("i-line")
		log.Warn("w-line")
		got := out.String()
		if strings.Contains(got, "d-line") != c.debug || strings.Contains(got, "i-line") != c.inf || !strings.Contains(got, "w-line") {
			t.Errorf("%v logged %q", c.args, got)
		}
	}
}
