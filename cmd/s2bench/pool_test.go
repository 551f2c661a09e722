package main

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"scistream/internal/exp/pool"
)

// TestPoolFlags: every flag is checked, and the refusal names it.
func TestPoolFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--experiments", "warm,cold"}, "--experiments"},
		{[]string{"--experiments", "warm,warm"}, "given twice"},
		{[]string{"--conns", "0"}, "--conns"},
		{[]string{"--wan_pool", "0"}, "--wan_pool"},
		{[]string{"--flows", "1"}, "--flows"},
		{[]string{"--pool_max_per_peer", "12"}, "below --flows"},
		{[]string{"--accesses", "0"}, "--accesses"},
		{[]string{"--hot", "12"}, "--hot"},
		{[]string{"--churn", "0"}, "--churn"},
		{[]string{"--steal", "1.5"}, "--steal"},
		{[]string{"--timeout", "1s"}, "--timeout"},
		{[]string{"--keep"}, "give --preset"},
		{[]string{"--preset", "moon"}, "--preset"},
		{[]string{"--preset", "lan", "--name", "Bad!"}, "--name"},
		{[]string{"extra"}, "unexpected argument"},
	} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), append([]string{"pool", "--s2cs", s2csBin}, c.args...), &stdout, &stderr)
		if code := exitCode(err); code != 2 || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: exit %d, error %v; want exit 2 naming %s", c.args, code, err, c.want)
		}
	}
}

// TestPool runs the experiment small on loopback: with a warm pool the
// connections reuse legs, under a cap below the streams that want legs
// the patterns tear legs down under both policies, every number is
// printed, and no gateway or directory is left behind.
func TestPool(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"pool", "--conns", "20", "--accesses", "60", "--flows", "6",
		"--pool_max_per_peer", "3", "--hot", "3", "--churn", "15", "--s2cs", s2csBin}, &stdout, &stderr)
	out := stdout.String()
	t.Logf("stdout:\n%s\nstderr:\n%s", out, stderr.String())
	if err != nil {
		t.Fatal(err)
	}
	num := `[0-9]+(\.[0-9]+)?`
	for _, label := range []string{`cold \(wan_pool 0\)`, `warm \(wan_pool 1\)`} {
		if !regexp.MustCompile(`(?m)^` + label + ` +20( +` + num + `){5}$`).MatchString(out) {
			t.Errorf("no first-byte row for %s", label)
		}
	}
	m := regexp.MustCompile(`warm stream: (\d+) of 20 connections took an idle leg; legs created (\d+), reused (\d+), torn down 0`).FindStringSubmatch(out)
	if m == nil {
		t.Fatal("no warm stream summary")
	}
	if took, _ := strconv.Atoi(m[1]); took < 18 {
		t.Errorf("with a warm pool only %d of 20 connections took an idle leg", took)
	}
	const flows = 6 // --flows
	rows := regexp.MustCompile(`(?m)^(hotset|stealing) +(lru|lrum) +60 +(\d+) +(\d+) +(\d+) +(`+num+`) +`+num+` ms( +`+num+`){4} +(\d+)$`).FindAllStringSubmatch(out, -1)
	if len(rows) != 4 {
		t.Fatalf("%d pattern rows, want 4 (2 patterns x 2 policies)", len(rows))
	}
	for _, r := range rows {
		torn, _ := strconv.Atoi(r[3])
		created, _ := strconv.Atoi(r[4])
		reused, _ := strconv.Atoi(r[5])
		switch {
		case r[1] == pool.HotSet && torn == 0:
			t.Errorf("%s %s: no leg torn down with 6 streams and a cap of 3", r[1], r[2])
		case created < 3 || created > 3+torn+2*flows:
			// One per teardown; and a warm leg dialed before its
			// stream's attach is refused by the peer, found stale and
			// replaced, by the warmer or by the connection that took
			// it: on a loaded machine, where the attach comes late,
			// up to twice per flow (a runaway pool creates one per
			// connection, 60).
			t.Errorf("%s %s: %d legs created, want the 3 warm ones plus one per teardown (%d) and at most %d more", r[1], r[2], created, torn, 2*flows)
		case reused+created-3 < 60-1 || reused > 60:
			t.Errorf("%s %s: %d reused and %d created do not account for 60 connections", r[1], r[2], reused, created)
		case r[len(r)-1] != "0":
			t.Errorf("%s %s: %s errors", r[1], r[2], r[len(r)-1])
		}
	}
	checkGone(t, allGatewayPIDs(t, out), tmp)
}

// allGatewayPIDs reads every gateway pair's PIDs from the output.
func allGatewayPIDs(t *testing.T, out string) []int {
	t.Helper()
	var pids []int
	for _, m := range pidRE.FindAllStringSubmatch(out, -1) {
		for _, s := range m[1:] {
			p, _ := strconv.Atoi(s)
			pids = append(pids, p)
		}
	}
	if len(pids) != 10 {
		t.Errorf("%d gateway PIDs in the output, want 10 (5 pairs)", len(pids))
	}
	return pids
}
