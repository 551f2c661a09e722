// Package metricstest is a test helper for the gateway's Prometheus
// metrics: it parses an exposition (Parse), looks a series up by its
// labels (Metrics.Value, Metrics.Series), and runs Prometheus's own
// checker over it (Promtool, `promtool check metrics`, from the Debian
// package prometheus that scripts/setup.sh installs).
package metricstest

import (
	"bytes"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metrics is a parsed exposition, by family name.
type Metrics map[string]*dto.MetricFamily

// Parse parses a text exposition, failing t if it is malformed.
func Parse(t testing.TB, body []byte) Metrics {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("metrics exposition does not parse: %v\n%s", err, body)
	}
	return fams
}

// Labels are label names and values a series must have (others may be
// present too).
type Labels map[string]string

func matches(m *dto.Metric, want Labels) bool {
	got := map[string]string{}
	for _, lp := range m.GetLabel() {
		got[lp.GetName()] = lp.GetValue()
	}
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	}
	return 0
}

// Value returns the value of the one series of family name whose labels
// include want, failing t if there is none or more than one.
func (ms Metrics) Value(t testing.TB, name string, want Labels) float64 {
	t.Helper()
	var found []*dto.Metric
	if f := ms[name]; f != nil {
		for _, m := range f.GetMetric() {
			if matches(m, want) {
				found = append(found, m)
			}
		}
	}
	if len(found) != 1 {
		t.Fatalf("metric %s%v: %d series, want 1 (families: %s)", name, want, len(found), strings.Join(ms.names(), " "))
	}
	return value(found[0])
}

// Series counts the series of every family whose labels include want.
func (ms Metrics) Series(want Labels) int {
	n := 0
	for _, f := range ms {
		for _, m := range f.GetMetric() {
			if matches(m, want) {
				n++
			}
		}
	}
	return n
}

func (ms Metrics) names() []string {
	var out []string
	for n := range ms {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Promtool runs `promtool check metrics` over body and fails t on any
// problem it reports (a malformed exposition, or a lint finding: names,
// units, help). Without promtool the test is skipped, except under CI
// (CI set), where scripts/setup.sh has installed it and its absence is a
// failure.
func Promtool(t testing.TB, body []byte) {
	t.Helper()
	bin, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("promtool not installed: scripts/setup.sh installs the Debian package prometheus")
		}
		t.Skip("promtool not installed: run scripts/setup.sh (installs the Debian package prometheus)")
	}
	cmd := exec.Command(bin, "check", "metrics")
	cmd.Stdin = bytes.NewReader(body)
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
}
