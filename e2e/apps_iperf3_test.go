package e2e

import (
	"encoding/json"
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"scistream/internal/localgw"
)

// iperf3Result is the part of `iperf3 -J` the test reads.
type iperf3Result struct {
	End struct {
		SumSent struct {
			Bytes         int64   `json:"bytes"`
			BitsPerSecond float64 `json:"bits_per_second"`
		} `json:"sum_sent"`
		SumReceived struct {
			Bytes         int64   `json:"bytes"`
			BitsPerSecond float64 `json:"bits_per_second"`
		} `json:"sum_received"`
	} `json:"end"`
	Error string `json:"error"`
}

// iperf3Client runs `iperf3 -c` against addr and returns its JSON report.
func iperf3Client(t *testing.T, path, addr string, seconds int) iperf3Result {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	out, err := exec.Command(path, "-c", host, "-p", port, "-t", strconv.Itoa(seconds), "-J").Output()
	var r iperf3Result
	if jerr := json.Unmarshal(out, &r); jerr != nil {
		t.Fatalf("iperf3 -c %s: %v; output is not JSON (%v): %s", addr, err, jerr, lastLines(string(out), 10))
	}
	if err != nil || r.Error != "" {
		t.Fatalf("iperf3 -c %s: %v: %s", addr, err, r.Error)
	}
	return r
}

// TestIperf3 measures goodput with iperf3, an independent tool, through
// the gateways and directly in the same run. iperf3 opens a control
// connection and a data connection to the same port; the stream's one
// channel carries both, each as its own WAN leg.
func TestIperf3(t *testing.T) {
	path := needCommand(t, "iperf3", "iperf3")
	p := newPair(t, pairOpts{})
	ip := localgw.RandomLoopback()
	port := freePort(t, ip)
	srv := startProc(t, "iperf3 -s", nil, path, "-s", "-B", ip, "-p", strconv.Itoa(port))
	waitListening(t, ip, port, 20*time.Second, srv)
	// A second server for the direct run: an iperf3 server takes one test
	// at a time and may still be ending the first ("the server is busy")
	// when the second client connects.
	port2 := freePort(t, ip)
	srv2 := startProc(t, "iperf3 -s (direct)", nil, path, "-s", "-B", ip, "-p", strconv.Itoa(port2))
	waitListening(t, ip, port2, 20*time.Second, srv2)
	so := p.wire("alice", ip, strconv.Itoa(port), 1)

	secs := 3
	if longRun() {
		secs = 20
	}
	via := iperf3Client(t, path, so.Listeners[0], secs)
	direct := iperf3Client(t, path, net.JoinHostPort(ip, strconv.Itoa(port2)), secs)
	for name, r := range map[string]iperf3Result{"via": via, "direct": direct} {
		if r.End.SumReceived.Bytes <= 0 || r.End.SumReceived.Bytes > r.End.SumSent.Bytes {
			t.Fatalf("%s: iperf3 received %d of %d bytes sent", name, r.End.SumReceived.Bytes, r.End.SumSent.Bytes)
		}
	}
	v, d := via.End.SumReceived.BitsPerSecond/1e9, direct.End.SumReceived.BitsPerSecond/1e9
	t.Logf("iperf3 %d s, one TCP stream: through the gateways (TLS WAN) %.2f Gbit/s, direct %.2f Gbit/s, ratio %.2f", secs, v, d, v/d)
}
