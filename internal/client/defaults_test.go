package client_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"scistream/internal/client"
)

// env returns a getenv of the variables in kv ("NAME=value").
func env(kv ...string) func(string) string {
	m := map[string]string{}
	for _, s := range kv {
		k, v, _ := strings.Cut(s, "=")
		m[k] = v
	}
	return func(k string) string { return m[k] }
}

// writeConfig writes text as config.yaml in a new directory, mode 0600,
// and returns the directory.
func writeConfig(t *testing.T, text string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

const sample = `# s2uc defaults
profile: anl
s2cs: 10.0.0.5:5000
server_cert: certs/gw.crt
token_file: ~/tok
output: json
outbound_s2cs: 10.0.0.6:5000
profiles:
  anl:
    s2cs: gw.anl.example:5000
    inbound_server_cert: /etc/anl.crt
  ornl:
    s2cs: gw.ornl.example:5000
    output: text
`

// TestDefaultsPrecedence: the command line is applied by s2uc; here,
// the environment over the selected profile over the top level, key by
// key, each side falling back to the plain key; a profile chosen by
// argument, then SCISTREAM_PROFILE, then the file's profile key; paths
// from the file relative to its directory, ~ expanded.
func TestDefaultsPrecedence(t *testing.T) {
	dir := writeConfig(t, sample)
	home, _ := os.UserHomeDir()
	for _, c := range []struct {
		name    string
		profile string
		env     []string
		want    client.Defaults
	}{
		{name: "file's profile", want: client.Defaults{Profile: "anl", Output: "json",
			Gateway:  client.GatewayDefaults{S2CS: "gw.anl.example:5000", ServerCert: filepath.Join(dir, "certs/gw.crt"), TokenFile: filepath.Join(home, "tok")},
			Inbound:  client.GatewayDefaults{S2CS: "gw.anl.example:5000", ServerCert: "/etc/anl.crt", TokenFile: filepath.Join(home, "tok")},
			Outbound: client.GatewayDefaults{S2CS: "10.0.0.6:5000", ServerCert: filepath.Join(dir, "certs/gw.crt"), TokenFile: filepath.Join(home, "tok")}}},
		{name: "SCISTREAM_PROFILE", env: []string{"SCISTREAM_PROFILE=ornl"}, want: client.Defaults{Profile: "ornl", Output: "text",
			Gateway:  client.GatewayDefaults{S2CS: "gw.ornl.example:5000", ServerCert: filepath.Join(dir, "certs/gw.crt"), TokenFile: filepath.Join(home, "tok")},
			Inbound:  client.GatewayDefaults{S2CS: "gw.ornl.example:5000", ServerCert: filepath.Join(dir, "certs/gw.crt"), TokenFile: filepath.Join(home, "tok")},
			Outbound: client.GatewayDefaults{S2CS: "10.0.0.6:5000", ServerCert: filepath.Join(dir, "certs/gw.crt"), TokenFile: filepath.Join(home, "tok")}}},
		{name: "--profile over SCISTREAM_PROFILE, environment over all", profile: "ornl",
			env: []string{"SCISTREAM_PROFILE=anl", "SCISTREAM_S2CS=127.0.0.1:5000", "SCISTREAM_SERVER_CERT=rel.crt", "SCISTREAM_TOKEN_FILE=/t", "SCISTREAM_OUTPUT=json"},
			want: client.Defaults{Profile: "ornl", Output: "json",
				Gateway:  client.GatewayDefaults{S2CS: "127.0.0.1:5000", ServerCert: "rel.crt", TokenFile: "/t"},
				Inbound:  client.GatewayDefaults{S2CS: "127.0.0.1:5000", ServerCert: "rel.crt", TokenFile: "/t"},
				Outbound: client.GatewayDefaults{S2CS: "10.0.0.6:5000", ServerCert: "rel.crt", TokenFile: "/t"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			d, err := client.LoadDefaults(c.profile, env(append(c.env, "SCISTREAM_HOME="+dir)...))
			if err != nil {
				t.Fatal(err)
			}
			c.want.File = filepath.Join(dir, "config.yaml")
			if d != c.want {
				t.Errorf("got  %+v\nwant %+v", d, c.want)
			}
		})
	}
}

// TestConfigFilePlace: SCISTREAM_CONFIG, else SCISTREAM_HOME, else
// XDG_CONFIG_HOME; a missing file is no error and no default.
func TestConfigFilePlace(t *testing.T) {
	for _, c := range []struct {
		env  []string
		want string
	}{
		{[]string{"SCISTREAM_CONFIG=/a/c.yaml", "SCISTREAM_HOME=/h", "XDG_CONFIG_HOME=/x"}, "/a/c.yaml"},
		{[]string{"SCISTREAM_HOME=/h", "XDG_CONFIG_HOME=/x"}, "/h/config.yaml"},
		{[]string{"XDG_CONFIG_HOME=/x"}, "/x/scistream/config.yaml"},
	} {
		if got := client.ConfigFile(env(c.env...)); got != c.want {
			t.Errorf("%v: %s, want %s", c.env, got, c.want)
		}
	}
	if home, err := os.UserHomeDir(); err == nil {
		if got, want := client.ConfigFile(env()), filepath.Join(home, ".config/scistream/config.yaml"); got != want {
			t.Errorf("no variables: %s, want %s", got, want)
		}
	}
	d, err := client.LoadDefaults("", env("SCISTREAM_HOME="+t.TempDir()))
	if err != nil || d != (client.Defaults{}) {
		t.Errorf("no file: %+v, %v", d, err)
	}
	d, err = client.LoadDefaults("", env("SCISTREAM_HOME="+t.TempDir(), "SCISTREAM_S2CS=h:1"))
	if err != nil || d.Gateway.S2CS != "h:1" || d.Outbound.S2CS != "h:1" {
		t.Errorf("no file, SCISTREAM_S2CS: %+v, %v", d, err)
	}
	// A file named by SCISTREAM_CONFIG that is not there is a mistake,
	// not "no defaults": the error names the variable, the path and the fix.
	typo := filepath.Join(writeConfig(t, "s2cs: h:1\n"), "config.yml")
	_, err = client.LoadDefaults("", env("SCISTREAM_CONFIG="+typo))
	if want := "SCISTREAM_CONFIG names " + typo + ", which does not exist: correct it, or unset SCISTREAM_CONFIG"; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("SCISTREAM_CONFIG naming no file: %v, want %q...", err, want)
	}
}

// TestDefaultsRefused: every fault names the file and the fix.
func TestDefaultsRefused(t *testing.T) {
	for _, c := range []struct {
		text, profile, want string
	}{
		{"s2c: 1.2.3.4:5000\n", "", "line 1: s2c: unknown key; did you mean s2cs?"},
		{"profiles:\n  a:\n    server_crt: x\n", "", "line 3: profile a: server_crt: unknown key; did you mean server_cert?"},
		{"profiles:\n  a:\n    profile: b\n", "", "line 3: profile a: profile: unknown key"},
		{"s2cs: a:1\ns2cs: b:1\n", "", "line 2: s2cs is given twice"},
		{"s2cs: [a, b]\n", "", "line 1: s2cs: want one value, e.g. s2cs: 10.0.0.5:5000"},
		{"s2cs:\n", "", "s2cs: want one value"},
		{"output: yaml\n", "", `output "yaml": use text or json`},
		{"- s2cs\n", "", "line 1: want keys such as s2cs: HOST:PORT"},
		{"s2cs: 'open\n", "", "not YAML"},
		{"profiles:\n  a: {}\n  b: {}\n", "c", `unknown profile "c": give one of a, b`},
		{"profile: c\n", "", `unknown profile "c": the file defines none`},
		{"profiles: x\n", "", "profiles: want a name for each profile"},
		{"profiles:\n  a: {}\nprofiles:\n  b: {}\n", "", "line 3: profiles is given twice"},
	} {
		dir := writeConfig(t, c.text)
		_, err := client.LoadDefaults(c.profile, env("SCISTREAM_HOME="+dir))
		file := filepath.Join(dir, "config.yaml")
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "configuration file "+file+": ") {
			t.Errorf("%q: %v, want %q in it, naming the file", c.text, err, c.want)
		}
	}
	dir := writeConfig(t, "s2cs: 1.2.3.4:5000\n")
	file := filepath.Join(dir, "config.yaml")
	if err := os.Chmod(file, 0o620); err != nil {
		t.Fatal(err)
	}
	_, err := client.LoadDefaults("", env("SCISTREAM_HOME="+dir))
	if err == nil || !strings.Contains(err.Error(), file+" can be written by other users (mode 0620)") || !strings.Contains(err.Error(), "chmod go-w "+file) {
		t.Errorf("group-writable file: %v", err)
	}
	if err := os.Chmod(file, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := client.LoadDefaults("", env("SCISTREAM_HOME="+dir)); err != nil {
		t.Errorf("a file others may read: %v", err)
	}
}
