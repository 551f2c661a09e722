package netbed

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Preset is one emulated path: the overall round-trip time from
// producer to consumer, and the WAN's rate.
type Preset struct {
	// Name identifies the preset on the command line.
	Name string `json:"name"`
	// RTT is the round-trip time producer to consumer, the same over the
	// direct path and through the gateways (LAN + WAN + LAN).
	RTT time.Duration `json:"rtt"`
	// RateBps is the WAN's rate in bits per second, both directions;
	// the direct path gets the same.
	RateBps int64 `json:"rate_bps"`
	// Loss is the probability of losing a packet on the WAN, 0..1.
	Loss float64 `json:"loss,omitempty"`
	// FlowRateBps, if not zero, polices each TCP flow on the WAN and
	// the direct path to this many bits per second, each direction, as
	// a flow-balanced firewall or a per-flow policer does (a packet over
	// the flow's token bucket is dropped); the link keeps RateBps.
	FlowRateBps int64 `json:"flow_rate_bps,omitempty"`
}

// DefaultRateBps is the presets' WAN rate: what the user-space delay line
// and the gateways carry on a small machine with room to spare, so that
// the WAN, not the machine, is the bottleneck (docs/testbed.md).
const DefaultRateBps = 200_000_000

// Presets are the five setups of seed 000 Table I, by their overall
// average RTT (producer LAN + gateway WAN + consumer LAN).
var presetTable = []Preset{
	{Name: "lan", RTT: 440 * time.Microsecond},
	{Name: "metro", RTT: 5490 * time.Microsecond},
	{Name: "shortwan", RTT: 24344 * time.Microsecond},
	{Name: "wan", RTT: 58161 * time.Microsecond},
	{Name: "longwan", RTT: 143691 * time.Microsecond},
}

// PresetNames lists the presets, in order of RTT.
func PresetNames() []string {
	var n []string
	for _, p := range presetTable {
		n = append(n, p.Name)
	}
	return n
}

// LookupPreset returns the named preset with the default rate.
func LookupPreset(name string) (Preset, error) {
	for _, p := range presetTable {
		if p.Name == name {
			p.RateBps = DefaultRateBps
			return p, nil
		}
	}
	return Preset{}, fmt.Errorf("unknown preset %q: use one of %s", name, strings.Join(PresetNames(), ", "))
}

// Validate checks the preset's bounds.
func (p Preset) Validate() error {
	switch {
	case p.RTT < 100*time.Microsecond || p.RTT > 2*time.Second:
		return fmt.Errorf("RTT %s out of range: give 100us to 2s", p.RTT)
	case p.RateBps < 1_000_000 || p.RateBps > 10_000_000_000:
		return fmt.Errorf("rate %d bit/s out of range: give 1Mbit to 10Gbit", p.RateBps)
	case p.Loss < 0 || p.Loss >= 0.5:
		return fmt.Errorf("loss %g out of range: give 0 to 0.5", p.Loss)
	case p.FlowRateBps != 0 && (p.FlowRateBps < 100_000 || p.FlowRateBps > p.RateBps):
		return fmt.Errorf("per-flow rate %d bit/s out of range: give 100kbit to the link's rate, %d bit/s", p.FlowRateBps, p.RateBps)
	}
	return nil
}

// BDP is the bandwidth-delay product in bytes.
func (p Preset) BDP() int64 { return int64(float64(p.RateBps) / 8 * p.RTT.Seconds()) }

func (p Preset) String() string {
	s := fmt.Sprintf("%s: RTT %.3f ms, rate %s", p.Name, ms(p.RTT), FormatRate(float64(p.RateBps)))
	if p.Loss > 0 {
		s += fmt.Sprintf(", loss %.4g%%", p.Loss*100)
	}
	if p.FlowRateBps > 0 {
		s += ", each TCP flow policed to " + FormatRate(float64(p.FlowRateBps))
	}
	return s
}

// FormatRate prints bits per second with a unit.
func FormatRate(bps float64) string {
	switch {
	case bps >= 1e9:
		return fmt.Sprintf("%.3g Gbit/s", bps/1e9)
	case bps >= 1e6:
		return fmt.Sprintf("%.4g Mbit/s", bps/1e6)
	}
	return fmt.Sprintf("%.4g kbit/s", bps/1e3)
}

// ParseRate parses a rate such as 500mbit, 1gbit, 100M or 2.5G (bits/s).
func ParseRate(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "/s"), "bit")
	t = strings.TrimSuffix(t, "bps")
	mult := 1.0
	switch {
	case strings.HasSuffix(t, "g"):
		mult, t = 1e9, strings.TrimSuffix(t, "g")
	case strings.HasSuffix(t, "m"):
		mult, t = 1e6, strings.TrimSuffix(t, "m")
	case strings.HasSuffix(t, "k"):
		mult, t = 1e3, strings.TrimSuffix(t, "k")
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || !(v > 0) || math.IsInf(v, 0) || v*mult > 1e12 {
		return 0, fmt.Errorf("rate %q: want a positive number of bits/s with k, m or g, e.g. 500mbit", s)
	}
	return int64(v * mult), nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
