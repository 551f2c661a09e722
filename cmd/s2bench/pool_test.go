package main

import (
	"bytes"
	"context"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestPoolPatterns: a pattern's sequence is the same for the same seed
// (every policy replays the same one) and has the shape it claims.
func TestPoolPatterns(t *testing.T) {
	p := patternParams{flows: 12, accesses: 2000, hot: 4, churn: 50, steal: 0.3, seed: 7}
	for _, name := range []string{patternHotSet, patternStealing} {
		a, b := p.sequence(name), p.sequence(name)
		if !slices.Equal(a, b) {
			t.Errorf("%s: two sequences of seed %d differ", name, p.seed)
		}
		q := p
		q.seed++
		if slices.Equal(a, q.sequence(name)) {
			t.Errorf("%s: seeds %d and %d give the same sequence", name, p.seed, q.seed)
		}
		if len(a) != p.accesses {
			t.Errorf("%s: %d accesses, want %d", name, len(a), p.accesses)
		}
		for i, f := range a {
			if f < 0 || f >= p.flows {
				t.Fatalf("%s: access %d goes to stream %d of %d", name, i, f, p.flows)
			}
		}
	}
	// hotset: within each window between two changes, its hot streams
	// take most connections; and the hot set does change.
	seq := p.sequence(patternHotSet)
	var tops [][]int
	for w := 0; w+p.churn <= len(seq); w += p.churn {
		count := make([]int, p.flows)
		for _, f := range seq[w : w+p.churn] {
			count[f]++
		}
		order := make([]int, p.flows)
		for i := range order {
			order[i] = i
		}
		slices.SortStableFunc(order, func(x, y int) int { return count[y] - count[x] })
		in := 0
		for _, f := range order[:p.hot] {
			in += count[f]
		}
		if in < p.churn*8/10 {
			t.Errorf("hotset: window at %d: the %d busiest streams take %d of %d connections, want at least 80%%", w, p.hot, in, p.churn)
		}
		top := slices.Clone(order[:p.hot])
		slices.Sort(top)
		tops = append(tops, top)
	}
	if slices.EqualFunc(tops[1:], tops[:len(tops)-1], slices.Equal[[]int]) {
		t.Errorf("hotset: the hot set never changed: %v", tops[0])
	}
	// stealing: 70% to the own streams plus the steals that land there.
	own := 0
	for _, f := range p.sequence(patternStealing) {
		if f < p.hot {
			own++
		}
	}
	if want := (1 - p.steal + p.steal*float64(p.hot)/float64(p.flows)) * float64(p.accesses); float64(own) < want*0.9 || float64(own) > want*1.1 {
		t.Errorf("stealing: %d of %d connections to the own streams, want about %.0f", own, p.accesses, want)
	}
}

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
	rows := regexp.MustCompile(`(?m)^(hotset|stealing) +(lru|lrum) +60 +(\d+) +(\d+) +(\d+) +(`+num+`) +`+num+` ms( +`+num+`){4} +(\d+)$`).FindAllStringSubmatch(out, -1)
	if len(rows) != 4 {
		t.Fatalf("%d pattern rows, want 4 (2 patterns x 2 policies)", len(rows))
	}
	for _, r := range rows {
		torn, _ := strconv.Atoi(r[3])
		created, _ := strconv.Atoi(r[4])
		reused, _ := strconv.Atoi(r[5])
		switch {
		case r[1] == patternHotSet && torn == 0:
			t.Errorf("%s %s: no leg torn down with 6 streams and a cap of 3", r[1], r[2])
		case created < 3 || created > 3+torn+3:
			// One per teardown, and a warm leg dialed before its
			// stream's attach may have been refused (and replaced).
			t.Errorf("%s %s: %d legs created, want the 3 warm ones plus one per teardown (%d) and at most 3 more", r[1], r[2], created, torn)
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
