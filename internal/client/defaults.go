package client

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"scistream/internal/cliflag"
	"scistream/internal/trustfile"
)

// s2uc's defaults live in a small YAML file, so that "s2uc list" with a
// default gateway just works. The format, the file's place and the
// precedence are a spec shared with the Python library (docs/client.md):
//
//	profile: ornl                        # default profile
//	s2cs: 10.0.0.5:5000                  # gateway of single-gateway commands and both sides of a stream
//	server_cert: /etc/scistream/gw.crt   # relative: to the file's directory; ~ expanded
//	token_file: ~/.scistream/token
//	output: text                         # text | json
//	inbound_s2cs: ...                    # side-specific keys: inbound_/outbound_ + s2cs, server_cert, token_file
//	profiles:
//	  ornl:
//	    s2cs: gw.ornl.example:5000
//
// Precedence, highest first: the command line; the environment
// (SCISTREAM_S2CS, SCISTREAM_SERVER_CERT, SCISTREAM_TOKEN_FILE,
// SCISTREAM_OUTPUT); the selected profile; the top-level keys. A
// side-specific key falls back to the plain key.

// GatewayDefaults are the defaults of one side: how to reach a gateway.
// An empty field has no default.
type GatewayDefaults struct {
	S2CS       string
	ServerCert string // an absolute path, or as given in the environment
	TokenFile  string
}

// Defaults are the settings of the configuration file and the
// environment, resolved for a profile. The zero value has no defaults.
type Defaults struct {
	// File is the configuration file read; empty if there was none.
	File string
	// Profile is the profile selected, empty for none.
	Profile string
	// Output is text or json; empty for no default.
	Output string
	// Gateway is the default of single-gateway commands; Inbound and
	// Outbound those of each side of a stream (each falling back to
	// Gateway, key by key).
	Gateway, Inbound, Outbound GatewayDefaults
}

// Side returns the defaults of the side a flag prefix names: "" for
// Gateway, "inbound_" and "outbound_" for the sides.
func (d Defaults) Side(prefix string) GatewayDefaults {
	switch prefix {
	case "inbound_":
		return d.Inbound
	case "outbound_":
		return d.Outbound
	}
	return d.Gateway
}

// ConfigFile returns the path of the configuration file getenv names:
// $SCISTREAM_CONFIG; else $SCISTREAM_HOME/config.yaml; else
// $XDG_CONFIG_HOME/scistream/config.yaml, XDG_CONFIG_HOME defaulting to
// ~/.config. It is "" when none can be named (no home directory).
func ConfigFile(getenv func(string) string) string {
	if p := getenv("SCISTREAM_CONFIG"); p != "" {
		return p
	}
	if h := getenv("SCISTREAM_HOME"); h != "" {
		return filepath.Join(h, "config.yaml")
	}
	xdg := getenv("XDG_CONFIG_HOME")
	if xdg == "" {
		h, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		xdg = filepath.Join(h, ".config")
	}
	return filepath.Join(xdg, "scistream", "config.yaml")
}

// gatewayKeys are the keys of one side, after its prefix.
var gatewayKeys = []string{"s2cs", "server_cert", "token_file"}

// fileKeys are the keys of a profile (and of the top level, which adds
// profile and profiles).
func fileKeys() []string {
	keys := []string{"output"}
	for _, p := range []string{"", "inbound_", "outbound_"} {
		for _, k := range gatewayKeys {
			keys = append(keys, p+k)
		}
	}
	return keys
}

// LoadDefaults reads the configuration file (ConfigFile) and the
// environment (getenv, os.Getenv in s2uc) and resolves them for
// profile: the one --profile names, else $SCISTREAM_PROFILE, else the
// file's profile key, else none. A missing file is no error, unless
// $SCISTREAM_CONFIG names it; a file others can write, a key that is not one, a value that is not a
// string, an unknown profile or output are, naming the file and the fix;
// so is one owned by another user, or in a directory others can write.
func LoadDefaults(profile string, getenv func(string) string) (Defaults, error) {
	path := ConfigFile(getenv)
	var data []byte
	if path != "" {
		// It names the gateways s2uc sends the token to and their pins:
		// one that others could write or replace is refused
		// (internal/trustfile), naming the fix.
		f, err := trustfile.Open("configuration file", path)
		switch {
		case errors.Is(err, fs.ErrNotExist) && getenv("SCISTREAM_CONFIG") != "":
			// Named on purpose: a mistyped name must not pass for no
			// file, and its defaults go unnoticed.
			return Defaults{}, fmt.Errorf("SCISTREAM_CONFIG names %s, which does not exist: correct it, or unset SCISTREAM_CONFIG for the file in its usual place (docs/client.md)", path)
		case errors.Is(err, fs.ErrNotExist):
			path = ""
		case trustfile.IsRefusal(err):
			return Defaults{}, err
		case err != nil:
			return Defaults{}, fmt.Errorf("configuration file: %w", err)
		default:
			defer f.Close()
			var b bytes.Buffer
			if _, err := b.ReadFrom(f); err != nil {
				return Defaults{}, fmt.Errorf("configuration file %s: %w", path, err)
			}
			data = b.Bytes()
		}
	}
	if profile == "" {
		profile = getenv("SCISTREAM_PROFILE")
	}
	d, err := parseDefaults(path, data, profile, getenv)
	if err != nil && path != "" {
		return d, fmt.Errorf("configuration file %s: %w", path, err)
	}
	return d, err
}

// parseDefaults resolves data, the configuration file at path (empty
// data: none), for profile.
func parseDefaults(path string, data []byte, profile string, getenv func(string) string) (Defaults, error) {
	top, profiles, err := parseFile(data)
	if err != nil {
		return Defaults{}, err
	}
	if profile == "" {
		profile = top["profile"]
	}
	merged := map[string]string{}
	for k, v := range top {
		if k != "profile" {
			merged[k] = v
		}
	}
	if profile != "" {
		p, ok := profiles[profile]
		if !ok {
			var known []string
			for n := range profiles {
				known = append(known, n)
			}
			sort.Strings(known)
			if len(known) == 0 {
				return Defaults{}, fmt.Errorf("unknown profile %q: the file defines none (add it under profiles:, or drop --profile, SCISTREAM_PROFILE or the profile key)", profile)
			}
			return Defaults{}, fmt.Errorf("unknown profile %q: give one of %s", profile, strings.Join(known, ", "))
		}
		for k, v := range p {
			merged[k] = v
		}
	}
	// Paths from the file are relative to its directory, and ~ is
	// expanded; the environment's are taken as given, as a flag's.
	for k, v := range merged {
		if strings.HasSuffix(k, "server_cert") || strings.HasSuffix(k, "token_file") {
			merged[k] = filePath(path, v)
		}
	}
	for _, e := range []struct{ env, key string }{
		{"SCISTREAM_S2CS", "s2cs"}, {"SCISTREAM_SERVER_CERT", "server_cert"},
		{"SCISTREAM_TOKEN_FILE", "token_file"}, {"SCISTREAM_OUTPUT", "output"},
	} {
		if v := getenv(e.env); v != "" {
			merged[e.key] = v
		}
	}
	d := Defaults{File: path, Profile: profile, Output: merged["output"]}
	if d.Output != "" && d.Output != "text" && d.Output != "json" {
		return d, fmt.Errorf("output %q: use text or json", d.Output)
	}
	side := func(prefix string) GatewayDefaults {
		get := func(k string) string {
			if v := merged[prefix+k]; v != "" {
				return v
			}
			return merged[k]
		}
		return GatewayDefaults{S2CS: get("s2cs"), ServerCert: get("server_cert"), TokenFile: get("token_file")}
	}
	d.Gateway, d.Inbound, d.Outbound = side(""), side("inbound_"), side("outbound_")
	return d, nil
}

// filePath resolves a path from the file at cfg: ~/ is the home
// directory, and a relative path is relative to cfg's directory.
func filePath(cfg, p string) string {
	if rest, ok := strings.CutPrefix(p, "~/"); ok || p == "~" {
		if h, err := os.UserHomeDir(); err == nil {
			return filepath.Join(h, rest)
		}
		return p
	}
	if p == "" || filepath.IsAbs(p) || cfg == "" {
		return p
	}
	return filepath.Join(filepath.Dir(cfg), p)
}

// parseFile decodes the file's keys: the top level's (profile too) and
// each profile's. Decoding is strict: an unknown key (the nearest known
// one suggested), a key given twice, a value that is not a string.
func parseFile(data []byte) (top map[string]string, profiles map[string]map[string]string, err error) {
	top, profiles = map[string]string{}, map[string]map[string]string{}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, nil, fmt.Errorf("not YAML: %w", err)
	}
	if len(doc.Content) == 0 {
		return top, profiles, nil // empty, or comments only
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, nil, fmt.Errorf("line %d: want keys such as s2cs: HOST:PORT", root.Line)
	}
	keys := fileKeys()
	topKeys := append([]string{"profile", "profiles"}, keys...)
	seenProfiles := false
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if k.Value == "profiles" {
			if seenProfiles {
				return nil, nil, fmt.Errorf("line %d: profiles is given twice", k.Line)
			}
			seenProfiles = true
			if v.Kind != yaml.MappingNode {
				return nil, nil, fmt.Errorf("line %d: profiles: want a name for each profile, and its keys under it", v.Line)
			}
			for j := 0; j+1 < len(v.Content); j += 2 {
				name, body := v.Content[j], v.Content[j+1]
				if _, dup := profiles[name.Value]; dup {
					return nil, nil, fmt.Errorf("line %d: profile %q is given twice", name.Line, name.Value)
				}
				if body.Kind != yaml.MappingNode {
					return nil, nil, fmt.Errorf("line %d: profile %q: want its keys (s2cs: ..., server_cert: ...) under it", body.Line, name.Value)
				}
				p := map[string]string{}
				if err := scalars(body, keys, p, "profile "+name.Value+": "); err != nil {
					return nil, nil, err
				}
				profiles[name.Value] = p
			}
			continue
		}
		if err := scalar(k, v, topKeys, top, ""); err != nil {
			return nil, nil, err
		}
	}
	return top, profiles, nil
}

// scalars reads the string keys of mapping m into out.
func scalars(m *yaml.Node, keys []string, out map[string]string, where string) error {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if err := scalar(m.Content[i], m.Content[i+1], keys, out, where); err != nil {
			return err
		}
	}
	return nil
}

// scalar reads one key k with value v into out, if k is among keys.
func scalar(k, v *yaml.Node, keys []string, out map[string]string, where string) error {
	if !slices.Contains(keys, k.Value) {
		msg := fmt.Sprintf("line %d: %s%s: unknown key", k.Line, where, k.Value)
		if near := cliflag.Nearest(k.Value, keys); near != "" {
			return fmt.Errorf("%s; did you mean %s?", msg, near)
		}
		return fmt.Errorf("%s; the keys are %s", msg, strings.Join(keys, ", "))
	}
	if _, dup := out[k.Value]; dup {
		return fmt.Errorf("line %d: %s%s is given twice", k.Line, where, k.Value)
	}
	if v.Kind != yaml.ScalarNode || v.Tag == "!!null" {
		return fmt.Errorf("line %d: %s%s: want one value, e.g. %s: %s", v.Line, where, k.Value, k.Value, example(k.Value))
	}
	out[k.Value] = v.Value
	return nil
}

// example is a value of key, for an error message.
func example(key string) string {
	switch {
	case strings.HasSuffix(key, "s2cs"):
		return "10.0.0.5:5000"
	case strings.HasSuffix(key, "server_cert"):
		return "/etc/scistream/gw.crt"
	case strings.HasSuffix(key, "token_file"):
		return "~/.scistream/token"
	case key == "output":
		return "text"
	}
	return "ornl"
}
