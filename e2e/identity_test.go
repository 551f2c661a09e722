package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"scistream/internal/api"
	"scistream/internal/login"
	"scistream/internal/oidctest"
)

// newIDPPair is a gateway pair that trusts is beside its token file:
// is's JWTs, or (opaque) its opaque tokens through its introspection
// endpoint, under the alias "idp", with a roles file that makes every
// caller a user and idp:ops an operator.
func newIDPPair(t *testing.T, is *oidctest.Issuer, opaque bool) *pair {
	t.Helper()
	dir := t.TempDir()
	roles := filepath.Join(dir, "roles")
	if err := os.WriteFile(roles, []byte("user any\noperator identity idp:ops\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"--roles", roles, "--oidc_ca", is.CAFile}
	if opaque {
		secret := filepath.Join(dir, "secret")
		if err := os.WriteFile(secret, []byte(is.IntrospectionSecret+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--introspection_url", is.URL+"/introspect", "--introspection_client_id", is.IntrospectionClientID,
			"--introspection_secret_file", secret, "--introspection_alias", "idp", "--introspection_identity_claim", "username")
	} else {
		args = append(args, "--oidc_issuer", is.URL, "--oidc_audience", is.Audience, "--oidc_alias", "idp")
	}
	return newPair(t, pairOpts{args: args})
}

// login runs s2uc login as id (its own SCISTREAM_HOME, no
// SCISTREAM_TOKEN), reads the user code from its output and approves it
// at the issuer for subject, as the user's browser would. It returns
// s2uc's output and the login it stored.
func (p *pair) login(id string, is *oidctest.Issuer, subject string) (string, *login.Saved) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	home := filepath.Join(p.home, id)
	cmd := exec.CommandContext(ctx, bins.s2uc, "login", "--issuer", is.URL, "--client_id", is.ClientID, "--ca", is.CAFile)
	cmd.Env = append(os.Environ(), "SCISTREAM_HOME="+home, "SCISTREAM_TOKEN=")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		p.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	var out strings.Builder
	codeRE := regexp.MustCompile(`enter the code (\S+)`)
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
		if m := codeRE.FindStringSubmatch(sc.Text()); m != nil {
			if err := is.Approve(ctx, m[1], subject); err != nil {
				p.t.Errorf("approve %s: %v", m[1], err)
			}
		}
	}
	if err := cmd.Wait(); err != nil {
		p.t.Fatalf("s2uc login as %s: %v\n%s%s", id, err, out.String(), stderr.String())
	}
	path := filepath.Join(home, "login.json")
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		p.t.Fatalf("%s: %v, %v; want mode 0600", path, fi, err)
	}
	saved, err := login.Store{Path: path}.Load()
	if err != nil {
		p.t.Fatal(err)
	}
	return out.String() + stderr.String(), saved
}

// secretsAbsent fails t if any secret appears in any of texts.
func secretsAbsent(t *testing.T, secrets []string, texts map[string]string) {
	t.Helper()
	for name, text := range texts {
		for _, s := range secrets {
			if s != "" && strings.Contains(text, s) {
				t.Errorf("a token or secret appears in %s", name)
			}
		}
	}
}

// TestIdentityWorkflow: the seed-001 workflow with tokens of a local
// OIDC issuer and the real binaries: s2uc login (the test reads the
// code and approves it), inbound-request, outbound-request, data
// through, release; an ordinary user cannot release another's stream,
// an operator can; then s2uc stream in one go. No token reaches a log
// or an output.
func TestIdentityWorkflow(t *testing.T) {
	is := oidctest.Start(t, oidctest.Options{})
	p := newIDPPair(t, is, false)
	app := newSink(t, "127.0.0.1", nil)
	outputs := map[string]string{}
	var secrets []string
	loginAs := func(id, subject string) {
		out, saved := p.login(id, is, subject)
		if !strings.Contains(out, "Logged in to "+is.URL) {
			t.Fatalf("s2uc login output:\n%s", out)
		}
		outputs["login "+id] = out
		secrets = append(secrets, saved.AccessToken, saved.RefreshToken)
	}
	run := func(id string, args ...string) string {
		t.Helper()
		out := p.mustS2UC(id, args...)
		outputs[id+" "+strings.Join(args, " ")] = out
		return out
	}
	refusedAs := func(id string, code api.Code, args ...string) {
		t.Helper()
		out, errs, exit := p.s2uc(id, args...)
		if exit == 0 || !strings.Contains(errs, string(code)) {
			t.Fatalf("s2uc %s as %s: exit %d, %s; want %s", strings.Join(args, " "), id, exit, errs, code)
		}
		outputs[id+" "+strings.Join(args, " ")] = out + errs
	}
	for id, subject := range map[string]string{"u-alice": "alice", "u-bob": "bob", "u-ops": "ops"} {
		loginAs(id, subject)
	}

	out := run("u-alice", "inbound-request", "--server_cert="+p.cons.CertFile, "--s2cs", p.cons.Addr,
		"--remote_ip", "127.0.0.1", "--receiver_ports", app.port(), "--num_conn", "1")
	m := regexp.MustCompile(`(?m)^uid: (\S+)\nlisteners: (\S+):(\d+)$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("inbound-request output lacks uid/listeners lines:\n%s", out)
	}
	uid, consHost, proxyC := m[1], m[2], m[3]
	out = run("u-alice", "outbound-request", "--server_cert="+p.prod.CertFile, "--s2cs", p.prod.Addr,
		"--remote_ip", consHost, "--receiver_ports", proxyC, "--num_conn", "1", uid, consHost+":"+proxyC)
	m = regexp.MustCompile(`(?m)^uid: (\S+)\nlisteners: (\S+)$`).FindStringSubmatch(out)
	if m == nil || m[1] != uid {
		t.Fatalf("outbound-request output lacks uid %s / listeners:\n%s", uid, out)
	}
	c, err := dialFrom("", m[2])
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("123\n"))
	c.Close()
	if r := app.next(t, 10*time.Second); r.err != nil || string(r.data) != "123\n" {
		t.Fatalf("consumer got %q (err %v), want \"123\\n\"", r.data, r.err)
	}
	var st api.Stream
	json.Unmarshal([]byte(run("u-alice", "status", uid, "--s2cs", p.cons.Addr, "--server_cert", p.cons.CertFile, "--output", "json")), &st)
	if st.Owner != "idp:alice" || st.State != api.StateConnected {
		t.Fatalf("the stream's owner %q, state %s; want idp:alice, connected", st.Owner, st.State)
	}

	// bob, an ordinary user, cannot release alice's stream: not found
	// as his own, refused when he names her.
	gw := []string{"--s2cs", p.cons.Addr, "--server_cert", p.cons.CertFile}
	refusedAs("u-bob", api.CodeNotFound, append([]string{"release", uid}, gw...)...)
	refusedAs("u-bob", api.CodePermissionDenied, append([]string{"release", uid, "--owner", "idp:alice"}, gw...)...)
	refusedAs("u-bob", api.CodePermissionDenied, append([]string{"list", "--all_owners"}, gw...)...)
	// ops, an operator, sees it among every owner's and releases it.
	out = run("u-ops", append([]string{"list", "--all_owners"}, gw...)...)
	if !strings.Contains(out, "OWNER") || !regexp.MustCompile(`idp:alice +`+uid).MatchString(out) {
		t.Fatalf("operator's list lacks alice's stream:\n%s", out)
	}
	out = run("u-ops", append([]string{"release", uid, "--owner", "idp:alice"}, gw...)...)
	if !strings.Contains(out, "released "+uid) {
		t.Fatalf("operator's release: %s", out)
	}
	json.Unmarshal([]byte(run("u-alice", "status", uid, "--s2cs", p.cons.Addr, "--server_cert", p.cons.CertFile, "--output", "json")), &st)
	if st.State != api.StateReleased || !strings.Contains(st.Reason, "released by idp:ops") {
		t.Fatalf("after the operator's release: %s, %q", st.State, st.Reason)
	}
	// alice releases what is left (the outbound side) from her record.
	run("u-alice", "release", uid)

	// The one-shot stream, then its release.
	so := p.wire("u-alice", app.host(), app.port(), 2)
	for i, l := range so.Listeners {
		c, err := dialFrom("", l)
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte{byte('a' + i)})
		c.Close()
		if r := app.next(t, 10*time.Second); r.err != nil || len(r.data) != 1 {
			t.Fatalf("one-shot stream, channel %d: %q, %v", i, r.data, r.err)
		}
	}
	run("u-alice", "release", so.UID)

	outputs["producer gateway log"] = p.prod.Log()
	outputs["consumer gateway log"] = p.cons.Log()
	secretsAbsent(t, secrets, outputs)
	if !strings.Contains(p.cons.Log(), "idp:ops") {
		t.Errorf("the consumer gateway's log does not say who released the stream")
	}
}

// TestIdentityIntrospection: gateways that check opaque tokens by
// introspection (as with Globus Auth) run s2uc stream for a user who
// logged in; while the endpoint is down a token it never vouched for is
// unavailable, not admitted.
func TestIdentityIntrospection(t *testing.T) {
	is := oidctest.Start(t, oidctest.Options{Opaque: true})
	p := newIDPPair(t, is, true)
	app := newSink(t, "127.0.0.1", nil)
	out, saved := p.login("u-alice", is, "alice@uchicago.edu")
	if strings.Contains(saved.AccessToken, ".") {
		t.Fatal("the issuer gave a JWT, not an opaque token")
	}
	so := p.wire("u-alice", app.host(), app.port(), 1)
	c, err := dialFrom("", so.Listeners[0])
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("opaque"))
	c.Close()
	if r := app.next(t, 10*time.Second); string(r.data) != "opaque" {
		t.Fatalf("consumer got %q", r.data)
	}
	var list api.StreamList
	json.Unmarshal([]byte(p.mustS2UC("u-alice", "list", "--s2cs", p.prod.Addr, "--server_cert", p.prod.CertFile, "--output", "json")), &list)
	if len(list.Streams) != 1 || list.Streams[0].Owner != "idp:alice@uchicago.edu" {
		t.Fatalf("alice's list: %+v", list)
	}
	// Each gateway asked about the token once: answers are cached.
	if n := is.Stats().Introspections; n < 1 || n > 2 {
		t.Errorf("%d introspections for one token on two gateways, want 1 or 2", n)
	}
	is.SetDown(true)
	p.tokens["fresh"] = is.MintOpaque(oidctest.Claims{Subject: "carol"})
	_, errs, code := p.s2uc("fresh", "list", "--s2cs", p.prod.Addr, "--server_cert", p.prod.CertFile)
	if code == 0 || !strings.Contains(errs, "unavailable") {
		t.Fatalf("a token checked while the endpoint is down: exit %d, %s", code, errs)
	}
	is.SetDown(false)
	p.mustS2UC("u-alice", "release", so.UID)
	secretsAbsent(t, []string{saved.AccessToken, saved.RefreshToken, p.tokens["fresh"], is.IntrospectionSecret},
		map[string]string{"login": out, "producer gateway log": p.prod.Log(), "consumer gateway log": p.cons.Log()})
}
