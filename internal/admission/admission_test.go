package admission

import (
	"errors"
	"strings"
	"testing"

	"scistream/internal/api"
	"scistream/internal/pace"
)

// TestValidate: each field out of range is named; zero values pass.
func TestValidate(t *testing.T) {
	for _, c := range []struct {
		err   error
		field string
	}{
		{Quota{}.Validate(), ""},
		{Capacity{}.Validate(), ""},
		{Quota{Streams: -1}.Validate(), "Streams"},
		{Quota{Ports: -1}.Validate(), "Ports"},
		{Quota{Rate: pace.Max + 1}.Validate(), "Rate"},
		{Quota{Pending: -1}.Validate(), "Pending"},
		{Capacity{Rate: -1}.Validate(), "Rate"},
		{Capacity{Streams: -1}.Validate(), "Streams"},
		{Capacity{Conns: -1}.Validate(), "Conns"},
	} {
		var fe *FieldError
		switch {
		case c.field == "" && c.err != nil:
			t.Errorf("zero value refused: %v", c.err)
		case c.field != "" && (!errors.As(c.err, &fe) || fe.Field != c.field):
			t.Errorf("got %v, want a FieldError on %s", c.err, c.field)
		}
	}
	if q := (Quota{}).WithDefaults(); q.Streams != 64 || q.Ports != 256 || q.Pending != 16 || q.Rate != 0 {
		t.Errorf("defaults %+v", q)
	}
}

// TestUsageAdd: every holding counts in the gateway's total, the
// owner's only in the owner's share.
func TestUsageAdd(t *testing.T) {
	var u Usage
	u.Add(Holding{Owner: "alice", Rate: 100, NumConn: 2, Ports: 2, Waiting: true}, "alice")
	u.Add(Holding{Owner: "bob", Rate: 50, NumConn: 3, Ports: 3}, "alice")
	u.Add(Holding{Owner: "alice", NumConn: 1, Ports: 1}, "alice")
	want := Usage{Streams: 3, Conns: 6, Rate: 150, OwnerStreams: 2, OwnerPorts: 3, OwnerWaiting: 1, OwnerRate: 100}
	if u != want {
		t.Fatalf("usage %+v, want %+v", u, want)
	}
}

// TestWaitingTogether: an owner's streams waiting for their peer and its
// 1.2 sessions count together against Quota.Pending, whichever is asked
// for; another owner's do not; a stream that waits for nothing is not
// refused for them.
func TestWaitingTogether(t *testing.T) {
	p := Policy{Quota: Quota{Pending: 2}}
	var u Usage
	u.Add(Holding{Owner: "alice", NumConn: 1, Ports: 1, Waiting: true}, "alice")
	u.AddSession("bob", "alice")
	if err := p.AdmitWaiting(u, "alice"); err != nil {
		t.Fatalf("alice's second waiting thing: %v; want it admitted", err)
	}
	u.AddSession("alice", "alice")
	if u.OwnerWaiting != 2 || u.Streams != 1 {
		t.Fatalf("usage %+v: want 2 of alice's waiting, 1 stream", u)
	}
	refused := func(what string, err error) {
		t.Helper()
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Code != api.CodeNoResources || !strings.Contains(ae.Message, "--quota_pending") {
			t.Errorf("%s: %v; want no_resources naming --quota_pending", what, err)
		}
	}
	refused("a third session", p.AdmitWaiting(u, "alice"))
	_, err := p.Admit(u, Ask{Owner: "alice", NumConn: 1, Ports: 1, Waiting: true})
	refused("a third waiting stream", err)
	if _, err := p.Admit(u, Ask{Owner: "alice", NumConn: 1, Ports: 1}); err != nil {
		t.Errorf("a stream that waits for nothing: %v; want it admitted", err)
	}
}
