package relay

import (
	"errors"
	"fmt"
	"strings"

	"scistream/internal/sockmap"
)

// Options configure the engines a gateway builds once and shares between
// all its streams. Every zero value is a usable default.
type Options struct {
	// BufferSize is the ring of the buffer engine for each direction of
	// each connection, in bytes, from MinBufferSize to MaxBufferSize; the
	// splice engine copies QUIC legs through the same ring. If zero,
	// DefaultBufferSize.
	BufferSize int
	// Sockmap is the loaded eBPF program behind the sockmap engine; the
	// caller owns it and closes it after the last relay ended. If nil,
	// the sockmap engine copies as splice does.
	Sockmap *sockmap.Redirector
	// MaxPipes caps the kernel pipes the splice engine holds at once,
	// over every connection (two open files each): a gateway plans its
	// open files, and a direction that finds none left is copied in user
	// space instead, as when the system refuses a pipe. If zero, no cap.
	MaxPipes int
	// CopyBudget is the memory the user-space copy loop's buffers of
	// every connection share (a TLS leg's bytes pass through it): each
	// copy reads through 512 KiB while the budget allows, and through
	// smaller buffers (down to 4 KiB) as the count of
	// copies at once grows. If zero, DefaultCopyBudget.
	CopyBudget int64
	// RingBudget is the memory the splice engine's rings for QUIC legs
	// share (each held for its connection's life): rings of BufferSize
	// while the budget allows, then 1 MiB, 256 KiB, 64 KiB and 16 KiB as the
	// count of connections grows. If zero, DefaultRingBudget.
	RingBudget int64
}

// Errors of New and Engines.Get, for callers that map them to their own
// messages (an API code, a flag name).
var (
	ErrUnknownEngine = errors.New("unknown engine")
	ErrBufferSize    = errors.New("buffer size out of range")
)

// Names lists the engines this build provides.
func Names() []string { return []string{"splice", "buffer", "sockmap"} }

// Engines are the engines built from one Options, looked up by name. They
// are safe for concurrent use by any number of relays.
type Engines struct {
	opts   Options
	byName map[string]Engine
}

// New builds every engine of Names with o's settings.
func New(o Options) (*Engines, error) {
	if o.BufferSize == 0 {
		o.BufferSize = DefaultBufferSize
	}
	if o.BufferSize < MinBufferSize || o.BufferSize > MaxBufferSize {
		return nil, fmt.Errorf("%w: %d bytes; give %d (64KiB) to %d (1GiB)", ErrBufferSize, o.BufferSize, MinBufferSize, MaxBufferSize)
	}
	pipes := &allowance{max: int64(max(o.MaxPipes, 0))}
	if o.MaxPipes == 0 {
		pipes.max = -1
	}
	if o.CopyBudget == 0 {
		o.CopyBudget = DefaultCopyBudget
	}
	if o.RingBudget == 0 {
		o.RingBudget = DefaultRingBudget
	}
	buf := newBuffer(o.BufferSize)
	sp := splice{ring: newRings(o.RingBudget, o.BufferSize), pipes: pipes, bufs: newCopyBufs(o.CopyBudget)}
	return &Engines{opts: o, byName: map[string]Engine{
		"splice":  sp,
		"buffer":  buf,
		"sockmap": sockmapEngine{r: o.Sockmap, fallback: sp},
	}}, nil
}

// Get returns the engine called name, or an error wrapping
// ErrUnknownEngine that lists the names there are.
func (e *Engines) Get(name string) (Engine, error) {
	if eng, ok := e.byName[name]; ok {
		return eng, nil
	}
	return nil, fmt.Errorf("%w %.40q: choose one of %s", ErrUnknownEngine, name, strings.Join(Names(), ", "))
}

// Names lists the engines, as the package's Names.
func (e *Engines) Names() []string { return Names() }

// BufferSize is the ring size in effect (Options.BufferSize, or its
// default).
func (e *Engines) BufferSize() int { return e.opts.BufferSize }

// PipesInUse returns the kernel pipes the splice engine holds now.
func (e *Engines) PipesInUse() int {
	return int(e.byName["splice"].(splice).pipes.n.Load())
}

// Kernel reports whether the sockmap engine has its eBPF program, so it
// redirects in the kernel where both sides are plain TCP sockets.
func (e *Engines) Kernel() bool { return e.opts.Sockmap != nil }
