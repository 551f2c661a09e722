// Package fileplan plans a gateway's open files: how many application
// connections it may relay at once (s2cs --max_active_conns, given or
// derived from the limit of open files), and how many splice pipes
// those connections leave room for, so that the gateway never runs out
// of open files in the middle of its work (an accept, a dial, a store
// write failing with EMFILE).
//
// Every application connection holds PerConn files in the gateway (its
// own socket and its WAN leg's; a QUIC leg holds none of its own, so
// such a connection takes one); the splice engine adds a pipe (two) per
// direction on plaintext legs, but only as many as the plan leaves
// (relay.Options.MaxPipes: a direction without one is copied in user
// space). The rest is fixed: two per data port (a listener, and a UDP
// socket for QUIC streams), the strangers in their handshake, the control
// port's connections (internal/controlport caps them), and Slack.
package fileplan

import (
	"fmt"
	"syscall"
)

const (
	// PerConn is what one application connection over a TLS or TCP WAN
	// leg holds open in the gateway: its socket and its WAN leg's.
	PerConn = 2
	// Slack covers the control API's listener, the metrics listener and
	// its scrapes, the store, watch legs, the QUIC dialers' sockets, the
	// runtime's own.
	Slack = 256
	// minDerived is the least connection cap a derived plan may give
	// without Low saying so.
	minDerived = 1024
)

// Input is what a plan is made from.
type Input struct {
	// Limit is the limit of open files to plan against. If zero, the
	// process's soft RLIMIT_NOFILE when Make runs (which the Go runtime
	// raised to the hard limit at start).
	Limit int
	// Ports is the number of data ports (the gateway's port range).
	Ports int
	// Strangers is the most WAN connections in their handshake at once
	// (strangers.Limits.Total, defaults resolved).
	Strangers int
	// Control is the most control connections at once
	// (controlport.Limits.Total, defaults resolved).
	Control int
	// MaxActiveConns is the cap on application connections asked for.
	// If zero, Make derives it from Limit.
	MaxActiveConns int
}

// Plan is a gateway's plan of its open files.
type Plan struct {
	// Limit is the limit planned against.
	Limit int
	// Fixed is what listeners, strangers, control connections and Slack
	// take.
	Fixed int
	// MaxActiveConns is the cap on application connections, as given
	// or derived: (Limit-Fixed)/(2*PerConn), half of what is left for
	// their sockets and half for splice pipes.
	MaxActiveConns int
	// Derived says MaxActiveConns was derived from Limit.
	Derived bool
	// MaxPipes is what the connections' sockets leave for splice pipes.
	MaxPipes int
}

// Need returns the open files the plan needs at most.
func (p Plan) Need() int { return p.Fixed + PerConn*p.MaxActiveConns + 2*p.MaxPipes }

// Low reports whether the plan is poor: a derived cap under 1024
// connections. The gateway runs, and says so at start.
func (p Plan) Low() bool { return p.Derived && p.MaxActiveConns < minDerived }

// LimitFor returns the limit of open files that gives a derived plan
// with these fixed files its 1024 connections: what to ask an operator
// whose plan is Low for.
func (p Plan) LimitFor() int { return p.Fixed + 2*PerConn*minDerived }

// An Error names the Input field Make refused (Limit or
// MaxActiveConns); Problem completes a sentence that starts with it and
// names the files needed and the fix.
type Error struct {
	Field, Problem string
	Err            error
}

func (e *Error) Error() string { return e.Field + " " + e.Problem }
func (e *Error) Unwrap() error { return e.Err }

// Make plans in's open files. It fails, with an *Error on
// MaxActiveConns, when the limit cannot hold the cap given, or any
// connection at all; or on Limit, when the process's limit cannot be
// read.
func Make(in Input) (Plan, error) {
	p := Plan{Limit: in.Limit, MaxActiveConns: in.MaxActiveConns}
	if p.Limit == 0 {
		var lim syscall.Rlimit
		if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			return p, &Error{Field: "Limit", Problem: "could not be read from the process", Err: err}
		}
		p.Limit = int(min(lim.Cur, 1<<30))
	}
	p.Fixed = 2*in.Ports + in.Strangers + in.Control + Slack
	left := p.Limit - p.Fixed
	if p.MaxActiveConns == 0 {
		p.Derived = true
		p.MaxActiveConns = max(0, left/(2*PerConn))
		if p.MaxActiveConns < 1 {
			return p, &Error{Field: "MaxActiveConns", Problem: fmt.Sprintf(
				"cannot be had: the limit of %d open files does not even cover the %d that %d ports, %d strangers in their handshake, %d control connections and %d others take: raise it to at least %d (ulimit -n, or LimitNOFILE= in a systemd unit), or narrow the port range",
				p.Limit, p.Fixed, in.Ports, in.Strangers, in.Control, Slack, p.LimitFor())}
		}
	} else if need := p.Fixed + PerConn*p.MaxActiveConns; need > p.Limit {
		return p, &Error{Field: "MaxActiveConns", Problem: fmt.Sprintf(
			"%d needs %d open files (%d per connection, plus %d for %d ports, %d strangers in their handshake, %d control connections and %d others), over the limit of %d: give at most %d, or raise the limit to %d (ulimit -n %d, or LimitNOFILE=%d in a systemd unit; the hard limit as root)",
			p.MaxActiveConns, need, PerConn, p.Fixed, in.Ports, in.Strangers, in.Control, Slack, p.Limit, max(0, left/PerConn), need, need, need)}
	}
	p.MaxPipes = max(0, (left-PerConn*p.MaxActiveConns)/2)
	return p, nil
}
