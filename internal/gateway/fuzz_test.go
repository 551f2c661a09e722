package gateway

import (
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"scistream/internal/api"
	"scistream/internal/httpapi"
	"scistream/internal/intake"
	"scistream/internal/store"
	"scistream/internal/stream"
	"scistream/internal/wan"
)

// FuzzRequest feeds untrusted bytes to the control API's request
// decoding and validation, as a caller's body reaches them: each body is
// decoded as an inbound, an outbound and an attach request and, when it
// decodes, turned into a record. Nothing may panic; every refusal must be
// an *api.Error of a client code; every record built must be one the
// gateway can run.
func FuzzRequest(f *testing.F) {
	for _, seed := range []string{
		`{"remote_ip":"127.0.0.1","receiver_ports":[8080],"num_conn":1}`,
		`{"uid":"0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b6c","remote_ip":"host.example","receiver_ports":[1,65535],"num_conn":2,"wan":"quic","engine":"buffer"}`,
		`{"uid":"0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b6c","peer_listeners":["127.0.0.1:5100"],"num_conn":1,"secret":"` + strings.Repeat("A", 43) + `=","wan":"tcp","allow":["10.0.0.0/8","::1"]}`,
		`{"peer_cert":"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"}`,
		`{"remote_ip":"127.0.0.1","receiver_ports":[80],"num_conn":1,"app_wait_s":0}`,
		`{"remote_ip":"127.0.0.1","receiver_ports":[80],"num_conn":1,"app_wait_s":-9223372036854775808}`,
		`{"remote_ip":"127.0.0.1","receiver_ports":[80],"num_conn":1,"resume_window_s":0}`,
		`{"remote_ip":"127.0.0.1","receiver_ports":[80],"num_conn":1,"resume_window_s":600}`,
		`{"remote_ip":"127.0.0.1","receiver_ports":[80],"num_conn":1,"resume_window_s":601}`,
		`{"remote_ip":"127.0.0.1","receiver_ports":[80],"num_conn":1,"resume_window_s":-1}`,
		`{"uid":"0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b6c","peer_listeners":["127.0.0.1:5100"],"num_conn":1,"secret":"` + strings.Repeat("A", 43) + `=","wan":"tcp","resume_window_s":9223372036854775807}`,
		`{"remote_ip":"127.0.0.1","receiver_ports":[80],"num_conn":1} {}`,
		`{"num_conn":1e400}`, `{"receiver_ports":"80"}`, `null`, `[]`, ``, "\x00", `{"uid":"\u0000"}`,
	} {
		f.Add([]byte(seed))
	}
	s := newTestServer(f, func(c *Config) {
		c.AllowTCPWAN = true
		c.Logger = slog.New(slog.DiscardHandler) // no F.Logf while fuzzing
	})
	f.Fuzz(func(t *testing.T, body []byte) {
		var in api.InboundRequest
		if err := httpapi.DecodeBody(body, &in); checkRefusal(t, "decode inbound", err) {
			rec, err := s.intake.Inbound(t.Context(), &in, "alice")
			if checkRefusal(t, "inbound", err) {
				checkRecord(t, s, rec)
			}
		}
		var out api.OutboundRequest
		if err := httpapi.DecodeBody(body, &out); checkRefusal(t, "decode outbound", err) {
			rec, err := s.intake.Outbound(t.Context(), &out, "alice")
			if checkRefusal(t, "outbound", err) {
				checkRecord(t, s, rec)
			}
		}
		var at api.AttachRequest
		if err := httpapi.DecodeBody(body, &at); checkRefusal(t, "decode attach", err) {
			for _, w := range []string{api.WANTLS, api.WANQUIC, api.WANTCP} {
				pin, err := intake.AttachPin(&at, &store.Record{UID: "u", Role: api.RoleInbound, WAN: w})
				if checkRefusal(t, "attach", err) && api.WANPinned(w) != (pin != "") {
					t.Fatalf("attach on a %s stream gave pin %q", w, pin)
				}
			}
		}
	})
}

// checkRefusal reports whether err is nil; otherwise it fails t unless
// err is an *api.Error with a client's code and a message.
func checkRefusal(t *testing.T, what string, err error) bool {
	t.Helper()
	if err == nil {
		return true
	}
	var ae *api.Error
	if !errors.As(err, &ae) {
		t.Fatalf("%s: refusal %v is not an *api.Error", what, err)
	}
	if ae.Code != api.CodeInvalidArgument && ae.Code != api.CodePermissionDenied || ae.Message == "" {
		t.Fatalf("%s: refusal %s %q, want invalid_argument or permission_denied with a message", what, ae.Code, ae.Message)
	}
	return false
}

// checkRecord fails t unless rec is a record the gateway can run.
func checkRecord(t *testing.T, s *Server, rec *store.Record) {
	t.Helper()
	if !api.ValidUID(rec.UID) || rec.Owner != "alice" || len(rec.Secret) != wan.SecretLen {
		t.Fatalf("record with uid %q, owner %q, %d-byte secret", rec.UID, rec.Owner, len(rec.Secret))
	}
	if rec.NumConn < 1 || rec.NumConn > s.cfg.PortRange.Size() || len(rec.Targets) == 0 {
		t.Fatalf("record with num_conn %d and %d targets", rec.NumConn, len(rec.Targets))
	}
	for _, tg := range rec.Targets {
		if _, _, err := net.SplitHostPort(tg); err != nil {
			t.Fatalf("target %q: %v", tg, err)
		}
	}
	if _, err := s.engines.Get(rec.Engine); err != nil {
		t.Fatalf("record with engine %q: %v", rec.Engine, err)
	}
	if (rec.Role == api.RoleInbound) != (rec.AppWaitS != nil) ||
		rec.AppWaitS != nil && (*rec.AppWaitS < 0 || time.Duration(*rec.AppWaitS)*time.Second > s.cfg.AppWaitMax) {
		t.Fatalf("%s record with app_wait_s %v (maximum %s)", rec.Role, rec.AppWaitS, s.cfg.AppWaitMax)
	}
	if w := rec.ResumeWindowS; w != nil && (*w < 0 || time.Duration(*w)*time.Second > s.cfg.Resume.WindowMax) {
		t.Fatalf("%s record with resume_window_s %d (maximum %s)", rec.Role, *w, s.cfg.Resume.WindowMax)
	}
	wantPin := rec.Role == api.RoleOutbound && api.WANPinned(rec.WAN)
	if wantPin != (rec.PeerCertSHA256 != "") {
		t.Fatalf("%s record on wan %q with pin %q", rec.Role, rec.WAN, rec.PeerCertSHA256)
	}
	for _, a := range rec.Allow {
		if _, err := stream.ParsePrefix(a); err != nil {
			t.Fatalf("allow %q: %v", a, err)
		}
	}
}
