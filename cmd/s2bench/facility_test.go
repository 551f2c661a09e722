package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"scistream/internal/exp/facility"
)

// TestFacilityFlags: every flag is checked, and the refusal names it.
func TestFacilityFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--experiments", "speed"}, "--experiments"},
		{[]string{"--experiments", ","}, "--experiments"},
		{[]string{"--nodes", "0"}, "--nodes"},
		{[]string{"--nodes", "1,99"}, "--nodes"},
		{[]string{"--nodes", "two"}, "--nodes"},
		{[]string{"--num_conn", "0"}, "--num_conn"},
		{[]string{"--num_conn", "1000"}, "--num_conn"},
		{[]string{"--conns", "2"}, "--conns"}, // fewer than the 3 channels
		{[]string{"--conns", "100000"}, "--conns"},
		{[]string{"--size", "0"}, "--size"},
		{[]string{"--size", "1GiB"}, "--size"},
		{[]string{"--bytes", "lots"}, "--bytes"},
		{[]string{"--bytes", "64KiB"}, "--bytes"},
		{[]string{"--bytes", "2TiB"}, "--bytes"},
		{[]string{"--reps", "0"}, "--reps"},
		{[]string{"--takeover", "1s"}, "--takeover"},
		{[]string{"--takeover", "soon"}, "--takeover"},
		{[]string{"--takeover", ","}, "--takeover"},
		{[]string{"--requests", "0"}, "--requests"},
		{[]string{"--requests", "1000000"}, "--requests"},
		{[]string{"--wan", "carrier-pigeon"}, "--wan"},
		{[]string{"--wan", "quic"}, "--wan"}, // a facility refuses it
		{[]string{"--engine", "magic"}, "--engine"},
		{[]string{"--run_timeout", "0s"}, "--run_timeout"},
		{[]string{"--json", t.TempDir()}, "--json"},
		{[]string{"--json", "/no/such/dir/out.json"}, "--json"},
		{[]string{"extra"}, "unexpected argument"},
	} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), append([]string{"facility", "--s2cs", s2csBin}, c.args...), &stdout, &stderr)
		if code := exitCode(err); code != 2 || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: exit %d, error %v; want exit 2 naming %s", c.args, code, err, c.want)
		}
	}
}

// pidsRE finds every process ID facility prints: etcd's, the nodes'
// (pids [...]), the control gateways' and the restarted nodes'.
var pidsRE = regexp.MustCompile(`pids? \[?(\d+(?: \d+)*)\]?`)

// facilityPIDs returns the process IDs in facility's output.
func facilityPIDs(t *testing.T, out string) []int {
	t.Helper()
	var pids []int
	for _, m := range pidsRE.FindAllStringSubmatch(out, -1) {
		for _, f := range strings.Fields(m[1]) {
			p, _ := strconv.Atoi(f)
			pids = append(pids, p)
		}
	}
	if len(pids) == 0 {
		t.Fatalf("no process IDs in the output:\n%s", out)
	}
	return pids
}

// TestFacility runs all three experiments small (one repetition, 1 and 2
// nodes, the shortest takeover bound): every table is printed, every
// record is in the JSON file, the channels were spread, data came back
// within the bound after the kill, and no process or directory is left.
func TestFacility(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	jsonPath := filepath.Join(t.TempDir(), "out.json")
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"facility", "--nodes", "1,2", "--bytes", "8MiB", "--reps", "1", "--takeover", "4s",
		"--requests", "5", "--json", jsonPath, "--s2cs", s2csBin}, &stdout, &stderr)
	out := stdout.String()
	t.Logf("stdout:\n%s\nstderr:\n%s", out, stderr.String())
	if err != nil {
		t.Fatal(err)
	}
	pids := facilityPIDs(t, out)
	if len(pids) != 1+(1+1+2+2)+(3+3+1)+(2+3) { // etcd, goodput, takeover (and the restart), control
		t.Errorf("%d process IDs in the output, want 19: %v", len(pids), pids)
	}
	checkGone(t, pids, tmp)
	for _, re := range []string{
		`(?m)^ +direct +- +- +1 +[0-9.]+ `,
		`(?m)^ +nodes1 +1 +1\+1 +1 +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ *$`,
		`(?m)^ +nodes2 +2 +2\+2 +1 +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ *$`,
		`(?m)^ +4s +1 +[0-9.]+ +[0-9.]+ +[0-9.]+ +[01]/1 +[0-9.]+ +[0-9]+ *$`,
		`(?m)^ +bbolt +1 +5 +[0-9.]+ `,
		`(?m)^ +etcd +1 +5 +[0-9.]+ `,
		`(?m)^ +facility +3 +5 +[0-9.]+ `,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("no row matching %s", re)
		}
	}
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var recs []facility.Record
	if err := json.Unmarshal(b, &recs); err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, r := range recs {
		count[r.Experiment]++
		switch r.Experiment {
		case "goodput":
			if r.Run == nil || !r.Run.IntegrityOK || r.Run.GoodputMBps <= 0 || r.Run.Pairs != 3 || (r.Nodes > 0) != (r.Run.GwCPUSPerGB != nil) {
				t.Errorf("goodput record %s", mustJSON(r))
			}
		case "takeover":
			// The bound, with e2e TestFacility's slack for a loaded machine.
			if r.TakeoverS == nil || *r.TakeoverS <= 0 || *r.TakeoverS > r.TakeoverBoundS+2 || r.Victim == "" || len(r.VictimChannels) == 0 {
				t.Errorf("takeover record %s", mustJSON(r))
			}
		case "control":
			if r.Requests != 5 || r.PairP50Ms <= 0 || r.PairP99Ms < r.PairP50Ms || r.InboundP50Ms <= 0 || r.ReleaseP50Ms <= 0 {
				t.Errorf("control record %s", mustJSON(r))
			}
		}
	}
	if count["goodput"] != 3 || count["takeover"] != 1 || count["control"] != 3 {
		t.Errorf("records by experiment %v, want 3 goodput, 1 takeover, 3 control", count)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// An interrupt (Ctrl-C) during the goodput runs and during a takeover
// stops every node and etcd and removes the temporary directory; the
// records so far are written.
func TestFacilityInterrupted(t *testing.T) {
	for _, c := range []struct{ trigger, exps string }{
		{"run 1/3 direct", "goodput"},
		{"takeover, --takeover 4s", "takeover"},
	} {
		t.Run(c.exps, func(t *testing.T) {
			tmp := t.TempDir()
			t.Setenv("TMPDIR", tmp)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			w := &cancelWriter{trigger: c.trigger, cancel: cancel}
			var stderr bytes.Buffer
			jsonPath := filepath.Join(t.TempDir(), "out.json")
			err := run(ctx, []string{"facility", "--experiments", c.exps, "--nodes", "1,2", "--bytes", "64MiB", "--reps", "1", "--takeover", "4s",
				"--json", jsonPath, "--s2cs", s2csBin}, w, &stderr)
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("got %v, want context.Canceled\nstdout:\n%s\nstderr:\n%s", err, w.buf.String(), stderr.String())
			}
			checkGone(t, facilityPIDs(t, w.buf.String()), tmp)
			b, err := os.ReadFile(jsonPath)
			var recs []facility.Record
			if err != nil || json.Unmarshal(b, &recs) != nil || len(recs) == 0 || recs[len(recs)-1].Experiment != c.exps {
				t.Errorf("JSON after the interrupt (%v):\n%s", err, b)
			}
		})
	}
}
