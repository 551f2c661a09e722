package main

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestTranslate12: the 1.2 daemon's command lines (1.2.1's, and the
// later branch's with "start" first) become s2cs's flags.
func TestTranslate12(t *testing.T) {
	for _, c := range []struct {
		args, want []string
		is12       bool
		secret     string
	}{
		{[]string{"--listener_ip", "10.0.0.1", "--type", "splice"}, []string{"--listener_ip", "10.0.0.1", "--type=splice"}, false, ""},
		{[]string{"--server_crt=a.crt", "--server_key=a.key", "--listener_ip=10.0.0.1", "--port=5000", "--port_range=5100-5200", "--type=Haproxy", "--verbose"},
			[]string{"--server_crt=a.crt", "--server_key=a.key", "--listener_ip=10.0.0.1", "--port=5000", "--port_range=5100-5200", "--type=splice", "--verbose"}, true, ""},
		{[]string{"start", "--type", "StunnelSubprocess", "--client_id=cid", "--client_secret", "s3cret"},
			[]string{"--type=splice", "--introspection_url=" + globusIntrospect, "--introspection_client_id=cid", "--introspection_identity_claim=username"}, true, "s3cret"},
		{[]string{"start"}, nil, true, ""},
		{[]string{"--type=Nginx", "--", "--type=Nginx"}, []string{"--type=splice", "--", "--type=Nginx"}, true, ""},
	} {
		got, l := translate12(c.args)
		if !slices.Equal(got, c.want) || l.is12 != c.is12 || l.clientSecret != c.secret {
			t.Errorf("translate12(%q) = %q (1.2 %v, secret %q); want %q (1.2 %v, secret %q)", c.args, got, l.is12, l.clientSecret, c.want, c.is12, c.secret)
		}
	}
}

// TestLegacyRefusals: the gRPC endpoint does not start without --peer_ca,
// whether asked for (--control_grpc) or implied by a 1.2 command line.
func TestLegacyRefusals(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	base := []string{"--state_dir", state, "--insecure_no_auth", "--listener_ip", "127.0.0.1"}
	for _, c := range []struct {
		args    []string
		mention string
	}{
		{[]string{"--control_grpc"}, "--control_grpc (the SciStream 1.2 control protocol) needs --peer_ca FILE"},
		{[]string{"--type=Haproxy"}, "needs --peer_ca FILE"},
		{[]string{"--peer_ca", "ca.pem"}, "--peer_ca is for the streams of SciStream 1.2 clients: give --control_grpc"},
		{[]string{"--control_grpc", "--peer_ca", "ca.pem", "--node", "n1"}, "--control_grpc: the 1.2 protocol is not served by a node of a facility"},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			refused(t, state, append(append([]string{}, base...), c.args...), c.mention)
		})
	}
	refused(t, state, append([]string{"start"}, base...), "needs --peer_ca FILE")
}
