package main

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"scistream/internal/bench"
	"scistream/internal/bytesize"
)

// Bounds of the workload flags.
const (
	maxBytes    = 1 << 40
	maxMessages = 1 << 40
	maxDuration = 24 * time.Hour
	maxReps     = 100
	maxSizes    = 32
)

// Named workloads (seed 000; brief sec. 5).
const (
	wlSweep   = "sweep"   // 512 B ... 1 MiB, powers of two
	wlDstream = "dstream" // 16 KiB messages (8 events x 2 KiB)
	wlLstream = "lstream" // 1 MiB messages
	wlSize    = "size"    // any fixed size(s) given by --workload SIZE[,SIZE...] or --size
)

// sweepSizes are the message sizes of the sweep workload.
func sweepSizes() []int {
	var s []int
	for n := 512; n <= 1<<20; n *= 2 {
		s = append(s, n)
	}
	return s
}

// workloadFlags are the flags that describe what a producer sends,
// shared by compare, run, testbed run and producer.
type workloadFlags struct {
	workload, size, bytes, messages, rate, mode, writes, reads string
	duration                                                   time.Duration
	set                                                        map[string]bool // flags given explicitly
	// dflt, if set before register, is the workload when neither
	// --workload nor --size is given, a named one (testbed run: sweep);
	// empty: --size.
	dflt string
}

func (w *workloadFlags) register(fs *flag.FlagSet) {
	dflt := "--size"
	if w.dflt != "" {
		dflt = w.dflt
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

// The values of --writes.
const (
	writesBatched = "batched"
	writesEach    = "each"
)

// plan is a resolved workload: the sizes to run and, per size, what one
// run sends.
type plan struct {
	name     string // wlSweep, wlDstream, wlLstream or wlSize
	sizes    []int
	mode     bench.Mode
	rate     bench.Rate
	each     bool          // one write per message (--writes each)
	readEach bool          // the consumer reads message by message (--reads each)
	duration time.Duration // open-ended runs; 0 for a fixed amount
	bytes    int64         // --bytes, or 0
	messages int64         // --messages, or 0
	// auto, if set, gives the payload per pair of a run when no amount
	// is given (testbed run: from the emulated path's rate and RTT).
	auto func(size, pairs int) int64
}

// resolve validates the flags; pairs is the largest pair count the plan
// will run with (every pair must get at least two messages).
func (w *workloadFlags) resolve(pairs int) (*plan, error) {
	p := &plan{duration: w.duration}
	var err error
	if p.mode, err = bench.ParseMode(w.mode); err != nil {
		return nil, usagef("--mode %q: use throughput, rr (request-reply) or echo (request-reply, the whole message echoed)", w.mode)
	}
	switch w.writes {
	case writesBatched, "":
	case writesEach:
		p.each = true
	default:
		return nil, usagef("--writes %q: use batched or each", w.writes)
	}
	switch w.reads {
	case writesBatched, "":
	case writesEach:
		if p.mode != bench.Throughput {
			return nil, usagef("--reads each is for throughput mode: --mode %s reads each message already", p.mode)
		}
		p.readEach = true
	default:
		return nil, usagef("--reads %q: use batched or each", w.reads)
	}
	wl := strings.ToLower(strings.TrimSpace(w.workload))
	if wl == "" && !w.set["size"] {
		wl = w.dflt
	}
	switch {
	case strings.TrimSpace(w.workload) != "" && w.set["size"]:
		return nil, usagef("--workload and --size both given: use one (--workload %s, or --size %s)", w.workload, w.size)
	case wl == wlSweep:
		p.name, p.sizes = wlSweep, sweepSizes()
	case wl == wlDstream:
		p.name, p.sizes = wlDstream, []int{16 << 10}
	case wl == wlLstream:
		p.name, p.sizes = wlLstream, []int{1 << 20}
	default:
		flagName, list := "--workload", w.workload
		if wl == "" {
			flagName, list = "--size", w.size
		}
		p.name = wlSize
		for _, f := range strings.Split(list, ",") {
			n, err := bytesize.Parse(f)
			if err != nil {
				return nil, usagef("%s: %w (or give sweep, dstream or lstream)", flagName, err)
			}
			if n < 1 || n > bench.MaxSize {
				return nil, usagef("%s %s out of range: give 1B to %s, e.g. 64KiB", flagName, strings.TrimSpace(f), bytesize.Format(bench.MaxSize))
			}
			p.sizes = append(p.sizes, int(n))
		}
		if len(p.sizes) > maxSizes {
			return nil, usagef("%s: %d sizes, at most %d", flagName, len(p.sizes), maxSizes)
		}
	}

	for _, size := range p.sizes {
		if p.mode == bench.Echo && size > bench.MaxEchoSize {
			return nil, usagef("--mode echo with %s messages: give sizes up to %s (the producer writes a whole message before it reads the echo)", bytesize.Format(int64(size)), bytesize.Format(bench.MaxEchoSize))
		}
	}

	amounts := 0
	for _, f := range []string{"bytes", "messages", "duration"} {
		if w.set[f] {
			amounts++
		}
	}
	if amounts > 1 {
		return nil, usagef("give one of --bytes, --messages and --duration, not several")
	}
	if w.set["bytes"] {
		if p.bytes, err = bytesize.Parse(w.bytes); err != nil {
			return nil, usagef("--bytes %w", err)
		}
		if p.bytes > maxBytes {
			return nil, usagef("--bytes %s exceeds %s: give a smaller total", w.bytes, bytesize.Format(maxBytes))
		}
	}
	if w.set["messages"] {
		n, err := strconv.ParseInt(strings.TrimSpace(w.messages), 10, 64)
		if err != nil || n < 1 || n > maxMessages {
			return nil, usagef("--messages %q: give a whole number from 1 to %d", w.messages, int64(maxMessages))
		}
		p.messages = n
	}
	if w.set["duration"] && (w.duration <= 0 || w.duration > maxDuration) {
		return nil, usagef("--duration %s out of range: give a positive duration up to %s, e.g. 10s", w.duration, maxDuration)
	}
	if w.set["rate"] {
		if p.rate, err = bench.ParseRate(w.rate); err != nil {
			return nil, usagef("--rate %w", err)
		}
	}
	for _, size := range p.sizes {
		if p.duration > 0 {
			continue
		}
		if b, _ := p.perPair(size, pairs); b < 2*int64(size) {
			switch {
			case p.messages > 0:
				return nil, usagef("--messages %d gives a pair fewer than two messages with %d pairs: raise --messages (timing needs two arrivals)", p.messages, pairs)
			default:
				return nil, usagef("--bytes %s is less than two messages of %s per pair (%d pairs): raise --bytes or lower the size (timing needs two arrivals)", w.bytes, bytesize.Format(int64(size)), pairs)
			}
		}
	}
	return p, nil
}

// perPair returns the payload bytes one of pairs pairs sends in a run of
// size-byte messages (0 for an open-ended run) and the default's
// description. Amounts given over all pairs are split evenly in whole
// messages (the last pair's share may end with a shorter message only
// when the total is not a multiple of the size).
func (p *plan) perPair(size, pairs int) (int64, string) {
	switch {
	case p.duration > 0:
		return 0, ""
	case p.messages > 0:
		return p.messages / int64(pairs) * int64(size), ""
	case p.bytes > 0:
		per := p.bytes / int64(pairs)
		if pairs > 1 {
			per = per / int64(size) * int64(size)
		}
		return per, ""
	case p.auto != nil:
		return p.auto(size, pairs), "default for the path's rate and RTT"
	case p.mode.RoundTrips():
		n := min(2000, max(100, int64(128<<20)/int64(size)))
		return n * int64(size), "default for rr"
	case p.name == wlSweep:
		return min(max(int64(size)*16384, 16<<20), 128<<20), "default for sweep"
	}
	return int64(1<<30) / int64(pairs) / int64(size) * int64(size), "default"
}

// describe says what one run of size-byte messages sends.
func (p *plan) describe(size, pairs int) string {
	var s string
	if p.duration > 0 {
		s = fmt.Sprintf("%s messages for %s", bytesize.Format(int64(size)), p.duration)
	} else {
		b, _ := p.perPair(size, pairs)
		s = fmt.Sprintf("%s in %d messages of %s", bytesize.Format(b), (b+int64(size)-1)/int64(size), bytesize.Format(int64(size)))
	}
	if pairs > 1 {
		s += fmt.Sprintf(" per pair x %d pairs", pairs)
	}
	if p.rate != (bench.Rate{}) {
		s += fmt.Sprintf(", paced at %s (%.0f msg/s) per pair", p.rate, p.rate.PerSecond(size))
	}
	if p.each && p.mode == bench.Throughput && p.rate == (bench.Rate{}) {
		s += ", one write per message"
	}
	if p.readEach {
		s += ", read message by message"
	}
	return s + ", " + p.mode.String() + " mode"
}

// maxPairs bounds --pairs of compare, producer and run: those keep a
// run's connections in one process with both of its ends (compare) and
// report each pair. s2bench conns goes further (bench.MaxPairs).
const maxPairs = 64

// parsePairs parses a pair count or a comma-separated list of them.
func parsePairs(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > maxPairs {
			return nil, usagef("--pairs %q: give counts from 1 to %d, e.g. 4 or 1,2,4,8", s, maxPairs)
		}
		out = append(out, n)
	}
	return out, nil
}

// flagsSet returns the names of the flags given on the command line.
func flagsSet(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[strings.ReplaceAll(f.Name, "-", "_")] = true })
	return set
}
