// Package workload is what an s2bench producer sends, as its flags give
// it: the named workloads of seed 000 (sweep, dstream, lstream) or fixed
// sizes, the amount per run (bytes, messages or a duration), pacing, the
// mode (throughput, request-reply, echo) and how messages are written and
// read. Flags registers those flags on a command's flag set and resolves
// them into a Plan; a Plan says, for each size and pair count, what one
// run sends.
//
// compare, run, testbed run and producer share it. Every error Resolve
// and ParsePairs return is a wrong flag: its message names the flag and
// how to fix it, and the command reports it as a usage error.
package workload

import (
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"scistream/internal/bench"
	"scistream/internal/bytesize"
)

// Bounds of the workload flags.
const (
	// MaxBytes bounds the payload of a run (--bytes).
	MaxBytes    = 1 << 40
	maxMessages = 1 << 40
	maxDuration = 24 * time.Hour
	maxSizes    = 32
)

// Named workloads (seed 000; brief sec. 5), the values of Plan.Name.
const (
	Sweep   = "sweep"   // 512 B ... 1 MiB, powers of two
	Dstream = "dstream" // 16 KiB messages (8 events x 2 KiB)
	Lstream = "lstream" // 1 MiB messages
	Fixed   = "size"    // any fixed size(s) given by --workload SIZE[,SIZE...] or --size
)

// SweepSizes are the message sizes of the sweep workload.
func SweepSizes() []int {
	var s []int
	for n := 512; n <= 1<<20; n *= 2 {
		s = append(s, n)
	}
	return s
}

// Flags are the flags that describe what a producer sends, shared by
// compare, run, testbed run and producer: Register defines them on a
// flag set, and once it is parsed Resolve checks them into a Plan.
type Flags struct {
	workload, size, bytes, messages, rate, mode, writes, reads string
	duration                                                   time.Duration
	fs                                                         *flag.FlagSet // Register's, whose given flags Resolve reads

	// Default, if set before Register, is the workload when neither
	// --workload nor --size is given, a named one (testbed run:
	// Sweep); empty: --size.
	Default string
}

// Register defines the workload flags on fs.
func (w *Flags) Register(fs *flag.FlagSet) {
	w.fs = fs
	dflt := "--size"
	if w.Default != "" {
		dflt = w.Default
	}
	fs.StringVar(&w.workload, "workload", "", "sweep (512B..1MiB, powers of two), dstream (16KiB), lstream (1MiB), or message size(s) e.g. 4KiB or 4KiB,64KiB (default: "+dflt+")")
	fs.StringVar(&w.size, "size", "64KiB", "payload bytes per message, when no --workload is given")
	fs.StringVar(&w.bytes, "bytes", "", "payload per run, over all pairs, e.g. 1GiB (default: 1GiB; sweep: 16MiB..128MiB scaled per size; rr: see --messages)")
	fs.StringVar(&w.messages, "messages", "", "messages per run, over all pairs, instead of --bytes (default in rr mode: min(2000, max(100, 128MiB/size)) per pair)")
	fs.DurationVar(&w.duration, "duration", 0, "send for this long per run instead of a fixed amount, e.g. 10s")
	fs.StringVar(&w.rate, "rate", "", "target rate per pair instead of as fast as possible: N msg/s (e.g. 5000msg/s) or bytes/s (e.g. 100MB/s)")
	fs.StringVar(&w.mode, "mode", "throughput", "throughput, rr (request-reply: the consumer answers each message with 16 bytes; RTT measured at the producer), or echo (request-reply in which the consumer echoes the whole message back, as a plain echo server: both directions carry it)")
	fs.StringVar(&w.writes, "writes", writesBatched, "how the producer writes in throughput mode: batched (small messages coalesced into writes of up to 256KiB) or each (one write per message, as an application sending message by message)")
	fs.StringVar(&w.reads, "reads", writesBatched, "how the consumer reads in throughput mode: batched (whatever has arrived, up to 64KiB or a message) or each (a message's header, then its payload, one read call each, as an application reading message by message); the producer tells the consumer in the run header")
}

// The values of --writes and --reads.
const (
	writesBatched = "batched"
	writesEach    = "each"
)

// Plan is a resolved workload: the sizes to run and, per size, what one
// run sends.
type Plan struct {
	Name     string // Sweep, Dstream, Lstream or Fixed
	Sizes    []int
	Mode     bench.Mode
	Rate     bench.Rate    // pacing per pair; zero: as fast as possible
	Each     bool          // one write per message (--writes each)
	ReadEach bool          // the consumer reads message by message (--reads each)
	Duration time.Duration // open-ended runs; 0 for a fixed amount
	Bytes    int64         // --bytes, or 0
	Messages int64         // --messages, or 0
	// Auto, if set, gives the payload per pair of a run when no amount
	// is given (testbed run: from the emulated path's rate and RTT).
	Auto func(size, pairs int) int64
}

// given returns the names of the flags given on the command line, in
// snake_case (an alias of cliflag's is a flag of its own).
func given(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	if fs != nil {
		fs.Visit(func(f *flag.Flag) { set[strings.ReplaceAll(f.Name, "-", "_")] = true })
	}
	return set
}

// Resolve validates the flags once the flag set Register defined them
// on is parsed; pairs is the largest pair count the plan will run with
// (every pair must get at least two messages).
func (w *Flags) Resolve(pairs int) (*Plan, error) {
	set := given(w.fs)
	p := &Plan{Duration: w.duration}
	var err error
	if p.Mode, err = bench.ParseMode(w.mode); err != nil {
		return nil, fmt.Errorf("--mode %q: use throughput, rr (request-reply) or echo (request-reply, the whole message echoed)", w.mode)
	}
	switch w.writes {
	case writesBatched, "":
	case writesEach:
		p.Each = true
	default:
		return nil, fmt.Errorf("--writes %q: use batched or each", w.writes)
	}
	switch w.reads {
	case writesBatched, "":
	case writesEach:
		if p.Mode != bench.Throughput {
			return nil, fmt.Errorf("--reads each is for throughput mode: --mode %s reads each message already", p.Mode)
		}
		p.ReadEach = true
	default:
		return nil, fmt.Errorf("--reads %q: use batched or each", w.reads)
	}
	wl := strings.ToLower(strings.TrimSpace(w.workload))
	if wl == "" && !set["size"] {
		wl = w.Default
	}
	switch {
	case strings.TrimSpace(w.workload) != "" && set["size"]:
		return nil, fmt.Errorf("--workload and --size both given: use one (--workload %s, or --size %s)", w.workload, w.size)
	case wl == Sweep:
		p.Name, p.Sizes = Sweep, SweepSizes()
	case wl == Dstream:
		p.Name, p.Sizes = Dstream, []int{16 << 10}
	case wl == Lstream:
		p.Name, p.Sizes = Lstream, []int{1 << 20}
	default:
		flagName, list := "--workload", w.workload
		if wl == "" {
			flagName, list = "--size", w.size
		}
		p.Name = Fixed
		for _, f := range strings.Split(list, ",") {
			n, err := bytesize.Parse(f)
			if err != nil {
				return nil, fmt.Errorf("%s: %w (or give sweep, dstream or lstream)", flagName, err)
			}
			if n < 1 || n > bench.MaxSize {
				return nil, fmt.Errorf("%s %s out of range: give 1B to %s, e.g. 64KiB", flagName, strings.TrimSpace(f), bytesize.Format(bench.MaxSize))
			}
			p.Sizes = append(p.Sizes, int(n))
		}
		if len(p.Sizes) > maxSizes {
			return nil, fmt.Errorf("%s: %d sizes, at most %d", flagName, len(p.Sizes), maxSizes)
		}
	}

	for _, size := range p.Sizes {
		if p.Mode == bench.Echo && size > bench.MaxEchoSize {
			return nil, fmt.Errorf("--mode echo with %s messages: give sizes up to %s (the producer writes a whole message before it reads the echo)", bytesize.Format(int64(size)), bytesize.Format(bench.MaxEchoSize))
		}
	}

	amounts := 0
	for _, f := range []string{"bytes", "messages", "duration"} {
		if set[f] {
			amounts++
		}
	}
	if amounts > 1 {
		return nil, fmt.Errorf("give one of --bytes, --messages and --duration, not several")
	}
	if set["bytes"] {
		if p.Bytes, err = bytesize.Parse(w.bytes); err != nil {
			return nil, fmt.Errorf("--bytes %w", err)
		}
		if p.Bytes > MaxBytes {
			return nil, fmt.Errorf("--bytes %s exceeds %s: give a smaller total", w.bytes, bytesize.Format(MaxBytes))
		}
	}
	if set["messages"] {
		n, err := strconv.ParseInt(strings.TrimSpace(w.messages), 10, 64)
		if err != nil || n < 1 || n > maxMessages {
			return nil, fmt.Errorf("--messages %q: give a whole number from 1 to %d", w.messages, int64(maxMessages))
		}
		p.Messages = n
	}
	if set["duration"] && (w.duration <= 0 || w.duration > maxDuration) {
		return nil, fmt.Errorf("--duration %s out of range: give a positive duration up to %s, e.g. 10s", w.duration, maxDuration)
	}
	if set["rate"] {
		if p.Rate, err = bench.ParseRate(w.rate); err != nil {
			return nil, fmt.Errorf("--rate %w", err)
		}
	}
	for _, size := range p.Sizes {
		if p.Duration > 0 {
			continue
		}
		if b, _ := p.PerPair(size, pairs); b < 2*int64(size) {
			switch {
			case p.Messages > 0:
				return nil, fmt.Errorf("--messages %d gives a pair fewer than two messages with %d pairs: raise --messages (timing needs two arrivals)", p.Messages, pairs)
			default:
				return nil, fmt.Errorf("--bytes %s is less than two messages of %s per pair (%d pairs): raise --bytes or lower the size (timing needs two arrivals)", w.bytes, bytesize.Format(int64(size)), pairs)
			}
		}
	}
	return p, nil
}

// PerPair returns the payload bytes one of pairs pairs sends in a run of
// size-byte messages (0 for an open-ended run) and the default's
// description. Amounts given over all pairs are split evenly in whole
// messages (the last pair's share may end with a shorter message only
// when the total is not a multiple of the size).
func (p *Plan) PerPair(size, pairs int) (int64, string) {
	switch {
	case p.Duration > 0:
		return 0, ""
	case p.Messages > 0:
		return p.Messages / int64(pairs) * int64(size), ""
	case p.Bytes > 0:
		per := p.Bytes / int64(pairs)
		if pairs > 1 {
			per = per / int64(size) * int64(size)
		}
		return per, ""
	case p.Auto != nil:
		return p.Auto(size, pairs), "default for the path's rate and RTT"
	case p.Mode.RoundTrips():
		n := min(2000, max(100, int64(128<<20)/int64(size)))
		return n * int64(size), "default for rr"
	case p.Name == Sweep:
		return min(max(int64(size)*16384, 16<<20), 128<<20), "default for sweep"
	}
	return int64(1<<30) / int64(pairs) / int64(size) * int64(size), "default"
}

// EachMessage reports whether the producer writes one message per write
// call: --writes each, in throughput mode without pacing (which writes
// each message anyway).
func (p *Plan) EachMessage() bool {
	return p.Each && p.Mode == bench.Throughput && p.Rate == (bench.Rate{})
}

// Describe says what one run of size-byte messages sends.
func (p *Plan) Describe(size, pairs int) string {
	var s string
	if p.Duration > 0 {
		s = fmt.Sprintf("%s messages for %s", bytesize.Format(int64(size)), p.Duration)
	} else {
		b, _ := p.PerPair(size, pairs)
		s = fmt.Sprintf("%s in %d messages of %s", bytesize.Format(b), (b+int64(size)-1)/int64(size), bytesize.Format(int64(size)))
	}
	if pairs > 1 {
		s += fmt.Sprintf(" per pair x %d pairs", pairs)
	}
	if p.Rate != (bench.Rate{}) {
		s += fmt.Sprintf(", paced at %s (%.0f msg/s) per pair", p.Rate, p.Rate.PerSecond(size))
	}
	if p.EachMessage() {
		s += ", one write per message"
	}
	if p.ReadEach {
		s += ", read message by message"
	}
	return s + ", " + p.Mode.String() + " mode"
}

// Print says what one run sends, for each pair count.
func (p *Plan) Print(w io.Writer, pairs []int) {
	for _, n := range pairs {
		if len(p.Sizes) <= 3 {
			for _, s := range p.Sizes {
				fmt.Fprintf(w, "  per run: %s\n", p.Describe(s, n))
			}
		} else {
			fmt.Fprintf(w, "  per run: %s ... %s\n", p.Describe(p.Sizes[0], n), p.Describe(p.Sizes[len(p.Sizes)-1], n))
		}
	}
}

// MaxPairs bounds --pairs of compare, producer and run: those keep a
// run's connections in one process with both of its ends (compare) and
// report each pair. s2bench conns goes further (bench.MaxPairs).
const MaxPairs = 64

// ParsePairs parses a pair count or a comma-separated list of them
// (--pairs).
func ParsePairs(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > MaxPairs {
			return nil, fmt.Errorf("--pairs %q: give counts from 1 to %d, e.g. 4 or 1,2,4,8", s, MaxPairs)
		}
		out = append(out, n)
	}
	return out, nil
}
