package netbed

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
)

// Tuning is the TCP configuration applied in the hosts' and gateways'
// namespaces (these sysctls are per network namespace).
type Tuning struct {
	// HostCC is the congestion control of the hosts (Config.CC): the
	// producer and the consumer set it on each of their sockets (as
	// root they may set any available one).
	HostCC string `json:"host_cc"`
	// CC is net.ipv4.tcp_congestion_control of the namespaces: HostCC
	// where a namespace may take it, else the host's default (CCNote
	// says why: a namespace other than the host's may only take one of
	// tcp_allowed_congestion_control).
	CC     string `json:"cc"`
	CCNote string `json:"cc_note,omitempty"`
	// Available is tcp_available_congestion_control.
	Available []string `json:"available"`
	// Rmem and Wmem are net.ipv4.tcp_rmem and tcp_wmem ("min default
	// max"): the max is Config.TCPBuf (DefaultTCPBuf), so that
	// autotuning can keep a long fat pipe full, through losses too.
	Rmem string `json:"tcp_rmem"`
	Wmem string `json:"tcp_wmem"`
}

// HostOf is HostCC, or CC for a testbed brought up before HostCC.
func (t Tuning) HostOf() string {
	if t.HostCC == "" {
		return t.CC
	}
	return t.HostCC
}

func (t Tuning) String() string {
	host := t.HostOf()
	lan := "the gateways' LAN legs " + t.CC
	if t.CCNote != "" {
		lan += " (" + t.CCNote + ")"
	}
	return fmt.Sprintf("congestion control: producer and consumer %s, %s, the gateways' WAN legs their own (s2cs --wan_cc) (available: %s); tcp_rmem %q, tcp_wmem %q, tcp_no_metrics_save 1",
		host, lan, strings.Join(t.Available, " "), t.Rmem, t.Wmem)
}

// DefaultTCPBuf is the largest buffer TCP autotuning may give one socket
// on a path of bandwidth-delay product bdp, unless Config.TCPBuf says:
// 4 x bdp, and at least 64 MiB, the limit ESnet's host tuning gives a
// 10 Gbit/s data transfer node on paths to 100 ms. Twice the product
// (this testbed's limit before) fills a clean path but not a lossy one:
// while a lost segment is resent, the receiver holds what came after it
// out of order, a round trip's worth, in the same buffer, of which only
// a part is window (the kernel keeps the rest for its overhead). On the
// long WAN at 0.1% loss, the gateways' one WAN leg (bbr) then spent 18-40%
// of its time limited by the receiver's window (ss: rwnd_limited) and
// carried 0.71-0.79 of the link; with 64 MiB, 0.87-0.97.
func DefaultTCPBuf(bdp int64) int64 { return max(4*bdp, 64<<20) }

// MinTCPBuf and MaxTCPBuf bound Config.TCPBuf: the kernel's smallest
// default (tcp_rmem's middle value, 128 KiB) and 1 GiB.
const (
	MinTCPBuf = 128 << 10
	MaxTCPBuf = 1 << 30
)

// DefaultHostCC is the hosts' congestion control unless Config.CC
// says: what RHEL's and Debian's hosts run.
const DefaultHostCC = "cubic"

// chooseCC returns want, or DefaultHostCC for "", if available.
func chooseCC(want string, available []string) (string, error) {
	if want == "" {
		want = DefaultHostCC
	}
	if !slices.Contains(available, want) {
		return "", fmt.Errorf("congestion control %q is not available here (available: %s): choose one of those (--host_cc), or load its module (modprobe tcp_%s)",
			want, strings.Join(available, " "), want)
	}
	return want, nil
}

func (tb *Testbed) tune(ctx context.Context, cc string, buf int64) error {
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_available_congestion_control")
	if err != nil {
		return fmt.Errorf("congestion controls: %w", err)
	}
	t := Tuning{Available: strings.Fields(string(b))}
	if t.HostCC, err = chooseCC(cc, t.Available); err != nil {
		return err
	}
	// A namespace other than the host's may take as its default only
	// one of tcp_allowed_congestion_control (the kernel's rule), which
	// the testbed leaves as the host has it: the namespaces then keep
	// the host's default, and the producer and the consumer still run
	// HostCC on their own sockets.
	t.CC = t.HostCC
	if allowed, err := os.ReadFile("/proc/sys/net/ipv4/tcp_allowed_congestion_control"); err == nil && !slices.Contains(strings.Fields(string(allowed)), t.HostCC) {
		def, _ := os.ReadFile("/proc/sys/net/ipv4/tcp_congestion_control")
		t.CC = strings.TrimSpace(string(def))
		t.CCNote = fmt.Sprintf("the host's default: a namespace may only take one of net.ipv4.tcp_allowed_congestion_control (%s); to give them %s too, as root: sysctl -w net.ipv4.tcp_allowed_congestion_control='%s %s'",
			strings.TrimSpace(string(allowed)), t.HostCC, strings.TrimSpace(string(allowed)), t.HostCC)
	}
	maxBuf := buf
	if maxBuf == 0 {
		maxBuf = DefaultTCPBuf(tb.Preset.BDP())
	}
	t.Rmem = fmt.Sprintf("4096 131072 %d", maxBuf)
	t.Wmem = fmt.Sprintf("4096 16384 %d", maxBuf)
	for _, r := range []string{Producer, ProducerGW, ConsumerGW, Consumer} {
		ns := tb.NS(r)
		for _, kv := range [][2]string{
			{"net.ipv4.tcp_congestion_control", t.CC},
			{"net.ipv4.tcp_rmem", t.Rmem},
			{"net.ipv4.tcp_wmem", t.Wmem},
			// A run must not inherit the previous one's ssthresh.
			{"net.ipv4.tcp_no_metrics_save", "1"},
		} {
			if err := Sysctl(ns, kv[0], kv[1]); err != nil {
				return err
			}
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	tb.Tuning = t
	return nil
}
