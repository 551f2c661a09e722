package fileplan

import (
	"errors"
	"strings"
	"testing"
)

// TestMake checks the plan of open files: the derived cap, the pipes
// what a cap leaves, and the refusals that name the files needed.
func TestMake(t *testing.T) {
	base := Input{Ports: 100, Strangers: 1024} // 200 + 1024 + 256 fixed
	for _, c := range []struct {
		limit, conns       int
		wantConns, wantPip int
		derived, low       bool
		err                string
	}{
		{20000, 0, 4630, 4630, true, false, ""},
		{20000, 9000, 9000, 260, false, false, ""},
		{20000, 9260, 9260, 0, false, false, ""},
		{20000, 9261, 0, 0, false, false, "9261 needs 20002 open files"},
		{1000, 0, 0, 0, true, false, "does not even cover"},
		{1500, 0, 5, 5, true, true, ""},
	} {
		in := base
		in.Limit, in.MaxActiveConns = c.limit, c.conns
		p, err := Make(in)
		if c.err != "" {
			var fe *Error
			if !errors.As(err, &fe) || fe.Field != "MaxActiveConns" {
				t.Errorf("limit %d, cap %d: got %v, want an Error on MaxActiveConns", c.limit, c.conns, err)
			}
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("limit %d, cap %d: %v; want an error with %q", c.limit, c.conns, err, c.err)
			}
			if c.conns > 0 && (err == nil || !strings.Contains(err.Error(), "give at most 9260")) {
				t.Errorf("limit %d, cap %d: %v; want the most that fits", c.limit, c.conns, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("limit %d, cap %d: %v", c.limit, c.conns, err)
			continue
		}
		if p.MaxActiveConns != c.wantConns || p.MaxPipes != c.wantPip || p.Derived != c.derived || p.Need() > c.limit || p.Low() != c.low {
			t.Errorf("limit %d, cap %d: plan %+v (needs %d, low %v); want cap %d, pipes %d, derived %v, low %v, within the limit", c.limit, c.conns, p, p.Need(), p.Low(), c.wantConns, c.wantPip, c.derived, c.low)
		}
	}
	if got := (Plan{Fixed: 1480}).LimitFor(); got != 1480+4*1024 {
		t.Errorf("LimitFor = %d, want %d", got, 1480+4*1024)
	}
}

// TestMakeProcessLimit: with no limit given, the plan is made against
// the process's own.
func TestMakeProcessLimit(t *testing.T) {
	p, err := Make(Input{Ports: 10, MaxActiveConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	if p.Limit <= 0 || p.Need() > p.Limit {
		t.Fatalf("plan %+v against the process's limit", p)
	}
}
