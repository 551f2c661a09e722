// Package etcdtest runs a real etcd server for tests, as httptest runs an
// HTTP server: Start launches the etcd binary of Debian's etcd-server
// package (scripts/setup.sh installs it) as a one-member cluster on a
// random loopback address, on ports it picks, with its data in the test's
// temporary directory, and returns once etcd answers /health. Stop kills
// it by its PID (an outage, as a crash or a reboot makes one) and Restart
// brings it back on the same address with the same data, so a test can
// take etcd away from a client and give it back. The test's cleanup stops
// it; etcd's own log is shown when the test fails.
//
// The process itself is localetcd's (which s2bench uses too); this
// package ties it to a test: errors fail the test, cleanup stops it.
//
// Options.TLS serves clients over TLS and requires a client certificate;
// Options.Auth turns on etcd's authentication with a user that may read
// and write the keys under /scistream/ only.
package etcdtest

import (
	"crypto/tls"
	"testing"

	"scistream/internal/localetcd"
)

// Prefix is the key prefix the user of Options.Auth may read and write.
const Prefix = localetcd.Prefix

// ReadyTimeout bounds the wait for a started etcd to answer /health.
const ReadyTimeout = localetcd.ReadyTimeout

// Options choose how the server is set up.
type Options struct {
	// TLS serves the client port over TLS with a self-signed certificate
	// and requires clients to present the one in Etcd.CertFile.
	TLS bool
	// Auth enables etcd's authentication: Etcd.User with Etcd.Password
	// may read and write every key under Prefix, nothing else.
	Auth bool
}

// Etcd is a running etcd server: localetcd's, with its fields (Endpoint,
// CAFile, CertFile, KeyFile, User, Password, PasswordFile) and its Stop,
// PID and URL.
type Etcd struct {
	*localetcd.Etcd
	tb testing.TB
}

// Start runs etcd and waits until it serves. If the etcd binary is
// missing, it fails tb saying to run scripts/setup.sh: a test that needs
// etcd never skips silently. Call it from the test's goroutine.
func Start(tb testing.TB, o Options) *Etcd {
	tb.Helper()
	le, err := localetcd.Start(localetcd.Options{Dir: tb.TempDir(), TLS: o.TLS, Auth: o.Auth})
	if err != nil {
		tb.Fatalf("etcdtest: %v", err)
	}
	tb.Cleanup(func() {
		le.Stop()
		if tb.Failed() {
			tb.Logf("etcd's log:\n%s", le.Log())
		}
	})
	return &Etcd{Etcd: le, tb: tb}
}

// ClientTLS is the TLS configuration of a client of a server started
// with Options.TLS (its CA and client certificate), nil otherwise.
func (e *Etcd) ClientTLS() *tls.Config {
	e.tb.Helper()
	c, err := e.Etcd.ClientTLS()
	if err != nil {
		e.tb.Fatal(err)
	}
	return c
}

// Restart starts a stopped etcd again on the same address with the same
// data, and waits until it serves. Call it from the test's goroutine.
func (e *Etcd) Restart() {
	e.tb.Helper()
	if err := e.Etcd.Restart(); err != nil {
		e.tb.Fatalf("etcdtest: %v", err)
	}
}
