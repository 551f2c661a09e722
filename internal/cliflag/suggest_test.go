package cliflag_test

import (
	"errors"
	"flag"
	"io"
	"testing"

	"scistream/internal/cliflag"
)

// TestParseError: a flag a command lacks is one line naming it, the
// nearest flag it has (whatever the spelling or separator typed) and
// where the flags are listed.
func TestParseError(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--listner_ip", "x"}, "unknown flag --listner_ip: did you mean --listener_ip? (s2cs --help lists the flags)"},
		{[]string{"-listner-ip=x"}, "unknown flag --listner-ip: did you mean --listener_ip? (s2cs --help lists the flags)"},
		{[]string{"--LISTENER_IP", "x"}, "unknown flag --LISTENER_IP: did you mean --listener_ip? (s2cs --help lists the flags)"},
		{[]string{"--prot", "1"}, "unknown flag --prot: did you mean --port? (s2cs --help lists the flags)"},
		{[]string{"--frobnicate"}, "unknown flag --frobnicate (s2cs --help lists the flags)"},
		{[]string{"--port", "x"}, `invalid value "x" for flag -port: parse error (s2cs --help lists the flags)`},
	} {
		fs := flag.NewFlagSet("s2cs", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		fs.String("listener_ip", "", "")
		fs.Int("port", 0, "")
		fs.String("port_range", "", "")
		cliflag.AddAliases(fs)
		err := cliflag.ParseError(fs, fs.Parse(c.args), "s2cs --help")
		if err == nil || err.Error() != c.want {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
		if unknown := c.want[:7] == "unknown"; errors.Is(err, cliflag.ErrUnknownFlag) != unknown {
			t.Errorf("%v: errors.Is(ErrUnknownFlag) = %v", c.args, !unknown)
		}
	}
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if err := cliflag.ParseError(fs, fs.Parse([]string{"--help"}), "x --help"); err != flag.ErrHelp {
		t.Errorf("--help: %v", err)
	}
}
