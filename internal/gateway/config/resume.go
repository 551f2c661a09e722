package config

import (
	"time"

	"scistream/internal/api"
	"scistream/internal/bytesize"
)

// Resume is how application connections over framed WAN legs (both
// gateways of this release, TLS or QUIC legs) outlive a lost leg: they
// wait, parked, for a new one, holding what they sent and the peer has
// not acknowledged. Zero fields are the defaults given.
type Resume struct {
	// Window is how long a connection waits for a new leg when one is
	// lost, unless its request says (resume_window_s); past it both
	// applications are reset, as a lost leg did before. Whole seconds.
	// If zero, DefaultResumeWindow; if negative, connections do not
	// wait.
	Window time.Duration
	// WindowMax is the longest resume_window_s a request may ask for,
	// and caps that of a restored stream. Whole seconds. If zero,
	// DefaultResumeWindowMax; if negative, no connection waits.
	WindowMax time.Duration
	// ConnBuffer bounds what one direction of one connection holds at
	// each gateway: read from its application and not yet acknowledged
	// by the peer, or received and not yet taken by the application.
	// Past it the application is not read (backpressure). It limits
	// one connection to about ConnBuffer per round trip: give at least
	// the path's bandwidth-delay product. If zero,
	// DefaultResumeConnBuffer.
	ConnBuffer int
	// Buffer bounds what every connection of the gateway holds so
	// together; a connection past it waits. If zero,
	// DefaultResumeBuffer.
	Buffer int64
	// MaxStripe is the most WAN legs at once one application connection
	// is carried on: an outbound request's stripe at most, and what
	// this gateway grants an inbound one. 1: no striping. If zero,
	// DefaultMaxStripe.
	MaxStripe int
}

// Defaults of Resume.
const (
	DefaultResumeWindow     = 30 * time.Second
	DefaultResumeWindowMax  = 10 * time.Minute
	DefaultResumeConnBuffer = 16 << 20
	DefaultResumeBuffer     = 1 << 30
	DefaultMaxStripe        = 8
	// MaxMaxStripe bounds MaxStripe (carry.MaxStripes).
	MaxMaxStripe = 16
	// MaxResumeWindow bounds WindowMax (a day).
	MaxResumeWindow = api.MaxResumeWindowS * time.Second
)

// WithDefaults returns r with its zeros given their defaults and its
// negative windows made zero (no wait).
func (r Resume) WithDefaults() Resume {
	wait := func(d, zero time.Duration) time.Duration {
		switch {
		case d == 0:
			return zero
		case d < 0:
			return 0
		}
		return d
	}
	r.Window, r.WindowMax = wait(r.Window, DefaultResumeWindow), wait(r.WindowMax, DefaultResumeWindowMax)
	r.Window = min(r.Window, r.WindowMax)
	if r.ConnBuffer == 0 {
		r.ConnBuffer = DefaultResumeConnBuffer
	}
	if r.Buffer == 0 {
		r.Buffer = DefaultResumeBuffer
	}
	if r.MaxStripe == 0 {
		r.MaxStripe = DefaultMaxStripe
	}
	return r
}

// Validate reports the first of r's settings a gateway refuses.
func (r Resume) Validate() error {
	switch {
	case r.Window > 0 && r.Window%time.Second != 0:
		return fieldError("Resume.Window", "%s is not a whole number of seconds: give e.g. 30s", r.Window)
	case r.WindowMax > 0 && r.WindowMax%time.Second != 0:
		return fieldError("Resume.WindowMax", "%s is not a whole number of seconds: give e.g. 10m", r.WindowMax)
	case r.WindowMax > MaxResumeWindow:
		return fieldError("Resume.WindowMax", "%s is longer than a day: give at most 24h", r.WindowMax)
	case r.ConnBuffer < 0 || r.ConnBuffer > 0 && r.ConnBuffer < 64<<10 || r.ConnBuffer > 1<<30:
		return fieldError("Resume.ConnBuffer", "%d bytes is out of range: give 64KiB to 1GiB (the default is %s)", r.ConnBuffer, bytesize.Format(DefaultResumeConnBuffer))
	case r.Buffer < 0:
		return fieldError("Resume.Buffer", "%d bytes is negative", r.Buffer)
	case r.MaxStripe < 0 || r.MaxStripe > MaxMaxStripe:
		return fieldError("Resume.MaxStripe", "%d is out of range: give 1 (no striping) to %d legs at once (the default is %d)", r.MaxStripe, MaxMaxStripe, DefaultMaxStripe)
	}
	d := r.WithDefaults()
	if r.Window > 0 && r.Window > d.WindowMax {
		return fieldError("Resume.Window", "%s exceeds the longest resume window a stream may have (%s): lower it, or raise the maximum", r.Window, d.WindowMax)
	}
	if d.Buffer < int64(d.ConnBuffer) {
		return fieldError("Resume.Buffer", "%s is less than one connection's buffer (%s): raise it, or lower that", bytesize.Format(d.Buffer), bytesize.Format(int64(d.ConnBuffer)))
	}
	return nil
}
