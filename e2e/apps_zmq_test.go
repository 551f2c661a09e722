package e2e

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"scistream/internal/localgw"
)

// zmqResult is what examples/zmq/sub.py prints last.
type zmqResult struct {
	OK       bool     `json:"ok"`
	Problems []string `json:"problems"`
	Samples  int64    `json:"samples"`
	Bytes    int64    `json:"bytes"`
	Sent     int64    `json:"sent"`
	Phases   []struct {
		Size      int64   `json:"size"`
		Samples   int64   `json:"samples"`
		Goodput   float64 `json:"goodput_MBps"`
		LatencyUS float64 `json:"latency_us"`
		JitterUS  float64 `json:"jitter_us"`
	} `json:"phases"`
}

type pubResult struct {
	Samples int64  `json:"samples"`
	Bytes   int64  `json:"bytes"`
	SHA256  string `json:"sha256"`
}

// zmqRun starts pub.py on a fresh loopback address, wires it through the
// gateways (the producer's gateway takes the inbound request: PUB and
// PUSH bind, SUB and PULL connect) unless direct, runs `peers` consumers
// and returns the producer's and the consumers' results.
func zmqRun(t *testing.T, p *pair, id, pattern string, peers int, sizes, perSize string, direct bool) (pubResult, []zmqResult, []string) {
	t.Helper()
	ex := examplesDir(t)
	pubIP := localgw.RandomLoopback()
	pub := startProc(t, "pub.py", nil, "python3", filepath.Join(ex, "zmq", "pub.py"),
		"--bind", "tcp://"+pubIP+":*", "--pattern", pattern, "--peers", fmt.Sprint(peers),
		"--sizes", sizes, "--bytes", perSize, "--wait", "60")
	ep, _ := pub.event("listening", 20*time.Second)["endpoint"].(string)
	connect := ep
	if !direct {
		port := ep[strings.LastIndex(ep, ":")+1:]
		so := p.wireVia(id, p.prod, p.cons, pubIP, port, 1)
		connect = "tcp://" + so.Listeners[0]
	}
	subPattern := map[string]string{"pub": "sub", "push": "pull"}[pattern]
	var subs []*proc
	var seqFiles []string
	for i := 0; i < peers; i++ {
		args := []string{"python3", filepath.Join(ex, "zmq", "sub.py"), "--connect", connect, "--pattern", subPattern, "--timeout", "60"}
		if subPattern == "pull" {
			f := filepath.Join(t.TempDir(), fmt.Sprintf("seqs%d", i))
			seqFiles = append(seqFiles, f)
			args = append(args, "--seqs-out", f)
		}
		subs = append(subs, startProc(t, fmt.Sprintf("sub.py #%d", i), nil, args...))
	}
	var pr pubResult
	pub.result(5*time.Minute, &pr)
	var rs []zmqResult
	for _, s := range subs {
		var r zmqResult
		s.result(2*time.Minute, &r)
		if !r.OK {
			t.Fatalf("%s: stream not intact: %v", s.name, r.Problems)
		}
		rs = append(rs, r)
	}
	return pr, rs, seqFiles
}

// TestZeroMQPubSub streams 1 GiB of samples of three sizes from a pyzmq
// publisher to a subscriber connected only through the gateways (seed
// 000's pipeline), checks that every sample arrived once, in order and
// intact (sequence numbers, CRC-32 per sample, SHA-256 of the stream),
// and logs goodput and jitter per size through the gateways and direct.
func TestZeroMQPubSub(t *testing.T) {
	needPython(t, "zmq")
	p := newPair(t, pairOpts{})
	sizes, perSize := "4096,65536,1048576", "128M,256M,640M"
	if longRun() {
		sizes, perSize = "512,4096,65536,262144,1048576", "256M"
	}
	via := zmqPubSubOnce(t, p, sizes, perSize, false)
	direct := zmqPubSubOnce(t, p, sizes, perSize, true)
	t.Logf("ZeroMQ PUB/SUB, %d samples, %d MiB each way (goodput MB/s, latency and jitter in us; via = through the two gateways, TLS WAN):",
		via.Samples, via.Bytes>>20)
	t.Logf("%9s | %8s %8s %8s | %8s %8s %8s | %s", "size", "via", "lat", "jitter", "direct", "lat", "jitter", "via/direct")
	for i, v := range via.Phases {
		d := direct.Phases[i]
		t.Logf("%9d | %8.0f %8.1f %8.1f | %8.0f %8.1f %8.1f | %.2f", v.Size, v.Goodput, v.LatencyUS, v.JitterUS,
			d.Goodput, d.LatencyUS, d.JitterUS, v.Goodput/d.Goodput)
	}
}

func zmqPubSubOnce(t *testing.T, p *pair, sizes, perSize string, direct bool) zmqResult {
	t.Helper()
	pr, rs, _ := zmqRun(t, p, "alice", "pub", 1, sizes, perSize, direct)
	r := rs[0]
	if r.Samples != pr.Samples || r.Bytes != pr.Bytes || r.Sent != pr.Samples {
		t.Fatalf("subscriber got %d samples / %d bytes, publisher sent %d / %d", r.Samples, r.Bytes, pr.Samples, pr.Bytes)
	}
	if !direct && r.Bytes < 1<<30 {
		t.Fatalf("streamed %d bytes, the test must move at least 1 GiB", r.Bytes)
	}
	return r
}

// TestZeroMQPushPull deals samples from one PUSH producer to three PULL
// consumers, each connected through the gateways on its own application
// connection, and checks that together they got every sample exactly once,
// each in increasing order.
func TestZeroMQPushPull(t *testing.T) {
	needPython(t, "zmq")
	p := newPair(t, pairOpts{})
	const peers = 3
	pr, rs, files := zmqRun(t, p, "alice", "push", peers, "4096,1048576", "64M", false)
	seen := make([]int, pr.Samples)
	var total int64
	for i, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if rs[i].Samples == 0 {
			t.Errorf("consumer %d got no samples: round-robin did not reach it", i)
		}
		for off := 0; off+8 <= len(b); off += 8 {
			s := binary.LittleEndian.Uint64(b[off:])
			if s >= uint64(len(seen)) {
				t.Fatalf("consumer %d got sequence number %d, the producer sent %d", i, s, pr.Samples)
			}
			seen[s]++
		}
		total += rs[i].Bytes
	}
	for s, n := range seen {
		if n != 1 {
			t.Fatalf("sample %d arrived %d times across the consumers, want exactly once", s, n)
		}
	}
	if total != pr.Bytes {
		t.Fatalf("consumers got %d bytes together, producer sent %d", total, pr.Bytes)
	}
	t.Logf("PUSH/PULL: %d samples dealt to %d consumers through the gateways: %d / %d / %d, each exactly once",
		pr.Samples, peers, rs[0].Samples, rs[1].Samples, rs[2].Samples)
}
