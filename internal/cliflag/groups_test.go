package cliflag_test

import (
	"bytes"
	"flag"
	"reflect"
	"strings"
	"testing"
	"time"

	"scistream/internal/cliflag"
)

// groupedSet is a flag set of every kind of default: zero ones, which
// mean "unset" and print none, and others, which print as given.
func groupedSet() *flag.FlagSet {
	fs := flag.NewFlagSet("d", flag.ContinueOnError)
	fs.String("listener_ip", "", "IP address advertised (required)")
	fs.Int("port", 5000, "control port")
	fs.String("port_range", "5100-5199", "data ports")
	fs.Duration("takeover", 0, "bound on a takeover (default 10s)")
	fs.Duration("lease_max", 168*time.Hour, "longest lease")
	fs.Duration("rate_interval", 1500*time.Millisecond, "sampling interval")
	fs.Int("capacity_conns", 0, "most channels (0: no bound)")
	fs.Bool("insecure_no_auth", false, "no authentication")
	fs.Bool("sockmap", true, "load the program")
	fs.String("note", "two words", "free text")
	fs.String("rate", "0", "a rate; 0: none")
	fs.Float64("ratio", 0.5, "a fraction")
	fs.String("long", "", strings.Repeat("word ", 40)+"end")
	cliflag.AddAliases(fs)
	return fs
}

func groups() []cliflag.Group {
	return []cliflag.Group{
		{Title: "The gateway", Flags: []string{"listener_ip", "port", "port_range"}},
		{Title: "Timing", Flags: []string{"takeover", "lease_max", "rate_interval"}},
	}
}

// TestCheckGroups: a flag in no group, in two, a name that is no flag or
// an alias, a group without a title or flags: each named, all at once.
func TestCheckGroups(t *testing.T) {
	fs := groupedSet()
	all := append(groups(), cliflag.Group{Title: "Rest", Flags: []string{"capacity_conns", "insecure_no_auth", "sockmap", "note", "rate", "ratio", "long"}})
	if err := cliflag.CheckGroups(fs, all); err != nil {
		t.Fatalf("complete groups refused: %v", err)
	}
	bad := append(groups(),
		cliflag.Group{Title: "Rest", Flags: []string{"capacity_conns", "insecure_no_auth", "sockmap", "note", "ratio", "port", "frobnicate", "port-range"}},
		cliflag.Group{Title: "Empty"},
		cliflag.Group{Flags: []string{"long"}})
	err := cliflag.CheckGroups(fs, bad)
	if err == nil {
		t.Fatal("incomplete groups accepted")
	}
	for _, want := range []string{
		"--rate is in no group",
		"--port is in 2 groups (The gateway, Rest)",
		`group "Rest" names --frobnicate, which is no flag`,
		`group "Rest" names --port-range, an alias: name the flag (--port_range)`,
		`group "Empty" holds no flag`,
		"a group without a title holds [long]",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "--port-range is in") || strings.Contains(err.Error(), "--listener-ip") {
		t.Errorf("an alias counted as a flag of its own:\n%v", err)
	}
}

// TestArrange: the groups' order, then every flag of no group, by name,
// under OtherTitle; aliases, unknown names and a second listing of a
// flag left out.
func TestArrange(t *testing.T) {
	fs := groupedSet()
	gs := append(groups(), cliflag.Group{Title: "Again", Flags: []string{"port", "no-such-flag", "lease-max"}})
	got := cliflag.Arrange(fs, gs)
	want := []cliflag.Group{
		{Title: "The gateway", Flags: []string{"listener_ip", "port", "port_range"}},
		{Title: "Timing", Flags: []string{"takeover", "lease_max", "rate_interval"}},
		{Title: cliflag.OtherTitle, Flags: []string{"capacity_conns", "insecure_no_auth", "long", "note", "rate", "ratio", "sockmap"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Arrange:\n got  %v\n want %v", got, want)
	}
	if got := cliflag.Arrange(fs, nil); len(got) != 1 || got[0].Title != cliflag.OtherTitle || len(got[0].Flags) != 13 {
		t.Errorf("Arrange without groups: %v", got)
	}
}

// entries splits PrintGroups' output into each flag's lines, by name,
// and returns the headings in order.
func entries(out string) (map[string]string, []string) {
	m := map[string]string{}
	var headings []string
	name := ""
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, "  --"):
			name = strings.Fields(line)[0][2:]
			m[name] = line + "\n"
		case strings.HasPrefix(line, "        "):
			m[name] += line + "\n"
		case strings.HasSuffix(line, ":"):
			headings = append(headings, line)
		}
	}
	return m, headings
}

// TestPrintGroups: headings in order, each flag under its own, its
// default as the flag takes it (no quoted numbers or durations, a
// duration short, no zero default, "(default" once and unbroken), no
// aliases, lines within 80 columns.
func TestPrintGroups(t *testing.T) {
	fs := groupedSet()
	var out bytes.Buffer
	cliflag.PrintGroups(&out, fs, groups())
	text := out.String()
	t.Logf("output:\n%s", text)
	got, headings := entries(text)
	if want := []string{"The gateway:", "Timing:", cliflag.OtherTitle + ":"}; !reflect.DeepEqual(headings, want) {
		t.Errorf("headings %q, want %q", headings, want)
	}
	if i, j, k := strings.Index(text, "Timing:"), strings.Index(text, "  --lease_max "), strings.Index(text, cliflag.OtherTitle+":"); !(i < j && j < k) {
		t.Errorf("--lease_max is not under Timing")
	}
	for name, want := range map[string]string{
		"listener_ip":      "  --listener_ip string\n        IP address advertised (required)\n",
		"port":             "  --port int\n        control port (default 5000)\n",
		"port_range":       "  --port_range string\n        data ports (default 5100-5199)\n",
		"takeover":         "  --takeover duration\n        bound on a takeover (default 10s)\n",
		"lease_max":        "  --lease_max duration\n        longest lease (default 168h)\n",
		"rate_interval":    "  --rate_interval duration\n        sampling interval (default 1.5s)\n",
		"capacity_conns":   "  --capacity_conns int\n        most channels (0: no bound)\n",
		"insecure_no_auth": "  --insecure_no_auth\n        no authentication\n",
		"sockmap":          "  --sockmap\n        load the program (default true)\n",
		"note":             "  --note string\n        free text (default \"two words\")\n",
		"rate":             "  --rate string\n        a rate; 0: none (default 0)\n",
		"ratio":            "  --ratio float\n        a fraction (default 0.5)\n",
	} {
		if got[name] != want {
			t.Errorf("--%s:\n got  %q\n want %q", name, got[name], want)
		}
	}
	if len(got) != 13 {
		t.Errorf("%d entries, want the 13 flags", len(got))
	}
	for _, alias := range []string{"--listener-ip", "--port-range", "--lease-max", "alias of"} {
		if strings.Contains(text, alias) {
			t.Errorf("output lists the alias %q", alias)
		}
	}
	for name, e := range got {
		if strings.Count(e, "(default") > 1 {
			t.Errorf("--%s says its default twice: %q", name, e)
		}
	}
	for _, line := range strings.Split(text, "\n") {
		if len(line) > 80 {
			t.Errorf("line longer than 80 columns: %q", line)
		}
		if strings.HasSuffix(line, "(default") {
			t.Errorf("a default broken over two lines: %q", line)
		}
	}
	if n := strings.Count(got["long"], "\n"); n < 3 {
		t.Errorf("a long usage is not wrapped: %q", got["long"])
	}
}

// TestDefaultText: zero values print nothing whatever their type.
func TestDefaultText(t *testing.T) {
	fs := groupedSet()
	for name, want := range map[string]string{
		"listener_ip": "-", "takeover": "-", "capacity_conns": "-", "insecure_no_auth": "-",
		"port": "5000", "lease_max": "168h", "rate_interval": "1.5s", "note": `"two words"`, "rate": "0", "sockmap": "true",
	} {
		d, ok := cliflag.DefaultText(fs.Lookup(name))
		if !ok {
			d = "-"
		}
		if d != want {
			t.Errorf("DefaultText(--%s) = %q, want %q", name, d, want)
		}
	}
}
