package workload

import (
	"flag"
	"io"
	"strings"
	"testing"
)

// The default amounts per run (what keeps a sweep short and a Dstream
// compare under a minute) and the split of a total over pairs.
func TestWorkloadAmounts(t *testing.T) {
	for _, c := range []struct {
		args  []string
		pairs int
		size  int
		want  int64 // payload bytes per pair
		sizes int
	}{
		{nil, 1, 64 << 10, 1 << 30, 1},
		{[]string{"--workload", "dstream"}, 1, 16 << 10, 1 << 30, 1},
		{[]string{"--workload", "lstream"}, 1, 1 << 20, 1 << 30, 1},
		{[]string{"--workload", "sweep"}, 1, 512, 16 << 20, 12},
		{[]string{"--workload", "sweep"}, 1, 4 << 10, 64 << 20, 12},
		{[]string{"--workload", "sweep"}, 1, 1 << 20, 128 << 20, 12},
		{[]string{"--workload", "sweep", "--mode", "rr"}, 1, 512, 2000 * 512, 12},
		{[]string{"--workload", "sweep", "--mode", "rr"}, 1, 1 << 20, 128 << 20, 12},
		{[]string{"--workload", "sweep", "--mode", "rr"}, 1, 4 << 20, 100 * 4 << 20, 12},
		{[]string{"--size", "16KiB", "--pairs", "4"}, 4, 16 << 10, 256 << 20, 1},
		{[]string{"--size", "1000", "--bytes", "10000", "--pairs", "3"}, 3, 1000, 3000, 1},
		{[]string{"--size", "1000", "--bytes", "2500"}, 1, 1000, 2500, 1},
		{[]string{"--size", "1KiB", "--messages", "10", "--pairs", "2"}, 2, 1 << 10, 5 << 10, 1},
		{[]string{"--size", "1KiB", "--duration", "1s"}, 1, 1 << 10, 0, 1},
		{[]string{"--workload", "1KiB,2KiB,4KiB"}, 1, 2 << 10, (1 << 30) / (2 << 10) * (2 << 10), 3},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var wf Flags
		wf.Register(fs)
		fs.String("pairs", "1", "")
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		p, err := wf.Resolve(c.pairs)
		if err != nil {
			t.Errorf("%v: %v", c.args, err)
			continue
		}
		if got, _ := p.PerPair(c.size, c.pairs); got != c.want || len(p.Sizes) != c.sizes {
			t.Errorf("%v: %d bytes per pair at size %d, %d sizes; want %d, %d", c.args, got, c.size, len(p.Sizes), c.want, c.sizes)
		}
	}
}

// --writes and --reads: batched by default, each on request, anything
// else refused with the choices named; reading message by message only
// in throughput mode.
func TestWorkloadWrites(t *testing.T) {
	for _, c := range []struct {
		args           []string
		each, readEach bool
		err            string
	}{
		{nil, false, false, ""},
		{[]string{"--writes", "batched"}, false, false, ""},
		{[]string{"--writes", "each", "--size", "512B"}, true, false, ""},
		{[]string{"--writes", "every"}, false, false, "use batched or each"},
		{[]string{"--writes", "each", "--reads", "each", "--size", "512B"}, true, true, ""},
		{[]string{"--reads", "batched"}, false, false, ""},
		{[]string{"--reads", "sometimes"}, false, false, "--reads \"sometimes\": use batched or each"},
		{[]string{"--reads", "each", "--mode", "rr"}, false, false, "--reads each is for throughput mode"},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var wf Flags
		wf.Register(fs)
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		p, err := wf.Resolve(1)
		switch {
		case c.err != "":
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%v: got %v, want an error saying %q", c.args, err, c.err)
			}
		case err != nil:
			t.Errorf("%v: %v", c.args, err)
		case p.Each != c.each || p.ReadEach != c.readEach:
			t.Errorf("%v: each %v, readEach %v; want %v, %v", c.args, p.Each, p.ReadEach, c.each, c.readEach)
		}
	}
}
