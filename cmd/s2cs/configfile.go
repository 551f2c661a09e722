package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"strings"

	"scistream/internal/cfgfile"
	"scistream/internal/cliflag"
	"scistream/internal/trustfile"
)

// The configuration file (--config): every flag is a key of the same
// name, so a flag added to flagSet is settable from the file with no
// further line anywhere (TestConfigEveryFlag checks it); its place in
// flagGroups puts its key in its section of --print_config, as in
// --help (TestFlagGroups checks it has one). Values go
// through the flags' own parsing and then through options.config and
// gateway.Config.Validate, exactly as the command line's do.

// opsOptions are the flags of running s2cs as a service: its
// configuration file, --print_config and --log_level.
type opsOptions struct {
	configFile  string
	printConfig bool
	logLevel    string
	// fs holds every flag, as parsed and loaded (--print_config writes
	// them).
	fs *flag.FlagSet
	// fromFile are the flags whose value came from --config.
	fromFile map[string]bool
}

func (o *opsOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.configFile, "config", "", "YAML configuration file: one key per flag, named as the flag (listener_ip: 10.0.0.3); a flag given as well overrides its key; see docs/deploy.md")
	fs.BoolVar(&o.printConfig, "print_config", false, "print the effective configuration (defaults, --config, flags) as a configuration file, without secrets, and exit")
	fs.StringVar(&o.logLevel, "log_level", "info", "least level logged: debug, info, warn or error (--verbose is debug)")
}

// configSchema is the configuration file of the flags in fs, in the
// groups --help lists them in. The flags that do something rather than
// set something have no key.
func configSchema(fs *flag.FlagSet) cfgfile.Schema {
	return cfgfile.Schema{FlagSet: fs, Actions: []string{"config", "print_config", "version"}, Groups: flagGroups()}
}

// load reads --config, if given, into fs, which holds every flag,
// leaving the flags given on the command line as they are.
func (o *opsOptions) load(fs *flag.FlagSet) error {
	o.fs = fs
	if o.configFile == "" {
		return nil
	}
	data, err := readConfig(o.configFile)
	if err != nil {
		return err
	}
	// Every key is checked, also those the command line overrides: a
	// mistake in a file under configuration management must not wait
	// for the day the override goes. A scratch flag set takes them all.
	if _, err := configSchema(new(options).flagSet()).Apply(o.configFile, data, nil); err != nil {
		return err
	}
	set, err := configSchema(fs).Apply(o.configFile, data, cliflag.Seen(fs))
	if err != nil {
		return err
	}
	o.fromFile = map[string]bool{}
	for _, name := range set {
		o.fromFile[name] = true
	}
	return nil
}

// given reports which flags were given, on the command line or in
// --config, by canonical name. Call it once load has run.
func (o *opsOptions) given() map[string]bool {
	set := map[string]bool{}
	if o.fs != nil {
		set = cliflag.Seen(o.fs)
	}
	for name := range o.fromFile {
		set[name] = true
	}
	return set
}

// readConfig reads the file at path, refusing one too large to be a
// configuration file, or one others could change (internal/trustfile):
// it says whom the gateway trusts (insecure_no_auth, allow_targets,
// tokens), so whoever can write it, or replace it, runs the gateway.
func readConfig(path string) ([]byte, error) {
	f, err := trustfile.Open("configuration file", path)
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, cfgfile.MaxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	return data, nil
}

// writeConfig writes the effective configuration: defaults, then the
// file, then the command line, as a configuration file that --config
// reads back to the same settings. Secrets are never in it: the keys
// that name secret files hold their paths, and flags that look like
// inline secrets have no key (cfgfile.Secret).
func (o *opsOptions) writeConfig(w io.Writer) error {
	header := "s2cs configuration, as s2cs --print_config printed it: defaults, then"
	if o.configFile != "" {
		header += " " + o.configFile + ", then"
	}
	header += " the command line.\nUse it as s2cs --config FILE; a flag given as well overrides its key."
	return configSchema(o.fs).Write(w, header)
}

// flagNamed matches the flag an error message begins with.
var flagNamed = regexp.MustCompile(`^--([a-z0-9_]+)`)

// fileHint adds to an error about a flag's value, when that value came
// from the configuration file, where it came from: an operator who never
// typed --type looks for it in the file.
func (o *opsOptions) fileHint(err error) error {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return err
	}
	m := flagNamed.FindStringSubmatch(err.Error())
	if m == nil || !o.fromFile[m[1]] {
		return err
	}
	return fmt.Errorf("%w (key %s in %s)", err, cfgfile.KeyName(m[1]), o.configFile)
}

// checkLevel returns the slog level --log_level asks for, debug if
// verbose (--verbose).
func (o *opsOptions) checkLevel(verbose bool) (string, error) {
	level := strings.ToLower(o.logLevel)
	switch level {
	case "debug", "info", "warn", "error":
	default:
		return "", fmt.Errorf("--log_level %.40q: use debug, info, warn or error", o.logLevel)
	}
	if verbose {
		if level != "debug" && level != "info" {
			return "", fmt.Errorf("--verbose (the debug level) and --log_level %s contradict each other: give one", level)
		}
		level = "debug"
	}
	return level, nil
}
