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
	// CC is net.ipv4.tcp_congestion_control.
	CC string `json:"cc"`
	// Available is tcp_available_congestion_control.
	Available []string `json:"available"`
	// Rmem and Wmem are net.ipv4.tcp_rmem and tcp_wmem ("min default
	// max"): the max is twice the bandwidth-delay product (at least the
	// kernel's default), so that autotuning can keep a long fat pipe full.
	Rmem string `json:"tcp_rmem"`
	Wmem string `json:"tcp_wmem"`
}

func (t Tuning) String() string {
	return fmt.Sprintf("congestion control %s (available: %s); tcp_rmem %q, tcp_wmem %q, tcp_no_metrics_save 1",
		t.CC, strings.Join(t.Available, " "), t.Rmem, t.Wmem)
}

// chooseCC returns want if available, or, for "", bbr if available and
// cubic otherwise.
func chooseCC(want string, available []string) (string, error) {
	if want != "" {
		if !slices.Contains(available, want) {
			return "", fmt.Errorf("congestion control %q is not available here (available: %s): choose one of those, or load its module (modprobe tcp_%s)",
				want, strings.Join(available, " "), want)
		}
		return want, nil
	}
	for _, c := range []string{"bbr", "cubic"} {
		if slices.Contains(available, c) {
			return c, nil
		}
	}
	if len(available) == 0 {
		return "", fmt.Errorf("no TCP congestion control listed as available")
	}
	return available[0], nil
}

func (tb *Testbed) tune(ctx context.Context, cc string) error {
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_available_congestion_control")
	if err != nil {
		return fmt.Errorf("congestion controls: %w", err)
	}
	t := Tuning{Available: strings.Fields(string(b))}
	if t.CC, err = chooseCC(cc, t.Available); err != nil {
		return err
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
