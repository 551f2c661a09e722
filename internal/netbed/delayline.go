package netbed

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// DelayLineConfig configures a user-space delay line on one TUN device.
type DelayLineConfig struct {
	// Dev is the TUN device to attach to (it may exist, persistent, with
	// its routes; otherwise it is created for the life of the line).
	// Required.
	Dev string
	// Delay is how long every packet is held. Zero forwards at once.
	Delay time.Duration
	// QueueBytes bounds the bytes held; a packet that would exceed it is
	// dropped (drop-tail). If zero, 64 MiB.
	QueueBytes int
	// QueuePackets bounds the packets held, likewise. If zero, 65536.
	QueuePackets int
	// Loss is the probability, 0..1, of dropping a packet at random.
	Loss float64
	// Seed seeds the random losses.
	Seed uint64
	// MTU is the largest packet read. If zero, 65535.
	MTU int
	// FlowRate, if not zero, polices each TCP flow (its addresses and
	// ports, each direction apart) to this many bits per second: a
	// packet its token bucket (FlowBurst) cannot pay for is dropped.
	FlowRate int64
}

// flowBurst is a flow's token bucket: 20 ms of its rate, at least
// 64 KiB (a policer's usual committed burst is of that order).
func flowBurst(rate int64) float64 { return max(float64(rate)/8*0.020, 64<<10) }

// flowKey names a TCP flow in one direction: addresses and ports.
type flowKey struct {
	src, dst         [16]byte
	srcPort, dstPort uint16
}

// tcpFlow returns the flow of an IPv4 or IPv6 packet carrying TCP (no
// extension headers), or false.
func tcpFlow(b []byte) (flowKey, bool) {
	var k flowKey
	var l4 []byte
	switch {
	case len(b) >= 20 && b[0]>>4 == 4:
		ihl := int(b[0]&0xf) * 4
		if b[9] != unix.IPPROTO_TCP || ihl < 20 || len(b) < ihl+4 {
			return k, false
		}
		copy(k.src[:], b[12:16])
		copy(k.dst[:], b[16:20])
		l4 = b[ihl:]
	case len(b) >= 44 && b[0]>>4 == 6:
		if b[6] != unix.IPPROTO_TCP {
			return k, false
		}
		copy(k.src[:], b[8:24])
		copy(k.dst[:], b[24:40])
		l4 = b[40:]
	default:
		return k, false
	}
	k.srcPort, k.dstPort = uint16(l4[0])<<8|uint16(l4[1]), uint16(l4[2])<<8|uint16(l4[3])
	return k, true
}

// policer is the per-flow token buckets of FlowRate.
type policer struct {
	rate  float64 // bytes per second
	burst float64
	flows map[flowKey]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

// maxFlows bounds the buckets held: past it they start again full.
const maxFlows = 1 << 16

// admit reports whether the flow of packet b (n bytes) may pass at now.
func (p *policer) admit(b []byte, n int, now time.Time) bool {
	k, ok := tcpFlow(b)
	if !ok {
		return true
	}
	bk := p.flows[k]
	if bk == nil {
		if len(p.flows) >= maxFlows {
			clear(p.flows)
		}
		bk = &bucket{tokens: p.burst, at: now}
		p.flows[k] = bk
	}
	bk.tokens = min(p.burst, bk.tokens+now.Sub(bk.at).Seconds()*p.rate)
	bk.at = now
	if bk.tokens < float64(n) {
		return false
	}
	bk.tokens -= float64(n)
	return true
}

// DelayLineStats counts what a delay line did.
type DelayLineStats struct {
	Forwarded, Dropped, Lost, Late int64 // packets; Late: written >100us after due
	Policed                        int64 // packets over their flow's rate (FlowRate)
}

// DelayLine holds every packet the kernel routes into its TUN device for
// a fixed time and then writes it back into the device, where the kernel
// routes it on (policy routing by incoming interface keeps it from
// coming back). Packets leave in the order they came: the delay is the
// same for all, so the queue is time-ordered by construction.
type DelayLine struct {
	cfg DelayLineConfig
	f   *os.File

	forwarded, dropped, lost, late, policed atomic.Int64
	pools                                   [len(bufClasses)]sync.Pool
}

const tunMaxRead = 65535

// OpenDelayLine attaches to cfg.Dev. The caller runs Run and then Close.
func OpenDelayLine(cfg DelayLineConfig) (*DelayLine, error) {
	switch {
	case cfg.Dev == "" || len(cfg.Dev) >= unix.IFNAMSIZ:
		return nil, fmt.Errorf("delay line: device name %q: give 1 to %d characters", cfg.Dev, unix.IFNAMSIZ-1)
	case cfg.Delay < 0 || cfg.Delay > 10*time.Second:
		return nil, fmt.Errorf("delay line: delay %s out of range 0 to 10s", cfg.Delay)
	case cfg.Loss < 0 || cfg.Loss >= 1:
		return nil, fmt.Errorf("delay line: loss %g out of range [0, 1)", cfg.Loss)
	case cfg.QueueBytes < 0 || cfg.QueuePackets < 0:
		return nil, errors.New("delay line: negative queue bound")
	case cfg.FlowRate < 0:
		return nil, errors.New("delay line: negative per-flow rate")
	}
	if cfg.QueueBytes == 0 {
		cfg.QueueBytes = 64 << 20
	}
	if cfg.QueuePackets == 0 {
		cfg.QueuePackets = 65536
	}
	if cfg.MTU <= 0 || cfg.MTU > tunMaxRead {
		cfg.MTU = tunMaxRead
	}
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("delay line: open /dev/net/tun: %w (is the tun module available?)", err)
	}
	var ifr [unix.IFNAMSIZ + 64]byte
	copy(ifr[:], cfg.Dev)
	*(*uint16)(unsafe.Pointer(&ifr[unix.IFNAMSIZ])) = unix.IFF_TUN | unix.IFF_NO_PI
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TUNSETIFF, uintptr(unsafe.Pointer(&ifr[0]))); errno != 0 {
		unix.Close(fd)
		return nil, fmt.Errorf("delay line: attach to TUN device %s: %w", cfg.Dev, errno)
	}
	return &DelayLine{cfg: cfg, f: os.NewFile(uintptr(fd), "/dev/net/tun:"+cfg.Dev)}, nil
}

// Stats returns the counters so far.
func (d *DelayLine) Stats() DelayLineStats {
	return DelayLineStats{d.forwarded.Load(), d.dropped.Load(), d.lost.Load(), d.late.Load(), d.policed.Load()}
}

// Close detaches from the device. It ends a running Run.
func (d *DelayLine) Close() error { return d.f.Close() }

type packet struct {
	due time.Time
	b   []byte
}

// spinBelow is the remaining wait under which the writer polls the clock
// instead of sleeping. Go's timers fire up to a millisecond late here
// (measured: 1 ms for a 50 us sleep), far too coarse for a LAN preset (a
// one-way delay of ~0.1 ms) and 4% of a short WAN's RTT; so the writer
// sleeps in nanosleep(2) on its own thread, with a 1 ns timer slack
// (~50-70 us late, measured), and spins the last stretch.
const spinBelow = 250 * time.Microsecond

// Run forwards packets until ctx ends or the device is closed. It
// returns nil when ctx ended.
func (d *DelayLine) Run(ctx context.Context) error {
	queue := make(chan packet, d.cfg.QueuePackets)
	var held atomic.Int64 // bytes in queue
	stop := context.AfterFunc(ctx, func() { d.f.Close() })
	defer stop()

	var wg sync.WaitGroup
	werr := make(chan error, 1)
	done := make(chan struct{})
	wg.Go(func() {
		// The thread ends with the goroutine, so its timer slack does not
		// leak to other goroutines: no UnlockOSThread.
		runtime.LockOSThread()
		unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
		for {
			var p packet
			select {
			case p = <-queue:
			case <-done:
				return
			}
			if wait := time.Until(p.due); wait > spinBelow {
				ts := unix.NsecToTimespec(int64(wait - spinBelow))
				unix.Nanosleep(&ts, nil) // EINTR only shortens the sleep; the spin below completes it
			}
			for time.Now().Before(p.due) {
			}
			if time.Since(p.due) > 100*time.Microsecond {
				d.late.Add(1)
			}
			_, err := d.f.Write(p.b)
			held.Add(-int64(len(p.b)))
			d.putBuf(p.b)
			if err != nil {
				if errors.Is(err, os.ErrClosed) {
					return
				}
				// A packet the kernel refuses (no route, ...) is dropped
				// as a router would; only a dead device ends the line.
				if errors.Is(err, unix.EBADFD) || errors.Is(err, unix.ENODEV) {
					werr <- fmt.Errorf("delay line: write: %w", err)
					return
				}
				d.dropped.Add(1)
				continue
			}
			d.forwarded.Add(1)
		}
	})
	defer func() {
		close(done)
		wg.Wait()
	}()

	rng := rand.New(rand.NewPCG(d.cfg.Seed, d.cfg.Seed^0x9e3779b97f4a7c15))
	var pol *policer
	if d.cfg.FlowRate > 0 {
		pol = &policer{rate: float64(d.cfg.FlowRate) / 8, burst: flowBurst(d.cfg.FlowRate), flows: map[flowKey]*bucket{}}
	}
	buf := make([]byte, d.cfg.MTU)
	for {
		n, err := d.f.Read(buf)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			select {
			case e := <-werr:
				return e
			default:
			}
			if errors.Is(err, os.ErrClosed) {
				return nil
			}
			return fmt.Errorf("delay line: read: %w", err)
		}
		now := time.Now()
		if n == 0 {
			continue
		}
		if d.cfg.Loss > 0 && rng.Float64() < d.cfg.Loss {
			d.lost.Add(1)
			continue
		}
		if pol != nil && !pol.admit(buf[:n], n, now) {
			d.policed.Add(1)
			continue
		}
		if held.Load()+int64(n) > int64(d.cfg.QueueBytes) {
			d.dropped.Add(1)
			continue
		}
		p := packet{due: now.Add(d.cfg.Delay), b: d.getBuf(n)}
		copy(p.b, buf[:n])
		select {
		case queue <- p:
			held.Add(int64(n))
		default:
			d.putBuf(p.b)
			d.dropped.Add(1)
		}
	}
}

// Packet buffers come from pools by size class, so a queue of small ACKs
// does not pin jumbo-sized buffers.
var bufClasses = [...]int{128, 1600, 9216, tunMaxRead}

func (d *DelayLine) getBuf(n int) []byte {
	for i, c := range bufClasses {
		if n <= c {
			if b, ok := d.pools[i].Get().(*[]byte); ok {
				return (*b)[:n]
			}
			return make([]byte, n, c)
		}
	}
	return make([]byte, n)
}

func (d *DelayLine) putBuf(b []byte) {
	for i, c := range bufClasses {
		if cap(b) == c {
			d.pools[i].Put(&b)
			return
		}
	}
}
