package compare

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"scistream/internal/bench"
	"scistream/internal/exp/progress"
	"scistream/internal/exp/record"
	"scistream/internal/exp/workload"
	"scistream/internal/leakcheck"
)

// loopbackRun is a RunOne that runs h for real over one loopback
// listener whatever its path names (the label is the Experiment's
// concern, not the data's), every message verified.
func loopbackRun(t *testing.T) func(ctx context.Context, h bench.Hello, prog *progress.Display, label string) (record.Record, error) {
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return func(ctx context.Context, h bench.Hello, prog *progress.Display, label string) (record.Record, error) {
		rec := record.Record{Path: h.Path, SizeBytes: h.Spec.Size, Pairs: h.Pairs, Mode: h.Mode.String()}
		res, err := bench.Run(ctx, ln, ln.Addr().String(), h, bench.RunOptions{})
		rec.Fill(res)
		if err == nil {
			rec.IntegrityOK = true
		}
		return rec, err
	}
}

// TestExperimentInterleaves: for each pair count, repetition and size,
// every path in turn; each record carries its repetition, workload and
// labels; the table and the JSON file hold every run.
func TestExperimentInterleaves(t *testing.T) {
	leakcheck.Check(t)
	jsonPath := filepath.Join(t.TempDir(), "out.json")
	e := &Experiment{
		Plan:  &workload.Plan{Name: workload.Fixed, Sizes: []int{1 << 10, 4 << 10}, Mode: bench.Throughput, Messages: 20},
		Pairs: []int{1, 2}, Reps: 2, Paths: []string{record.PathDirect, record.PathGateways},
		Engine: "buffer", WAN: "tcp", JSONPath: jsonPath,
		RunOne: loopbackRun(t),
	}
	var stdout, stderr bytes.Buffer
	recs, err := e.Run(context.Background(), &stdout, &stderr)
	if err != nil {
		t.Fatalf("%v\n%s", err, stdout.String())
	}
	if len(recs) != 2*2*2*2 {
		t.Fatalf("%d records, want 16 (2 pair counts x 2 reps x 2 sizes x 2 paths)", len(recs))
	}
	i := 0
	for _, pairs := range []int{1, 2} {
		for rep := 1; rep <= 2; rep++ {
			for _, size := range []int{1 << 10, 4 << 10} {
				for _, path := range []string{record.PathDirect, record.PathGateways} {
					r := recs[i]
					if r.Pairs != pairs || r.Rep != rep || r.SizeBytes != size || r.Path != path || !r.IntegrityOK ||
						r.Workload != workload.Fixed || r.Engine != "buffer" || r.WAN != "tcp" || r.Messages != 20 {
						t.Errorf("record %d: %+v; want pairs %d, rep %d, size %d, path %s, verified", i, r, pairs, rep, size, path)
					}
					i++
				}
			}
		}
	}
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var onDisk []record.Record
	if err := json.Unmarshal(b, &onDisk); err != nil || len(onDisk) != len(recs) {
		t.Errorf("JSON file: %d records, %v; want %d", len(onDisk), err, len(recs))
	}
	out := stdout.String()
	for _, want := range []string{"run 16/16 gateways", "gw/direct", "wrote 16 records to " + jsonPath} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestExperimentFails: the first failed run ends the experiment with an
// error naming it; the records so far, the failed one included, are
// returned and in the JSON file, and OnFail hears the path.
func TestExperimentFails(t *testing.T) {
	leakcheck.Check(t)
	jsonPath := filepath.Join(t.TempDir(), "out.json")
	run := loopbackRun(t)
	calls := 0
	var failed []string
	boom := errors.New("boom")
	e := &Experiment{
		Plan:  &workload.Plan{Name: workload.Fixed, Sizes: []int{1 << 10}, Mode: bench.Throughput, Messages: 10},
		Reps:  3,
		Paths: []string{record.PathDirect, record.PathGateways}, JSONPath: jsonPath,
		RunOne: func(ctx context.Context, h bench.Hello, prog *progress.Display, label string) (record.Record, error) {
			if calls++; calls == 4 {
				return record.Record{Path: h.Path, Error: boom.Error()}, boom
			}
			return run(ctx, h, prog, label)
		},
		OnFail: func(path string) { failed = append(failed, path) },
	}
	var stdout, stderr bytes.Buffer
	recs, err := e.Run(context.Background(), &stdout, &stderr)
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "gateways run (1KiB, 1 pairs, rep 2) FAILED") {
		t.Fatalf("error %v, want the run that failed named", err)
	}
	if len(recs) != 4 || recs[3].IntegrityOK || recs[3].Rep != 2 {
		t.Errorf("records %+v, want 4, the last the failed one", recs)
	}
	if len(failed) != 1 || failed[0] != record.PathGateways {
		t.Errorf("OnFail heard %v, want [gateways]", failed)
	}
	b, _ := os.ReadFile(jsonPath)
	var onDisk []record.Record
	if err := json.Unmarshal(b, &onDisk); err != nil || len(onDisk) != 4 || onDisk[3].Error != "boom" {
		t.Errorf("JSON after the failure (%v):\n%s", err, b)
	}
	if strings.Contains(stdout.String(), "gw/direct") {
		t.Error("a table after a failed run")
	}
}
