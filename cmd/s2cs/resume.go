package main

import (
	"flag"
	"fmt"
	"time"

	"scistream/internal/bytesize"
	"scistream/internal/gateway"
)

// resumeOptions are the flags of connections over framed WAN legs that
// outlive a lost leg (gateway.Config.Resume): how long one waits for a
// new leg, and the bytes each side keeps for it.
type resumeOptions struct {
	window, windowMax  time.Duration
	connBuffer, buffer string
	maxStripe          int
}

func (o *resumeOptions) register(fs *flag.FlagSet) {
	fs.DurationVar(&o.window, "resume_window", gateway.DefaultResumeWindow, "how long an application connection over framed WAN legs (both gateways of this release, tls or quic) waits, parked, for a new leg when its leg is lost, its applications seeing a pause, before both are reset; a request's resume_window_s overrides it; whole seconds, 0: connections do not wait (a lost leg resets them) and their legs carry no frames, at the plain relay's cost")
	fs.DurationVar(&o.windowMax, "resume_window_max", gateway.DefaultResumeWindowMax, "the longest resume_window_s a request may ask for; whole seconds, at most 24h, 0 to let no connection wait")
	fs.StringVar(&o.connBuffer, "resume_conn_buffer", bytesize.Format(gateway.DefaultResumeConnBuffer), "what each direction of a framed connection keeps at each gateway: sent and not yet acknowledged by the peer (to resend on a new leg), or received and not yet taken by the application; past it the application is not read; at least the path's bandwidth-delay product, 64KiB to 1GiB")
	fs.IntVar(&o.maxStripe, "max_stripe", gateway.DefaultMaxStripe, "the most WAN legs at once one application connection is carried on (striping: a request's stripe, s2uc --stripe): what an outbound request may ask and what this gateway grants an inbound one; 1 to 16, 1: no striping")
	fs.StringVar(&o.buffer, "resume_buffer", bytesize.Format(gateway.DefaultResumeBuffer), "what every framed connection of the gateway keeps together (the bound of the gateway's memory for them); a connection past it waits; at least --resume_conn_buffer")
}

// config checks what the gateway cannot (a zero that the command line
// must not mean "the default", the relations between the flags, said in
// their names) and returns the gateway's settings; Config.Validate checks
// the rest (flagError names the flag).
func (o *resumeOptions) config() (gateway.Resume, error) {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"--resume_window", o.window}, {"--resume_window_max", o.windowMax}} {
		if d.v < 0 {
			return gateway.Resume{}, fmt.Errorf("%s %s is negative: give a duration such as 30s, or 0s for connections not to wait", d.name, d.v)
		}
	}
	if o.maxStripe < 1 || o.maxStripe > gateway.MaxMaxStripe {
		return gateway.Resume{}, fmt.Errorf("--max_stripe %d is out of range: give 1 (no striping) to %d legs at once", o.maxStripe, gateway.MaxMaxStripe)
	}
	if o.window > o.windowMax {
		return gateway.Resume{}, fmt.Errorf("--resume_window %s exceeds --resume_window_max %s, the longest window a stream may have: lower it, or raise --resume_window_max", o.window, o.windowMax)
	}
	conn, err := o.size("--resume_conn_buffer", o.connBuffer, "64KiB", gateway.DefaultResumeConnBuffer)
	if err != nil {
		return gateway.Resume{}, err
	}
	all, err := o.size("--resume_buffer", o.buffer, "--resume_conn_buffer", gateway.DefaultResumeBuffer)
	if err != nil {
		return gateway.Resume{}, err
	}
	if all < conn && conn <= 1<<30 { // a conn_buffer out of range is Validate's to say
		return gateway.Resume{}, fmt.Errorf("--resume_buffer %s is less than --resume_conn_buffer %s, one connection's: raise it, or lower --resume_conn_buffer", bytesize.Format(all), bytesize.Format(conn))
	}
	// Clamped, so that on a 32-bit build a size past int's range cannot
	// wrap into the valid one; Validate refuses anything past 1GiB.
	return gateway.Resume{Window: noWait(o.window), WindowMax: noWait(o.windowMax), ConnBuffer: int(min(conn, 1<<40)), Buffer: all, MaxStripe: o.maxStripe}, nil
}

// size reads the byte size v of flag name; the command line's 0 is a
// mistake (the gateway's zero is the default).
func (o *resumeOptions) size(name, v, least string, def int64) (int64, error) {
	n, err := bytesize.Parse(v)
	if err != nil {
		return 0, fmt.Errorf("%s %w", name, err)
	}
	if n == 0 {
		return 0, fmt.Errorf("%s 0: give at least %s (the default is %s)", name, least, bytesize.Format(def))
	}
	return n, nil
}
