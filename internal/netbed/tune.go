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
	// max"): the max is twice the bandwidth-delay product (at least the
	// kernel's default), so that autotuning can keep a long fat pipe full.
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

func (tb *Testbed) tune(ctx context.Context, cc string) error {
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
	maxBuf := max(2*tb.Preset.BDP(), 6<<20)
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
