package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"scistream/internal/certs"
	"scistream/internal/etcdtest"
	"scistream/internal/localgw"
)

// TestStoreFlagsRefused: every bad store flag, alone or in a bad
// combination, is refused before anything starts, in one line that names
// the flag; and a password never shows in it.
func TestStoreFlagsRefused(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	empty, twoLines, pw := file("empty", ""), file("two", "a\nb\n"), file("pw", "s3cret\n")
	_, caFile, _, err := certs.LoadOrGenerate(dir, []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	loose := file("loose", "s3cret\n")
	if err := os.Chmod(loose, 0o644); err != nil {
		t.Fatal(err)
	}
	notPEM := file("ca.txt", "not a certificate")
	base := []string{"--state_dir", state, "--insecure_no_auth", "--listener_ip", "127.0.0.1"}
	etcd := []string{"--store", "etcd://127.0.0.1:2379", "--store_facility", "f"}
	for _, c := range []struct {
		args    []string
		mention string
	}{
		{[]string{"--store", "http://127.0.0.1:2379"}, `--store "http://127.0.0.1:2379": give etcd://HOST:PORT`},
		{[]string{"--store", "bolt"}, `--store "bolt": give etcd://`},
		{[]string{"--store", "etcd://"}, `--store "etcd://"`},
		{[]string{"--store", "etcd://host"}, `--store: endpoint "host": give HOST:PORT`},
		{[]string{"--store", "etcd://host:0"}, `port "0" is not a number from 1 to 65535`},
		{[]string{"--store", "etcd://host:99999"}, `port "99999"`},
		{[]string{"--store", "etcd://host:x"}, `port "x"`},
		{[]string{"--store", "etcd://a:1,,b:2"}, `--store: endpoint ""`},
		{[]string{"--store", "etcd://a:1,a:1"}, `endpoint "a:1" is given twice`},
		{[]string{"--store", "etcd://bad_host!:1"}, `"bad_host!" is neither an IP address nor a host name`},
		{[]string{"--store", "etcd://h:1/v3"}, "no path or query"},
		{[]string{"--store", "etcd://root:s3cret@h:1"}, "--store holds a user name or password"},
		{[]string{"--store", "etcd://h:1"}, "--store etcd://h:1 needs --store_facility NAME"},
		{[]string{"--store", "etcd://h:1", "--store_facility", "a/b"}, `--store_facility "a/b": use ASCII letters`},
		{[]string{"--store", "etcd://h:1", "--store_facility", "../x"}, `--store_facility "../x"`},
		{[]string{"--store_facility", "f"}, "--store_facility applies only to an etcd store"},
		{[]string{"--etcd_ca", "ca.pem"}, "--etcd_ca applies only to an etcd store"},
		{[]string{"--etcd_password_file", pw}, "--etcd_password_file applies only to an etcd store"},
		{append(etcd, "--etcd_cert", "c.pem"), "give both --etcd_cert and --etcd_key"},
		{append(etcd, "--etcd_cert", "c.pem", "--etcd_key", "k.pem"), "--etcd_cert needs --etcd_ca"},
		{append(etcd, "--etcd_ca", filepath.Join(dir, "none.pem")), "--etcd_ca: open"},
		{append(etcd, "--etcd_ca", notPEM), "holds no PEM certificate"},
		{append(etcd, "--etcd_user", "u"), `--etcd_user "u" needs --etcd_password_file FILE`},
		{append(etcd, "--etcd_password_file", pw), "--etcd_password_file needs --etcd_user"},
		{append(etcd, "--etcd_user", "u", "--etcd_password_file", empty), "is empty: write the password"},
		{append(etcd, "--etcd_user", "u", "--etcd_password_file", twoLines), "holds more than one line"},
		{append(etcd, "--etcd_user", "u", "--etcd_password_file", filepath.Join(dir, "nope")), "--etcd_password_file open"},
		{append(etcd, "--etcd_user", "u\x07", "--etcd_password_file", pw), "holds a control character"},
		// Issue 25, finding 7: a password file others may read, and a
		// password or stream secrets in plaintext, without a word.
		{append(etcd, "--etcd_user", "u", "--etcd_password_file", loose), "password file " + loose + " can be read or written by other users (mode 0644): chmod 600"},
		{append(etcd, "--etcd_user", "u", "--etcd_password_file", pw), `--etcd_user "u" without TLS would send its password, and every stream's secret, to etcd in plaintext: give --etcd_ca`},
		{[]string{"--store", "etcd://10.0.0.5:2379", "--store_facility", "f"}, "--store etcd://10.0.0.5:2379 without TLS would send every stream's secret (in its record) to etcd in plaintext: give --etcd_ca (the CA of etcd's certificate) to connect over TLS, or --insecure_etcd"},
		{[]string{"--store", "etcd://127.0.0.1:2379,etcd.example.org:2379", "--store_facility", "f"}, "or --insecure_etcd"},
		{[]string{"--insecure_etcd"}, "--insecure_etcd applies only to an etcd store"},
		{append(etcd, "--etcd_ca", caFile, "--insecure_etcd"), "--insecure_etcd: the connection to etcd is TLS"},
		{[]string{"--node", "n1"}, "--node n1: the nodes of a facility share their state in etcd: give --store etcd://"},
		{append(etcd, "--node", "n1"), "--node n1: every node of a facility presents the same WAN certificate"},
		{append(etcd, "--node", "a/b", "--server_crt", pw, "--server_key", pw), `--node "a/b": use ASCII letters`},
		{append(etcd, "--node", "n1", "--server_crt", pw, "--server_key", pw, "--takeover", "2s"), "--takeover 2s is too short"},
		{append(etcd, "--takeover", "20s"), "--takeover applies to a node of a facility only"},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			var stdout, stderr, msg bytes.Buffer
			err := run(context.Background(), append(append([]string{}, base...), c.args...), &stdout, &stderr)
			if code := exitCode(err, &msg); code != 2 {
				t.Fatalf("exit status %d (%v), want 2", code, err)
			}
			line := msg.String()
			if !strings.HasPrefix(line, "s2cs: ") || strings.Count(line, "\n") != 1 || !strings.Contains(line, c.mention) {
				t.Errorf("message %q; want one line \"s2cs: ...\" mentioning %q", line, c.mention)
			}
			if strings.Contains(line+stdout.String()+stderr.String(), "s3cret") {
				t.Errorf("the password shows: %q", line)
			}
			if _, err := os.Stat(state); !os.IsNotExist(err) {
				t.Errorf("a refused command line created the state directory (stat: %v)", err)
			}
		})
	}
}

// TestStoreEtcd runs s2cs on an etcd that requires TLS and a password:
// it serves, says where its records are, and never shows the password.
// Started with a wrong password, or with etcd down, it exits at once
// with a line that says which flags to check.
func TestStoreEtcd(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{TLS: true, Auth: true})
	args := func(passwordFile string) []string {
		return []string{"--listener_ip", localgw.RandomLoopback(), "--port", "0", "--port_range", "5100-5101",
			"--state_dir", t.TempDir(), "--insecure_no_auth",
			"--store", "etcd://" + srv.Endpoint, "--store_facility", "site-a",
			"--etcd_ca", srv.CAFile, "--etcd_cert", srv.CertFile, "--etcd_key", srv.KeyFile,
			"--etcd_user", srv.User, "--etcd_password_file", passwordFile}
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	var stderr bytes.Buffer // read only once run has returned
	done := make(chan error, 1)
	go func() {
		err := run(ctx, args(srv.PasswordFile), pw, &stderr)
		pw.Close()
		done <- err
	}()
	var stdout strings.Builder
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		stdout.WriteString(sc.Text() + "\n")
		if strings.HasPrefix(sc.Text(), "s2cs: control API on https://") {
			break
		}
	}
	go io.Copy(io.Discard, pr)
	want := "s2cs: stream records in etcd at " + srv.Endpoint + " under /scistream/site-a/ (TLS, user " + srv.User + ")"
	if !strings.Contains(stdout.String(), want) {
		cancel()
		t.Fatalf("stdout lacks %q:\n%s\nrun = %v, stderr:\n%s", want, stdout.String(), <-done, stderr.String())
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run after its context ended = %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("run did not return after its context ended")
	}
	if strings.Contains(stdout.String()+stderr.String(), srv.Password) {
		t.Fatal("s2cs printed or logged the etcd password")
	}

	wrong := filepath.Join(t.TempDir(), "wrong")
	if err := os.WriteFile(wrong, []byte("not-"+srv.Password), 0o600); err != nil {
		t.Fatal(err)
	}
	var msg bytes.Buffer
	exitCode(run(context.Background(), args(wrong), io.Discard, io.Discard), &msg)
	if !strings.Contains(msg.String(), "refused access") || !strings.Contains(msg.String(), "check --etcd_user, --etcd_password_file") ||
		strings.Contains(msg.String(), srv.Password) {
		t.Errorf("with a wrong password: %q; want a refusal that names --etcd_user and --etcd_password_file, without the password", msg.String())
	}

	srv.Stop()
	msg.Reset()
	start := time.Now()
	exitCode(run(context.Background(), args(srv.PasswordFile), io.Discard, io.Discard), &msg)
	if !strings.Contains(msg.String(), "state store unavailable") || !strings.Contains(msg.String(), "is etcd running there") {
		t.Errorf("with etcd down: %q; want it unavailable and a hint", msg.String())
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("with etcd down, s2cs took %s to give up", took)
	}
}
