package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"scistream/internal/api"
	"strconv"
	"testing"
	"time"

	"scistream/internal/localgw"
)

// broker is a private RabbitMQ broker started by examples/rabbitmq/broker.sh
// on ports chosen by the test.
type broker struct {
	ip   string
	port int
	pass string
	proc *proc
}

// startBroker runs the Debian rabbitmq-server package's broker in a temp
// directory: AMQP on a random loopback address, Erlang distribution and
// epmd on ports of their own, all stopped by PID when the test ends.
func startBroker(t *testing.T) *broker {
	t.Helper()
	if _, err := os.Stat("/usr/lib/rabbitmq/bin/rabbitmq-server"); err != nil {
		t.Skip("rabbitmq-server not installed: run scripts/setup.sh (installs the Debian package rabbitmq-server)")
	}
	needCommand(t, "epmd", "erlang-base")
	b := &broker{ip: localgw.RandomLoopback()}
	b.port = freePort(t, b.ip)
	secret := make([]byte, 16)
	if _, err := rand.Read(secret); err != nil {
		t.Fatal(err)
	}
	b.pass = hex.EncodeToString(secret)
	dir := filepath.Join(t.TempDir(), "broker")
	b.proc = startProc(t, "broker.sh", nil, filepath.Join(examplesDir(t), "rabbitmq", "broker.sh"),
		"--ip", b.ip, "--port", strconv.Itoa(b.port), "--dir", dir, "--pass", b.pass,
		"--dist-port", strconv.Itoa(freePort(t, "127.0.0.1")), "--epmd-port", strconv.Itoa(freePort(t, "127.0.0.1")))
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := filepath.Glob(filepath.Join(dir, "log", "*.log"))
			for _, l := range logs {
				if bs, err := os.ReadFile(l); err == nil {
					t.Logf("%s (last lines):\n%s", filepath.Base(l), lastLines(string(bs), 40))
				}
			}
		}
	})
	// Ready when it answers the AMQP protocol header with Connection.Start.
	// The broker opens its listener only at the end of its boot.
	eventually(t, 3*time.Minute, "the RabbitMQ broker to answer AMQP", func() bool {
		select {
		case <-b.proc.done:
			t.Fatalf("broker.sh exited (%v) before serving; stderr:\n%s", b.proc.err, lastLines(b.proc.stderrText(), 30))
		default:
		}
		return amqpHandshake(net.JoinHostPort(b.ip, strconv.Itoa(b.port))) == nil
	})
	return b
}

// amqpHandshake sends the AMQP 0-9-1 protocol header and expects the
// broker's Connection.Start method frame (class 10, method 10).
func amqpHandshake(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("AMQP\x00\x00\x09\x01")); err != nil {
		return err
	}
	var h [11]byte // type, channel(2), size(4), class(2), method(2)
	if _, err := io.ReadFull(c, h[:]); err != nil {
		return err
	}
	if h[0] != 1 || h[7] != 0 || h[8] != 10 || h[9] != 0 || h[10] != 10 {
		return fmt.Errorf("not a Connection.Start frame: % x", h)
	}
	return nil
}

func (b *broker) url(hostport string) string {
	return "amqp://streamer:" + b.pass + "@" + hostport + "/"
}

type rmqProducerResult struct {
	OK        bool     `json:"ok"`
	Problems  []string `json:"problems"`
	Messages  int      `json:"messages"`
	Confirmed int      `json:"confirmed"`
	Nacks     int      `json:"nacks"`
	Replies   int      `json:"replies"`
	MsgsPerS  float64  `json:"msgs_per_s"`
	RTTMedian float64  `json:"rtt_ms_median"`
	RTTP90    float64  `json:"rtt_ms_p90"`
	RTTP99    float64  `json:"rtt_ms_p99"`
}

type rmqConsumerResult struct {
	OK           bool     `json:"ok"`
	Problems     []string `json:"problems"`
	Expected     int      `json:"expected"`
	Unique       int      `json:"unique"`
	Duplicates   int      `json:"duplicates"`
	Missing      int      `json:"missing"`
	Bad          int      `json:"bad"`
	LeftInQueues *int     `json:"left_in_queues"`
	PerConsumer  []int    `json:"per_consumer"`
	MsgsPerS     float64  `json:"msgs_per_s"`
	MBps         float64  `json:"MBps"`
}

// rmqRun runs consumer.py (against the broker directly: consumers sit
// beside it) and producer.py (against producerAddr: the producer
// gateway's listener, or the broker itself for the direct baseline) and
// checks that every message was consumed exactly once.
func rmqRun(t *testing.T, b *broker, producerAddr string, pairs, size, count int, rtt bool, prefix string) (rmqProducerResult, rmqConsumerResult) {
	t.Helper()
	dir := filepath.Join(examplesDir(t), "rabbitmq")
	common := []string{"--size", strconv.Itoa(size), "--queue-prefix", prefix, "--queue-bytes", "64M", "--timeout", "300"}
	cons := startProc(t, fmt.Sprintf("consumer.py (%d)", pairs), []string{"AMQP_URL=" + b.url(net.JoinHostPort(b.ip, strconv.Itoa(b.port)))},
		append([]string{"python3", filepath.Join(dir, "consumer.py"), "--consumers", strconv.Itoa(pairs),
			"--producers", strconv.Itoa(pairs), "--count", strconv.Itoa(count)}, common...)...)
	cons.event("ready", time.Minute) // consumers first, as in seed 001
	args := append([]string{"python3", filepath.Join(dir, "producer.py"), "--producers", strconv.Itoa(pairs),
		"--count", strconv.Itoa(count)}, common...)
	if rtt {
		args = append(args, "--rtt")
	}
	prod := startProc(t, fmt.Sprintf("producer.py (%d)", pairs), []string{"AMQP_URL=" + b.url(producerAddr)}, args...)
	var pr rmqProducerResult
	var cr rmqConsumerResult
	prod.result(5*time.Minute, &pr)
	cons.result(time.Minute, &cr)
	n := pairs * count
	if !pr.OK || pr.Confirmed != n || (rtt && pr.Replies != n) {
		t.Fatalf("%d pairs, %d B: producers: %d/%d confirmed, %d replies: %v", pairs, size, pr.Confirmed, n, pr.Replies, pr.Problems)
	}
	if !cr.OK || cr.Unique != n || cr.Duplicates != 0 || cr.Missing != 0 || cr.Bad != 0 || cr.LeftInQueues == nil || *cr.LeftInQueues != 0 {
		t.Fatalf("%d pairs, %d B: not exactly once: %d/%d unique, %d duplicates, %d missing, %d corrupt, left %v: %v",
			pairs, size, cr.Unique, n, cr.Duplicates, cr.Missing, cr.Bad, cr.LeftInQueues, cr.Problems)
	}
	return pr, cr
}

// TestRabbitMQ is seed 001's setup 2: a RabbitMQ broker beside the
// consumers (inbound gateway in front of it), producers publishing
// through the gateways with publisher confirms, consumers acking, with 1,
// 8 and 64 producer/consumer pairs and Dstream (16 KiB) and Lstream
// (1 MiB) messages. Each run checks exactly-once delivery; the log shows
// messages/s and request/reply RTT. SCISTREAM_LONG=1 runs the full sweep
// of docs/applications.md with the direct baseline.
func TestRabbitMQ(t *testing.T) {
	needPython(t, "pika")
	b := startBroker(t)
	p := newPair(t, pairOpts{})
	so := p.wire("alice", b.ip, strconv.Itoa(b.port), 1)
	proxyP := so.Listeners[0]

	pairsList := []int{1, 8, 64}
	type workload struct {
		name          string
		size          int
		total, rttTot int // messages per run across all producers
	}
	loads := []workload{{"Dstream", 16 << 10, 2048, 256}, {"Lstream", 1 << 20, 128, 64}}
	if longRun() {
		pairsList = []int{1, 2, 4, 8, 16, 32, 64}
		loads = []workload{{"Dstream", 16 << 10, 16384, 2048}, {"Lstream", 1 << 20, 512, 128}}
	}
	run := 0
	for _, w := range loads {
		t.Logf("%s (%d B), through the gateways%s:", w.name, w.size, map[bool]string{true: " | direct to the broker", false: ""}[longRun()])
		t.Logf("%5s %9s %9s %8s %7s | %10s %10s %10s", "pairs", "msgs", "msgs/s", "MB/s", "nacks", "RTT p50 ms", "p90", "p99")
		for _, pairs := range pairsList {
			count := max(2, w.total/pairs)
			rttCount := max(2, w.rttTot/pairs)
			run++
			pr, cr := rmqRun(t, b, proxyP, pairs, w.size, count, false, fmt.Sprintf("t%d", run))
			run++
			rr, _ := rmqRun(t, b, proxyP, pairs, w.size, rttCount, true, fmt.Sprintf("t%d", run))
			line := fmt.Sprintf("%5d %9d %9.0f %8.1f %7d | %10.2f %10.2f %10.2f", pairs, cr.Unique, cr.MsgsPerS, cr.MBps, pr.Nacks,
				rr.RTTMedian, rr.RTTP90, rr.RTTP99)
			if longRun() {
				addr := net.JoinHostPort(b.ip, strconv.Itoa(b.port))
				run++
				dp, dc := rmqRun(t, b, addr, pairs, w.size, count, false, fmt.Sprintf("t%d", run))
				run++
				dr, _ := rmqRun(t, b, addr, pairs, w.size, rttCount, true, fmt.Sprintf("t%d", run))
				line += fmt.Sprintf(" | direct %9.0f msgs/s %8.1f MB/s %7d nacks, RTT %8.2f %8.2f %8.2f", dc.MsgsPerS, dc.MBps, dp.Nacks,
					dr.RTTMedian, dr.RTTP90, dr.RTTP99)
			}
			t.Log(line)
		}
	}
	// A healthy stream reports no error: the broker resets each AMQP
	// connection it closes, which is the application's doing (it used
	// to show as one gateway error per connection).
	for _, g := range []*localgw.Gateway{p.prod, p.cons} {
		var st api.Stream
		out := p.mustS2UC("alice", "status", so.UID, "--s2cs", g.Addr, "--server_cert", g.CertFile, "--output", "json")
		if err := json.Unmarshal([]byte(out), &st); err != nil || st.Stats == nil {
			t.Fatalf("status: %v\n%s", err, out)
		}
		t.Logf("%s: %d connections, aborted by kind %v", g.Addr, st.Stats.TotalConns, st.Stats.AbortedByKind)
		if st.Stats.Errors != 0 {
			t.Errorf("a healthy RabbitMQ stream shows %d errors on %s: %v (last: %v)", st.Stats.Errors, g.Addr, st.Stats.AbortedByKind, st.Stats.LastErrors)
		}
	}
}
