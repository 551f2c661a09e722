package netbed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Tolerance is how far the measured RTT and rate may be from the preset
// before an experiment refuses to run.
const Tolerance = 0.10

// Measurement is what the testbed achieved, measured over real sockets
// in its namespaces.
type Measurement struct {
	// DirectRTT is producer to consumer over the direct path. Every RTT
	// is the minimum over a series of round trips: the path's own RTT,
	// without the scheduling noise of a busy machine (which only ever
	// adds); the medians are kept for the record.
	DirectRTT time.Duration `json:"direct_rtt"`
	// LANARTT, WANRTT and LANBRTT are producer to its gateway, gateway
	// to gateway, and consumer gateway to consumer.
	LANARTT time.Duration `json:"lan_a_rtt"`
	WANRTT  time.Duration `json:"wan_rtt"`
	LANBRTT time.Duration `json:"lan_b_rtt"`
	// DirectRateBps and WANRateBps are the rates a paced UDP flow above
	// the preset's rate got through each path.
	DirectRateBps float64 `json:"direct_rate_bps"`
	WANRateBps    float64 `json:"wan_rate_bps"`
	// DirectMedian and GatewayMedian are the median RTTs (the gateway
	// path's as the sum of its segments' medians).
	DirectMedian  time.Duration `json:"direct_rtt_median"`
	GatewayMedian time.Duration `json:"gateway_rtt_median"`
}

// GatewayRTT is the RTT producer to consumer through the gateways: the
// sum of the three segments.
func (m *Measurement) GatewayRTT() time.Duration { return m.LANARTT + m.WANRTT + m.LANBRTT }

func (m *Measurement) String() string {
	return fmt.Sprintf("RTT direct %.3f ms, through the gateways %.3f ms (LAN A %.3f + WAN %.3f + LAN B %.3f; medians %.3f / %.3f ms); rate direct %s, WAN %s",
		ms(m.DirectRTT), ms(m.GatewayRTT()), ms(m.LANARTT), ms(m.WANRTT), ms(m.LANBRTT), ms(m.DirectMedian), ms(m.GatewayMedian),
		FormatRate(m.DirectRateBps), FormatRate(m.WANRateBps))
}

// Check returns an error naming every value more than Tolerance away
// from the preset.
func (m *Measurement) Check(p Preset) error {
	var bad []string
	off := func(got, want float64) bool { return math.Abs(got-want) > Tolerance*want }
	if off(float64(m.DirectRTT), float64(p.RTT)) {
		bad = append(bad, fmt.Sprintf("direct RTT %.3f ms", ms(m.DirectRTT)))
	}
	if off(float64(m.GatewayRTT()), float64(p.RTT)) {
		bad = append(bad, fmt.Sprintf("gateway-path RTT %.3f ms", ms(m.GatewayRTT())))
	}
	if off(m.DirectRateBps, float64(p.RateBps)) {
		bad = append(bad, "direct rate "+FormatRate(m.DirectRateBps))
	}
	if off(m.WANRateBps, float64(p.RateBps)) {
		bad = append(bad, "WAN rate "+FormatRate(m.WANRateBps))
	}
	if len(bad) > 0 {
		return fmt.Errorf("the testbed is more than %.0f%% off preset %s: %s; the machine may be too busy (retry when it is quieter), or the rate too high for it (lower --wan_rate)",
			Tolerance*100, p, strings.Join(bad, ", "))
	}
	return nil
}

// rttProbes is how many round trips an RTT measurement takes: enough for
// a stable median, bounded to about 1.5 s on long paths.
func rttProbes(rtt time.Duration) int {
	return min(max(int(1500*time.Millisecond/max(rtt, time.Microsecond)), 7), 41)
}

// Measure measures the RTT of every segment and the rate of both
// emulated paths.
func (tb *Testbed) Measure(ctx context.Context) (*Measurement, error) {
	for _, d := range tb.DelayLines {
		if gone(d.PID) {
			return nil, fmt.Errorf("the delay line in %s (pid %d) is not running (its log: %s): rebuild the testbed with s2bench testbed down --name %s, then up",
				d.NS, d.PID, d.Log, tb.Name)
		}
	}
	m := &Measurement{}
	n := rttProbes(tb.Preset.RTT)
	var err error
	probes := []struct {
		dst      *time.Duration
		med      *time.Duration
		src, dns string
		ip       string
		n        int
	}{
		{&m.DirectRTT, &m.DirectMedian, Producer, Consumer, tb.ConsumerDirect(), n},
		{&m.LANARTT, new(time.Duration), Producer, ProducerGW, tb.ProducerGWLAN(), 21},
		{&m.WANRTT, new(time.Duration), ProducerGW, ConsumerGW, tb.ConsumerGWWAN(), n},
		{&m.LANBRTT, new(time.Duration), ConsumerGW, Consumer, tb.ConsumerLAN(), 21},
	}
	for _, p := range probes {
		if *p.dst, *p.med, err = RTT(ctx, tb.NS(p.src), tb.NS(p.dns), p.ip, p.n); err != nil {
			return nil, err
		}
	}
	m.GatewayMedian = *probes[1].med + *probes[2].med + *probes[3].med
	if m.DirectRateBps, err = Rate(ctx, tb.NS(Producer), tb.NS(Consumer), tb.ConsumerDirect(), tb.Preset.RateBps, tb.Preset.RTT); err != nil {
		return nil, err
	}
	if m.WANRateBps, err = Rate(ctx, tb.NS(ProducerGW), tb.NS(ConsumerGW), tb.ConsumerGWWAN(), tb.Preset.RateBps, tb.Preset.RTT); err != nil {
		return nil, err
	}
	return m, nil
}

// Calibrate measures the RTT of both emulated paths with no delay and
// restarts the delay lines with what the preset's RTT needs on top: the
// direct path carries all of it; the WAN carries what the two LANs leave.
// It saves the new delay lines in the testbed's state.
func (tb *Testbed) Calibrate(ctx context.Context) error {
	if err := tb.calibrate(ctx); err != nil {
		return err
	}
	return tb.save()
}

// MeasureChecked measures the testbed and, while it is more than
// Tolerance off the preset, corrects the delays by the RTT error measured
// (half of it each way) and measures again, up to attempts times in all:
// the calibration at Up was taken with the delay lines idle and at one
// moment of the machine's load, and the feedback accounts for both. It
// returns the last measurement and, if that is still off, the error of
// Check.
func (tb *Testbed) MeasureChecked(ctx context.Context, attempts int) (*Measurement, error) {
	for i := 1; ; i++ {
		m, err := tb.Measure(ctx)
		if err != nil {
			return nil, err
		}
		cerr := m.Check(tb.Preset)
		if cerr == nil || i >= attempts {
			return m, cerr
		}
		var wan, dir time.Duration
		for _, d := range tb.DelayLines {
			switch d.NS {
			case tb.NS(WANRouter):
				wan = d.Delay
			case tb.NS(DirectRouter):
				dir = d.Delay
			}
		}
		wan = max(wan+(tb.Preset.RTT-m.GatewayRTT())/2, 0)
		dir = max(dir+(tb.Preset.RTT-m.DirectRTT)/2, 0)
		tb.logf("testbed %s: measured %s; more than %.0f%% off: one-way delay direct %.3f ms, WAN %.3f ms (attempt %d of %d)",
			tb.Name, m, Tolerance*100, ms(dir), ms(wan), i+1, attempts)
		if err := tb.startDelayLines(ctx, wan, dir); err != nil {
			return nil, err
		}
		if err := tb.save(); err != nil {
			return nil, err
		}
	}
}

func (tb *Testbed) calibrate(ctx context.Context) error {
	if err := tb.startDelayLines(ctx, 0, 0); err != nil {
		return err
	}
	var err error
	tb.BaseRTT = map[string]time.Duration{}
	for _, p := range []struct{ key, src, dst, ip string }{
		{"direct", Producer, Consumer, tb.ConsumerDirect()},
		{"lan_a", Producer, ProducerGW, tb.ProducerGWLAN()},
		{"wan", ProducerGW, ConsumerGW, tb.ConsumerGWWAN()},
		{"lan_b", ConsumerGW, Consumer, tb.ConsumerLAN()},
	} {
		if tb.BaseRTT[p.key], _, err = RTT(ctx, tb.NS(p.src), tb.NS(p.dst), p.ip, 41); err != nil {
			return err
		}
	}
	rtt := tb.Preset.RTT
	dir := max(rtt-tb.BaseRTT["direct"], 0) / 2
	wan := max(rtt-tb.BaseRTT["lan_a"]-tb.BaseRTT["lan_b"]-tb.BaseRTT["wan"], 0) / 2
	tb.logf("testbed %s: base RTT direct %.3f ms, LAN A %.3f, WAN %.3f, LAN B %.3f; one-way delay direct %.3f ms, WAN %.3f ms",
		tb.Name, ms(tb.BaseRTT["direct"]), ms(tb.BaseRTT["lan_a"]), ms(tb.BaseRTT["wan"]), ms(tb.BaseRTT["lan_b"]), ms(dir), ms(wan))
	return tb.startDelayLines(ctx, wan, dir)
}

// RTT measures the round trip of one byte over a TCP connection from
// namespace srcNS to a listener on ip in namespace dstNS, over n
// exchanges (the first, which may wait for the connection, is not
// counted), and returns the minimum and the median.
func RTT(ctx context.Context, srcNS, dstNS, ip string, n int) (minimum, median time.Duration, err error) {
	var ln *net.TCPListener
	err = Do(dstNS, func() (err error) {
		ln, err = net.ListenTCP("tcp", &net.TCPAddr{IP: net.ParseIP(ip)})
		return err
	})
	if err != nil {
		return 0, 0, fmt.Errorf("RTT probe listener in %s: %w", dstNS, err)
	}
	defer ln.Close()
	deadline := time.Now().Add(30 * time.Second)
	ln.SetDeadline(deadline)
	echoed := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			echoed <- err
			return
		}
		defer c.Close()
		c.SetDeadline(deadline)
		_, err = io.Copy(c, c)
		echoed <- err
	}()
	var c net.Conn
	err = Do(srcNS, func() (err error) {
		d := net.Dialer{Deadline: deadline}
		c, err = d.DialContext(ctx, "tcp", ln.Addr().String())
		return err
	})
	if err != nil {
		return 0, 0, fmt.Errorf("RTT probe from %s to %s: %w", srcNS, ln.Addr(), err)
	}
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	c.SetDeadline(deadline)
	var samples []time.Duration
	b := []byte{0}
	for i := range n + 1 {
		start := time.Now()
		if _, err := c.Write(b); err != nil {
			c.Close()
			return 0, 0, fmt.Errorf("RTT probe to %s: %w", ln.Addr(), err)
		}
		if _, err := io.ReadFull(c, b); err != nil {
			c.Close()
			return 0, 0, fmt.Errorf("RTT probe to %s: %w", ln.Addr(), err)
		}
		if i > 0 {
			samples = append(samples, time.Since(start))
		}
	}
	c.Close()
	if err := <-echoed; err != nil && ctx.Err() == nil {
		return 0, 0, fmt.Errorf("RTT probe echo in %s: %w", dstNS, err)
	}
	slices.Sort(samples)
	return samples[0], samples[len(samples)/2], nil
}

// Rate measures what a UDP flow paced 25% above rateBps for a second from
// namespace srcNS gets through to ip in dstNS: the highest rate of
// arrivals over any stretch of at least rateWindow. The path's rate limit
// caps every stretch; taking the best one keeps a sender or delay line
// that a busy machine deschedules for a moment from passing for a slow
// path.
func Rate(ctx context.Context, srcNS, dstNS, ip string, rateBps int64, rtt time.Duration) (float64, error) {
	const dgram = 8000 // fits a jumbo frame
	var rc *net.UDPConn
	err := Do(dstNS, func() (err error) {
		rc, err = net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(ip)})
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("rate probe receiver in %s: %w", dstNS, err)
	}
	defer rc.Close()
	// A receive buffer far above net.core.rmem_max (SO_RCVBUFFORCE, as
	// root): a receiver descheduled on a busy machine must not drop
	// datagrams the path delivered, or it would measure the machine, not
	// the path.
	if raw, err := rc.SyscallConn(); err == nil {
		raw.Control(func(fd uintptr) {
			unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 32<<20)
		})
	}
	var sc *net.UDPConn
	err = Do(srcNS, func() (err error) {
		sc, err = net.DialUDP("udp", nil, rc.LocalAddr().(*net.UDPAddr))
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("rate probe sender in %s: %w", srcNS, err)
	}
	defer sc.Close()

	type result struct{ arrivals []arrival }
	sent := make(chan struct{})
	got := make(chan result, 1)
	go func() {
		var r result
		buf := make([]byte, 65536)
		quiet := max(2*rtt, 300*time.Millisecond)
		senderDone := false
		for {
			if !senderDone {
				select {
				case <-sent:
					senderDone = true
				default:
				}
			}
			wait := 3 * time.Second
			if senderDone {
				wait = quiet
			}
			rc.SetReadDeadline(time.Now().Add(wait))
			n, err := rc.Read(buf)
			if err != nil {
				if senderDone || ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) && !isTimeout(err) {
					got <- r
					return
				}
				continue
			}
			r.arrivals = append(r.arrivals, arrival{time.Now(), n})
		}
	}()
	payload := make([]byte, dgram)
	dur := time.Second
	pace := float64(rateBps) * 1.25 / 8 // bytes/s
	start := time.Now()
	var out int64
	for elapsed := time.Duration(0); elapsed < dur && ctx.Err() == nil; elapsed = time.Since(start) {
		for float64(out) < pace*elapsed.Seconds() {
			if _, err := sc.Write(payload); err == nil {
				out += dgram
			} else {
				break // a full socket buffer: try again later
			}
		}
		time.Sleep(200 * time.Microsecond) // pacing the sender's own datagrams
	}
	close(sent)
	r := <-got
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	best := bestRate(r.arrivals, rateWindow)
	if best == 0 {
		return 0, fmt.Errorf("rate probe %s -> %s: %d datagrams got through, too few to measure a rate over %s", srcNS, ip, len(r.arrivals), rateWindow)
	}
	return best, nil
}

// arrival is one datagram's arrival.
type arrival struct {
	at time.Time
	n  int
}

// bestRate returns the highest rate in bits/s over any stretch of
// arrivals at least window long: the bytes after arrival i up to arrival
// j over their time apart, for each i and the first j at least window
// after it (two pointers, linear). 0 if no stretch is long enough.
func bestRate(a []arrival, window time.Duration) float64 {
	best := 0.0
	var sum int64 // bytes of arrivals i+1..j
	j := 0
	for i := range a {
		if j < i {
			j, sum = i, 0
		}
		for j+1 < len(a) && a[j].at.Sub(a[i].at) < window {
			j++
			sum += int64(a[j].n)
		}
		span := a[j].at.Sub(a[i].at)
		if span < window {
			break
		}
		best = max(best, float64(sum)*8/span.Seconds())
		if i+1 <= j {
			sum -= int64(a[i+1].n)
		}
	}
	return best
}

// rateWindow is the shortest stretch of arrivals a rate is measured over.
const rateWindow = 300 * time.Millisecond

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
