package main

import (
	"fmt"
	"io"
	"time"

	"scistream/internal/api"
	"scistream/internal/pace"
)

// termFlags are what a request asks of rate and lifetime: --rate,
// --min_rate and --lease, on the commands that create a stream.
type termFlags struct {
	rate, least, lease string
}

func (c *cmdline) terms() *termFlags {
	t := &termFlags{}
	c.fs.StringVar(&t.rate, "rate", "", "rate to reserve, in bits per second with an optional prefix k, M, G or T (e.g. 800M, 10Gbit/s; or bytes: 100MB/s); each gateway admits it against its capacity and keeps the stream to it (default: best effort)")
	c.fs.StringVar(&t.least, "min_rate", "", "least rate to accept when a gateway cannot reserve --rate: it then grants what it has down to this (default: --rate, all or nothing)")
	c.fs.StringVar(&t.lease, "lease", "", "the stream's lifetime, e.g. 2h: the gateways release it when it runs out unless renewed (s2uc update --lease); default: the gateway's, see s2uc info")
	return t
}

// parse returns the request fields: rate and min_rate in bits per second,
// lease_s in seconds (zeros: not given).
func (t *termFlags) parse() (rate, least int64, leaseS int, err error) {
	r, err := parseRateFlag("rate", t.rate)
	if err != nil {
		return 0, 0, 0, err
	}
	l, err := parseRateFlag("min_rate", t.least)
	if err != nil {
		return 0, 0, 0, err
	}
	if l > r {
		return 0, 0, 0, usagef("--min_rate %s is more than --rate %s", l, r)
	}
	leaseS, err = parseLease(t.lease)
	return int64(r), int64(l), leaseS, err
}

func parseRateFlag(name, s string) (pace.Rate, error) {
	if s == "" {
		return 0, nil
	}
	r, err := pace.ParseRate(s)
	if err != nil {
		return 0, usagef("--%s %w", name, err)
	}
	return r, nil
}

// parseLease reads --lease: empty is 0 (not given), else a positive
// whole number of seconds.
func parseLease(s string) (int, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		return 0, usagef("--lease %q: give a duration such as 2h or 90m", s)
	case d <= 0 || d%time.Second != 0:
		return 0, usagef("--lease %s: give a positive whole number of seconds, e.g. 2h", d)
	case d > 366*24*time.Hour:
		return 0, usagef("--lease %s is longer than a year; see s2uc info for the gateway's longest lease", d)
	}
	return int(d / time.Second), nil
}

// printTerms writes a stream's rate and lease on one line: "rate 800
// Mbit/s reserved (asked 1 Gbit/s), lease 2h0m0s until 15:04 UTC".
func printTerms(w io.Writer, s *api.Stream) {
	rate := "best effort"
	if s.Rate > 0 {
		rate = pace.Rate(s.Rate).String() + " reserved"
		if s.RateRequested != s.Rate {
			rate += fmt.Sprintf(" (asked %s, at least %s)", pace.Rate(s.RateRequested), pace.Rate(s.MinRate))
		}
	}
	fmt.Fprintf(w, "rate: %s", rate)
	if !s.Expires.IsZero() {
		fmt.Fprintf(w, "; lease %s, until %s", time.Duration(s.LeaseS)*time.Second, s.Expires.UTC().Format("2006-01-02 15:04:05 UTC"))
	}
	fmt.Fprintln(w)
}
