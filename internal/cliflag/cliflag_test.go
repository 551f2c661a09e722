package cliflag_test

import (
	"bytes"
	"flag"
	"io"
	"maps"
	"strings"
	"testing"
	"time"

	"scistream/internal/cliflag"
)

type flags struct {
	fs        *flag.FlagSet
	serverCrt *string // defined as server_crt
	listenOn  *string // defined as listen-on
	port      *int    // no separator
	verbose   *bool   // defined as dry_run
	timeout   *time.Duration
	out       *bytes.Buffer
}

func newFlags() *flags {
	f := &flags{fs: flag.NewFlagSet("test", flag.ContinueOnError), out: &bytes.Buffer{}}
	f.fs.SetOutput(f.out)
	f.serverCrt = f.fs.String("server_crt", "/etc/s2cs.crt", "server `certificate` file")
	f.listenOn = f.fs.String("listen-on", "", "address to listen on")
	f.port = f.fs.Int("port", 5000, "control port")
	f.verbose = f.fs.Bool("dry_run", false, "print what would happen")
	f.timeout = f.fs.Duration("read_timeout", 0, "read timeout\nsecond line")
	cliflag.AddAliases(f.fs)
	return f
}

func TestAddAliasesShareValue(t *testing.T) {
	cases := []struct {
		name  string
		args  []string
		check func(t *testing.T, f *flags)
	}{
		{"canonical snake", []string{"--server_crt", "a.crt"}, func(t *testing.T, f *flags) {
			if *f.serverCrt != "a.crt" {
				t.Fatalf("server_crt = %q", *f.serverCrt)
			}
		}},
		{"kebab alias of snake", []string{"--server-crt", "b.crt"}, func(t *testing.T, f *flags) {
			if *f.serverCrt != "b.crt" {
				t.Fatalf("server_crt = %q", *f.serverCrt)
			}
		}},
		{"alias with =", []string{"-server-crt=c.crt"}, func(t *testing.T, f *flags) {
			if *f.serverCrt != "c.crt" {
				t.Fatalf("server_crt = %q", *f.serverCrt)
			}
		}},
		{"snake alias of kebab", []string{"--listen_on", "127.0.0.1:1"}, func(t *testing.T, f *flags) {
			if *f.listenOn != "127.0.0.1:1" {
				t.Fatalf("listen-on = %q", *f.listenOn)
			}
		}},
		{"bool alias", []string{"--dry-run"}, func(t *testing.T, f *flags) {
			if !*f.verbose {
				t.Fatal("dry_run not set through --dry-run")
			}
		}},
		{"bool alias =false", []string{"--dry_run", "--dry-run=false"}, func(t *testing.T, f *flags) {
			if *f.verbose {
				t.Fatal("--dry-run=false did not clear dry_run")
			}
		}},
		{"duration alias", []string{"--read-timeout", "3s"}, func(t *testing.T, f *flags) {
			if *f.timeout != 3*time.Second {
				t.Fatalf("read_timeout = %v", *f.timeout)
			}
		}},
		{"last spelling wins", []string{"--server_crt", "1", "--server-crt", "2"}, func(t *testing.T, f *flags) {
			if *f.serverCrt != "2" {
				t.Fatalf("server_crt = %q", *f.serverCrt)
			}
		}},
		{"defaults untouched", nil, func(t *testing.T, f *flags) {
			if *f.serverCrt != "/etc/s2cs.crt" || *f.port != 5000 {
				t.Fatalf("defaults changed: %q %d", *f.serverCrt, *f.port)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFlags()
			if err := f.fs.Parse(c.args); err != nil {
				t.Fatalf("Parse(%q): %v", c.args, err)
			}
			c.check(t, f)
			// Both spellings read back the same value.
			for _, pair := range [][2]string{{"server_crt", "server-crt"}, {"listen-on", "listen_on"}, {"dry_run", "dry-run"}, {"read_timeout", "read-timeout"}} {
				a, b := f.fs.Lookup(pair[0]), f.fs.Lookup(pair[1])
				if a == nil || b == nil {
					t.Fatalf("missing flag %q or %q", pair[0], pair[1])
				}
				if a.Value.String() != b.Value.String() {
					t.Fatalf("%s=%q but %s=%q", pair[0], a.Value, pair[1], b.Value)
				}
			}
		})
	}
}

func TestAddAliasesScope(t *testing.T) {
	f := newFlags()
	if f.fs.Lookup("port") == nil {
		t.Fatal("port missing")
	}
	n := 0
	f.fs.VisitAll(func(*flag.Flag) { n++ })
	if n != 9 { // 5 flags + 4 aliases; "port" has none
		t.Fatalf("%d flags after AddAliases, want 9", n)
	}
	// A bool alias must still act as a bool flag (no value needed).
	if bf, ok := f.fs.Lookup("dry-run").Value.(interface{ IsBoolFlag() bool }); !ok || !bf.IsBoolFlag() {
		t.Fatal("bool alias is not a bool flag")
	}

	// Both spellings defined explicitly: neither gets an alias and they
	// stay independent.
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	a := fs.String("a_b", "", "")
	b := fs.String("a-b", "", "")
	cliflag.AddAliases(fs)
	if err := fs.Parse([]string{"--a_b", "1", "--a-b", "2"}); err != nil {
		t.Fatal(err)
	}
	if *a != "1" || *b != "2" {
		t.Fatalf("a_b=%q a-b=%q", *a, *b)
	}

	// Calling AddAliases twice does not panic (flag redefinition).
	fs2 := flag.NewFlagSet("y", flag.ContinueOnError)
	fs2.String("x_y", "", "")
	cliflag.AddAliases(fs2)
	cliflag.AddAliases(fs2)
}

func TestPrintDefaultsOmitsAliases(t *testing.T) {
	f := newFlags()
	cliflag.PrintDefaults(f.fs)
	out := f.out.String()
	for _, want := range []string{
		"  --server_crt certificate\n    \tserver certificate file (default \"/etc/s2cs.crt\")\n",
		"  --listen-on string\n    \taddress to listen on\n",
		"  --port int\n    \tcontrol port (default \"5000\")\n",
		"  --dry_run\n    \tprint what would happen\n",
		// Multi-line usage is indented. (A zero Duration still prints
		// `(default "0s")`; only "", "false", "0" and "[]" are omitted.)
		"  --read_timeout duration\n    \tread timeout\n    \tsecond line",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q\n--- output:\n%s", want, out)
		}
	}
	for _, alias := range []string{"--server-crt", "--listen_on", "--dry-run", "--read-timeout", "alias of"} {
		if strings.Contains(out, alias) {
			t.Errorf("output mentions alias %q\n--- output:\n%s", alias, out)
		}
	}
	if strings.Count(out, "  --") != 5 {
		t.Errorf("want 5 entries\n%s", out)
	}
}

func TestSeen(t *testing.T) {
	cases := []struct {
		args []string
		want map[string]bool
	}{
		{nil, map[string]bool{}},
		{[]string{"--server_crt", "x"}, map[string]bool{"server_crt": true}},
		{[]string{"--server-crt", "x"}, map[string]bool{"server_crt": true}},
		{[]string{"--listen_on", "x"}, map[string]bool{"listen-on": true}},
		{[]string{"--listen-on", "x", "--port", "1"}, map[string]bool{"listen-on": true, "port": true}},
		{[]string{"--dry-run", "--dry_run", "--server-crt", "x"}, map[string]bool{"dry_run": true, "server_crt": true}},
	}
	for _, c := range cases {
		f := newFlags()
		if err := f.fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		if got := cliflag.Seen(f.fs); !maps.Equal(got, c.want) {
			t.Errorf("Seen(%q) = %v, want %v", c.args, got, c.want)
		}
	}
}

func TestUnknownFlagStillFails(t *testing.T) {
	f := newFlags()
	f.fs.SetOutput(io.Discard)
	if err := f.fs.Parse([]string{"--server.crt", "x"}); err == nil {
		t.Fatal("unknown spelling accepted")
	}
}
