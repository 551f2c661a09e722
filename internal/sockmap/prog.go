package sockmap

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
)

// Verdict values of an SK_SKB program.
const (
	skDrop = 0
	skPass = 1
)

// Layout of a ctl value (written by user space only; replaced whole, so
// the program never sees a half-written one: the map is not preallocated,
// so an update swaps in a new element under RCU).
const (
	ctlPeer   = 0  // cookie of the egress socket, the key in the targets map
	ctlLimit  = 8  // credit granted by user space: redirect while redirected+len <= limit
	ctlResume = 16 // leave passing mode when seen == resume (user space read every passed byte)
	ctlOffset = 24 // egress "sent" at the start + bytes user space wrote since
	ctlWindow = 32 // the window, for the credit computed in the kernel
	ctlSize   = 40
)

// Layout of a state value (written by the program only, one socket's
// program runs are serialised by the socket lock).
const (
	stSeen       = 0  // bytes of every skb the program decided on
	stRedirected = 8  // bytes redirected to the peer
	stPassing    = 16 // 1 while skbs go to user space (sticky until seen == resume)
	stNext       = 24 // TCP sequence number of the next byte not yet decided on
	stNextOK     = 32 // 1 once stNext is set
	stTrimmed    = 40 // bytes trimmed off the head of skbs: already decided on (retransmitted overlap)
	stBroken     = 48 // 1 if an overlap could not be trimmed: user space aborts
	stSize       = 56
)

// maxTrimCalls bounds the bpf_skb_adjust_room calls (at most 4095 bytes
// each) that trim one skb's overlap.
const maxTrimCalls = 80

// program returns the SK_SKB stream verdict program:
//
//	len := skb.len
//	if len == 0 { return DROP }                   // bare FIN: no byte; user space sees EOF
//	c := ctl[cookie]; s := st[cookie]
//	if c == nil || s == nil { return PASS }
//	if s.broken { return DROP }                   // user space aborts
//	if !s.nextOK { s.next = sk.copied_seq; s.nextOK = 1 }
//	over := s.next - TCP_SKB_CB(skb)->seq         // (mod 2^32) a retransmission's repeated head
//	if over > 0 {
//		s.trimmed += over
//		if over >= len { return DROP }            // nothing new
//		pull over bytes off the head (bpf_skb_adjust_room, 4095 at a time)
//		len = skb.len
//	}
//	s.next = TCP_SKB_CB(skb)->end_seq
//	if s.passing {                                // keep order behind passed bytes
//		if s.seen != c.resume { s.seen += len; return PASS }
//		s.passing = 0                             // user space read them all
//	}
//	n := s.redirected + len
//	sent := egress.bytes_acked + (egress.write_seq - egress.snd_una)
//	queued := c.offset + n - sent                 // ahead of the egress socket, with this skb
//	if n > c.limit && queued > c.window {         // credit stale, and the window full
//		s.passing = 1; s.seen += len; return PASS
//	}
//	if egress.sk_wmem_queued + queued*9/8 > egress.sk_sndbuf {
//		s.passing = 1; s.seen += len; return PASS  // no room: the worker would stall a jiffy
//	}
//	s.redirected = n; s.seen += len
//	return sk_redirect_hash(skb, targets, &c.peer, 0)   // to the egress socket's send path
func program(ctl, st, targets *ebpf.Map, off tcpOffsets) asm.Instructions {
	const (
		rCtx = asm.R6
		rLen = asm.R7
		rCtl = asm.R8
		rSt  = asm.R9
	)
	return asm.Instructions{
		asm.Mov.Reg(rCtx, asm.R1),
		asm.LoadMem(rLen, rCtx, 0, asm.Word), // __sk_buff.len
		asm.JEq.Imm(rLen, 0, "empty"),

		asm.Mov.Reg(asm.R1, rCtx),
		asm.FnGetSocketCookie.Call(),
		asm.StoreMem(asm.RFP, -8, asm.R0, asm.DWord),

		asm.LoadMapPtr(asm.R1, ctl.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -8),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "pass"),
		asm.Mov.Reg(rCtl, asm.R0),

		asm.LoadMapPtr(asm.R1, st.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -8),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "pass"),
		asm.Mov.Reg(rSt, asm.R0),

		// Trim the head of an skb that repeats bytes already decided
		// on: TCP queues a retransmission that overlaps received
		// data whole (seq < rcv_nxt), and tcp_read_skb hands it to
		// us whole, ignoring that offset.
		asm.LoadMem(asm.R1, rSt, stBroken, asm.DWord),
		asm.JNE.Imm(asm.R1, 0, "empty"),
		asm.LoadMem(asm.R1, rSt, stNextOK, asm.DWord),
		asm.JNE.Imm(asm.R1, 0, "havenext"),
		// First skb: the next byte is the ingress socket's copied_seq
		// (user space has read everything before it, see prepare).
		asm.LoadMem(asm.R1, rCtx, int16(off.skbSk), asm.DWord),
		asm.JEq.Imm(asm.R1, 0, "seqinit"),
		asm.FnSkcToTcpSock.Call(),
		asm.JEq.Imm(asm.R0, 0, "seqinit"),
		asm.LoadMem(asm.R2, asm.R0, int16(off.copiedSeq), asm.Word),
		asm.Ja.Label("setnext"),
		asm.LoadMem(asm.R2, rCtx, int16(off.skbCb), asm.Word).WithSymbol("seqinit"),
		asm.StoreMem(rSt, stNext, asm.R2, asm.DWord).WithSymbol("setnext"),
		asm.Mov.Imm(asm.R1, 1),
		asm.StoreMem(rSt, stNextOK, asm.R1, asm.DWord),
		asm.LoadMem(asm.R2, rSt, stNext, asm.DWord).WithSymbol("havenext"),
		asm.LoadMem(asm.R3, rCtx, int16(off.skbCb), asm.Word), // TCP_SKB_CB(skb)->seq
		asm.Sub.Reg32(asm.R2, asm.R3),                         // overlap = next - seq (mod 2^32)
		asm.JEq.Imm(asm.R2, 0, "advance"),
		asm.JSLT.Imm32(asm.R2, 0, "advance"), // a gap: cannot be (TCP queues in order)
		asm.LoadMem(asm.R1, rSt, stTrimmed, asm.DWord),
		asm.Add.Reg(asm.R1, asm.R2),
		asm.StoreMem(rSt, stTrimmed, asm.R1, asm.DWord),
		asm.JGE.Reg(asm.R2, rLen, "empty"),                      // nothing new in it: next stays
		asm.StoreMem(asm.RFP, -56, asm.R2, asm.DWord),           // left to trim
		asm.LoadMem(asm.R4, rCtx, int16(off.skbCb)+4, asm.Word), // end_seq
		asm.StoreMem(rSt, stNext, asm.R4, asm.DWord),
		asm.Mov.Imm(asm.R1, 0),
		asm.StoreMem(asm.RFP, -64, asm.R1, asm.DWord), // calls made
		asm.LoadMem(asm.R2, asm.RFP, -56, asm.DWord).WithSymbol("trim"),
		asm.JEq.Imm(asm.R2, 0, "trimmed"),
		asm.LoadMem(asm.R1, asm.RFP, -64, asm.DWord),
		asm.JGE.Imm(asm.R1, maxTrimCalls, "broken"),
		asm.Add.Imm(asm.R1, 1),
		asm.StoreMem(asm.RFP, -64, asm.R1, asm.DWord),
		asm.JLE.Imm(asm.R2, 4095, "chunk"),
		asm.Mov.Imm(asm.R2, 4095),
		asm.LoadMem(asm.R3, asm.RFP, -56, asm.DWord).WithSymbol("chunk"),
		asm.Sub.Reg(asm.R3, asm.R2),
		asm.StoreMem(asm.RFP, -56, asm.R3, asm.DWord),
		asm.Mov.Imm(asm.R3, 0),
		asm.Sub.Reg(asm.R3, asm.R2),
		asm.Mov.Reg(asm.R2, asm.R3), // -chunk
		asm.Mov.Reg(asm.R1, rCtx),
		asm.Mov.Imm(asm.R3, 0),
		asm.Mov.Imm(asm.R4, 0),
		asm.FnSkbAdjustRoom.Call(), // mode 0, negative: pulls len bytes off the head
		asm.JNE.Imm(asm.R0, 0, "broken"),
		asm.Ja.Label("trim"),
		asm.LoadMem(rLen, rCtx, 0, asm.Word).WithSymbol("trimmed"),
		asm.JEq.Imm(rLen, 0, "broken"),
		asm.Ja.Label("decide"),
		asm.LoadMem(asm.R4, rCtx, int16(off.skbCb)+4, asm.Word).WithSymbol("advance"), // end_seq
		asm.StoreMem(rSt, stNext, asm.R4, asm.DWord),

		asm.LoadMem(asm.R1, rSt, stPassing, asm.DWord).WithSymbol("decide"),
		asm.JEq.Imm(asm.R1, 0, "check"),
		asm.LoadMem(asm.R2, rSt, stSeen, asm.DWord),
		asm.LoadMem(asm.R3, rCtl, ctlResume, asm.DWord),
		asm.JNE.Reg(asm.R2, asm.R3, "passcount"),
		asm.Mov.Imm(asm.R1, 0), // user space has read every passed byte
		asm.StoreMem(rSt, stPassing, asm.R1, asm.DWord),

		asm.LoadMem(asm.R2, rSt, stRedirected, asm.DWord).WithSymbol("check"),
		asm.Add.Reg(asm.R2, rLen),
		asm.StoreMem(asm.RFP, -24, asm.R2, asm.DWord), // redirected+len
		// Look at the egress socket: how much it has taken (sent),
		// and how much room its send buffer has left.
		asm.LoadMem(asm.R2, rCtl, ctlPeer, asm.DWord),
		asm.StoreMem(asm.RFP, -16, asm.R2, asm.DWord),
		asm.LoadMapPtr(asm.R1, targets.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -16),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "exhaust"),
		asm.StoreMem(asm.RFP, -32, asm.R0, asm.DWord), // the socket, to release
		asm.Mov.Reg(asm.R1, asm.R0),
		asm.FnSkcToTcpSock.Call(),
		asm.Mov.Imm(asm.R3, 0),
		asm.StoreMem(asm.RFP, -40, asm.R3, asm.DWord), // ok flag
		asm.JEq.Imm(asm.R0, 0, "release"),
		// sent = bytes_acked + (write_seq - snd_una), the unit user space
		// uses (bytes_acked + SIOCOUTQ).
		asm.LoadMem(asm.R3, asm.R0, int16(off.writeSeq), asm.Word),
		asm.LoadMem(asm.R4, asm.R0, int16(off.sndUna), asm.Word),
		asm.Sub.Reg32(asm.R3, asm.R4),
		asm.LoadMem(asm.R4, asm.R0, int16(off.bytesAcked), asm.DWord),
		asm.Add.Reg(asm.R3, asm.R4),
		asm.StoreMem(asm.RFP, -48, asm.R3, asm.DWord), // sent
		asm.LoadMem(asm.R3, asm.R0, int16(off.wmemQueued), asm.Word),
		asm.StoreMem(asm.RFP, -72, asm.R3, asm.DWord), // sk_wmem_queued
		asm.LoadMem(asm.R3, asm.R0, int16(off.sndbuf), asm.Word),
		asm.StoreMem(asm.RFP, -80, asm.R3, asm.DWord), // sk_sndbuf
		asm.Mov.Imm(asm.R3, 1),
		asm.StoreMem(asm.RFP, -40, asm.R3, asm.DWord),
		asm.LoadMem(asm.R1, asm.RFP, -32, asm.DWord).WithSymbol("release"),
		asm.FnSkRelease.Call(),
		asm.LoadMem(asm.R3, asm.RFP, -40, asm.DWord),
		asm.JEq.Imm(asm.R3, 0, "exhaust"),
		asm.LoadMem(asm.R2, asm.RFP, -24, asm.DWord),
		asm.LoadMem(asm.R4, rCtl, ctlOffset, asm.DWord),
		asm.Add.Reg(asm.R2, asm.R4),
		asm.LoadMem(asm.R3, asm.RFP, -48, asm.DWord),
		asm.JGT.Reg(asm.R3, asm.R2, "exhaust"), // cannot be: be safe
		asm.Sub.Reg(asm.R2, asm.R3),
		asm.StoreMem(asm.RFP, -88, asm.R2, asm.DWord), // queued, with this skb
		// Within the credit user space last granted, or else within
		// the window by the egress socket's own progress.
		asm.LoadMem(asm.R3, rCtl, ctlLimit, asm.DWord),
		asm.LoadMem(asm.R4, asm.RFP, -24, asm.DWord),
		asm.JLE.Reg(asm.R4, asm.R3, "room"),
		asm.LoadMem(asm.R4, rCtl, ctlWindow, asm.DWord),
		asm.JGT.Reg(asm.R2, asm.R4, "exhaust"),
		// Room: the egress socket must take every queued byte at once
		// (a full socket makes the kernel's worker retry a jiffy
		// later: a 4 ms stall at HZ=250). Bytes become send-buffer
		// memory with some skb overhead: count them as 9/8.
		asm.LoadMem(asm.R2, asm.RFP, -88, asm.DWord).WithSymbol("room"),
		asm.Mov.Reg(asm.R3, asm.R2),
		asm.RSh.Imm(asm.R3, 3),
		asm.Add.Reg(asm.R2, asm.R3),
		asm.LoadMem(asm.R3, asm.RFP, -72, asm.DWord),
		asm.Add.Reg(asm.R2, asm.R3),
		asm.LoadMem(asm.R3, asm.RFP, -80, asm.DWord),
		asm.JGT.Reg(asm.R2, asm.R3, "exhaust"),
		asm.LoadMem(asm.R2, asm.RFP, -24, asm.DWord),
		asm.StoreMem(rSt, stRedirected, asm.R2, asm.DWord),
		asm.LoadMem(asm.R2, rSt, stSeen, asm.DWord),
		asm.Add.Reg(asm.R2, rLen),
		asm.StoreMem(rSt, stSeen, asm.R2, asm.DWord),
		asm.LoadMem(asm.R2, rCtl, ctlPeer, asm.DWord),
		asm.StoreMem(asm.RFP, -16, asm.R2, asm.DWord),
		asm.Mov.Reg(asm.R1, rCtx),
		asm.LoadMapPtr(asm.R2, targets.FD()),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, -16),
		asm.Mov.Imm(asm.R4, 0),
		asm.FnSkRedirectHash.Call(),
		asm.Return(),

		asm.Mov.Imm(asm.R1, 1).WithSymbol("exhaust"),
		asm.StoreMem(rSt, stPassing, asm.R1, asm.DWord),
		asm.LoadMem(asm.R2, rSt, stSeen, asm.DWord).WithSymbol("passcount"),
		asm.Add.Reg(asm.R2, rLen),
		asm.StoreMem(rSt, stSeen, asm.R2, asm.DWord),
		asm.Mov.Imm(asm.R0, skPass).WithSymbol("pass"),
		asm.Return(),
		// A bare FIN: no byte to lose; its state (RCV_SHUTDOWN) is
		// already on the socket, so a read sees EOF. Passed instead,
		// the kernel would queue an empty message that reads as
		// EFAULT when the skb's FIN flag is not visible any more.
		asm.Mov.Imm(asm.R0, skDrop).WithSymbol("empty"),
		asm.Return(),
		// An overlap that could not be trimmed: user space aborts the
		// connection rather than deliver a byte twice.
		asm.Mov.Imm(asm.R1, 1).WithSymbol("broken"),
		asm.StoreMem(rSt, stBroken, asm.R1, asm.DWord),
		asm.Mov.Imm(asm.R0, skDrop),
		asm.Return(),
	}
}

// ErrUnavailable is returned by New when the kernel refuses the program or
// its maps (no CAP_BPF / CAP_NET_ADMIN, no SOCKMAP support).
var ErrUnavailable = errors.New("sockmap redirect unavailable")

// Config configures a Redirector.
type Config struct {
	// MaxSockets bounds the number of sockets in each map, so the number
	// of directions that can be redirected at once. If zero, 16384.
	MaxSockets uint32
	// Window bounds, per direction, the bytes redirected into the kernel
	// queue of the egress socket and not yet accepted by its send buffer.
	// If zero, DefaultWindow.
	Window int64
	// ForceUnavailable makes New fail as if the kernel refused the
	// program (tests, and s2cs's SCISTREAM_SOCKMAP=off).
	ForceUnavailable bool
}

// DefaultWindow is the default per-direction bound on redirected bytes
// queued in the kernel ahead of the egress socket.
const DefaultWindow = 4 << 20

// Redirector owns the loaded verdict program and its maps. One serves
// every connection of a process; it is safe for concurrent use.
type Redirector struct {
	cfg     Config
	verdict *ebpf.Map // SOCKHASH with the program attached: ingress sockets
	targets *ebpf.Map // SOCKHASH without a program: egress sockets
	hold    *ebpf.Map // SOCKHASH without a program: keeps an ingress socket's psock (and any byte passed to it) alive until Copy has read it, whatever the other direction does
	ctl     *ebpf.Map
	st      *ebpf.Map
	prog    *ebpf.Program

	stats struct {
		redirected, fallbacks, passes, userBytes, kernelBytes, trimmed, queued atomic.Int64
	}

	mu     sync.Mutex // guards the following fields
	closed bool
	active int // Copy calls in progress; Close waits for none
	idle   *sync.Cond
	// gates, by socket cookie, are closed once the Copy reading that
	// socket has prepared it (see Copy): before that the socket must
	// not enter a map, which would make SIOCINQ report the psock's
	// queue instead of TCP's.
	gates map[uint64]*gate
}

// New loads the verdict program and creates its maps. It returns an error
// wrapping ErrUnavailable when the kernel refuses them; the caller then
// uses another engine.
func New(cfg Config) (*Redirector, error) {
	if cfg.MaxSockets == 0 {
		cfg.MaxSockets = 16384
	}
	if cfg.Window == 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.Window < 64<<10 {
		return nil, fmt.Errorf("sockmap window %d bytes: use at least 64 KiB", cfg.Window)
	}
	if cfg.ForceUnavailable {
		return nil, fmt.Errorf("%w: disabled by configuration", ErrUnavailable)
	}
	r := &Redirector{cfg: cfg, gates: map[uint64]*gate{}}
	r.idle = sync.NewCond(&r.mu)
	ok := false
	defer func() {
		if !ok {
			r.closeObjects()
		}
	}()
	off, err := kernelOffsets()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	sockHash := func(name string) (*ebpf.Map, error) {
		return ebpf.NewMap(&ebpf.MapSpec{Name: name, Type: ebpf.SockHash, KeySize: 8, ValueSize: 4, MaxEntries: cfg.MaxSockets})
	}
	if r.verdict, err = sockHash("s2_verdict"); err != nil {
		return nil, fmt.Errorf("%w: create SOCKHASH: %v (needs CAP_BPF and CAP_NET_ADMIN)", ErrUnavailable, err)
	}
	if r.targets, err = sockHash("s2_targets"); err != nil {
		return nil, fmt.Errorf("%w: create SOCKHASH: %v", ErrUnavailable, err)
	}
	if r.hold, err = sockHash("s2_hold"); err != nil {
		return nil, fmt.Errorf("%w: create SOCKHASH: %v", ErrUnavailable, err)
	}
	if r.ctl, err = ebpf.NewMap(&ebpf.MapSpec{Name: "s2_ctl", Type: ebpf.Hash, KeySize: 8, ValueSize: ctlSize,
		MaxEntries: cfg.MaxSockets, Flags: 1 /* BPF_F_NO_PREALLOC: updates swap whole elements */}); err != nil {
		return nil, fmt.Errorf("%w: create control map: %v", ErrUnavailable, err)
	}
	if r.st, err = ebpf.NewMap(&ebpf.MapSpec{Name: "s2_state", Type: ebpf.Hash, KeySize: 8, ValueSize: stSize,
		MaxEntries: cfg.MaxSockets}); err != nil {
		return nil, fmt.Errorf("%w: create state map: %v", ErrUnavailable, err)
	}
	if r.prog, err = ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         "s2_verdict",
		Type:         ebpf.SkSKB,
		AttachType:   ebpf.AttachSkSKBStreamVerdict,
		License:      "GPL",
		Instructions: program(r.ctl, r.st, r.targets, off),
	}); err != nil {
		return nil, fmt.Errorf("%w: load SK_SKB verdict program: %v", ErrUnavailable, err)
	}
	if err := link.RawAttachProgram(link.RawAttachProgramOptions{
		Target: r.verdict.FD(), Program: r.prog, Attach: ebpf.AttachSkSKBStreamVerdict,
	}); err != nil {
		return nil, fmt.Errorf("%w: attach stream verdict: %v", ErrUnavailable, err)
	}
	ok = true
	return r, nil
}

// Window is the per-direction bound on redirected bytes queued in the
// kernel ahead of the egress socket.
func (r *Redirector) Window() int64 { return r.cfg.Window }

// Close waits for every Copy in progress to return, then unloads the
// program and frees the maps. It is idempotent.
func (r *Redirector) Close() error {
	r.mu.Lock()
	r.closed = true
	for r.active > 0 {
		r.idle.Wait()
	}
	r.mu.Unlock()
	r.closeObjects()
	return nil
}

func (r *Redirector) closeObjects() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.prog != nil && r.verdict != nil {
		link.RawDetachProgram(link.RawDetachProgramOptions{
			Target: r.verdict.FD(), Program: r.prog, Attach: ebpf.AttachSkSKBStreamVerdict,
		})
	}
	for _, c := range []interface{ Close() error }{r.prog, r.verdict, r.targets, r.hold, r.ctl, r.st} {
		switch c := c.(type) {
		case *ebpf.Program:
			if c != nil {
				c.Close()
			}
		case *ebpf.Map:
			if c != nil {
				c.Close()
			}
		}
	}
	r.prog, r.verdict, r.targets, r.hold, r.ctl, r.st = nil, nil, nil, nil, nil, nil
}

// acquire registers a Copy; it fails once Close has begun.
func (r *Redirector) acquire() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || r.prog == nil {
		return false
	}
	r.active++
	return true
}

func (r *Redirector) release() {
	r.mu.Lock()
	r.active--
	if r.active == 0 {
		r.idle.Broadcast()
	}
	r.mu.Unlock()
}

// Stats counts what the Redirector did since New.
type Stats struct {
	Redirected  int64 // directions handed to the kernel
	Fallbacks   int64 // directions left to user space (ErrFallback)
	Passes      int64 // times the program passed bytes to user space (window spent, or no room in the egress socket)
	UserBytes   int64 // bytes Copy moved in user space
	KernelBytes int64 // bytes the program redirected
	Trimmed     int64 // retransmitted bytes the program trimmed off skbs (already delivered)
	// KernelQueued is a gauge: bytes redirected and not yet taken by
	// their egress socket, summed over the directions running now, as
	// each last looked (every 250 us to 50 ms while it waits). Bytes
	// wait there only while the kernel's worker is behind: the program
	// redirects only what the egress socket has room for.
	KernelQueued int64
}

// Stats returns the counters.
func (r *Redirector) Stats() Stats {
	return Stats{
		Redirected:   r.stats.redirected.Load(),
		Fallbacks:    r.stats.fallbacks.Load(),
		Passes:       r.stats.passes.Load(),
		UserBytes:    r.stats.userBytes.Load(),
		KernelBytes:  r.stats.kernelBytes.Load(),
		Trimmed:      r.stats.trimmed.Load(),
		KernelQueued: r.stats.queued.Load(),
	}
}

// tcpOffsets are offsets of struct tcp_sock fields in the running
// kernel, from its BTF: the program reads them to see how far the egress
// socket has taken redirected bytes.
type tcpOffsets struct {
	writeSeq, sndUna, bytesAcked, copiedSeq uint32 // struct tcp_sock
	wmemQueued, sndbuf                      uint32 // struct sock, at the start of tcp_sock
	skbCb, skbSk                            uint32 // struct __sk_buff
}

func kernelOffsets() (tcpOffsets, error) {
	var o tcpOffsets
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		return o, fmt.Errorf("kernel BTF: %v", err)
	}
	var ts *btf.Struct
	if err := spec.TypeByName("tcp_sock", &ts); err != nil {
		return o, fmt.Errorf("kernel BTF: struct tcp_sock: %v", err)
	}
	for _, f := range []struct {
		name string
		dst  *uint32
	}{{"write_seq", &o.writeSeq}, {"snd_una", &o.sndUna}, {"bytes_acked", &o.bytesAcked}, {"copied_seq", &o.copiedSeq}} {
		off, ok := memberOffset(ts.Members, f.name)
		if !ok {
			return o, fmt.Errorf("kernel BTF: no tcp_sock.%s", f.name)
		}
		*f.dst = off
	}
	// struct sock sits at offset 0 of tcp_sock, nested three deep.
	sockPath := []string{"inet_conn", "icsk_inet", "sk"}
	for _, f := range []struct {
		name string
		dst  *uint32
	}{{"sk_wmem_queued", &o.wmemQueued}, {"sk_sndbuf", &o.sndbuf}} {
		off, ok := pathOffset(ts, append(sockPath, f.name))
		if !ok {
			return o, fmt.Errorf("kernel BTF: no tcp_sock.%s.%s", strings.Join(sockPath, "."), f.name)
		}
		*f.dst = off
	}
	var sb *btf.Struct
	if err := spec.TypeByName("__sk_buff", &sb); err != nil {
		return o, fmt.Errorf("kernel BTF: struct __sk_buff: %v", err)
	}
	for _, f := range []struct {
		name string
		dst  *uint32
	}{{"cb", &o.skbCb}, {"sk", &o.skbSk}} {
		off, ok := memberOffset(sb.Members, f.name)
		if !ok {
			return o, fmt.Errorf("kernel BTF: no __sk_buff.%s", f.name)
		}
		*f.dst = off
	}
	return o, nil
}

// pathOffset returns the offset of a member nested in s by the path of
// member names.
func pathOffset(s *btf.Struct, path []string) (uint32, bool) {
	var total uint32
	ms := s.Members
	for i, name := range path {
		var m *btf.Member
		for j := range ms {
			if ms[j].Name == name {
				m = &ms[j]
				break
			}
		}
		if m == nil {
			return 0, false
		}
		total += m.Offset.Bytes()
		if i == len(path)-1 {
			return total, true
		}
		inner, ok := btf.UnderlyingType(m.Type).(*btf.Struct)
		if !ok {
			return 0, false
		}
		ms = inner.Members
	}
	return 0, false
}

func memberOffset(ms []btf.Member, name string) (uint32, bool) {
	for _, m := range ms {
		if m.Name == name {
			return m.Offset.Bytes(), true
		}
		if m.Name == "" {
			var inner []btf.Member
			switch t := btf.UnderlyingType(m.Type).(type) {
			case *btf.Struct:
				inner = t.Members
			case *btf.Union:
				inner = t.Members
			}
			if off, ok := memberOffset(inner, name); ok {
				return m.Offset.Bytes() + off, true
			}
		}
	}
	return 0, false
}

// gate is where the two directions of a relayed socket pair meet: the
// Copy reading a socket opens its gate once the socket is prepared; the
// Copy writing to it waits for that before putting it in a map. Each
// socket's gate is visited by those two Copy calls and dropped when both
// have left (or at once when the wait times out).
type gate struct {
	ch    chan struct{}
	exits int
}

func (r *Redirector) gate(key uint64) chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	g, ok := r.gates[key]
	if !ok {
		g = &gate{ch: make(chan struct{})}
		r.gates[key] = g
	}
	return g.ch
}

// open marks key's socket as prepared.
func (r *Redirector) open(key uint64) {
	ch := r.gate(key)
	r.mu.Lock()
	defer r.mu.Unlock()
	select {
	case <-ch:
	default:
		close(ch)
	}
}

// leaveGate records that one of the two visitors of key's gate is done.
func (r *Redirector) leaveGate(key uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if g, ok := r.gates[key]; ok {
		if g.exits++; g.exits >= 2 {
			delete(r.gates, key)
		}
	}
}

func (r *Redirector) dropGate(key uint64) {
	r.mu.Lock()
	delete(r.gates, key)
	r.mu.Unlock()
}
