package main

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestRateFlags: every flag is checked, and the refusal names it.
func TestRateFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--experiments", "speed"}, "--experiments"},
		{[]string{"--experiments", ","}, "--experiments"},
		{[]string{"--rates", "10MB/s,fast"}, "--rates"},
		{[]string{"--rates", "0"}, "no rate"},
		{[]string{"--capacity", "lots"}, "--capacity"},
		{[]string{"--reserved", "400MB/s"}, "below --capacity"},
		{[]string{"--besteffort", "0"}, "--besteffort"},
		{[]string{"--duration", "10ms"}, "--duration"},
		{[]string{"--size", "0"}, "--size"},
		{[]string{"--wan", "carrier-pigeon"}, "--wan"},
		{[]string{"extra"}, "unexpected argument"},
	} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), append([]string{"rate", "--s2cs", s2csBin}, c.args...), &stdout, &stderr)
		if code := exitCode(err); code != 2 || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: exit %d, error %v; want exit 2 naming %s", c.args, code, err, c.want)
		}
	}
}

// TestRate runs both experiments small on loopback: every row is
// printed, and the rates are kept to (a paced stream cannot beat its
// grant by more than the bucket's burst allows; the loose upper bounds
// here hold on any machine, the figures of docs/performance.md come
// from longer runs).
func TestRate(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"rate", "--duration", "1s", "--rates", "80M", "--capacity", "40MB/s", "--reserved", "20MB/s",
		"--besteffort", "2", "--s2cs", s2csBin}, &stdout, &stderr)
	out := stdout.String()
	t.Logf("stdout:\n%s\nstderr:\n%s", out, stderr.String())
	if err != nil {
		t.Fatal(err)
	}
	num := `([0-9]+\.[0-9]+)`
	if !regexp.MustCompile(`(?m)^ +none +- +` + num + ` +- *$`).MatchString(out) {
		t.Error("no unpaced row")
	}
	ratio := func(re string) float64 {
		t.Helper()
		m := regexp.MustCompile(re).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("no row matching %s", re)
		}
		r, _ := strconv.ParseFloat(m[len(m)-1], 64)
		return r
	}
	for _, re := range []string{
		`(?m)^ +80 Mbit/s +10\.0 +` + num + ` +` + num + ` *$`,
		`(?m)^ +reserved +20\.0 +` + num + ` +` + num + ` *$`,
		`(?m)^ +best effort together +20\.0 +` + num + ` +` + num + ` *$`,
	} {
		if r := ratio(re); r > 1.2 || r <= 0 {
			t.Errorf("%s: delivered/granted %.3f", re, r)
		}
	}
}
