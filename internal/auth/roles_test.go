package auth_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"scistream/internal/auth"
)

func TestParsePolicy(t *testing.T) {
	cases := []struct {
		name    string
		in      string
		wantLen int
		wantErr string // substring; "" means success
	}{
		{"any", "user any\n", 1, ""},
		{"every selector", "user any\noperator identity idp.example.org:alice\noperator group idp.example.org:ops\nreader scope scistream:status\n", 4, ""},
		{"comments, blanks, tabs, crlf", "# roles\n\n\tuser\tany\r\n  reader identity prometheus  \n", 2, ""},
		{"inline comment", "user any # everyone\nreader identity mon\t# the monitor\n", 2, ""},
		{"group with unicode", "reader group idp:équipe\n", 1, ""},
		{"same value for two roles", "user identity alice\noperator identity alice\n", 2, ""},

		{"empty", "", 0, "no rules"},
		{"only comments", "# nothing\n\n", 0, "no rules"},
		{"unknown role", "admin any\n", 0, `line 1: unknown role "admin"`},
		{"role case matters", "User any\n", 0, "line 1: unknown role"},
		{"unknown selector", "user everyone\n", 0, `line 1: unknown selector "everyone"`},
		{"selector without name", "operator identity\n", 0, `line 1: "identity" needs a name`},
		{"any with a name", "user any alice\n", 0, `line 1: "any" takes no name`},
		{"role alone", "user\n", 0, "line 1: want"},
		{"too many fields", "user identity alice bob\n", 0, "line 1: want"},
		{"bad identity", "user identity ali!ce\n", 0, "line 1: identity"},
		{"identity too long", "user identity " + strings.Repeat("a", 129) + "\n", 0, "line 1: identity"},
		{"group control char", "user group a\x01b\n", 0, "line 1: group"},
		{"scope too long", "user scope " + strings.Repeat("s", 257) + "\n", 0, "line 1: scope"},
		{"invalid utf-8", "user group \xff\xfe\n", 0, "line 1: group"},
		{"duplicate", "user any\n\nuser any\n", 0, "line 3: same rule as line 1"},
		{"error names line", "# c\nuser any\nreader\n", 0, "line 3:"},
		{"line too long", "user group " + strings.Repeat("g", 70000) + "\n", 0, "too long"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := auth.ParsePolicy(strings.NewReader(c.in))
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("ParsePolicy error %v, want one containing %q", err, c.wantErr)
				}
				if p != nil {
					t.Fatal("non-nil Policy with an error")
				}
				return
			}
			if err != nil {
				t.Fatalf("ParsePolicy: %v", err)
			}
			if p.Len() != c.wantLen {
				t.Fatalf("Len = %d, want %d", p.Len(), c.wantLen)
			}
		})
	}
}

func TestRolesOf(t *testing.T) {
	p, err := auth.ParsePolicy(strings.NewReader(`
user      any
operator  identity  idp:alice
operator  group     idp:ops
reader    scope     scistream:status
reader    identity  monitor
`))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		pr   auth.Principal
		want []auth.Role
	}{
		{"ordinary", auth.Principal{Identity: "idp:bob"}, []auth.Role{auth.RoleUser}},
		{"operator by identity", auth.Principal{Identity: "idp:alice"}, []auth.Role{auth.RoleUser, auth.RoleOperator}},
		{"operator by group", auth.Principal{Identity: "idp:carol", Groups: []string{"idp:x", "idp:ops"}}, []auth.Role{auth.RoleUser, auth.RoleOperator}},
		// A group of the same name from another provider is another group.
		{"group of another provider", auth.Principal{Identity: "other:carol", Groups: []string{"other:ops"}}, []auth.Role{auth.RoleUser}},
		{"group named as identity", auth.Principal{Identity: "idp:ops"}, []auth.Role{auth.RoleUser}},
		{"reader by scope", auth.Principal{Identity: "idp:dave", Scopes: []string{"openid", "scistream:status"}}, []auth.Role{auth.RoleUser, auth.RoleReader}},
		{"static identity", auth.Principal{Identity: "monitor", Source: auth.SourceStatic}, []auth.Role{auth.RoleUser, auth.RoleReader}},
		// Identities are compared exactly: no prefix, no case folding.
		{"prefix of an operator", auth.Principal{Identity: "idp:alic"}, []auth.Role{auth.RoleUser}},
		{"case differs", auth.Principal{Identity: "idp:Alice"}, []auth.Role{auth.RoleUser}},
	}
	for _, c := range cases {
		if got := p.RolesOf(&c.pr); !slices.Equal(got, c.want) {
			t.Errorf("%s: RolesOf = %v, want %v", c.name, got, c.want)
		}
	}
	// Without "any", a caller no rule names holds no role at all.
	strict, err := auth.ParsePolicy(strings.NewReader("operator identity idp:alice\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := strict.RolesOf(&auth.Principal{Identity: "idp:bob"}); len(got) != 0 {
		t.Fatalf("strict policy gives an unnamed caller %v", got)
	}
	var none *auth.Policy
	if got := none.RolesOf(&auth.Principal{Identity: "x"}); !slices.Equal(got, auth.DefaultRoles()) {
		t.Fatalf("nil policy gives %v, want the defaults %v", got, auth.DefaultRoles())
	}
}

func TestHasRole(t *testing.T) {
	op := &auth.Principal{Roles: []auth.Role{auth.RoleOperator}}
	user := &auth.Principal{Roles: []auth.Role{auth.RoleUser}}
	reader := &auth.Principal{Roles: []auth.Role{auth.RoleReader}}
	for _, r := range auth.Roles() {
		if !op.Has(r) {
			t.Errorf("operator lacks %s", r)
		}
	}
	if user.Has(auth.RoleOperator) || user.Has(auth.RoleReader) || !user.Has(auth.RoleUser) {
		t.Errorf("user's roles: %v", user.Roles)
	}
	if reader.Has(auth.RoleUser) || reader.Has(auth.RoleOperator) {
		t.Errorf("reader's roles: %v", reader.Roles)
	}
	if (&auth.Principal{}).Has(auth.RoleUser) {
		t.Error("a principal without roles has one")
	}
}

func TestLoadPolicy(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "roles")
	if err := os.WriteFile(bad, []byte("user any\nsuperuser any\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := auth.LoadPolicy(bad); err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("LoadPolicy error %v should name the file and line 2", err)
	}
}

func FuzzParsePolicy(f *testing.F) {
	f.Add("user any\n")
	f.Add("operator identity idp:alice\nreader scope s # c\n")
	f.Add("user group \xff\n")
	f.Add("user any\nuser any\n")
	f.Add("")
	f.Fuzz(func(t *testing.T, in string) {
		p, err := auth.ParsePolicy(strings.NewReader(in))
		if err != nil {
			if p != nil {
				t.Fatal("non-nil Policy with an error")
			}
			return
		}
		if p.Len() < 1 {
			t.Fatal("success with no rules")
		}
		// Every role a policy gives is a known one.
		pr := &auth.Principal{Identity: "x", Groups: strings.Fields(in), Scopes: strings.Fields(in)}
		for _, r := range p.RolesOf(pr) {
			if !slices.Contains(auth.Roles(), r) {
				t.Fatalf("unknown role %q given", r)
			}
		}
	})
}
