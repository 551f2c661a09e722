package config

import (
	"errors"
	"strings"
	"testing"
	"time"

	"scistream/internal/intake"
	"scistream/internal/observe"
	"scistream/internal/ports"
)

// TestFiles: the gateway's config names its own fields in the plan's
// refusals (internal/fileplan checks the arithmetic), so that s2cs can
// name the flag.
func TestFiles(t *testing.T) {
	base := Config{ListenerIP: "127.0.0.1", PortRange: ports.Range{Lo: 5100, Hi: 5199}} // 200 + 1024 + 256 + 256 fixed
	for _, c := range []struct {
		limit, conns int
		err          string
	}{
		{20000, 9261, "MaxActiveConns 9261 needs 20258 open files"},
		{1000, 0, "MaxActiveConns cannot be had"},
	} {
		cfg := base
		cfg.FileLimit, cfg.MaxActiveConns = c.limit, c.conns
		_, err := cfg.Files()
		var ce *Error
		if !errors.As(err, &ce) || ce.Field != "MaxActiveConns" || !strings.HasPrefix(err.Error(), c.err) {
			t.Errorf("limit %d, cap %d: got %v, want an Error on MaxActiveConns starting %q", c.limit, c.conns, err, c.err)
		}
		if err := cfg.Validate(); err == nil || err.Error() != ce.Error() {
			t.Errorf("limit %d, cap %d: Validate says %v, want %v", c.limit, c.conns, err, ce)
		}
	}
	cfg := base
	cfg.FileLimit = 20000
	if f, err := cfg.Files(); err != nil || f.MaxActiveConns != 4566 || !f.Derived {
		t.Errorf("limit 20000: plan %+v, %v; want a derived cap of 4566", f, err)
	}
}

// TestConfigAppWait: the gateway's default and maximum wait: zero is the
// default, negative is no wait, anything else whole seconds up to a day,
// and the default no longer than the maximum.
func TestConfigAppWait(t *testing.T) {
	base := Config{ListenerIP: "127.0.0.1", PortRange: ports.Range{Lo: 5100, Hi: 5103}}
	for _, c := range []struct {
		def, most        time.Duration
		wantDef, wantMax time.Duration
		field, problem   string
	}{
		{0, 0, intake.DefaultAppWait, intake.DefaultAppWaitMax, "", ""},
		{-1, 0, 0, intake.DefaultAppWaitMax, "", ""},
		{-1, -1, 0, 0, "", ""},
		{5 * time.Second, 5 * time.Second, 5 * time.Second, 5 * time.Second, "", ""},
		{0, 24 * time.Hour, intake.DefaultAppWait, 24 * time.Hour, "", ""},
		{1500 * time.Millisecond, 0, 0, 0, "AppWaitDefault", "not a whole number of seconds"},
		{0, 90 * time.Millisecond, 0, 0, "AppWaitMax", "not a whole number of seconds"},
		{0, 25 * time.Hour, 0, 0, "AppWaitMax", "longer than a day"},
		{0, -1, 0, 0, "AppWaitDefault", "exceeds the longest wait a stream may have (0s)"},
		{time.Hour, 0, 0, 0, "AppWaitDefault", "exceeds the longest wait a stream may have (10m0s)"},
	} {
		cfg := base
		cfg.AppWaitDefault, cfg.AppWaitMax = c.def, c.most
		err := cfg.Validate()
		var ce *Error
		if c.field == "" {
			if err != nil {
				t.Errorf("default %s, max %s: %v", c.def, c.most, err)
				continue
			}
			d := cfg.WithDefaults()
			if d.AppWaitDefault != c.wantDef || d.AppWaitMax != c.wantMax {
				t.Errorf("default %s, max %s: resolved to %s, %s; want %s, %s", c.def, c.most, d.AppWaitDefault, d.AppWaitMax, c.wantDef, c.wantMax)
			}
		} else if !errors.As(err, &ce) || ce.Field != c.field || !strings.Contains(ce.Problem, c.problem) {
			t.Errorf("default %s, max %s: %v; want %s refused with %q", c.def, c.most, err, c.field, c.problem)
		}
	}
}

// TestObserveConfig: every refused rate setting names the field and the
// fix.
func TestObserveConfig(t *testing.T) {
	base := Config{ListenerIP: "127.0.0.1", PortRange: ports.Range{Lo: 5100, Hi: 5110}}
	for _, c := range []struct {
		o       observe.Config
		field   string
		mention string
	}{
		{observe.Config{RateInterval: -time.Second}, "Observe.RateInterval", "too short"},
		{observe.Config{RateInterval: time.Millisecond}, "Observe.RateInterval", "10ms to 1m0s"},
		{observe.Config{RateInterval: 2 * time.Minute}, "Observe.RateInterval", "too long"},
		{observe.Config{RateWindow: -time.Second}, "Observe.RateWindow", "shorter than the sampling interval"},
		{observe.Config{RateInterval: 2 * time.Second, RateWindow: time.Second}, "Observe.RateWindow", "shorter than the sampling interval (2s)"},
		{observe.Config{RateInterval: 10 * time.Millisecond, RateWindow: time.Hour}, "Observe.RateWindow", "more than 3600"},
		{observe.Config{RateWindow: 2 * time.Hour}, "Observe.RateWindow", "7200 samples"},
	} {
		cfg := base
		cfg.Observe = c.o
		err := cfg.Validate()
		var ce *Error
		if !errors.As(err, &ce) || ce.Field != c.field || !strings.Contains(ce.Problem, c.mention) {
			t.Errorf("%+v: %v; want an Error on %s mentioning %q", c.o, err, c.field, c.mention)
		}
	}
	for _, o := range []observe.Config{{}, {RateInterval: 10 * time.Millisecond, RateWindow: 36 * time.Second}, {RateInterval: time.Minute, RateWindow: time.Hour}} {
		cfg := base
		cfg.Observe = o
		if err := cfg.Validate(); err != nil {
			t.Errorf("%+v refused: %v", o, err)
		}
	}
}
