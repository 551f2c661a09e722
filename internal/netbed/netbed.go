// Package netbed builds a two-facility testbed on one machine out of
// network namespaces, veth links, a user-space TUN delay line and tc
// rate limits, and measures the RTT and rate it achieves.
//
//	facility A LAN            emulated WAN              facility B LAN
//	prod --lan-- pgw --wan-- [wan: delay line + tbf] --wan-- cgw --lan-- cons
//	  \                                                             /
//	   `--dir-- [dir: delay line + tbf, the same RTT] --dir--------'
//
// The producer (prod) and the consumer (cons) reach each other only
// through the gateways' proxies (pgw, cgw do not forward packets), plus a
// separate path (dir) used only for the direct baseline, emulating the
// same end-to-end RTT and rate. The root namespace reaches each gateway
// over a management veth, for the control API only.
//
// A testbed outlives the command that built it: its state (namespaces,
// delay-line PIDs) lives in a JSON file under /run/scistream-testbed, so
// another process can use it or take it down.
package netbed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// DefaultStateRoot is where testbeds keep their state.
const DefaultStateRoot = "/run/scistream-testbed"

// Namespace roles.
const (
	Producer     = "prod" // producer host, facility A
	ProducerGW   = "pgw"  // producer gateway (outbound side), facility A
	WANRouter    = "wan"  // the emulated WAN between the gateways
	ConsumerGW   = "cgw"  // consumer gateway (inbound side), facility B
	Consumer     = "cons" // consumer host, facility B
	DirectRouter = "dir"  // the emulated path of the direct baseline
)

var roles = []string{Producer, ProducerGW, WANRouter, ConsumerGW, Consumer, DirectRouter}

// Device names.
const (
	tunDev = "dl0" // the delay line's TUN device in each router
	mtu    = 9000  // jumbo frames, as on seed 000's testbed
	// tunQueueLen is the TUN device's queue towards the delay line, in
	// packets. The kernel's default, 500, is 36 ms of 1,480-byte QUIC
	// packets at 200 Mbit/s: a delay line descheduled that long on a
	// busy machine dropped 0-2,935 packets per long-WAN run at its input,
	// losses a real WAN does not have (docs/performance.md, QUIC). The
	// tbf queue behind the delay line stays the bottleneck's buffer.
	tunQueueLen = 10000
)

// Config describes a testbed to build.
type Config struct {
	// Name tells testbeds apart: 1 to 8 of a-z, 0-9. Required.
	Name string
	// Preset is the path to emulate. Required (see LookupPreset).
	Preset Preset
	// DelayLine is the command that runs a delay line (DelayLineMain); its
	// flags are appended. Required, e.g. {"/usr/bin/s2bench", "testbed",
	// "delayline"}.
	DelayLine []string
	// CC is the TCP congestion control of the hosts, as a facility's
	// run their distribution's default: the producer's and the
	// consumer's sockets (set on each: Tuning.HostCC) and the
	// namespaces' default, which the gateways' LAN legs run (the
	// gateways set their WAN legs' own, s2cs --wan_cc). A name from
	// tcp_available_congestion_control, or "" for DefaultHostCC.
	CC string
	// TCPBuf is the largest buffer TCP autotuning may give one socket
	// in the testbed's namespaces (tcp_rmem and tcp_wmem max), between
	// MinTCPBuf and MaxTCPBuf; 0 for DefaultTCPBuf of the preset.
	TCPBuf int64
	// StateRoot holds the state. If empty, DefaultStateRoot.
	StateRoot string
	// Log receives one line per step. If nil, nothing is printed.
	Log io.Writer
}

// DelayProc is a running delay line.
type DelayProc struct {
	NS    string        `json:"ns"`
	PID   int           `json:"pid"`
	Delay time.Duration `json:"delay"`
	Log   string        `json:"log"`
}

// Testbed is a testbed that is up (or partly built, while Up runs). It
// is saved as JSON in its state file.
type Testbed struct {
	Name       string       `json:"name"`
	Subnet     int          `json:"subnet"` // addresses are 10.<Subnet>.x.y
	Preset     Preset       `json:"preset"`
	Dir        string       `json:"dir"`
	Namespaces []string     `json:"namespaces"`
	RootLinks  []string     `json:"root_links"`
	DelayLines []*DelayProc `json:"delay_lines"`
	DelayCmd   []string     `json:"delay_cmd"`
	Tuning     Tuning       `json:"tuning"`
	// BaseRTT is the RTT of each emulated path with no delay configured:
	// what the veths and the delay line's own pass add, subtracted from
	// the delay so that the measured RTT meets the preset.
	BaseRTT map[string]time.Duration `json:"base_rtt"`
	Created time.Time                `json:"created"`

	log io.Writer
}

var nameRE = regexp.MustCompile(`^[a-z0-9]{1,8}$`)

// ValidateName checks a testbed name.
func ValidateName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("testbed name %q: use 1 to 8 of a-z and 0-9 (it becomes part of namespace and interface names)", name)
	}
	return nil
}

// NS returns the namespace of role.
func (tb *Testbed) NS(role string) string { return nsName(tb.Name, role) }

func nsName(name, role string) string { return "s2-" + name + "-" + role }

func (tb *Testbed) addr(third, fourth int) string {
	return fmt.Sprintf("10.%d.%d.%d", tb.Subnet, third, fourth)
}

// Addresses. Facility A LAN 10.S.1.0/24, WAN A side 10.S.2.0/24, WAN B
// side 10.S.3.0/24, facility B LAN 10.S.4.0/24, direct path 10.S.5.0/24
// (producer side) and 10.S.6.0/24 (consumer side), management 10.S.7.0/29.

// ProducerLAN is the producer's address on facility A's LAN.
func (tb *Testbed) ProducerLAN() string { return tb.addr(1, 2) }

// ProducerGWLAN is the producer gateway's address on facility A's LAN.
func (tb *Testbed) ProducerGWLAN() string { return tb.addr(1, 1) }

// LANASubnet is facility A's LAN.
func (tb *Testbed) LANASubnet() string { return tb.addr(1, 0) + "/24" }

// ProducerGWWAN is the producer gateway's WAN address: its s2cs
// --listener_ip, reached by the producer (a host route over the LAN) and
// by the root namespace (over the management link).
func (tb *Testbed) ProducerGWWAN() string { return tb.addr(2, 2) }

// ConsumerGWWAN is the consumer gateway's WAN address (its s2cs
// --listener_ip).
func (tb *Testbed) ConsumerGWWAN() string { return tb.addr(3, 2) }

// ConsumerGWLAN is the consumer gateway's address on facility B's LAN.
func (tb *Testbed) ConsumerGWLAN() string { return tb.addr(4, 1) }

// ConsumerLAN is the consumer's address on facility B's LAN.
func (tb *Testbed) ConsumerLAN() string { return tb.addr(4, 2) }

// ProducerDirect is the producer's address on the direct path.
func (tb *Testbed) ProducerDirect() string { return tb.addr(5, 2) }

// ConsumerDirect is the consumer's address on the direct path.
func (tb *Testbed) ConsumerDirect() string { return tb.addr(6, 2) }

func rootLink(name, role string) string { return "s2" + name + role[:1] } // s2<name>p, s2<name>c

func stateFile(root, name string) string { return filepath.Join(root, name+".json") }

// Load reads the state of testbed name; an error wrapping os.ErrNotExist
// if it is not up.
func Load(root, name string) (*Testbed, error) {
	if root == "" {
		root = DefaultStateRoot
	}
	b, err := os.ReadFile(stateFile(root, name))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("testbed %s is not up (no %s): %w", name, stateFile(root, name), err)
		}
		return nil, err
	}
	var tb Testbed
	if err := json.Unmarshal(b, &tb); err != nil {
		return nil, fmt.Errorf("testbed state %s: %w; take it down with: s2bench testbed down --name %s", stateFile(root, name), err, name)
	}
	return &tb, nil
}

// SetLog directs progress lines to w.
func (tb *Testbed) SetLog(w io.Writer) { tb.log = w }

func (tb *Testbed) logf(format string, args ...any) {
	if tb.log != nil {
		fmt.Fprintf(tb.log, format+"\n", args...)
	}
}

func (tb *Testbed) save() error {
	b, err := json.MarshalIndent(tb, "", "  ")
	if err != nil {
		return err
	}
	p := stateFile(filepath.Dir(tb.Dir), tb.Name)
	if err := os.WriteFile(p+".tmp", append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("testbed state: %w", err)
	}
	return os.Rename(p+".tmp", p)
}

// Up builds the testbed, starts its delay lines, applies the TCP tuning
// and calibrates the delays to the preset's RTT. On failure, or when ctx
// ends, it removes whatever it built.
func Up(ctx context.Context, cfg Config) (_ *Testbed, err error) {
	if err := ValidateName(cfg.Name); err != nil {
		return nil, err
	}
	if err := cfg.Preset.Validate(); err != nil {
		return nil, fmt.Errorf("preset %s: %w", cfg.Preset.Name, err)
	}
	if len(cfg.DelayLine) == 0 {
		return nil, errors.New("netbed: Config.DelayLine is required")
	}
	root := cfg.StateRoot
	if root == "" {
		root = DefaultStateRoot
	}
	if old, err := Load(root, cfg.Name); err == nil {
		return nil, fmt.Errorf("testbed %s is already up (preset %s, since %s): use it with s2bench testbed run --name %s, or take it down with s2bench testbed down --name %s",
			cfg.Name, old.Preset.Name, old.Created.Format(time.RFC3339), cfg.Name, cfg.Name)
	}
	if left := leftovers(cfg.Name); len(left) > 0 {
		return nil, fmt.Errorf("testbed %s has leftovers without state (%s): remove them with s2bench testbed down --name %s", cfg.Name, strings.Join(left, ", "), cfg.Name)
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("testbed state directory: %w", err)
	}
	tb := &Testbed{Name: cfg.Name, Preset: cfg.Preset, Dir: filepath.Join(root, cfg.Name), DelayCmd: cfg.DelayLine, Created: time.Now().UTC(), log: cfg.Log}
	if tb.Subnet, err = pickSubnet(ctx, root, cfg.Name); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(tb.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("testbed state directory: %w", err)
	}
	defer func() {
		if err != nil {
			if derr := tb.Down(); derr != nil {
				err = errors.Join(err, fmt.Errorf("clean up: %w", derr))
			}
		}
	}()
	if err := tb.save(); err != nil {
		return nil, err
	}
	steps := []struct {
		what string
		fn   func(context.Context) error
	}{
		{"namespaces", tb.addNamespaces},
		{"links", tb.addLinks},
		{"routes", tb.addRoutes},
		{"WAN emulation", tb.addEmulation},
		{"TCP tuning", func(ctx context.Context) error { return tb.tune(ctx, cfg.CC, cfg.TCPBuf) }},
		{"delay lines and calibration", tb.calibrate},
	}
	for _, s := range steps {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("interrupted before %s: %w", s.what, context.Cause(ctx))
		}
		start := time.Now()
		if err := s.fn(ctx); err != nil {
			return nil, fmt.Errorf("testbed %s: %s: %w", tb.Name, s.what, err)
		}
		if err := tb.save(); err != nil {
			return nil, err
		}
		tb.logf("testbed %s: %s done in %.0f ms", tb.Name, s.what, ms(time.Since(start)))
	}
	return tb, nil
}

// leftovers lists namespaces and root links of testbed name.
func leftovers(name string) []string {
	var out []string
	for _, r := range roles {
		if nsExists(nsName(name, r)) {
			out = append(out, "namespace "+nsName(name, r))
		}
	}
	for _, r := range []string{ProducerGW, ConsumerGW} {
		if _, err := os.Stat("/sys/class/net/" + rootLink(name, r)); err == nil {
			out = append(out, "link "+rootLink(name, r))
		}
	}
	return out
}

// pickSubnet chooses S for 10.S.0.0/16: derived from the name, and not
// routed in the root namespace nor used by another testbed.
func pickSubnet(ctx context.Context, root, name string) (int, error) {
	out, err := exec.CommandContext(ctx, "ip", "-4", "route", "show", "table", "all").Output()
	if err != nil {
		return 0, fmt.Errorf("ip route: %w", err)
	}
	used := map[int]bool{}
	for _, f := range strings.Fields(string(out)) {
		if strings.HasPrefix(f, "10.") {
			if p := strings.SplitN(f, ".", 3); len(p) >= 2 {
				if v, err := strconv.Atoi(p[1]); err == nil {
					used[v] = true
				}
			}
		}
	}
	states, _ := filepath.Glob(filepath.Join(root, "*.json"))
	for _, s := range states {
		if tb, err := Load(root, strings.TrimSuffix(filepath.Base(s), ".json")); err == nil {
			used[tb.Subnet] = true
		}
	}
	h := fnv.New32a()
	h.Write([]byte(name))
	const lo, n = 64, 190 // 10.64.0.0 to 10.253.0.0
	for i := range n {
		s := lo + (int(h.Sum32())+i)%n
		if !used[s] {
			return s, nil
		}
	}
	return 0, errors.New("no free 10.S.0.0/16 for the testbed: every candidate is routed here; take other testbeds down")
}

func (tb *Testbed) addNamespaces(ctx context.Context) error {
	for _, r := range roles {
		ns := tb.NS(r)
		tb.Namespaces = append(tb.Namespaces, ns) // before: a half-made one is removed too
		if err := ip(ctx, "netns", "add", ns); err != nil {
			return err
		}
		if err := ip(ctx, "-n", ns, "link", "set", "lo", "up"); err != nil {
			return err
		}
	}
	// The routers forward (only between their two sides, by policy
	// routing through the delay line); the hosts and the gateways never
	// do (the default in a new namespace, written down to be sure).
	for _, r := range roles {
		fwd := "0"
		if r == WANRouter || r == DirectRouter {
			fwd = "1"
		}
		if err := Sysctl(tb.NS(r), "net.ipv4.ip_forward", fwd); err != nil {
			return err
		}
		// Packets come back from the TUN device with addresses routed
		// elsewhere: strict reverse-path filtering would drop them.
		for _, k := range []string{"all", "default"} {
			if err := Sysctl(tb.NS(r), "net.ipv4.conf."+k+".rp_filter", "0"); err != nil {
				return err
			}
		}
	}
	return nil
}

type link struct {
	aNS, aDev, aAddr string
	bNS, bDev, bAddr string
	prefix           int
}

func (tb *Testbed) links() []link {
	n := tb.NS
	return []link{
		{n(Producer), "lan", tb.addr(1, 2), n(ProducerGW), "lan", tb.addr(1, 1), 24},
		{n(ProducerGW), "wan", tb.addr(2, 2), n(WANRouter), "west", tb.addr(2, 1), 24},
		{n(WANRouter), "east", tb.addr(3, 1), n(ConsumerGW), "wan", tb.addr(3, 2), 24},
		{n(ConsumerGW), "lan", tb.addr(4, 1), n(Consumer), "lan", tb.addr(4, 2), 24},
		{n(Producer), "dir", tb.addr(5, 2), n(DirectRouter), "west", tb.addr(5, 1), 24},
		{n(DirectRouter), "east", tb.addr(6, 1), n(Consumer), "dir", tb.addr(6, 2), 24},
		{"", rootLink(tb.Name, ProducerGW), tb.addr(7, 1), n(ProducerGW), "mgmt", tb.addr(7, 2), 30},
		{"", rootLink(tb.Name, ConsumerGW), tb.addr(7, 5), n(ConsumerGW), "mgmt", tb.addr(7, 6), 30},
	}
}

// nsArgs prefixes an ip command with -n ns, or nothing for the root
// namespace.
func nsArgs(ns string, args ...string) []string {
	if ns == "" {
		return args
	}
	return append([]string{"-n", ns}, args...)
}

func (tb *Testbed) addLinks(ctx context.Context) error {
	for _, l := range tb.links() {
		if l.aNS == "" {
			tb.RootLinks = append(tb.RootLinks, l.aDev)
		}
		if err := ip(ctx, nsArgs(l.aNS, "link", "add", l.aDev, "mtu", strconv.Itoa(mtu), "type", "veth", "peer", "name", l.bDev, "netns", l.bNS, "mtu", strconv.Itoa(mtu))...); err != nil {
			return err
		}
		for _, e := range [][3]string{{l.aNS, l.aDev, l.aAddr}, {l.bNS, l.bDev, l.bAddr}} {
			if err := ip(ctx, nsArgs(e[0], "addr", "add", e[2]+"/"+strconv.Itoa(l.prefix), "dev", e[1])...); err != nil {
				return err
			}
			if err := ip(ctx, nsArgs(e[0], "link", "set", "dev", e[1], "up")...); err != nil {
				return err
			}
		}
	}
	return nil
}

func (tb *Testbed) addRoutes(ctx context.Context) error {
	n := tb.NS
	routes := [][]string{
		// The gateways reach each other over the WAN only.
		{n(ProducerGW), "10.%d.3.0/24", tb.addr(2, 1)},
		{n(ConsumerGW), "10.%d.2.0/24", tb.addr(3, 1)},
		// The producer reaches its gateway's listeners (bound to the WAN
		// address) over its LAN, and the consumer only over the direct
		// path; the consumer's LAN stays unreachable from facility A.
		{n(Producer), tb.ProducerGWWAN() + "/32", tb.addr(1, 1)},
		{n(Producer), "10.%d.6.0/24", tb.addr(5, 1)},
		{n(Consumer), "10.%d.5.0/24", tb.addr(6, 1)},
		// The root namespace reaches each gateway's control API.
		{"", tb.ProducerGWWAN() + "/32", tb.addr(7, 2)},
		{"", tb.ConsumerGWWAN() + "/32", tb.addr(7, 6)},
	}
	for _, r := range routes {
		dst := r[1]
		if strings.Contains(dst, "%d") {
			dst = fmt.Sprintf(dst, tb.Subnet)
		}
		if err := ip(ctx, nsArgs(r[0], "route", "add", dst, "via", r[2])...); err != nil {
			return err
		}
	}
	return nil
}

// addEmulation sets up, in each router, the TUN device every packet
// between its two sides passes (policy routing: what comes in on west or east
// goes to the TUN; what the delay line writes back is routed normally),
// and the rate limit on both egresses.
func (tb *Testbed) addEmulation(ctx context.Context) error {
	p := tb.Preset
	rateB := float64(p.RateBps) / 8
	// tbf's bucket: a few jumbo frames or 1 ms at the rate; its queue: one
	// bandwidth-delay product, a router buffer that lets one TCP flow
	// fill the pipe.
	burst := max(int64(4*mtu), int64(rateB/1000))
	limit := max(p.BDP(), 16*int64(mtu))
	for _, r := range []string{WANRouter, DirectRouter} {
		ns := tb.NS(r)
		cmds := [][]string{
			{"tuntap", "add", "dev", tunDev, "mode", "tun"},
			{"link", "set", tunDev, "mtu", strconv.Itoa(mtu), "txqueuelen", strconv.Itoa(tunQueueLen), "up"},
			{"rule", "add", "iif", "west", "lookup", "100", "pref", "100"},
			{"rule", "add", "iif", "east", "lookup", "100", "pref", "101"},
			{"route", "add", "default", "dev", tunDev, "table", "100"},
		}
		for _, c := range cmds {
			if err := ip(ctx, nsArgs(ns, c...)...); err != nil {
				return err
			}
		}
		if err := Sysctl(ns, "net.ipv4.conf."+tunDev+".rp_filter", "0"); err != nil {
			return err
		}
		for _, dev := range []string{"west", "east"} {
			if err := tc(ctx, ns, "qdisc", "add", "dev", dev, "root", "tbf",
				"rate", strconv.FormatInt(p.RateBps, 10)+"bit",
				"burst", strconv.FormatInt(burst, 10), "limit", strconv.FormatInt(limit, 10)); err != nil {
				return fmt.Errorf("rate limit: %w", err)
			}
		}
	}
	return nil
}

// startDelayLines (re)starts the delay line of each router with the
// given one-way delays.
func (tb *Testbed) startDelayLines(ctx context.Context, wanDelay, dirDelay time.Duration) error {
	if err := tb.stopDelayLines(); err != nil {
		return err
	}
	queue := max(4*tb.Preset.BDP(), 8<<20)
	for _, r := range []struct {
		role  string
		delay time.Duration
	}{{WANRouter, wanDelay}, {DirectRouter, dirDelay}} {
		ns := tb.NS(r.role)
		logPath := filepath.Join(tb.Dir, r.role+"-delayline.log")
		lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return err
		}
		args := append([]string{"netns", "exec", ns}, tb.DelayCmd...)
		args = append(args, "--dev", tunDev, "--delay", r.delay.String(),
			"--queue_bytes", strconv.FormatInt(queue, 10),
			"--loss", strconv.FormatFloat(tb.Preset.Loss, 'g', -1, 64),
			"--flow_rate", strconv.FormatInt(tb.Preset.FlowRateBps, 10),
			"--seed", strconv.FormatInt(time.Now().UnixNano(), 10),
			"--testbed", tb.Name)
		cmd := exec.Command("ip", args...)
		cmd.Stdout, cmd.Stderr = lf, lf
		// Its own session: a Ctrl-C at the terminal reaches only the
		// command, which then takes the testbed down in order.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		err = cmd.Start()
		lf.Close()
		if err != nil {
			return fmt.Errorf("start the delay line in %s: %w", ns, err)
		}
		dp := &DelayProc{NS: ns, PID: cmd.Process.Pid, Delay: r.delay, Log: logPath}
		tb.DelayLines = append(tb.DelayLines, dp)
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }() // reaps it if it ends while we run
		if err := tb.save(); err != nil {
			return err
		}
		if err := waitReady(ctx, logPath, dp.PID, exited); err != nil {
			return fmt.Errorf("delay line in %s: %w", ns, err)
		}
	}
	return nil
}

// waitReady waits for the delay line's ready line in its log.
func waitReady(ctx context.Context, logPath string, pid int, exited <-chan error) error {
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	want := fmt.Sprintf("delayline: ready pid %d", pid)
	for {
		b, _ := os.ReadFile(logPath)
		if strings.Contains(string(b), want) {
			return nil
		}
		select {
		case err := <-exited:
			return fmt.Errorf("exited (%v): %s", err, lastLine(string(b)))
		case <-deadline.C:
			return fmt.Errorf("not ready within 10s: %s", lastLine(string(b)))
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-tick.C:
		}
	}
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndex(s, "\n"); i >= 0 {
		return s[i+1:]
	}
	return s
}

// stopDelayLines stops the delay lines it started, by PID.
func (tb *Testbed) stopDelayLines() error {
	var errs []error
	for _, d := range tb.DelayLines {
		if err := stopPID(d.PID, "--testbed\x00"+tb.Name+"\x00"); err != nil {
			errs = append(errs, fmt.Errorf("delay line in %s: %w", d.NS, err))
		}
	}
	tb.DelayLines = nil
	return errors.Join(errs...)
}

// stopPID sends SIGTERM to pid if its command line contains marker (so
// a PID reused by another program is left alone), waits up to 5 seconds
// for it to end, then kills it.
func stopPID(pid int, marker string) error {
	cl, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || (marker != "" && !strings.Contains(string(cl), marker)) {
		return nil // gone, or not ours any more
	}
	p, err := os.FindProcess(pid)
	if err != nil {
		return nil
	}
	p.Signal(syscall.SIGTERM)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if gone(pid) {
			return nil
		}
		time.Sleep(5 * time.Millisecond) // polling another process's exit: no event to wait on
	}
	p.Kill()
	for range 200 {
		if gone(pid) {
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	return fmt.Errorf("pid %d did not exit after SIGKILL", pid)
}

// gone reports whether pid has exited (a zombie has: it holds no
// namespace any more).
func gone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] == 'Z' || s[i+2] == 'X'
	}
	return false
}

// Down takes the testbed down: stops its delay lines and every process
// left in its namespaces, deletes the namespaces (and with them every
// link and TUN device) and its state. It runs to the end whatever
// fails, and returns every error.
func (tb *Testbed) Down() error {
	err := tb.stopDelayLines()
	return errors.Join(err, DownByName(filepath.Dir(tb.Dir), tb.Name))
}

// DownByName removes what testbed name left, with or without its state
// file: processes in its namespaces (by PID), the namespaces, root
// links and the state.
func DownByName(root, name string) error {
	if root == "" {
		root = DefaultStateRoot
	}
	if err := ValidateName(name); err != nil {
		return err
	}
	var errs []error
	if tb, err := Load(root, name); err == nil {
		errs = append(errs, tb.stopDelayLines())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// The root ends of the management links first: deleting a namespace
	// destroys its links only once the kernel has released it, later.
	for _, r := range []string{ProducerGW, ConsumerGW} {
		l := rootLink(name, r)
		if _, err := os.Stat("/sys/class/net/" + l); err == nil {
			errs = append(errs, ip(ctx, "link", "del", l))
		}
	}
	for _, r := range roles {
		ns := nsName(name, r)
		if !nsExists(ns) {
			continue
		}
		out, _ := exec.CommandContext(ctx, "ip", "netns", "pids", ns).Output()
		for _, f := range strings.Fields(string(out)) {
			if pid, err := strconv.Atoi(f); err == nil && pid != os.Getpid() {
				errs = append(errs, stopPID(pid, ""))
			}
		}
		errs = append(errs, ip(ctx, "netns", "del", ns))
	}
	errs = append(errs, os.RemoveAll(filepath.Join(root, name)))
	if err := os.Remove(stateFile(root, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	if left := leftovers(name); len(left) > 0 {
		errs = append(errs, fmt.Errorf("still present after down: %s", strings.Join(left, ", ")))
	}
	return errors.Join(errs...)
}
